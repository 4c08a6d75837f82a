"""The torch-native entry points: ``rasterize``, ``interpolate`` and ``render``.

Each is a thin wrapper: it builds one ``RasterSettings`` (the single source of defaults),
picks the backend, and delegates.
"""

from __future__ import annotations

from .contracts import Fragments, Frame
from .settings import RasterSettings

_BACKEND_CACHE: dict[tuple, object] = {}


def _backend(backend, device=None):
    """A backend instance from a name (cached: GL contexts are expensive) or an instance."""
    if not isinstance(backend, str):
        return backend
    from .backends import select_backend

    key = (backend.strip().lower(), None if device is None else str(device))
    inst = _BACKEND_CACHE.get(key)
    if inst is None:
        inst = select_backend(backend, **({} if device is None else {"device": device}))
        _BACKEND_CACHE[key] = inst
    return inst


def _settings(settings, **overrides) -> RasterSettings:
    base = settings if settings is not None else RasterSettings()
    if not isinstance(base, RasterSettings):
        from ._check import PyGpuTypeError

        raise PyGpuTypeError(f"`settings` must be a RasterSettings, got {type(base).__name__}")
    return base.with_(**overrides)


def rasterize(
    batch,
    size,
    mode: str | None = None,
    *,
    backend="torch",
    sigma: float | None = None,
    faces_per_pixel: int | None = None,
    cull_backfaces: bool | None = None,
    memory_budget: int | None = None,
    settings: RasterSettings | None = None,
) -> Fragments:
    """Rasterize ``batch`` at ``size = (H, W)`` into ``Fragments``.

    ``mode="hard"`` (default) follows the exact raster rule, K = 1. ``mode="soft"`` keeps the
    ``faces_per_pixel`` nearest faces whose soft footprint (``sigma``, px^2) reaches each pixel,
    with their signed squared edge distance. Unset arguments take ``settings``' values, then
    ``RasterSettings``' defaults.
    """
    s = _settings(settings, mode=mode, sigma=sigma, faces_per_pixel=faces_per_pixel,
                  cull_backfaces=cull_backfaces, memory_budget=memory_budget)
    return _backend(backend).rasterize(batch, size, settings=s)


def render(
    batch,
    size,
    mode: str | None = None,
    *,
    backend="torch",
    background=(0.0, 0.0, 0.0),
    sigma: float | None = None,
    gamma: float | None = None,
    faces_per_pixel: int | None = None,
    cull_backfaces: bool | None = None,
    memory_budget: int | None = None,
    settings: RasterSettings | None = None,
) -> Frame:
    """Rasterize and shade ``batch`` into a ``Frame`` (image, alpha, depth, face_index).

    With the torch backend ``Frame.image`` is differentiable with respect to vertex positions
    and colors (and, in soft mode, through silhouettes and depth order). ``background`` is float
    RGB in [0, 1].
    """
    s = _settings(settings, mode=mode, sigma=sigma, gamma=gamma, faces_per_pixel=faces_per_pixel,
                  cull_backfaces=cull_backfaces, memory_budget=memory_budget)
    return _backend(backend).render_frame(batch, size, background=background, settings=s)


def interpolate(attributes, fragments: Fragments, faces, *, kind: str | None = None):
    """Interpolate per-vertex ``[B, V, C]`` (or gather per-face ``[B, F, C]``) attributes at fragments.

    Returns float ``[B, H, W, K, C]``; zero where ``fragments.face_index`` is -1. Uses the
    fragments' perspective-correct barycentrics, so gradients reach both the attributes and,
    through the barycentrics, the vertex positions. ``kind`` (``"vertex"`` or ``"face"``) settles
    the case ``V == F``, where the shape alone cannot tell.
    """
    from .shading.interpolate import interpolate as _interpolate

    return _interpolate(attributes, fragments, faces, kind=kind)
