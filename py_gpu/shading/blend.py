"""Soft blending: turn soft ``Fragments`` into a soft silhouette and a depth-aware color image.

With ``D_k = sigmoid(dist_k / sigma)`` the soft coverage of the k-th kept face at a pixel
(``dist`` in px^2, positive inside, ``sigma`` in px^2):

- **silhouette** (SoftRas eq. 4): ``alpha = 1 - prod_f (1 - D_f)`` over every face ``f`` whose
  footprint reaches the pixel (``Fragments.alpha``, computed by the rasterizer); for fragments
  without it, over the K kept slots. Evaluated as ``1 - exp(sum logsigmoid(-dist / sigma))``, so
  it stays exact when some ``D`` round to 1.
- **normalized depth**: ``z_k = (zfar - depth_k) / (zfar - znear)``, 1 near and 0 far, with the
  range of :func:`depth_range` (automatic unless ``BlendSettings`` gives one).
- **color**, ``BlendSettings.composite``:

  - ``"over"`` (default): the kept faces' softmax ``w_k = D_k exp(z_k / gamma) / sum_j D_j exp(z_j / gamma)``
    gives the surface color ``c = sum_k w_k color_k``, composited with the silhouette:
    ``image = alpha * c + (1 - alpha) * background``.
  - ``"softras"`` (SoftRas eq. 6, in PyTorch3D's ``softmax_rgb_blend`` form): with
    ``z_max = max(max_k z_k, eps)`` and ``eps = background_epsilon``,

        w_k  = D_k * exp((z_k - z_max) / gamma)
        w_bg = max(exp((eps - z_max) / gamma), eps)
        image = (sum_k w_k * color_k + w_bg * background) / (sum_k w_k + w_bg)

  Both are evaluated as a softmax over logits ``logsigmoid(dist_k / sigma) + z_k / gamma``,
  which is the same ratio without overflow. Small ``gamma`` lets the nearest face dominate;
  large ``gamma`` mixes faces.
"""

from __future__ import annotations

import math
import sys
import warnings

import torch
import torch.nn.functional as nnf

from .._check import PyGpuTypeError, PyGpuWarning
from ..contracts import Fragments
from ..raster.torch_soft import exp_floor, exp_normal
from ..settings import BlendSettings, RasterSettings

__all__ = ["coverage", "silhouette", "depth_range", "blend_weights", "face_weights", "weighted", "blend",
           "nearest_covering", "check_depth_range", "blend_planes", "slot_weights"]


#: Slot counts up to which :func:`slot_sum` and :func:`slot_max` add the slots one by one.
_SHORT_SLOTS = 4


def slot_sum(x: torch.Tensor, keepdim: bool = False) -> torch.Tensor:
    """``x.sum(dim=-1)`` over the K slots, the same bits. torch's CPU sum over a last dim of 2-4
    runs 3-10x slower than adding its slices (measured at 1 thread: 0.24 against 0.08 ms for
    32,768 pixels of 4 slots), and adds them in the same order (slot 0 first), which
    ``tests/test_soft.py`` checks for every K up to :data:`_SHORT_SLOTS`. Under autograd, one sum
    (one node, whose backward is one expand) costs less than K - 1 additions."""
    K = x.shape[-1]
    if K <= 1 or K > _SHORT_SLOTS or (x.requires_grad and torch.is_grad_enabled()):
        return x.sum(dim=-1, keepdim=keepdim)
    total = x[..., 0] + x[..., 1]
    for k in range(2, K):
        total = total + x[..., k]
    return total[..., None] if keepdim else total


def slot_max(x: torch.Tensor, keepdim: bool = False) -> torch.Tensor:
    """``x.amax(dim=-1)`` over the K slots (a maximum has no order), by slices for short K as
    :func:`slot_sum`."""
    K = x.shape[-1]
    if K <= 1 or K > _SHORT_SLOTS or (x.requires_grad and torch.is_grad_enabled()):
        return x.amax(dim=-1, keepdim=keepdim)
    top = torch.maximum(x[..., 0], x[..., 1])
    for k in range(2, K):
        top = torch.maximum(top, x[..., k])
    return top[..., None] if keepdim else top


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
    """float ``[B, H, W, 1]``: soft silhouette ``1 - prod (1 - D)``: ``frags.alpha`` (every face
    reaching the pixel) when the rasterizer computed it, else over the K kept slots."""
    if frags.alpha is not None:
        return frags.alpha
    log_miss = nnf.logsigmoid(-_scaled(frags, settings.sigma))  # log(1 - D_k)
    log_miss = torch.where(frags.mask, log_miss, torch.zeros_like(log_miss))
    return (1.0 - exp_normal(slot_sum(log_miss)))[..., None]


