"""Soft blending: turn soft ``Fragments`` into a soft silhouette and a depth-aware color image.

With ``D_k = sigmoid(dist_k / sigma)`` the soft coverage of the k-th kept face at a pixel
(``dist`` in px^2, positive inside, ``sigma`` in px^2):

- **silhouette** (SoftRas eq. 4): ``alpha = 1 - prod_k (1 - D_k)``, evaluated as
  ``1 - exp(sum_k logsigmoid(-dist_k / sigma))`` so it stays exact when some ``D_k`` round to 1.
- **color** (SoftRas eq. 6, in PyTorch3D's ``softmax_rgb_blend`` form): depths are normalized to
  ``z_k = (zfar - depth_k) / (zfar - znear)`` (1 at ``znear``, 0 at ``zfar``), then with
  ``z_max = max(max_k z_k, eps)``

      w_k  = D_k * exp((z_k - z_max) / gamma)
      w_bg = max(exp((eps - z_max) / gamma), eps)
      image = (sum_k w_k * color_k + w_bg * background) / (sum_k w_k + w_bg)

  where ``eps = background_epsilon``. Small ``gamma`` lets the nearest face dominate; large
  ``gamma`` mixes faces. The normalization is done as one softmax over ``K + 1`` logits
  (``log D_k = logsigmoid(dist_k / sigma)``), which is the same ratio without overflow.

Defaults (``RasterSettings``): ``sigma = 1`` px^2, ``gamma = 1e-4``, ``znear = 0``, ``zfar = 1``,
``background_epsilon = 1e-10``, ``faces_per_pixel = 8``, ``cutoff = 1e-4``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as nnf

from .._check import PyGpuTypeError, check_rgb, check_size
from ..contracts import Fragments, Frame, TriangleBatch
from ..settings import RasterSettings

__all__ = ["coverage", "silhouette", "blend_weights", "slot_colors", "blend", "render_soft"]


def _scaled(frags: Fragments, sigma: float) -> torch.Tensor:
    """float ``[B, H, W, K]``: ``dist / sigma``, 0 on empty slots."""
    if frags.dist is None:
        raise PyGpuTypeError("soft blending needs soft Fragments (with `dist`); rasterize with mode='soft'")
    return torch.where(frags.mask, frags.dist, torch.zeros_like(frags.dist)) / sigma


def coverage(frags: Fragments, sigma: float) -> torch.Tensor:
    """float ``[B, H, W, K]``: per-slot soft coverage ``D = sigmoid(dist / sigma)``; 0 where empty."""
    d = torch.sigmoid(_scaled(frags, sigma))
    return torch.where(frags.mask, d, torch.zeros_like(d))


def silhouette(frags: Fragments, settings: RasterSettings) -> torch.Tensor:
    """float ``[B, H, W, 1]``: soft silhouette ``1 - prod_k (1 - D_k)`` over the kept faces."""
    log_miss = nnf.logsigmoid(-_scaled(frags, settings.sigma))  # log(1 - D_k)
    log_miss = torch.where(frags.mask, log_miss, torch.zeros_like(log_miss))
    return (1.0 - torch.exp(log_miss.sum(dim=-1)))[..., None]


def blend_weights(frags: Fragments, settings: RasterSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalized softmax-over-depth weights.

    Returns:
        weights: float ``[B, H, W, K]``, each kept face's share of the pixel color (0 where empty).
        background: float ``[B, H, W]``, the background's share; ``weights.sum(-1) + background == 1``.
    """
    mask = frags.mask
    eps, gamma = settings.background_epsilon, settings.gamma
    depth = torch.where(mask, frags.depth, torch.zeros_like(frags.depth))
    z = (settings.zfar - depth) / (settings.zfar - settings.znear)  # [B, H, W, K]
    z_max = torch.where(mask, z, torch.full_like(z, -math.inf)).amax(dim=-1, keepdim=True).clamp(min=eps)
    logit = nnf.logsigmoid(_scaled(frags, settings.sigma)) + (z - z_max) / gamma
    logit = torch.where(mask, logit, torch.full_like(logit, -math.inf))
    logit_bg = torch.clamp((eps - z_max) / gamma, min=math.log(eps))  # [B, H, W, 1]
    w = torch.softmax(torch.cat((logit, logit_bg), dim=-1), dim=-1)
    return w[..., :-1], w[..., -1]


