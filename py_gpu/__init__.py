"""py_gpu: a PyTorch-native triangle rasterizer, exact and differentiable, on any torch device.

The whole public surface is below. Tensor API: ``TriangleBatch`` -> ``rasterize`` ->
``Fragments`` -> ``interpolate`` / ``render`` -> ``Frame``. Seed API (py_gpu 0.0.1):
``RasterBatch`` of ``ScreenTriangle`` -> ``select_backend(...).render(batch, width, height)`` ->
``FrameBuffer``.
"""

from ._check import BackendUnavailableError, MemoryBudgetError, PyGpuTypeError, PyGpuValueError
from ._version import __version__
from .api import interpolate, rasterize, render
from .backends import (
    BackendCapabilities,
    CPURasterBackend,
    NumpyRasterBackend,
    RasterBackend,
    available_backends,
    detect_gpu_packages,
    register_backend,
    select_backend,
)
from .buffers import DepthBuffer, FrameBuffer
from .contracts import Fragments, Frame, TriangleBatch
from .geometry import RasterBatch, ScreenTriangle, ScreenVertex
from .settings import RasterSettings

__all__ = [
    # tensor API
    "TriangleBatch",
    "Fragments",
    "Frame",
    "RasterSettings",
    "rasterize",
    "interpolate",
    "render",
    # backends
    "BackendCapabilities",
    "RasterBackend",
    "CPURasterBackend",
    "NumpyRasterBackend",
    "select_backend",
    "register_backend",
    "available_backends",
    "detect_gpu_packages",
    # seed API (py_gpu 0.0.1)
    "ScreenVertex",
    "ScreenTriangle",
    "RasterBatch",
    "FrameBuffer",
    "DepthBuffer",
    # errors
    "PyGpuValueError",
    "PyGpuTypeError",
    "BackendUnavailableError",
    "MemoryBudgetError",
    "__version__",
]