def depth_range(depth: torch.Tensor, blend_settings: BlendSettings, *, clip_space: bool,
                mask: torch.Tensor | None = None) -> torch.Tensor:
    """float ``[B, 2]`` ``(znear, zfar)`` per batch element, detached.

    Explicit ``BlendSettings`` values are used as given. Otherwise clip-space input uses ``z/w``
    in ``[0, 1]``, and screen-space input the range of ``depth`` (float ``[B, ...]``: the batch's
    vertex depths, or the fragments' with ``mask``): ``znear`` = its minimum, ``zfar`` = its maximum
    plus its extent (plus 1 when flat), so the element's faces span normalized depth ``[0.5, 1]``
    and the ``"softras"`` background term never outweighs a face.
    """
    B = depth.shape[0]
    b = blend_settings
    if not b.auto_range or clip_space:
        lo, hi = (0.0, 1.0) if b.auto_range else (b.znear, b.zfar)
        return torch.tensor([[lo, hi]], dtype=depth.dtype, device=depth.device).expand(B, 2)
    if depth.numel() == 0:
        return torch.tensor([[0.0, 1.0]], dtype=depth.dtype, device=depth.device).expand(B, 2)
    d = depth.detach().reshape(B, -1)
    if d.shape[1] == 0:
        return torch.tensor([[0.0, 1.0]], dtype=depth.dtype, device=depth.device).expand(B, 2)
    if mask is None:
        mask = torch.isfinite(d)
    else:
        mask = mask.reshape(B, -1)
    lo = torch.where(mask, d, torch.full_like(d, math.inf)).amin(dim=1)
    hi = torch.where(mask, d, torch.full_like(d, -math.inf)).amax(dim=1)
    empty = ~torch.isfinite(lo)
    lo, hi = torch.where(empty, torch.zeros_like(lo), lo), torch.where(empty, torch.zeros_like(hi), hi)
    span = hi - lo
    return torch.stack((lo, hi + torch.where(span > 0, span, torch.ones_like(span))), dim=1)


_WARNED: set = set()


def check_depth_range(depth: torch.Tensor, blend_settings: BlendSettings, where: str) -> None:
    """Warn once per range when explicit ``znear``/``zfar`` do not hold every vertex depth
    (float ``[B, V]``): such faces get normalized depth outside ``[0, 1]``, and in the
    ``"softras"`` form a face beyond ``zfar`` loses to the background."""
    b = blend_settings
    if b.auto_range or depth.numel() == 0:
        return
    d = depth.detach()
    lo, hi = float(d.min()), float(d.max())
    key = (b.znear, b.zfar)
    if (lo < b.znear or hi > b.zfar) and key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(f"{where}: vertex depths span [{lo:.4g}, {hi:.4g}], outside the soft-blend range "
                      f"znear={b.znear}, zfar={b.zfar}; faces beyond zfar fade into the background in the "
                      "'softras' form. Leave znear/zfar unset for the automatic range, or widen them.",
                      PyGpuWarning, stacklevel=3)


def _normalized(frags: Fragments, blend_settings: BlendSettings, zrange: torch.Tensor | None) -> torch.Tensor:
    """float ``[B, H, W, K]`` normalized depth ``(zfar - depth) / (zfar - znear)``, 0 where empty."""
    mask = frags.mask
    depth = torch.where(mask, frags.depth, torch.zeros_like(frags.depth))
    if zrange is None:
        zrange = _fragments_range(frags, blend_settings)
    zrange = zrange.to(depth.dtype)
    near, far = zrange[:, 0].view(-1, 1, 1, 1), zrange[:, 1].view(-1, 1, 1, 1)
    return torch.where(mask, (far - depth) / (far - near), torch.zeros_like(depth))


def _fragments_range(frags: Fragments, blend_settings: BlendSettings) -> torch.Tensor:
    """:func:`depth_range` of the fragments' own kept depths (clip space where they carry
    ``screen_bary``), for blends given no ``zrange``."""
    return depth_range(frags.depth, blend_settings, clip_space=frags.screen_bary is not None, mask=frags.mask)


