"""Brute-force soft rasterizer: the test oracle for :mod:`py_gpu.raster.torch_soft`.

Every face is evaluated at every pixel (an ``[B, F, H*W]`` tensor), with autograd on; no binning,
no chunking, no per-chunk top-K. The faces reaching a pixel (``dist >= -blur_radius^2``) are then
fully sorted by ``(depth, face)`` and the first K are returned; ``alpha`` is summed over all of them. Only for small scenes: memory is
``O(B * F * H * W)``.
"""

from __future__ import annotations

import math

import torch

from .._check import MemoryBudgetError, PyGpuTypeError, check_size
from ..contracts import Fragments, TriangleBatch
from ..settings import RasterSettings
from .torch_soft import faces_kept, soft_geometry

__all__ = ["rasterize_soft_oracle"]

#: Largest ``B * F * H * W`` the oracle accepts (about 1 GiB of float64 temporaries).
MAX_WORK = 4_000_000


def rasterize_soft_oracle(batch: TriangleBatch, size, settings: RasterSettings | None = None) -> Fragments:
    """Same contract as :func:`py_gpu.raster.torch_soft.rasterize_soft`, computed the slow way.

    Returns ``Fragments`` with ``face_index`` int64 ``[B, H, W, K]``, ``bary`` ``[B, H, W, K, 3]``,
    ``depth`` ``[B, H, W, K]`` (+inf where empty), ``dist`` ``[B, H, W, K]`` (0 where empty) and,
    for clip-space input, ``screen_bary``.
    """
    where = "rasterize_soft_oracle"
    if not isinstance(batch, TriangleBatch):
        raise PyGpuTypeError(f"{where}: `batch` must be a TriangleBatch, got {type(batch).__name__}")
    height, width = check_size(where, size)
    s = settings if settings is not None else RasterSettings(mode="soft")
    B, F, K, P = batch.batch_size, batch.num_faces, s.faces_per_pixel, height * width
    if B * F * P > MAX_WORK:
        raise MemoryBudgetError(f"{where}: B*F*H*W = {B * F * P} exceeds {MAX_WORK}; it is a test oracle for small scenes")
    dtype, device = batch.dtype, batch.device
    screen = batch.screen_vertices((height, width))  # [B, V, 3]
    tri = screen[:, batch.faces]  # [B, F, 3, 3]
    pix = torch.arange(P, device=device)
    px = (pix % width).to(dtype) + 0.5  # [P]
    py = (pix // width).to(dtype) + 0.5
    dist, lam, depth = soft_geometry(tri[:, :, None], px, py)  # [B, F, P], [B, F, P, 3], [B, F, P]
    bary = lam
    if batch.is_clip_space:
        w = batch.vertices[..., 3][:, batch.faces]  # [B, F, 3]
        q = lam / w[:, :, None, :]
        bary = q / q.sum(dim=-1, keepdim=True)
    r = s.blur_radius
    reach = (dist.detach() >= -(r * r)) & faces_kept(screen.detach(), batch.faces, s.cull_backfaces)[..., None]
    # the silhouette over every reaching face: sum log(1 - D) over F
    log_miss = torch.where(reach, torch.nn.functional.logsigmoid(-dist / s.sigma), torch.zeros_like(dist)).sum(1)
    alpha = (1.0 - torch.exp(log_miss)).reshape(B, height, width, 1)
    # sort all faces per pixel by (depth, face): faces are in index order, so a stable sort on depth
    key = torch.where(reach, depth.detach(), torch.full_like(depth, math.inf))  # [B, F, P]
    order = torch.sort(key, dim=1, stable=True).indices  # [B, F, P]
    n = min(K, F)
    top = order[:, :n]  # [B, n, P]
    hit = reach.gather(1, top)  # [B, n, P]
    face_index = torch.where(hit, top, torch.full_like(top, -1))

    def pick(t: torch.Tensor, fill: float) -> torch.Tensor:  # [B, F, P, ...] -> [B, H, W, K, ...]
        idx = top.reshape(*top.shape, *([1] * (t.dim() - 3))).expand(-1, -1, -1, *t.shape[3:])
        v = t.gather(1, idx)
        mask = hit.reshape(*hit.shape, *([1] * (t.dim() - 3)))
        v = torch.where(mask, v, torch.full_like(v, fill))
        v = v.movedim(1, 2)  # [B, P, n, ...]
        if n < K:
            pad = torch.full((B, P, K - n, *t.shape[3:]), fill, dtype=v.dtype, device=device)
            v = torch.cat((v, pad), dim=2)
        return v.reshape(B, height, width, K, *t.shape[3:])

    fi = face_index.movedim(1, 2)
    if n < K:
        fi = torch.cat((fi, torch.full((B, P, K - n), -1, dtype=torch.int64, device=device)), dim=2)
    return Fragments(
        face_index=fi.reshape(B, height, width, K),
        bary=pick(bary, 0.0),
        depth=pick(depth, math.inf),
        dist=pick(dist, 0.0),
        screen_bary=pick(lam, 0.0) if batch.is_clip_space else None,
        alpha=alpha,
    )
