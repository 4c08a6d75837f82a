"""The front end: ``rasterize``, ``render`` and ``interpolate``, and the one path from batch to frame.

Every entry point (these functions, the ``Renderer`` and the seed protocol) goes the same way:

1. validate the arguments and build the settings (``RasterSettings`` + ``BlendSettings``, the
   single sources of defaults);
2. clip clip-space input against the near plane, once (:func:`near_clip`);
3. dispatch the drawable batch to a backend, which never clips;
4. map the result back onto the input faces, once (``ClipResult.unclip``), and shade it with
   the shared shading functions (:mod:`py_gpu.shading.composite`).

When clipping cut nothing, the backend renders the whole frame itself (its fast path: GL shades
in GL, the reference in plain Python, torch in float64).
"""

from __future__ import annotations

import os
import threading

import torch

from ._check import PyGpuTypeError, check_rgb, check_size, checks_enabled
from ._runtime import cpu_threads
from .backends import Backend, create_backend
from .contracts import Fragments, Frame, TriangleBatch
from .image import quantize
from .raster.clip import ClipResult, clip_batch
from .raster.torch_soft import silhouette_soft
from .settings import BlendSettings, RasterSettings, resolve_settings
from .shading.blend import check_depth_range
from .shading.composite import shade_fragments
from .shading.interpolate import interpolate

__all__ = ["rasterize", "render", "interpolate", "resolve_backend", "near_clip", "rasterize_batch",
           "render_batch", "render_rgb8"]

_BACKEND_CACHE: dict[tuple, tuple[int, Backend]] = {}  # (name, device) -> (the process that built it, backend)
_CACHE_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    global _CACHE_LOCK
    _CACHE_LOCK = threading.Lock()  # another thread of the parent may have held it


os.register_at_fork(after_in_child=_after_fork_in_child)


def resolve_backend(where: str, backend, device=None, *, cached: bool = True) -> Backend:
    """A backend instance from a name or an instance.

    Names are built once per name and device and then shared (GL contexts are expensive), also
    between threads (the other backends keep no state between calls; the GL backend takes its
    calls in turn), but never with a forked child: a child builds its own. ``cached=False``
    builds a new instance that the caller owns (the ``Renderer`` does).
    """
    if isinstance(backend, str):
        options = {} if device is None else {"device": device}
        if not cached:
            return create_backend(backend, **options)
        key = (backend.strip().lower(), None if device is None else str(device))
        with _CACHE_LOCK:
            pid, inst = _BACKEND_CACHE.get(key, (None, None))
            if inst is None or pid != os.getpid() or getattr(inst, "_released", False):
                inst = create_backend(backend, **options)
                _BACKEND_CACHE[key] = (os.getpid(), inst)
        return inst
    for method in ("rasterize", "render_frame", "render_rgb8", "check_settings"):
        if not callable(getattr(backend, method, None)):
            raise PyGpuTypeError(
                f"{where}: `backend` must be a backend name or a py_gpu backend (with {method}()), "
                f"got {type(backend).__name__}"
            )
    return backend


def _batch(where: str, batch) -> TriangleBatch:
    if not isinstance(batch, TriangleBatch):
        raise PyGpuTypeError(f"{where}: `batch` must be a py_gpu.TriangleBatch, got {type(batch).__name__}")
    return batch


# ---- the one path ------------------------------------------------------------------------------
def guard_band(size) -> float:
    """The clip-space guard band ``G`` for an ``(H, W)`` image: ``|x|, |y| <= G w`` keeps every screen
    coordinate within about 2**14 px, where float32 still holds the raster rule's 1/256 px grid
    exactly, so every backend (OpenGL included) receives the same drawable batch."""
    return max(1.0, float(2**15) / max(size))


def near_clip(batch: TriangleBatch, size) -> ClipResult | None:
    """The clip of a clip-space batch for an ``(H, W)`` image (None for screen space), against the
    near plane and the guard band: the only place that clips."""
    return clip_batch(batch, guard=guard_band(size)) if batch.is_clip_space else None