def blend_weights(frags: Fragments, settings: RasterSettings, blend_settings: BlendSettings,
                  zrange: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalized softmax-over-depth weights of the ``"softras"`` form.

    ``zrange``: float ``[B, 2]`` from :func:`depth_range`; None derives it from the fragments.

    Returns:
        weights: float ``[B, H, W, K]``, each kept face's share of the pixel color (0 where empty).
        background: float ``[B, H, W]``, the background's share; ``weights.sum(-1) + background == 1``.
    """
    mask = frags.mask
    b = blend_settings
    eps, gamma = b.background_epsilon, b.gamma
    z = _normalized(frags, b, zrange)  # [B, H, W, K]
    z_max = slot_max(torch.where(mask, z, torch.full_like(z, -math.inf)), keepdim=True).clamp(min=eps)
    logit = nnf.logsigmoid(_scaled(frags, settings.sigma)) + (z - z_max) / gamma
    logit = torch.where(mask, logit, torch.full_like(logit, -math.inf))
    logit_bg = torch.clamp((eps - z_max) / gamma, min=math.log(eps))  # [B, H, W, 1]
    # the softmax over the K slots and the background, written out: torch.softmax over a short
    # last dim runs at ~18 ns per element on the CPU (about 10x these ops)
    top = torch.maximum(slot_max(logit, keepdim=True), logit_bg).detach()
    e, e_bg = exp_normal(logit - top), exp_normal(logit_bg - top)
    total = slot_sum(e, keepdim=True) + e_bg
    return e / total, (e_bg / total)[..., 0]


def _face_logits(frags: Fragments, settings: RasterSettings, blend_settings: BlendSettings,
                 zrange: torch.Tensor | None) -> torch.Tensor:
    """The ``"over"`` form's softmax arguments ``logit - top`` (float ``[B, H, W, K]``, -inf where
    empty), ``top`` each pixel's largest logit (detached; 0 without any)."""
    mask = frags.mask
    z = _normalized(frags, blend_settings, zrange)
    logit = nnf.logsigmoid(_scaled(frags, settings.sigma)) + z / blend_settings.gamma
    logit = torch.where(mask, logit, torch.full_like(logit, -math.inf))
    return _less_top(logit)


def _less_top(logit: torch.Tensor) -> torch.Tensor:
    """``logit - top`` (float ``[B, H, W, K]``), ``top`` each pixel's largest logit over its K
    slots (detached; 0 where none is finite)."""
    top = slot_max(logit, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top)).detach()
    return logit - top


def _softmax(shifted: torch.Tensor) -> torch.Tensor:
    """The softmax over the K slots of :func:`_less_top`'s ``shifted`` logits (0 where every
    slot's weight is 0)."""
    e = exp_normal(shifted)
    total = slot_sum(e, keepdim=True)
    return e / torch.where(total > 0, total, torch.ones_like(total))


def weighted(frags: Fragments, settings: RasterSettings, blend_settings: BlendSettings,
             zrange: torch.Tensor | None = None) -> torch.Tensor:
    """bool ``[B, H, W, K]``: the slots whose :func:`face_weights` weight is not exactly 0 (those
    below ``exp_normal``'s floor get 0, with a zero derivative), without the softmax itself."""
    shifted = _face_logits(frags, settings, blend_settings, zrange)
    return shifted >= exp_floor(shifted.dtype)


def face_weights(frags: Fragments, settings: RasterSettings, blend_settings: BlendSettings,
                 zrange: torch.Tensor | None = None) -> torch.Tensor:
    """float ``[B, H, W, K]``: the ``"over"`` form's weights, a softmax over the kept faces only
    (summing to 1 where any face is kept, 0 elsewhere)."""
    return _softmax(_face_logits(frags, settings, blend_settings, zrange))


def slot_weights(dist: torch.Tensor, depth: torch.Tensor, sigma: float, gamma: float,
                 zrange: torch.Tensor) -> torch.Tensor:
    """:func:`face_weights` of the slots ``dist``, ``depth`` (float ``[B, H, W, K]``) whose empty
    entries hold depth +inf (the rasterizer's own slot buffers), the same bits without masks:
    there the normalized depth is -inf, so the logit is -inf and the weight 0, as the masks make
    them. (``zrange``: float ``[B, 2]`` of :func:`depth_range`.)"""
    zrange = zrange.to(depth.dtype)
    near, far = zrange[:, 0].view(-1, 1, 1, 1), zrange[:, 1].view(-1, 1, 1, 1)
    logit = nnf.logsigmoid(dist / sigma) + ((far - depth) / (far - near)) / gamma
    return _softmax(_less_top(logit))


