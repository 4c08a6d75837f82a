"""py_gpu 0.0.1 import path: ``from py_gpu.numpy_raster import NumpyRasterBackend``."""

from .backends.cpu import NumpyRasterBackend

__all__ = ["NumpyRasterBackend"]
