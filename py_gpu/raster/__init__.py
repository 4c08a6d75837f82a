"""Rasterizers: the pure-Python reference, NumPy, torch hard and soft, the soft oracle, and clipping.

Each takes a batch it can draw (screen space, or clip space with every ``w > 0``) and returns
``Fragments``. Near-plane clipping lives in :mod:`py_gpu.raster.clip` and is applied once, by
the front end (:mod:`py_gpu.frontend`).
"""

from .clip import ClipResult, clip_batch, clip_near, unclip_fragments
from .numpy_raster import rasterize_numpy
from .reference import rasterize_reference
from .soft_oracle import rasterize_soft_oracle
from .torch_hard import rasterize_hard, rasterize_hard_exact
from .torch_soft import rasterize_soft

__all__ = [
    "ClipResult",
    "clip_batch",
    "clip_near",
    "rasterize_hard",
    "rasterize_hard_exact",
    "rasterize_numpy",
    "rasterize_reference",
    "rasterize_soft",
    "rasterize_soft_oracle",
    "unclip_fragments",
]
