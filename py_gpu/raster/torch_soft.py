"""Soft (SoftRas-style) rasterization in torch: the K nearest faces whose blurred footprint reaches
each pixel, with the signed squared distance to each.

Formulation (Liu et al., "Soft Rasterizer", ICCV 2019; PyTorch3D's ``blur_radius`` variant):
a face covers pixel ``p`` with probability ``D = sigmoid(dist / sigma)``, where ``dist`` is the
squared distance (px^2) from the pixel center to the triangle's boundary, positive inside and
negative outside. A face is kept for a pixel when ``D >= cutoff``, i.e. ``dist >= -r^2`` with the
blur radius ``r = sqrt(sigma * ln(1/cutoff - 1))`` (``RasterSettings.blur_radius``).

Algorithm (:func:`rasterize_soft`), per batch element:

1. **Bin.** Each face's bounding box, grown by ``r`` and clipped to the image, is cut into
   ``(face, row)`` spans. A face enters only the pixels its blur radius can reach, never the whole
   frame, so the work grows with (faces x pixels inside their blur radius), not ``F * H * W``.
2. **Chunk.** Spans are sorted by width and grouped into chunks that fit
   ``settings.memory_budget``; each chunk is evaluated as a dense ``[spans, width]`` block.
3. **Select.** Within a chunk the reached fragments are ranked per pixel by ``(depth, face)``
   and the first K are merged into a running per-pixel top-K buffer.
4. **Recompute.** The winners' distance, barycentrics and depth are recomputed once more with
   autograd on, only for the ``[B, H, W, K]`` kept slots. Nothing of size ``F * H * W`` (or even
   of the candidate count) is kept for the backward pass.

Steps 1-3 run without gradients: which faces are kept is a discrete choice. All gradients flow
through step 4, to the vertex positions (x, y, depth, and w for clip-space input).
"""

from __future__ import annotations

import math

import torch

from .._check import MemoryBudgetError, PyGpuTypeError, check_size
from ..contracts import Fragments, TriangleBatch
from ..settings import RasterSettings

__all__ = ["rasterize_soft", "soft_geometry", "faces_kept"]


def soft_geometry(tri: torch.Tensor, px: torch.Tensor, py: torch.Tensor):
    """Soft-raster quantities of triangles at sample points (shared by every soft path).

    Args:
        tri: float ``[..., 3, 3]`` screen-space triangles: corner, then ``(x_px, y_px, depth)``.
            Broadcast against ``px``/``py`` after dropping the last two dims.
        px, py: float ``[...]`` sample positions in pixels (pixel centers are ``col + 0.5``).

    Returns:
        dist: float ``[...]`` signed squared distance (px^2) from the sample to the triangle's
            boundary, positive inside, negative outside.
        lam: float ``[..., 3]`` affine barycentrics, clamped to >= 0 and renormalized to sum to 1
            (identity inside the face; the nearest point's weights outside, as SoftRas does).
        depth: float ``[...]`` depth interpolated with ``lam``.

    Degenerate (zero-area) triangles give finite garbage; callers drop them first.
    """
    x0, y0, z0 = tri[..., 0, 0], tri[..., 0, 1], tri[..., 0, 2]
    x1, y1, z1 = tri[..., 1, 0], tri[..., 1, 1], tri[..., 1, 2]
    x2, y2, z2 = tri[..., 2, 0], tri[..., 2, 1], tri[..., 2, 2]
    area = (x1 - x0) * (y2 - y0) - (y1 - y0) * (x2 - x0)
    area = torch.where(area != 0, area, torch.ones_like(area))
    # affine barycentrics, in the raster rule's operation order
    l0 = ((x2 - x1) * (py - y1) - (y2 - y1) * (px - x1)) / area
    l1 = ((x0 - x2) * (py - y2) - (y0 - y2) * (px - x2)) / area
    l2 = ((x1 - x0) * (py - y0) - (y1 - y0) * (px - x0)) / area
    inside = (l0 >= 0) & (l1 >= 0) & (l2 >= 0)

    def seg2(ax, ay, bx, by):  # squared distance to segment a-b
        ex, ey = bx - ax, by - ay
        ee = ex * ex + ey * ey
        ee = torch.where(ee > 0, ee, torch.ones_like(ee))
        dx, dy = px - ax, py - ay
        t = ((dx * ex + dy * ey) / ee).clamp(0.0, 1.0)
        rx, ry = dx - t * ex, dy - t * ey
        return rx * rx + ry * ry

    d2 = torch.minimum(torch.minimum(seg2(x0, y0, x1, y1), seg2(x1, y1, x2, y2)), seg2(x2, y2, x0, y0))
    dist = torch.where(inside, d2, -d2)
    c0, c1, c2 = l0.clamp(min=0.0), l1.clamp(min=0.0), l2.clamp(min=0.0)
    total = c0 + c1 + c2  # >= 1 because l0 + l1 + l2 == 1
    c0, c1, c2 = c0 / total, c1 / total, c2 / total
    depth = c0 * z0 + c1 * z1 + c2 * z2
    return dist, torch.stack((c0, c1, c2), dim=-1), depth


