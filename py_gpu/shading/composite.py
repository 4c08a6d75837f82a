"""Compositing: per-fragment colors over a background, hard (nearest face) or soft (blended).

Every path that turns ``Fragments`` into a ``Frame`` comes through here: the backends'
``render_frame``, the front end's clipped path and the ``Renderer``'s shading pass.
"""

from __future__ import annotations

import math

import torch

from .._check import PyGpuTypeError, check_rgb, check_size
from ..contracts import Fragments, Frame, TriangleBatch
from ..raster.torch_soft import rasterize_soft
from ..settings import BlendSettings, RasterSettings
from .blend import blend, nearest_covering, silhouette
from .interpolate import gather_face, interpolate_vertex

__all__ = ["background_tensor", "slot_colors", "composite_hard", "composite_soft", "at_slot",
           "shade_hard", "shade_soft", "shade_fragments", "render_soft"]


def background_tensor(background, channels: int, dtype: torch.dtype, device) -> torch.Tensor:
    """float ``[C]``: the background RGB in the first ``min(3, C)`` channels, 0 in the others."""
    bg = torch.zeros(channels, dtype=dtype, device=device)
    n = min(3, channels)
    bg[:n] = torch.tensor(list(background)[:n], dtype=dtype, device=device)
    return bg


def slot_colors(batch: TriangleBatch, frags: Fragments) -> torch.Tensor:
    """float ``[B, H, W, K, C]``: each fragment's color (vertex colors interpolated, face colors
    gathered, white without colors) in ``frags.bary``'s dtype; 0 where empty."""
    dtype = frags.bary.dtype
    if batch.face_colors is not None:
        return gather_face(batch.face_colors.to(dtype), frags.face_index)
    if batch.vertex_colors is not None:
        return interpolate_vertex(batch.vertex_colors.to(dtype), batch.faces, frags.face_index, frags.bary)
    ones = torch.ones(*frags.face_index.shape, 3, dtype=dtype, device=frags.face_index.device)
    return torch.where(frags.mask[..., None], ones, torch.zeros((), dtype=dtype, device=ones.device))


def at_slot(values: torch.Tensor, slot: torch.Tensor, covered: torch.Tensor) -> torch.Tensor:
    """``values[..., slot, :]`` for ``[B, H, W, K, C]`` values and int64 ``[B, H, W]`` slots; 0 where not covered."""
    got = torch.gather(values, 3, slot[..., None, None].expand(*slot.shape, 1, values.shape[-1])).squeeze(3)
    return torch.where(covered[..., None], got, torch.zeros((), dtype=got.dtype, device=got.device))


def composite_hard(colors: torch.Tensor, frags: Fragments, background) -> Frame:
    """The nearest fragment's color (slot 0) over ``background``.

    ``colors``: float ``[B, H, W, K, C]``. Returns a ``Frame`` in ``colors``' dtype.
    """
    face = frags.face_index[..., 0]  # [B, H, W]
    covered = face >= 0
    bg = background_tensor(background, colors.shape[-1], colors.dtype, colors.device)
    image = torch.where(covered[..., None], colors[..., 0, :], bg)
    depth = torch.where(covered, frags.depth[..., 0], torch.full_like(frags.depth[..., 0], math.inf))
    return Frame(image=image, alpha=covered[..., None].to(colors.dtype), depth=depth, face_index=face)


def composite_soft(colors: torch.Tensor, frags: Fragments, background, settings: RasterSettings,
                   blend_settings: BlendSettings) -> tuple[Frame, torch.Tensor]:
    """Softmax-over-depth blend of ``colors`` ``[B, H, W, K, C]`` with the background.

    Returns the ``Frame`` (soft silhouette alpha; depth and face of the nearest fragment whose
    face contains the pixel center) and that fragment's slot, int64 ``[B, H, W]``.
    """
    bg = background_tensor(background, colors.shape[-1], colors.dtype, colors.device)
    image = blend(colors, frags, bg, settings, blend_settings)
    face, depth, slot = nearest_covering(frags)
    return Frame(image=image, alpha=silhouette(frags, settings), depth=depth, face_index=face), slot


def shade_hard(batch: TriangleBatch, frags: Fragments, background) -> Frame:
    """Hard-mode ``Frame`` of ``batch``'s colors at ``frags`` (K = 1), in ``frags.bary``'s dtype."""
    return composite_hard(slot_colors(batch, frags), frags, background)


def shade_soft(batch: TriangleBatch, frags: Fragments, background, settings: RasterSettings,
               blend_settings: BlendSettings) -> Frame:
    """Soft-mode ``Frame`` of ``batch``'s colors at soft ``frags``."""
    return composite_soft(slot_colors(batch, frags), frags, background, settings, blend_settings)[0]


def shade_fragments(batch: TriangleBatch, frags: Fragments, background, settings: RasterSettings,
          blend_settings: BlendSettings) -> Frame:
    """``shade_hard`` or ``shade_soft``, by ``settings.mode``."""
    if settings.mode == "soft":
        return shade_soft(batch, frags, background, settings, blend_settings)
    return shade_hard(batch, frags, background)


def render_soft(batch: TriangleBatch, size, *, background=(0.0, 0.0, 0.0), settings: RasterSettings | None = None,
                blend_settings: BlendSettings | None = None, rasterizer=rasterize_soft) -> Frame:
    """Soft-render a screen-space (or already clipped) ``batch`` at ``size = (H, W)``.

    ``rasterizer(batch, size, settings) -> Fragments`` defaults to
    :func:`py_gpu.raster.torch_soft.rasterize_soft`; tests pass the brute-force oracle. The
    ``Frame``'s ``image``, ``alpha`` and ``depth`` are differentiable with respect to vertices
    and colors. Use :func:`py_gpu.render` for clip-space input that may cross the near plane.
    """
    where = "render_soft"
    if not isinstance(batch, TriangleBatch):
        raise PyGpuTypeError(f"{where}: `batch` must be a TriangleBatch, got {type(batch).__name__}")
    size = check_size(where, size)
    bg = check_rgb(where, "background", background, scale=1.0)
    s = RasterSettings(mode="soft") if settings is None else settings
    b = BlendSettings() if blend_settings is None else blend_settings
    if not isinstance(s, RasterSettings) or not isinstance(b, BlendSettings):
        raise PyGpuTypeError(f"{where}: `settings` must be a RasterSettings and `blend_settings` a BlendSettings")
    return shade_soft(batch, rasterizer(batch, size, s), bg, s, b)
