"""Rasterizers: the pure-Python reference, NumPy, and (when present) the torch hard/soft paths.

``from py_gpu.raster import CPURasterBackend`` keeps working as in py_gpu 0.0.1.
"""

from .clip import clip_batch, clip_near, unclip_fragments
from .numpy_raster import rasterize_numpy
from .reference import rasterize_reference
from .soft_oracle import rasterize_soft_oracle
from .torch_soft import rasterize_soft


def __getattr__(name):  # lazy: backends import this package
    if name == "CPURasterBackend":
        from ..backends.cpu import CPURasterBackend

        return CPURasterBackend
    raise AttributeError(name)


__all__ = ["CPURasterBackend", "clip_batch", "clip_near", "unclip_fragments", "rasterize_numpy", "rasterize_reference", "rasterize_soft", "rasterize_soft_oracle"]
