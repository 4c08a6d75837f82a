"""py_gpu: a PyTorch-native triangle rasterizer, exact and differentiable, on any torch device.

The whole public surface is below. Tensor API: ``TriangleBatch`` -> ``rasterize`` ->
``Fragments`` -> ``interpolate`` / ``render`` -> ``Frame``. World space: ``MeshBatch`` +
``Camera`` -> ``Renderer`` (lit, textured, persistent geometry) -> ``Frame``. Building blocks
live in ``py_gpu.camera``, ``py_gpu.mesh``, ``py_gpu.shapes``, ``py_gpu.fit``, ``py_gpu.raster`` and
``py_gpu.shading``. py_gpu 0.0.1's API (``RasterBatch`` of ``ScreenTriangle`` ->
``select_backend(...).render(batch, width, height)`` -> ``FrameBuffer``) lives in
``py_gpu.compat`` and is re-exported here.

Importing ``py_gpu`` is cheap: the names below, and torch with them, load on first use (the
first attribute read, or the first import of a submodule other than ``py_gpu.adapters`` and
``py_gpu.adapters.py3d``). A scene package can construct the py_3d bridge without paying for
torch until it renders a frame.
"""

from __future__ import annotations

import importlib as _importlib
import importlib.util as _importlib_util
import sys as _sys

from ._version import __version__

#: Every public name and the module that defines it, loaded together on first use.
_PUBLIC = {
    "BackendUnavailableError": "._check", "MemoryBudgetError": "._check", "PyGpuWarning": "._check", "PyGpuTypeError": "._check",
    "PyGpuValueError": "._check", "checks": "._check", "set_checks": "._check",
    "get_threads": "._runtime", "set_threads": "._runtime",
    "Backend": ".backends", "BackendCapabilities": ".backends", "ModernGLBackend": ".backends",
    "NumpyBackend": ".backends", "ReferenceBackend": ".backends", "TorchBackend": ".backends",
    "available_backends": ".backends", "create_backend": ".backends", "register_backend": ".backends",
    "Camera": ".camera",
    "CPURasterBackend": ".compat", "DepthBuffer": ".compat", "FrameBuffer": ".compat",
    "ModernGLRasterBackend": ".compat", "NumpyRasterBackend": ".compat", "RasterBackend": ".compat",
    "RasterBatch": ".compat", "ScreenTriangle": ".compat", "ScreenVertex": ".compat",
    "detect_gpu_packages": ".compat", "select_backend": ".compat",
    "Fragments": ".contracts", "Frame": ".contracts", "TriangleBatch": ".contracts",
    "interpolate": ".frontend", "rasterize": ".frontend", "render": ".frontend", "silhouette": ".frontend",
    "MeshBatch": ".mesh",
    "Renderer": ".renderer",
    "BlendSettings": ".settings", "RasterSettings": ".settings",
    "antialias": ".shading",
}
#: Submodules a scene package may import without loading the rest (they import torch only when used).
_LIGHT_MODULES = {"py_gpu._version", "py_gpu.adapters", "py_gpu.adapters.py3d", "py_gpu.adapters.py3d.__main__"}
_loaded = False


def _load() -> None:
    """Import the public names (and with them torch) and register the 0.0.1 import paths, once."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    try:
        for name, module in _PUBLIC.items():
            globals()[name] = getattr(_importlib.import_module(module, __name__), name)
        for module in ("shapes", "fit"):
            globals()[module] = _importlib.import_module("." + module, __name__)
        _importlib.import_module(".compat.paths", __name__).install()
    except BaseException:
        _loaded = False  # the next use raises the same error again, never a bare AttributeError
        raise
    if _FINDER in _sys.meta_path:
        _sys.meta_path.remove(_FINDER)


def __getattr__(name: str):
    if not _loaded and not name.startswith("__"):
        _load()
        if name in globals():
            return globals()[name]
    raise AttributeError(f"module 'py_gpu' has no attribute {name!r}")


def __dir__():
    _load()
    return sorted(globals())


class _LoadFirst:
    """Finds nothing itself: the first import of a py_gpu submodule (other than the light ones)
    loads the package first, so that the 0.0.1 import paths and names are registered as before."""

    def find_spec(self, fullname, path=None, target=None):
        if _loaded or not fullname.startswith("py_gpu.") or fullname in _LIGHT_MODULES:
            return None
        _load()
        module = _sys.modules.pop(fullname, None)
        if module is None:  # not loaded with the package: the usual finders import it
            return None
        # Loading registered it (a 0.0.1 alias, or a module the package imports): hand that module
        # back through a loader, as the import system would otherwise execute it a second time.
        return _importlib_util.spec_from_loader(fullname, _Registered(module))


class _Registered:
    """Loader of a module that is already loaded: the import returns ``module`` itself."""

    def __init__(self, module) -> None:
        self._module = module

    def create_module(self, spec):
        return None

    def exec_module(self, placeholder) -> None:
        _sys.modules[placeholder.__name__] = self._module


_FINDER = _LoadFirst()
_sys.meta_path.insert(0, _FINDER)

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
    "silhouette",
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
    "PyGpuWarning",
    "__version__",
]
