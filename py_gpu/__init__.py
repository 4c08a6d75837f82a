"""py_gpu: a PyTorch-native triangle rasterizer, exact and differentiable, on any torch device.

The whole public surface is below. Tensor API: ``TriangleBatch`` -> ``rasterize`` ->
``Fragments`` -> ``interpolate`` / ``render`` -> ``Frame``. World space: ``MeshBatch`` +
``Camera`` -> ``Renderer`` (lit, textured, persistent geometry) -> ``Frame``. Building blocks
live in ``py_gpu.camera``, ``py_gpu.mesh``, ``py_gpu.shapes``, ``py_gpu.fit``, ``py_gpu.raster`` and
``py_gpu.shading``. py_gpu 0.0.1's API (``RasterBatch`` of ``ScreenTriangle`` ->
``select_backend(...).render(batch, width, height)`` -> ``FrameBuffer``) lives in
``py_gpu.compat`` and is re-exported here.
"""

from ._check import BackendUnavailableError, MemoryBudgetError, PyGpuTypeError, PyGpuValueError, checks, set_checks
from ._runtime import get_threads, set_threads
from ._version import __version__
from .backends import (
    Backend,
    BackendCapabilities,
    ModernGLBackend,
    NumpyBackend,
    ReferenceBackend,
    TorchBackend,
    available_backends,
    create_backend,
    register_backend,
)
from .camera import Camera
from .compat import (
    CPURasterBackend,
    DepthBuffer,
    FrameBuffer,
    ModernGLRasterBackend,
    NumpyRasterBackend,
    RasterBackend,
    RasterBatch,
    ScreenTriangle,
    ScreenVertex,
    detect_gpu_packages,
    select_backend,
)
from .contracts import Fragments, Frame, TriangleBatch
from .frontend import interpolate, rasterize, render
from . import fit, shapes
from .mesh import MeshBatch
from .renderer import Renderer
from .settings import BlendSettings, RasterSettings
from .shading import antialias

from .compat import paths as _paths  # noqa: E402  (0.0.1 import paths)

_paths.install()

__all__ = [
    # tensor API
    "TriangleBatch",
    "Fragments",
    "Frame",
    "RasterSettings",
    "BlendSettings",
    "rasterize",
    "interpolate",
    "render",
    "antialias",
    # world space
    "Camera",
    "MeshBatch",
    "shapes",
    "fit",
    "Renderer",
    # backends
    "Backend",
    "BackendCapabilities",
    "ReferenceBackend",
    "NumpyBackend",
    "TorchBackend",
    "ModernGLBackend",
    "create_backend",
    "select_backend",
    "register_backend",
    "available_backends",
    # py_gpu 0.0.1 (py_gpu.compat)
    "ScreenVertex",
    "ScreenTriangle",
    "RasterBatch",
    "FrameBuffer",
    "DepthBuffer",
    "RasterBackend",
    "CPURasterBackend",
    "NumpyRasterBackend",
    "ModernGLRasterBackend",
    "detect_gpu_packages",
    # errors
    "PyGpuValueError",
    "set_checks",
    "set_threads",
    "get_threads",
    "checks",
    "PyGpuTypeError",
    "BackendUnavailableError",
    "MemoryBudgetError",
    "__version__",
]
