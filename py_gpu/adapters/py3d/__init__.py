"""Render py_3d scenes (``pip install "py_gpu[py3d]"``, import name ``py_3d``) through py_gpu.

``Py3DRasterRenderer`` is a py_3d ``Renderer``: ``render(scene, camera, settings, target=None)``
returns a py_3d ``PixelBuffer`` that looks like py_3d's own ``CPURenderer``'s (docs/py3d.md
lists the one intended difference and the measured agreement). ``py_3d.GPURenderer`` constructs
it. Constructing it is cheap: this module imports neither torch nor GL; the first frame loads
:mod:`.frame` (scene caching, rasterizing, shading), creates the backend and keeps both.

``python -m py_gpu.adapters.py3d script.py [args]`` runs a py_3d script with the Linux import fix
applied (:mod:`.__main__`).
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

#: Backend names (and aliases) py_gpu registers itself; others are checked against the registry.
_KNOWN_BACKENDS = {"auto", "reference", "cpu", "numpy", "torch", "moderngl", "opengl", "gl", "gpu"}


def _py3d():
    """The ``py_3d`` module, imported with the Linux fix applied when it needs it.

    py3dengine 0.0.4 declares Win32 window structs at import time and needs
    ``ctypes.wintypes.HCURSOR``, which CPython defines only on Windows. When ``import py_3d``
    fails on exactly that, the alias Windows uses (an ``HCURSOR`` is a ``HANDLE``) is given to
    ``ctypes.wintypes`` and py_3d is imported again; nothing else is changed.
    """
    try:
        import py_3d
    except ImportError as exc:
        errors = importlib.import_module("py_gpu._check")
        raise errors.BackendUnavailableError(
            'the py_3d bridge needs the py_3d package: pip install "py_gpu[py3d]" (PyPI name py3dengine)'
        ) from exc
    except AttributeError as exc:
        if not apply_import_fix(exc):
            raise
        for name in [m for m in sys.modules if m == "py_3d" or m.startswith("py_3d.")]:
            del sys.modules[name]
        import py_3d
    return py_3d


def apply_import_fix(error: BaseException | None = None) -> bool:
    """Give ``ctypes.wintypes`` the ``HCURSOR`` alias py_3d needs on Linux and macOS.

    Returns True when the alias was added (only when it is missing, and, given ``error``, only
    when that error is the missing ``HCURSOR``).
    """
    import ctypes.wintypes as wintypes

    if hasattr(wintypes, "HCURSOR") or (error is not None and "HCURSOR" not in str(error)):
        return False
    wintypes.HCURSOR = wintypes.HANDLE
    return True


@dataclass(frozen=True)
class Py3DCapabilities:
    """What the bridge draws itself and what it hands to py_3d's ``CPURenderer`` (docs/py3d.md).

    Attributes:
        name: the renderer's name.
        accelerated: True when frames are rasterized by py_gpu (False with ``reference_compatible``).
        backend: the py_gpu backend's name once the first frame chose it (None before, and with
            ``reference_compatible``).
        computed: py_3d features the bridge computes, vectorized in torch.
        cpu_fallback: scene contents for which a whole frame is rendered by ``CPURenderer``
            instead (with a one-time warning each).
        fast_materials_skips: what ``fast_materials=True`` evaluates more coarsely.
        differences: the intended differences from ``CPURenderer``.
    """

    name: str
    accelerated: bool
    backend: str | None
    computed: tuple[str, ...]
    cpu_fallback: tuple[str, ...]
    fast_materials_skips: tuple[str, ...]
    differences: tuple[str, ...]


COMPUTED = (
    "flat and smooth (per-pixel, from vertex normals) lighting",
    "Sun and Lamp lights (falloff, radius), ambient, light_wrap, bounce_light, two-sided lighting",
    "Material color, absorption, diffuse, emission, specular, shininess, roughness, fuzziness, "
    "reflectivity, light_transmission",
    "textures sampled per pixel (nearest, as Material.color_at)",
    "gamma with py_3d's truncation",
    "ray_traced_shadows (shadow_bias, shadow_samples, shadow_softness) as vectorized shadow rays",
    "reflection_bounces (py_3d's environment reflection)",
    "wireframe, edge_highlight, Point3, Line3, LineSet3 (1 px, py_3d's line stepping)",
    "TextBulletin and FloatingTextBulletin (drawn by py_3d's own routines)",
    "cull_backfaces, max_render_distance, camera near/far",
)
CPU_FALLBACK = (
    "a light that is not a py_3d Sun or Lamp (its sample() cannot be evaluated in torch)",
)
FAST_MATERIALS_SKIPS = (
    "smooth_shading: lighting (and shadows) evaluated at the triangle corners and interpolated "
    "across the face (Gouraud) instead of at every pixel",
    "fuzziness: the per-pixel surface noise is left out (roughness darkening is kept)",
)
DIFFERENCES = (
    "near plane: a triangle that reaches behind camera.near is clipped there and its visible part "
    "drawn; CPURenderer drops the whole triangle (a ground plane under the camera shows up)",
)


@dataclass
class Py3DRasterRenderer:
    """A py_3d ``Renderer`` backed by py_gpu (the class py_3d's ``GPURenderer`` constructs).

    Args:
        backend_impl: a py_gpu backend instance to rasterize with (default: ``prefer_backend``,
            created on the first frame).
        reference_compatible: True (the default, as in py_gpu 0.0.1): delegate every frame to one
            cached py_3d ``CPURenderer``, bit for bit py_3d's picture at py_3d's speed. False:
            rasterize with py_gpu and shade with py_3d's model in torch.
        prefer_backend: ``"auto"`` (the fastest backend that works here), ``"moderngl"``,
            ``"torch"``, ``"numpy"`` or ``"reference"``.
        fast_materials: trade fidelity for speed in the py_gpu path; :data:`FAST_MATERIALS_SKIPS`
            says exactly what is evaluated more coarsely. Ignored with ``reference_compatible``.
        name, backend: the renderer's name and backend label (py_3d's ``Renderer`` protocol).
        device: torch device for the scene tensors and shading (default: the torch backend's
            device, else the CPU). Shading runs in float64 there.

    The renderer keeps, between frames, one mesh per py_3d object (keyed as ``CPURenderer`` keys
    its static-geometry cache, plus the object's value, so a scene rebuilt every frame from equal
    objects converts nothing) and the textures; ``stats`` counts the work.
    """

    backend_impl: object | None = None
    reference_compatible: bool = True
    prefer_backend: str = "auto"
    fast_materials: bool = False
    name: str = "py_gpu py_3d batch renderer"
    device: object | None = None
    backend: str = "py_gpu"

    def __post_init__(self) -> None:
        where = "Py3DRasterRenderer"
        for flag in ("reference_compatible", "fast_materials"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"{where}: `{flag}` must be a bool, got {getattr(self, flag)!r}")
        if not isinstance(self.prefer_backend, str):
            raise TypeError(f"{where}: `prefer_backend` must be a backend name, got {self.prefer_backend!r}")
        if self.prefer_backend.strip().lower() not in _KNOWN_BACKENDS and self.backend_impl is None:
            registry = importlib.import_module("py_gpu.backends.registry")
            if self.prefer_backend.strip().lower() not in registry._ALIASES:
                registry.create_backend(self.prefer_backend)  # raises, naming the backends there are
        if not isinstance(self.name, str):
            raise TypeError(f"{where}: `name` must be a string, got {self.name!r}")
        self._engine = None  # the py_gpu path's FrameRenderer, made on the first frame
        self._reference = None  # the cached CPURenderer of the reference-compatible path

    @property
    def is_accelerated(self) -> bool:
        """True when frames are rasterized by py_gpu (``reference_compatible=False``)."""
        return not self.reference_compatible

    @property
    def capabilities(self) -> Py3DCapabilities:
        """What this renderer computes, what falls back to ``CPURenderer``, what differs."""
        backend = None
        if self.is_accelerated:
            impl = self.backend_impl if self.backend_impl is not None else getattr(self._engine, "backend", None)
            backend = None if impl is None else impl.capabilities.name
        return Py3DCapabilities(self.name, self.is_accelerated, backend, COMPUTED, CPU_FALLBACK,
                                FAST_MATERIALS_SKIPS, DIFFERENCES)

    @property
    def stats(self):
        """The py_gpu path's counters (``frame.BridgeStats``), or None before its first frame."""
        return None if self._engine is None else self._engine.stats

    def render(self, scene, camera, settings, target=None):
        """Render ``scene`` through ``camera`` with py_3d ``settings`` into a ``PixelBuffer``
        (``target``, when given, must match the settings' size)."""
        py_3d = _py3d()
        if self.reference_compatible:
            if self._reference is None:
                self._reference = py_3d.CPURenderer()
            return self._reference.render(scene, camera, settings, target)
        if self._engine is None:
            frame = importlib.import_module(".frame", __name__)
            self._engine = frame.FrameRenderer(self.backend_impl, self.prefer_backend, device=self.device,
                                               fast_materials=self.fast_materials)
            if self.backend_impl is None:
                self.backend_impl = self._engine.backend
        return self._engine.render(scene, camera, settings, target)

    def clear_cache(self) -> None:
        """Forget every cached mesh and texture (the next frame converts the scene again)."""
        if self._engine is not None:
            self._engine.clear_cache()
        if self._reference is not None:
            self._reference.clear_cache()


