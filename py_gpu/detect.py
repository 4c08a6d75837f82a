"""py_gpu 0.0.1 import path: ``from py_gpu.detect import detect_gpu_packages``."""

from .backends.registry import detect_gpu_packages

__all__ = ["detect_gpu_packages"]