def faces_kept(screen: torch.Tensor, faces: torch.Tensor, cull_backfaces: bool) -> torch.Tensor:
    """bool ``[B, F]``: faces with nonzero screen area (and, with culling, counter-clockwise on screen).

    ``screen`` is float ``[B, V, 3]``; culling drops faces with positive area in the raster rule's
    edge function (clockwise with y down), as the hard rasterizers do.
    """
    tri = screen[:, faces]  # [B, F, 3, 3]
    x, y = tri[..., 0], tri[..., 1]
    area = (x[..., 1] - x[..., 0]) * (y[..., 2] - y[..., 0]) - (y[..., 1] - y[..., 0]) * (x[..., 2] - x[..., 0])
    keep = area != 0
    if cull_backfaces:
        keep &= area < 0
    return keep


def _bytes_per_fragment(dtype: torch.dtype) -> int:
    """Working bytes one candidate fragment takes in step 2 (about 40 live temporaries)."""
    item = torch.finfo(dtype).bits // 8
    return 40 * item + 32


def rasterize_soft(batch: TriangleBatch, size, settings: RasterSettings | None = None) -> Fragments:
    """Soft-rasterize ``batch`` at ``size = (H, W)``.

    Args:
        batch: a ``TriangleBatch`` (screen ``[B, V, 3]`` or clip ``[B, V, 4]`` vertices).
        size: ``(H, W)``.
        settings: ``RasterSettings``; uses ``sigma``, ``cutoff`` (-> ``blur_radius``),
            ``faces_per_pixel`` (K), ``cull_backfaces`` and ``memory_budget``.

    Returns:
        ``Fragments`` with K = ``settings.faces_per_pixel``, nearest first by ``(depth, face)``:
        ``face_index`` int64 ``[B, H, W, K]`` (-1 padded), ``bary`` ``[B, H, W, K, 3]``
        (clamped as in :func:`soft_geometry`, then perspective-correct for clip-space input),
        ``depth`` ``[B, H, W, K]`` (+inf where empty), ``dist`` ``[B, H, W, K]`` signed squared
        distance in px^2 (0 where empty), and ``screen_bary`` for clip-space input.
        Float tensors are differentiable with respect to ``batch.vertices``.

    Raises:
        MemoryBudgetError: when ``settings.memory_budget`` cannot hold one row of fragments.
    """
    where = "rasterize_soft"
    if not isinstance(batch, TriangleBatch):
        raise PyGpuTypeError(f"{where}: `batch` must be a TriangleBatch, got {type(batch).__name__}")
    height, width = check_size(where, size)
    s = settings if settings is not None else RasterSettings(mode="soft")
    if not isinstance(s, RasterSettings):
        raise PyGpuTypeError(f"{where}: `settings` must be a RasterSettings, got {type(s).__name__}")
    screen = batch.screen_vertices((height, width))  # [B, V, 3], differentiable
    face_index = select_faces(screen.detach(), batch.faces, (height, width), s)  # [B, H, W, K]
    return gather_fragments(batch, screen, face_index)


