"""Hard-mode color shading shared by the exact backends (and differentiable in torch)."""

from __future__ import annotations

import torch

from ..contracts import Fragments, Frame, TriangleBatch


def shade_hard(batch: TriangleBatch, frags: Fragments, background: tuple[float, float, float]) -> Frame:
    """Color each pixel's nearest face (K = 0 slot) and composite over ``background``.

    Per-vertex colors use ``b0*c0 + b1*c1 + b2*c2`` written out in that order, so every exact
    backend gets bit-identical float64 values; per-face colors are gathered; with no colors the
    faces are white. Returns a ``Frame`` in ``frags.bary``'s dtype.
    """
    face = frags.face_index[..., 0]  # [B, H, W]
    covered = face >= 0
    safe = face.clamp(min=0)
    dtype = frags.bary.dtype
    B, H, W = face.shape
    colors = batch.colors
    C = 3 if colors is None else colors.shape[-1]
    if colors is None or batch.num_faces == 0:
        rgb = torch.ones(B, H, W, C, dtype=dtype, device=face.device)
    elif batch.face_colors is not None:
        fc = batch.face_colors.to(dtype)  # [B, F, C]
        rgb = torch.gather(fc, 1, safe.reshape(B, -1, 1).expand(-1, -1, C)).reshape(B, H, W, C)
    else:
        vc = batch.vertex_colors.to(dtype)  # [B, V, C]
        corner = batch.faces[safe]  # [B, H, W, 3] vertex ids
        bary = frags.bary[..., 0, :]  # [B, H, W, 3]

        def at(k: int) -> torch.Tensor:
            idx = corner[..., k].reshape(B, -1, 1).expand(-1, -1, C)
            return torch.gather(vc, 1, idx).reshape(B, H, W, C)

        rgb = bary[..., 0:1] * at(0) + bary[..., 1:2] * at(1) + bary[..., 2:3] * at(2)
    bg = torch.zeros(C, dtype=dtype, device=face.device)
    bg[: min(3, C)] = torch.tensor(background[: min(3, C)], dtype=dtype, device=face.device)
    image = torch.where(covered[..., None], rgb, bg)
    alpha = covered[..., None].to(dtype)
    depth = torch.where(covered, frags.depth[..., 0], torch.full_like(frags.depth[..., 0], float("inf")))
    return Frame(image=image, alpha=alpha, depth=depth, face_index=face)