def rasterize_batch(backend: Backend, batch: TriangleBatch, size, settings: RasterSettings) -> Fragments:
    """Fragments of a validated batch on its own faces: clip once, rasterize, map back once."""
    clipped = near_clip(batch, size)
    if clipped is None:
        return backend.rasterize(batch, size, settings=settings)
    return clipped.unclip(backend.rasterize(clipped.batch, size, settings=settings))


def render_batch(backend: Backend, batch: TriangleBatch, size, background, settings: RasterSettings,
                 blend: BlendSettings) -> Frame:
    """The ``Frame`` of a validated batch (see the module docstring)."""
    clipped = near_clip(batch, size)
    if clipped is None or clipped.num_clipped == 0:
        drawable = batch if clipped is None else clipped.batch
        return backend.render_frame(drawable, size, background=background, settings=settings, blend=blend)
    frags = clipped.unclip(backend.rasterize(clipped.batch, size, settings=settings))
    return shade_fragments(_on(batch, frags), frags, background, settings, blend)


def render_rgb8(backend: Backend, batch: TriangleBatch, size, background,
                settings: RasterSettings | None = None) -> torch.Tensor:
    """uint8 ``[B, H, W, 3]`` image of a validated batch (the 8-bit fast path, used by the seed protocol)."""
    with cpu_threads(batch.device, batch.batch_size * size[0] * size[1]):
        return _render_rgb8(backend, batch, size, background, settings)


def _render_rgb8(backend: Backend, batch: TriangleBatch, size, background,
                 settings: RasterSettings | None) -> torch.Tensor:
    settings = settings or RasterSettings()
    clipped = near_clip(batch, size)
    if clipped is None or clipped.num_clipped == 0:
        drawable = batch if clipped is None else clipped.batch
        return backend.render_rgb8(drawable, size, background=background, settings=settings)
    frags = clipped.unclip(backend.rasterize(clipped.batch, size, settings=settings))
    return quantize(shade_fragments(_on(batch, frags), frags, background, settings, BlendSettings()).image.detach()[..., :3])


def _check_soft_range(batch: TriangleBatch, blend: BlendSettings, where: str) -> None:
    """Warn once when explicit soft-blend ``znear``/``zfar`` miss some vertex depths (``z``, or
    ``z/w`` of the vertices in front of the camera)."""
    v = batch.vertices.detach()
    if batch.is_clip_space:
        w = v[..., 3]
        depth = (v[..., 2] / w)[w > 0]
    else:
        depth = v[..., 2]
    check_depth_range(depth, blend, where)


def _on(batch: TriangleBatch, frags: Fragments) -> TriangleBatch:
    """``batch`` on the fragments' device (a backend with its own device renders there)."""
    device = frags.face_index.device
    return batch if batch.device == device else batch.to(device)


# ---- public entry points ---------------------------------------------------------------------------
def rasterize(
    batch: TriangleBatch,
    size,
    mode: str | None = None,
    *,
    backend="torch",
    sigma: float | None = None,
    faces_per_pixel: int | None = None,
    cull_backfaces: bool | None = None,
    memory_budget: int | None = None,
    settings: RasterSettings | None = None,
    blend: BlendSettings | None = None,
) -> Fragments:
    """Rasterize ``batch`` at ``size = (H, W)`` into ``Fragments`` on the input faces.

    ``mode="hard"`` (default) follows the exact raster rule, K = 1. ``mode="soft"`` keeps the
    ``faces_per_pixel`` nearest faces whose soft footprint (``sigma``, px^2) reaches each pixel,
    with their signed squared edge distance. Unset arguments take ``settings``' values, then
    ``RasterSettings``' defaults. ``blend`` is accepted (and checked) so that one set of
    keywords works for every entry point; rasterizing does not blend.
    """
    where = "rasterize"
    s, _ = resolve_settings(where, settings, blend, mode=mode, sigma=sigma, faces_per_pixel=faces_per_pixel,
                            cull_backfaces=cull_backfaces, memory_budget=memory_budget)
    be = resolve_backend(where, backend)
    tb = _batch(where, batch)
    size = check_size(where, size)
    with cpu_threads(tb.device, tb.batch_size * size[0] * size[1]):
        return rasterize_batch(be, tb, size, be.check_settings(where, s))


