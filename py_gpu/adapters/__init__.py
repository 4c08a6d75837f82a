"""Adapters for external scene packages (``py_gpu.adapters.py3d`` for py_3d)."""