def blend(colors: torch.Tensor, frags: Fragments, background: torch.Tensor, settings: RasterSettings,
          blend_settings: BlendSettings, zrange: torch.Tensor | None = None) -> torch.Tensor:
    """float ``[B, H, W, C]``: the soft image of per-slot ``colors`` ``[B, H, W, K, C]`` over
    ``background`` (float ``[C]``), in ``blend_settings.composite``'s form."""
    return blend_planes(colors.unbind(-1), frags, background, settings, blend_settings, zrange)


def blend_planes(planes, frags: Fragments, background: torch.Tensor, settings: RasterSettings,
                 blend_settings: BlendSettings, zrange: torch.Tensor | None = None,
                 weights: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`blend` of colors given as one ``[B, H, W, K]`` plane per channel (what the soft tile
    paths make): each channel's weighted sum runs over the contiguous K slots of its plane rather
    than over a strided dim of ``[..., K, C]`` (the sums of every path, so the same bits).
    ``weights``: the ``"over"`` form's :func:`face_weights`, when the caller has them."""
    if blend_settings.composite == "softras":
        weights, w_bg = blend_weights(frags, settings, blend_settings, zrange)
        return torch.stack([slot_sum(weights * plane) + w_bg * background[c] for c, plane in enumerate(planes)],
                           dim=-1)
    if weights is None and frags.alpha is not None and torch.is_grad_enabled() and not background.requires_grad \
            and any(t.requires_grad for t in (frags.dist, frags.depth, frags.alpha, *planes)):
        if zrange is None:
            zrange = _fragments_range(frags, blend_settings)
        return _OverBlend.apply(frags.face_index, frags.dist, frags.depth, frags.alpha, background,
                                (settings, blend_settings, zrange.detach()), *planes)
    return _over(planes, frags, background, settings, blend_settings, zrange, weights)


def _over(planes, frags: Fragments, background: torch.Tensor, settings: RasterSettings,
          blend_settings: BlendSettings, zrange: torch.Tensor | None, weights: torch.Tensor | None) -> torch.Tensor:
    """The ``"over"`` image of :func:`blend_planes`: ``alpha * sum_k w_k c_k + (1 - alpha) * background``."""
    if weights is None:
        weights = face_weights(frags, settings, blend_settings, zrange)
    return _over_image(weights, silhouette(frags, settings)[..., 0], planes, background)[0]


def _over_image(weights: torch.Tensor, alpha: torch.Tensor, planes, background: torch.Tensor):
    """``(image, sums)``: the ``"over"`` image ``[B, H, W, C]`` of the weights and color planes
    (``[B, H, W, K]`` each) over ``background`` with the silhouette ``alpha`` (``[B, H, W]``), and
    each channel's weighted sum ``S_c = sum_k w_k p_ck`` (``[B, H, W]``)."""
    sums = [slot_sum(weights * plane) for plane in planes]
    return torch.stack([alpha * s + (1.0 - alpha) * background[c] for c, s in enumerate(sums)], dim=-1), sums


class _OverBlend(torch.autograd.Function):
    """:func:`_over` (the same operations, so the same values) with a closed-form backward pass
    into the slots' distances and depths, the silhouette and the color planes. Autograd through
    the weights' expressions (masks, the shift, the softmax, the per-channel products) keeps
    some forty nodes per tile; this backward pass runs a third as many operations.

    With ``a`` the silhouette, ``w`` the softmax of the logits ``l_k = logsigmoid(dist_k / sigma)
    + z_k / gamma`` over the kept slots (``z_k = (zfar - depth_k) / (zfar - znear)``, the shift
    by the largest logit is detached) and ``S_c = sum_k w_k p_ck``: ``dL/da = sum_c g_c (S_c -
    bg_c)``, ``dL/dp_ck = a g_c w_k``, and with ``u_k = sum_c a g_c p_ck``, ``dL/dl_k = w_k (u_k -
    sum_j w_j u_j)``, ``dL/ddist_k = dL/dl_k sigmoid(-dist_k / sigma) / sigma`` and ``dL/ddepth_k =
    -dL/dl_k / (gamma (zfar - znear))`` on kept slots (0 elsewhere)."""

    @staticmethod
    def forward(ctx, face_index, dist, depth, alpha, background, config, *planes):
        settings, blend_settings, zrange = config
        frags = Fragments(face_index, None, depth, dist, None, alpha)
        weights = face_weights(frags, settings, blend_settings, zrange)
        a = alpha[..., 0]
        image, sums = _over_image(weights, a, planes, background)
        ctx.save_for_backward(face_index, dist, weights, a, background, *sums, *planes)
        ctx.config = config
        return image

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        face_index, dist, weights, a, background, *rest = ctx.saved_tensors
        C = len(rest) // 2
        sums, planes = rest[:C], rest[C:]
        settings, blend_settings, zrange = ctx.config
        need = ctx.needs_input_grad
        g = grad.unbind(-1)
        g_alpha = None
        if need[3]:
            g_alpha = sum(g[c] * (sums[c] - background[c]) for c in range(C))[..., None]
        ag = [a * g[c] for c in range(C)]
        g_planes = [ag[c][..., None] * weights if need[6 + c] else None for c in range(C)]
        g_dist = g_depth = None
        if need[1] or need[2]:
            u = ag[0][..., None] * planes[0]
            for c in range(1, C):
                u = u + ag[c][..., None] * planes[c]
            g_logit = weights * (u - slot_sum(weights * u, keepdim=True))
            mask = face_index >= 0
            zero = torch.zeros((), dtype=g_logit.dtype, device=g_logit.device)
            if need[1]:
                scaled = torch.where(mask, dist, zero) / settings.sigma
                g_dist = torch.where(mask, g_logit * torch.sigmoid(-scaled) / settings.sigma, zero)
            if need[2]:
                zr = zrange.to(g_logit.dtype)
                scale = -1.0 / ((zr[:, 1] - zr[:, 0]).view(-1, 1, 1, 1) * blend_settings.gamma)
                g_depth = torch.where(mask, g_logit * scale, zero)
        return None, g_dist, g_depth, g_alpha, None, None, *g_planes


#: Integer types whose bytes hold the K flags of a pixel, for K of 2, 4 and 8 (see :func:`_first_set`).
_FLAG_WORDS = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def _first_set(flags: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """int64 ``[..., 1]``: the first ``k`` with ``flags[..., k]`` (``K - 1`` where none), and bool
    ``[...]``: whether any is set, of bool ``flags [..., K]``.

    For K of 2, 4 or 8 on a little-endian machine, a pixel's K flags are the bytes of one integer:
    flag ``k`` is bit ``8 k``, so the lowest set bit (``x & -x``, a power of two, exact in
    float32) gives ``k = log2 / 8``; torch's CPU reductions over a short last dim are several
    times slower (0.70 against 0.10 ms for 16,384 pixels of 8 slots)."""
    K = flags.shape[-1]
    word = _FLAG_WORDS.get(K) if sys.byteorder == "little" else None
    if word is not None and flags.is_contiguous():
        x = flags.view(word)[..., 0].long() if word != torch.int64 else flags.view(word)[..., 0]
        any_set = x != 0
        low = (x & -x).clamp_(min=1).to(torch.float32)  # 2^(8k) (exact in float32), 1 where none
        first = torch.log2(low).mul_(0.125).round_().to(torch.int64)
        return torch.where(any_set, first, K - 1)[..., None], any_set
    # int32 ranks: torch's CPU min over a short last dim is about 30x slower in int64
    slots = torch.arange(K, dtype=torch.int32, device=flags.device)
    rank = torch.where(flags, slots, torch.full_like(slots, K))
    return rank.amin(dim=-1, keepdim=True).clamp(max=K - 1).long(), flags.any(dim=-1)


def nearest_covering(frags: Fragments) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The nearest kept face whose triangle contains the pixel center (``dist >= 0``).

    Returns int64 ``[B, H, W]`` face index (-1 where none), float ``[B, H, W]`` its depth
    (+inf where none) and int64 ``[B, H, W]`` its slot in ``K`` (clamped to a valid slot where none).
    """
    covering = frags.mask & (frags.dist >= 0)  # [B, H, W, K]
    first, any_cov = _first_set(covering)
    face = torch.where(any_cov, frags.face_index.gather(-1, first)[..., 0],
                       torch.full_like(any_cov, -1, dtype=torch.int64))
    depth = frags.depth.gather(-1, first)[..., 0]
    depth = torch.where(any_cov, depth, torch.full_like(depth, math.inf))
    return face, depth, first[..., 0]