def select_faces(screen: torch.Tensor, faces: torch.Tensor, size: tuple[int, int], s: RasterSettings) -> torch.Tensor:
    """int64 ``[B, H, W, K]``: per pixel the K nearest faces (by depth, then face index) whose
    blurred footprint reaches it; -1 padded. Steps 1-3 of the module docstring; no gradients."""
    height, width = size
    B = screen.shape[0]
    K = s.faces_per_pixel
    out = torch.full((B, height * width, K), -1, dtype=torch.int64, device=screen.device)
    if faces.shape[0] == 0:
        return out.reshape(B, height, width, K)
    max_frags = s.memory_budget // _bytes_per_fragment(screen.dtype)
    if max_frags < width:
        raise MemoryBudgetError(
            f"rasterize_soft: memory_budget={s.memory_budget} bytes cannot hold one row of {width} fragments; "
            f"raise memory_budget to at least {width * _bytes_per_fragment(screen.dtype)}"
        )
    keep = faces_kept(screen, faces, s.cull_backfaces)  # [B, F]
    with torch.no_grad():
        for b in range(B):
            _select_element(screen[b], faces, keep[b], height, width, s, max_frags, out[b])
    return out.reshape(B, height, width, K)


def _select_element(verts, faces, keep, height, width, s: RasterSettings, max_frags: int, out: torch.Tensor) -> None:
    """Fill ``out`` (int64 ``[H*W, K]``) for one batch element. ``verts``: float ``[V, 3]``."""
    device, dtype = verts.device, verts.dtype
    K = s.faces_per_pixel
    radius = s.blur_radius
    reach = -(radius * radius)  # keep fragments with dist >= reach (D >= cutoff)
    tri = verts[faces]  # [F, 3, 3]
    # 1. bin: pixel rows/cols whose centers lie within the grown bounding box
    lo = tri[..., :2].amin(dim=1) - radius  # [F, 2]
    hi = tri[..., :2].amax(dim=1) + radius
    c0 = torch.ceil(lo[:, 0] - 0.5).clamp(min=0).long()
    c1 = torch.floor(hi[:, 0] - 0.5).clamp(max=width - 1).long()
    r0 = torch.ceil(lo[:, 1] - 0.5).clamp(min=0).long()
    r1 = torch.floor(hi[:, 1] - 0.5).clamp(max=height - 1).long()
    live = keep & (c0 <= c1) & (r0 <= r1)
    face_ids = torch.nonzero(live).squeeze(1)  # [F_live]
    if face_ids.numel() == 0:
        return
    n_rows = (r1 - r0 + 1)[face_ids]
    span_face = torch.repeat_interleave(face_ids, n_rows)  # [S] (face, row) spans, face order
    first = torch.cumsum(n_rows, 0) - n_rows
    span_row = r0[span_face] + (torch.arange(span_face.numel(), device=device) - torch.repeat_interleave(first, n_rows))
    span_c0 = c0[span_face]
    span_w = (c1 - c0 + 1)[span_face]
    # 2. chunk: spans sorted by width, so each dense [spans, width] block wastes little
    order = torch.sort(span_w, stable=True).indices
    widths = span_w[order].tolist()
    n_spans = len(widths)
    best_depth = torch.full((height * width, K), math.inf, dtype=dtype, device=device)
    best_face = out  # [H*W, K], filled in place
    start = 0
    while start < n_spans:
        stop = min(n_spans, start + max(1, max_frags // widths[start]))
        while stop - start > 1 and (stop - start) * widths[stop - 1] > max_frags:
            stop = start + max(1, max_frags // widths[stop - 1])
        ids = torch.sort(order[start:stop]).values  # back to (face, row) order
        _chunk(tri, span_face[ids], span_row[ids], span_c0[ids], span_w[ids], widths[stop - 1],
               width, reach, K, best_depth, best_face)
        start = stop


def _chunk(tri, face, row, col0, span_w, wmax: int, width: int, reach: float, K: int,
           best_depth: torch.Tensor, best_face: torch.Tensor) -> None:
    """Evaluate one chunk of spans densely and merge its per-pixel top-K into ``best_*``."""
    device, dtype = tri.device, tri.dtype
    offs = torch.arange(wmax, device=device)  # [Wmax]
    cols = col0[:, None] + offs[None, :]  # [S, Wmax]
    px = cols.to(dtype) + 0.5
    py = (row.to(dtype) + 0.5)[:, None]  # [S, 1]
    dist, _, depth = soft_geometry(tri[face][:, None], px, py)  # [S, Wmax]
    ok = (offs[None, :] < span_w[:, None]) & (dist >= reach)
    pix = (row[:, None] * width + cols)[ok]  # [N] in face order
    fid = face[:, None].expand_as(cols)[ok]
    z = depth[ok]
    del dist, depth, px, cols
    if pix.numel() == 0:
        return
    # 3. rank per pixel by (depth, face): fragments arrive in face order, so stable sorts do it
    if z.dtype == torch.float32:
        # one sort on an int64 key: pixel in the high 32 bits, the float32 depth's bits mapped to
        # an order-preserving unsigned int in the low 32 (+0.0 replaces -0.0 first)
        bits = (z + 0.0).view(torch.int32).to(torch.int64)
        ordered = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits) + 2**31
        o = torch.sort((pix << 32) | ordered, stable=True).indices
    else:
        o = torch.sort(z, stable=True).indices
        o = o[torch.sort(pix[o], stable=True).indices]
    pix, fid, z = pix[o], fid[o], z[o]
    touched, counts = torch.unique_consecutive(pix, return_counts=True)  # [M]
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(pix.numel(), device=device) - torch.repeat_interleave(starts, counts)
    local = torch.repeat_interleave(torch.arange(touched.numel(), device=device), counts)
    sel = rank < K
    cand_z = torch.full((touched.numel(), K), math.inf, dtype=dtype, device=device)
    cand_f = torch.full((touched.numel(), K), -1, dtype=torch.int64, device=device)
    cand_z[local[sel], rank[sel]] = z[sel]
    cand_f[local[sel], rank[sel]] = fid[sel]
    # merge with what earlier chunks kept for the same pixels, again by (depth, face)
    all_z = torch.cat((best_depth[touched], cand_z), dim=1)  # [M, 2K]
    all_f = torch.cat((best_face[touched], cand_f), dim=1)
    big = torch.iinfo(torch.int64).max
    o = torch.sort(torch.where(all_f >= 0, all_f, big), dim=1, stable=True).indices
    all_z, all_f = all_z.gather(1, o), all_f.gather(1, o)
    o = torch.sort(all_z, dim=1, stable=True).indices[:, :K]
    best_depth[touched] = all_z.gather(1, o)
    best_face[touched] = all_f.gather(1, o)


def gather_fragments(batch: TriangleBatch, screen: torch.Tensor, face_index: torch.Tensor) -> Fragments:
    """Step 4: differentiable distance, barycentrics and depth for the chosen ``face_index``.

    ``screen``: float ``[B, V, 3]`` (with autograd history); ``face_index``: int64 ``[B, H, W, K]``.
    Only the non-empty slots are evaluated.
    """
    B, H, W, K = face_index.shape
    dtype, device = screen.dtype, screen.device
    flat = face_index.reshape(B, -1)  # [B, H*W*K]
    bi, si = torch.nonzero(flat >= 0, as_tuple=True)  # [N] batch, slot
    fi = flat[bi, si]
    pixel = si // K
    px = (pixel % W).to(dtype) + 0.5
    py = (pixel // W).to(dtype) + 0.5
    corner = batch.faces[fi]  # [N, 3]
    tri = screen[bi[:, None], corner]  # [N, 3, 3]
    dist_n, lam_n, depth_n = soft_geometry(tri, px, py)
    screen_bary = None
    bary_n = lam_n
    if batch.is_clip_space:
        w = batch.vertices[..., 3][bi[:, None], corner]  # [N, 3]
        q = lam_n / w
        bary_n = q / q.sum(dim=-1, keepdim=True)
    n_slots = B * H * W * K
    lin = bi * (H * W * K) + si

    def scatter(values: torch.Tensor, fill: float, tail: tuple[int, ...] = ()) -> torch.Tensor:
        base = torch.full((n_slots, *tail), fill, dtype=dtype, device=device)
        return base.index_put((lin,), values).reshape(B, H, W, K, *tail)

    if batch.is_clip_space:
        screen_bary = scatter(lam_n, 0.0, (3,))
    return Fragments(
        face_index=face_index,
        bary=scatter(bary_n, 0.0, (3,)),
        depth=scatter(depth_n, math.inf),
        dist=scatter(dist_n, 0.0),
        screen_bary=screen_bary,
    )
