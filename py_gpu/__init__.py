"""py_gpu: a PyTorch-native triangle rasterizer, exact and differentiable, on any torch device.

The whole public surface is below. Tensor API: ``TriangleBatch`` -> ``rasterize`` ->
``Fragments`` -> ``interpolate`` / ``render`` -> ``Frame``. World space: ``MeshBatch`` +
``Camera`` -> ``Renderer`` (lit, textured, persistent geometry) -> ``Frame``. Building blocks
live in ``py_gpu.camera``, ``py_gpu.mesh``, ``py_gpu.raster`` and ``py_gpu.shading``. Seed API (py_gpu 0.0.1):
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
    TorchBackend,
    available_backends,
    detect_gpu_packages,
    register_backend,
    select_backend,
)
from .buffers import DepthBuffer, FrameBuffer
from .camera import Camera
from .contracts import Fragments, Frame, TriangleBatch
from .geometry import RasterBatch, ScreenTriangle, ScreenVertex
from .mesh import MeshBatch
from .renderer import Renderer
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
    # world space
    "Camera",
    "MeshBatch",
    "Renderer",
    # backends
    "BackendCapabilities",
    "RasterBackend",
    "CPURasterBackend",
    "NumpyRasterBackend",
    "TorchBackend",
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
