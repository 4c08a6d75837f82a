"""Backends: the base class, capabilities, the registry and ``create_backend``.

Built-in backends register here. The ModernGL backend imports moderngl only when it is built.
"""

from . import moderngl as _moderngl
from . import torch_backend as _torch_backend
from .base import Backend, BackendCapabilities
from .cpu import NumpyBackend, ReferenceBackend
from .moderngl import ModernGLBackend
from .registry import BackendStatus, available_backends, create_backend, register_backend, torch_devices
from .torch_backend import TorchBackend

register_backend(
    "reference", ReferenceBackend, priority=0, aliases=("cpu",), summary="pure-Python oracle, exact, slow"
)
register_backend("numpy", NumpyBackend, priority=10, summary="vectorized NumPy, exact")
_torch_backend.register()
_moderngl.register()

__all__ = [
    "Backend",
    "BackendCapabilities",
    "BackendStatus",
    "ModernGLBackend",
    "NumpyBackend",
    "ReferenceBackend",
    "TorchBackend",
    "available_backends",
    "create_backend",
    "register_backend",
    "torch_devices",
]