def slot_colors(batch: TriangleBatch, frags: Fragments) -> torch.Tensor:
    """float ``[B, H, W, K, C]``: each slot's color (vertex colors through ``frags.bary``, face
    colors gathered, white without colors); 0 where empty."""
    face = frags.face_index
    B, H, W, K = face.shape
    safe = face.clamp(min=0).reshape(B, -1)  # [B, H*W*K]
    dtype = frags.bary.dtype
    if batch.face_colors is not None:
        fc = batch.face_colors.to(dtype)  # [B, F, C]
        C = fc.shape[-1]
        col = torch.gather(fc, 1, safe[..., None].expand(-1, -1, C)).reshape(B, H, W, K, C)
    elif batch.vertex_colors is not None:
        vc = batch.vertex_colors.to(dtype)  # [B, V, C]
        C = vc.shape[-1]
        corner = batch.faces[safe]  # [B, H*W*K, 3]
        per_corner = torch.gather(vc, 1, corner.reshape(B, -1, 1).expand(-1, -1, C)).reshape(B, H, W, K, 3, C)
        col = (frags.bary[..., None] * per_corner).sum(dim=-2)
    else:
        col = torch.ones(B, H, W, K, 3, dtype=dtype, device=face.device)
    return torch.where(frags.mask[..., None], col, torch.zeros_like(col))


def blend(colors: torch.Tensor, frags: Fragments, background, settings: RasterSettings) -> torch.Tensor:
    """float ``[B, H, W, C]``: softmax-over-depth blend of per-slot ``colors`` ``[B, H, W, K, C]``
    with ``background`` (a float sequence of length >= min(C, 3); extra channels get 0)."""
    weights, w_bg = blend_weights(frags, settings)
    C = colors.shape[-1]
    bg = torch.zeros(C, dtype=colors.dtype, device=colors.device)
    n = min(3, C)
    bg[:n] = torch.tensor(list(background)[:n], dtype=colors.dtype, device=colors.device)
    return (weights[..., None] * colors).sum(dim=-2) + w_bg[..., None] * bg


def nearest_covering(frags: Fragments) -> tuple[torch.Tensor, torch.Tensor]:
    """The nearest kept face whose triangle contains the pixel center (``dist >= 0``).

    Returns int64 ``[B, H, W]`` face index (-1 where none) and float ``[B, H, W]`` its depth
    (+inf where none).
    """
    covering = frags.mask & (frags.dist >= 0)  # [B, H, W, K]
    K = covering.shape[-1]
    rank = torch.where(covering, torch.arange(K, device=covering.device), torch.full_like(frags.face_index, K))
    first = rank.amin(dim=-1, keepdim=True).clamp(max=K - 1)  # [B, H, W, 1]
    any_cov = covering.any(dim=-1)
    face = torch.where(any_cov, frags.face_index.gather(-1, first)[..., 0], torch.full_like(any_cov, -1, dtype=torch.int64))
    depth = frags.depth.gather(-1, first)[..., 0]
    depth = torch.where(any_cov, depth, torch.full_like(depth, math.inf))
    return face, depth


def render_soft(batch: TriangleBatch, size, *, background=(0.0, 0.0, 0.0), settings: RasterSettings | None = None,
                rasterizer=None) -> Frame:
    """Soft-render ``batch`` at ``size = (H, W)``: soft rasterize, color the slots, blend.

    Args:
        batch: ``TriangleBatch``; vertex or face colors (white without).
        size: ``(H, W)``.
        background: float RGB in [0, 1].
        settings: ``RasterSettings`` (``sigma``, ``gamma``, ``faces_per_pixel``, ``znear``/``zfar``,
            ``background_epsilon``, ``cutoff``, ``cull_backfaces``, ``memory_budget``).
        rasterizer: ``f(batch, size, settings) -> Fragments``; defaults to
            :func:`py_gpu.raster.torch_soft.rasterize_soft` (tests pass the brute-force oracle).

    Returns:
        ``Frame``: ``image`` float ``[B, H, W, C]`` (softmax-over-depth blend), ``alpha``
        ``[B, H, W, 1]`` (soft silhouette), ``depth`` ``[B, H, W]`` and ``face_index`` ``[B, H, W]``
        of the nearest face containing the pixel center (+inf / -1 where none). ``image``,
        ``alpha`` and ``depth`` are differentiable with respect to vertices and colors.
    """
    where = "render_soft"
    if not isinstance(batch, TriangleBatch):
        raise PyGpuTypeError(f"{where}: `batch` must be a TriangleBatch, got {type(batch).__name__}")
    size = check_size(where, size)
    bg = check_rgb(where, "background", background, scale=1.0)
    s = settings if settings is not None else RasterSettings(mode="soft")
    if not isinstance(s, RasterSettings):
        raise PyGpuTypeError(f"{where}: `settings` must be a RasterSettings, got {type(s).__name__}")
    if rasterizer is None:
        from ..raster.torch_soft import rasterize_soft as rasterizer
    frags = rasterizer(batch, size, s)
    image = blend(slot_colors(batch, frags), frags, bg, s)
    face, depth = nearest_covering(frags)
    return Frame(image=image, alpha=silhouette(frags, s), depth=depth, face_index=face)
