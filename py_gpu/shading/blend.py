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

Defaults: ``RasterSettings`` (``sigma = 1`` px^2, ``faces_per_pixel = 8``, ``cutoff = 1e-4``) and
``BlendSettings`` (``gamma = 1e-4``, ``znear = 0``, ``zfar = 1``, ``background_epsilon = 1e-10``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as nnf

from .._check import PyGpuTypeError
from ..contracts import Fragments
from ..settings import BlendSettings, RasterSettings

__all__ = ["coverage", "silhouette", "blend_weights", "blend", "nearest_covering"]


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


def blend_weights(frags: Fragments, settings: RasterSettings, blend_settings: BlendSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalized softmax-over-depth weights.

    Returns:
        weights: float ``[B, H, W, K]``, each kept face's share of the pixel color (0 where empty).
        background: float ``[B, H, W]``, the background's share; ``weights.sum(-1) + background == 1``.
    """
    mask = frags.mask
    b = blend_settings
    eps, gamma = b.background_epsilon, b.gamma
    depth = torch.where(mask, frags.depth, torch.zeros_like(frags.depth))
    z = (b.zfar - depth) / (b.zfar - b.znear)  # [B, H, W, K]
    z_max = torch.where(mask, z, torch.full_like(z, -math.inf)).amax(dim=-1, keepdim=True).clamp(min=eps)
    logit = nnf.logsigmoid(_scaled(frags, settings.sigma)) + (z - z_max) / gamma
    logit = torch.where(mask, logit, torch.full_like(logit, -math.inf))
    logit_bg = torch.clamp((eps - z_max) / gamma, min=math.log(eps))  # [B, H, W, 1]
    w = torch.softmax(torch.cat((logit, logit_bg), dim=-1), dim=-1)
    return w[..., :-1], w[..., -1]


def blend(colors: torch.Tensor, frags: Fragments, background: torch.Tensor, settings: RasterSettings,
          blend_settings: BlendSettings) -> torch.Tensor:
    """float ``[B, H, W, C]``: softmax-over-depth blend of per-slot ``colors`` ``[B, H, W, K, C]``
    with ``background``, a float ``[C]`` tensor."""
    weights, w_bg = blend_weights(frags, settings, blend_settings)
    return (weights[..., None] * colors).sum(dim=-2) + w_bg[..., None] * background


def nearest_covering(frags: Fragments) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The nearest kept face whose triangle contains the pixel center (``dist >= 0``).

    Returns int64 ``[B, H, W]`` face index (-1 where none), float ``[B, H, W]`` its depth
    (+inf where none) and int64 ``[B, H, W]`` its slot in ``K`` (clamped to a valid slot where none).
    """
    covering = frags.mask & (frags.dist >= 0)  # [B, H, W, K]
    K = covering.shape[-1]
    rank = torch.where(covering, torch.arange(K, device=covering.device), torch.full_like(frags.face_index, K))
    first = rank.amin(dim=-1, keepdim=True).clamp(max=K - 1)  # [B, H, W, 1]
    any_cov = covering.any(dim=-1)
    face = torch.where(any_cov, frags.face_index.gather(-1, first)[..., 0], torch.full_like(any_cov, -1, dtype=torch.int64))
    depth = frags.depth.gather(-1, first)[..., 0]
    depth = torch.where(any_cov, depth, torch.full_like(depth, math.inf))
    return face, depth, first[..., 0]