def render(
    batch: TriangleBatch,
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
    znear: float | None = None,
    zfar: float | None = None,
    composite: str | None = None,
    settings: RasterSettings | None = None,
    blend: BlendSettings | None = None,
) -> Frame:
    """Rasterize and shade ``batch`` into a ``Frame`` (image, alpha, depth, face_index).

    With the torch backend ``Frame.image`` is differentiable with respect to vertex positions
    and colors (and, in soft mode, through silhouettes and depth order). ``background`` is float
    RGB in [0, 1]. ``sigma``, ``faces_per_pixel``, ``cull_backfaces`` and ``memory_budget``
    override ``settings`` (a ``RasterSettings``); ``gamma``, ``znear``, ``zfar`` and ``composite``
    override ``blend`` (a ``BlendSettings``).

    In soft mode ``Frame.alpha`` is the soft silhouette over every face reaching a pixel, and
    ``Frame.image`` is by default (``composite="over"``) the faces' blended color composited with
    that alpha over the background; ``composite="softras"`` gives SoftRas' and PyTorch3D's form.
    Depth is normalized automatically unless ``znear``/``zfar`` are given (see ``BlendSettings``).
    """
    where = "render"
    s, b = resolve_settings(where, settings, blend, mode=mode, sigma=sigma, gamma=gamma,
                            faces_per_pixel=faces_per_pixel, cull_backfaces=cull_backfaces,
                            memory_budget=memory_budget, znear=znear, zfar=zfar, composite=composite)
    be = resolve_backend(where, backend)
    tb = _batch(where, batch)
    if s.mode == "soft" and not b.auto_range and checks_enabled():
        _check_soft_range(tb, b, where)
    size = check_size(where, size)
    bg = check_rgb(where, "background", background, scale=1.0)
    with cpu_threads(tb.device, tb.batch_size * size[0] * size[1]):
        return render_batch(be, tb, size, bg, be.check_settings(where, s), b)


def silhouette(
    batch: TriangleBatch,
    size,
    *,
    sigma: float | None = None,
    cull_backfaces: bool | None = None,
    memory_budget: int | None = None,
    settings: RasterSettings | None = None,
) -> torch.Tensor:
    """float ``[B, H, W, 1]``: the soft silhouette of ``batch``, differentiable with respect to the
    vertex positions: ``1 - prod (1 - D)`` over every face whose blurred footprint reaches a pixel,
    with ``D = sigmoid(dist / sigma)`` (SoftRas' silhouette; PyTorch3D's ``SoftSilhouetteShader``
    takes the product over the K nearest faces only).

    The same values, bit for bit, as ``render(batch, size, mode="soft").alpha`` with the same
    settings, without selecting the K nearest faces, interpolating colors or blending: the
    cheaper call for silhouette losses. It runs in torch, on the batch's device. ``sigma``,
    ``cull_backfaces`` and ``memory_budget`` override ``settings`` (a ``RasterSettings``; its
    ``mode`` is taken as ``"soft"``). Clip-space faces that the near plane cuts go through
    ``render``'s clipping (same values, at ``render``'s cost).
    """
    where = "silhouette"
    s, b = resolve_settings(where, settings, None, mode="soft", sigma=sigma, cull_backfaces=cull_backfaces,
                            memory_budget=memory_budget)
    tb = _batch(where, batch)
    size = check_size(where, size)
    with cpu_threads(tb.device, tb.batch_size * size[0] * size[1]):
        clipped = near_clip(tb, size)
        if clipped is not None and clipped.num_clipped:
            be = resolve_backend(where, "torch")
            return render_batch(be, tb, size, (0.0, 0.0, 0.0), be.check_settings(where, s), b).alpha
        return silhouette_soft(tb if clipped is None else clipped.batch, size, s)