def frame_to_py3d_pixel_buffer(frame, target=None):
    """A py_gpu ``FrameBuffer`` as a py_3d ``PixelBuffer`` (written into ``target`` when given)."""
    PixelBuffer = _py3d().PixelBuffer
    if target is not None:
        if target.width != frame.width or target.height != frame.height:
            raise ValueError("target buffer dimensions must match rendered frame")
        target.pixels = PixelBuffer.from_rgb_bytes(frame.width, frame.height, frame.pixels).pixels
        return target
    return PixelBuffer.from_rgb_bytes(frame.width, frame.height, frame.pixels)


def scene_to_triangle_batch(scene, camera, settings, *, dtype=None, device=None):
    """A py_3d scene as a ``B = 1`` clip-space ``TriangleBatch`` with flat lit face colors in [0, 1]
    (py_gpu 0.0.1's call; the clip space carries py_3d's ``(W - 1) / 2`` pixel mapping).

    Points and lines are not included; ``scene_to_raster_batch`` draws lines as quads.
    """
    return importlib.import_module(".frame", __name__).scene_to_triangle_batch(scene, camera, settings, dtype=dtype,
                                                                                device=device)


def scene_to_raster_batch(scene, camera, settings, *, wire_width: float = 1.5):
    """py_gpu 0.0.1's call: the scene projected to a screen-space ``RasterBatch`` (seed format).

    Triangles are clipped against the near plane first (0.0.1 dropped any triangle with a vertex
    behind the camera). Lines become two-triangle quads ``wire_width`` pixels wide.
    """
    return importlib.import_module(".frame", __name__).scene_to_raster_batch(scene, camera, settings,
                                                                              wire_width=wire_width)


__all__ = ["Py3DCapabilities", "Py3DRasterRenderer", "apply_import_fix", "frame_to_py3d_pixel_buffer",
           "scene_to_raster_batch", "scene_to_triangle_batch"]
