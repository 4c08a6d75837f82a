"""py_gpu 0.0.1's import paths, kept working by pointing them at the compatibility modules.

0.0.1 was a flat package: ``py_gpu.backends``, ``py_gpu.buffers``, ``py_gpu.detect``,
``py_gpu.geometry``, ``py_gpu.moderngl_backend``, ``py_gpu.numpy_raster`` and ``py_gpu.raster``.
Module paths that no longer exist are registered as aliases of the compatibility modules that
hold their names; the 0.0.1 names of modules that still exist are added to them. Nothing in
the core refers to this: ``install()`` runs once, when ``py_gpu`` is imported.
"""

from __future__ import annotations

import sys

from .. import backends, raster
from . import buffers, detect, screen, seed

#: 0.0.1 module path -> the compatibility module that holds its names.
MODULE_ALIASES = {
    "py_gpu.buffers": buffers,
    "py_gpu.geometry": screen,
    "py_gpu.detect": detect,
    "py_gpu.numpy_raster": seed,
    "py_gpu.moderngl_backend": seed,
}
#: 0.0.1 names added to modules that still exist.
NAMES = {
    raster: {"CPURasterBackend": seed.CPURasterBackend},
    backends: {"select_backend": seed.select_backend, "RasterBackend": seed.RasterBackend},
}


def install() -> None:
    """Make every 0.0.1 import path resolve (idempotent)."""
    package = sys.modules["py_gpu"]
    for path, module in MODULE_ALIASES.items():
        sys.modules.setdefault(path, module)
        setattr(package, path.rsplit(".", 1)[1], module)
    for module, names in NAMES.items():
        for name, value in names.items():
            setattr(module, name, value)
