"""py_gpu 0.0.1 import path: ``from py_gpu.moderngl_backend import ModernGLRasterBackend``.

Importing this module does not import moderngl; constructing the backend does.
"""

from .backends.moderngl import ModernGLBackend

#: py_gpu 0.0.1's name for the ModernGL backend.
ModernGLRasterBackend = ModernGLBackend

__all__ = ["ModernGLRasterBackend"]
