"""Backends: the seed protocol, capabilities, the registry and ``select_backend``.

Built-in backends register here; optional ones import their dependency lazily, when built.
"""

from .base import BackendCapabilities, ExactBackend, RasterBackend
from .cpu import CPURasterBackend, NumpyRasterBackend
from .registry import (
    BackendStatus,
    available_backends,
    detect_gpu_packages,
    register_backend,
    select_backend,
    torch_devices,
)

register_backend(
    "reference", CPURasterBackend, priority=0, aliases=("cpu",), summary="pure-Python oracle, exact, slow"
)
register_backend("numpy", NumpyRasterBackend, priority=10, summary="vectorized NumPy, exact")

from . import _optional  # noqa: E402,F401  (registers torch / moderngl when their modules exist)
from .torch_backend import TorchBackend  # noqa: E402

__all__ = [
    "BackendCapabilities",
    "BackendStatus",
    "CPURasterBackend",
    "ExactBackend",
    "NumpyRasterBackend",
    "RasterBackend",
    "TorchBackend",
    "available_backends",
    "detect_gpu_packages",
    "register_backend",
    "select_backend",
    "torch_devices",
]
