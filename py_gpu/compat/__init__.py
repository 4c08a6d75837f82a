"""py_gpu 0.0.1 compatibility: its screen-space classes, buffers, backend protocol and import paths.

Everything 0.0.1 defined lives in this package and nowhere else; the core never imports it.

- :mod:`~py_gpu.compat.screen`: ``ScreenVertex``, ``ScreenTriangle``, ``RasterBatch`` and both
  conversions to and from ``TriangleBatch``;
- :mod:`~py_gpu.compat.buffers`: ``FrameBuffer``, ``DepthBuffer``;
- :mod:`~py_gpu.compat.seed`: the ``render(batch, width, height)`` protocol, the 0.0.1 backend
  classes and ``select_backend``;
- :mod:`~py_gpu.compat.detect`: ``detect_gpu_packages``;
- :mod:`~py_gpu.compat.paths`: the 0.0.1 module paths (``py_gpu.detect``, ``py_gpu.geometry`` ...).
"""

from .buffers import ColorLike, DepthBuffer, FrameBuffer
from .detect import detect_gpu_packages
from .screen import RasterBatch, ScreenTriangle, ScreenVertex
from .seed import (
    CPURasterBackend,
    ModernGLRasterBackend,
    NumpyRasterBackend,
    RasterBackend,
    SeedProtocol,
    TorchRasterBackend,
    select_backend,
)

__all__ = [
    "CPURasterBackend",
    "ColorLike",
    "DepthBuffer",
    "FrameBuffer",
    "ModernGLRasterBackend",
    "NumpyRasterBackend",
    "RasterBackend",
    "RasterBatch",
    "ScreenTriangle",
    "ScreenVertex",
    "SeedProtocol",
    "TorchRasterBackend",
    "detect_gpu_packages",
    "select_backend",
]
