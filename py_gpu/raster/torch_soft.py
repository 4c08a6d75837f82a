"""Soft (SoftRas-style) rasterization in torch: the K nearest faces whose blurred footprint reaches
each pixel, with the signed squared distance to each.

Formulation (Liu et al., "Soft Rasterizer", ICCV 2019; PyTorch3D's ``blur_radius`` variant):
a face covers pixel ``p`` with probability ``D = sigmoid(dist / sigma)``, where ``dist`` is the
squared distance (px^2) from the pixel center to the triangle's boundary, positive inside and
negative outside. A face is kept for a pixel when ``D >= cutoff``, i.e. ``dist >= -r^2`` with the
blur radius ``r = sqrt(sigma * ln(1/cutoff - 1))`` (``RasterSettings.blur_radius``).

Algorithm (:func:`rasterize_soft`). The image is cut into **tiles**: bands of whole pixel rows of
one batch element, or pieces of one row when a whole row does not fit, sized so that one tile's
working set fits ``settings.memory_budget`` (:func:`plan_tiles`). Per tile:

1. **Bin.** Each face's bounding box, grown by ``r`` and clipped to the tile, is cut into
   ``(face, row)`` spans, and each span is cut to the columns that the face's edges, moved
   outward by ``r``, can hold (:func:`_reach_lines`): a slanted face's span follows its edges,
   not its box. A face enters only the pixels its blur radius can reach, never the whole frame,
   so the work grows with (faces x pixels inside their blur radius), not ``F * H * W``.
2. **Chunk.** Consecutive spans (nearest faces first, by their nearest corner's depth, where
   the faces' boxes cover the frame many times over; else in face order) are grouped into
   chunks of at most ``plan.max_frags`` (and ``_CHUNK_CANDIDATES``) candidate fragments; each
   chunk is evaluated as one flat vector of candidates (no padding to the widest span). Before
   a chunk after the first is evaluated, its spans and candidates at pixels that are done are
   skipped: pixels whose K slots are full and whose silhouette sum is so low that alpha is
   exactly 1, where a face whose nearest depth lies beyond the K-th slot changes nothing. Faces
   behind every done pixel of their box are dropped even before their spans are made.
3. **Select.** Within a chunk the reached fragments are ranked per pixel by ``(depth, face)``
   and the first K are merged into the tile's running per-pixel top-K buffer. Chunks after the
   first drop, before ranking, the fragments that lose to their pixel's K-th kept slot. For a
   soft render (``FaceSelector.window``), the fragments no blended frame can use are dropped
   first (:func:`_front_filter`).
4. **Recompute.** The winners' distance, barycentrics and depth are evaluated once more, only for
   the tile's non-empty K slots (:func:`gather_tile`).

Steps 1-3 run without gradients: which faces are kept is a discrete choice. All gradients flow
through step 4, to the vertex positions (x, y, depth, and w for clip-space input).

**Memory.** :class:`TileLoop` runs the tiles and writes each tile's results into the returned
whole-frame tensors, which are the output and come on top of the budget (up to
``RETURNED_PER_BUDGET`` times it). When what autograd saves for all tiles together fits the
budget, the tiles simply run with autograd on. Otherwise autograd keeps nothing per tile: the
backward pass evaluates one tile at a time again, with autograd on, from the selected face
indices (the returned ``face_index``). Soft rendering (:mod:`py_gpu.shading.composite`) runs its
blend inside the same tile loop, so that neither the K-slot tensors nor what their blend saves for
backward ever exist for the whole frame. A request that cannot fit raises
:class:`MemoryBudgetError` before anything is allocated, saying what to change.

**Determinism.** Every result is independent of the tiling, the span groups and the chunks (bit
for bit in the forward pass; gradients are sums over tiles, equal to rounding) and of the number
of threads (bit for bit). Vertex values are gathered with ``index_select``, whose backward
(``index_add_``) sums duplicate indices in a fixed order on the CPU; the sums this module makes
itself (silhouette sums, closed-form vertex gradients) use ``scatter_add_``, the same order
(:mod:`py_gpu.raster._scatter`). Advanced indexing's backward
(``index_put_(accumulate=True)``) adds float32 values with atomics when several threads run,
which made soft-mode gradients differ from run to run in the last bits. Colors go through
``torch.gather``, whose CPU backward (``scatter_add_``) is ordered as well; tile gradients are
summed in tile order. On CUDA, ``index_add_`` and ``scatter_add_`` use atomics: call
``torch.use_deterministic_algorithms(True)`` there for run-to-run identical gradients.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.nn.functional as nnf

from .._check import MemoryBudgetError, PyGpuTypeError, check_size
from ..contracts import Fragments, TriangleBatch
from ..settings import RasterSettings
from ._scatter import add_at, flat_nonzero, put_at, split_index

__all__ = ["rasterize_soft", "silhouette_soft", "soft_geometry", "faces_kept", "SoftPlan", "plan_tiles",
           "plan_with_room", "FaceSelector", "TileLoop", "gather_tile", "gather_tile_planes", "gather_bytes_per_slot",
           "RETURNED_PER_BUDGET", "exp_normal", "exp_floor", "blend_window", "slot_centers"]


def soft_geometry(tri: torch.Tensor, px: torch.Tensor, py: torch.Tensor, *, dist_only: bool = False,
                  no_bary: bool = False):
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

    With ``dist_only``, only ``dist`` is returned; with ``no_bary``, ``lam`` is None (the
    selection needs only ``dist`` and ``depth``).

    Degenerate (zero-area) triangles give finite garbage; callers drop them first.
    """
    coords = [tri[..., corner, k] for corner in range(3) for k in range(3)]
    return _geometry(coords, px, py, dist_only=dist_only, no_bary=no_bary)


def _geometry(coords, px: torch.Tensor, py: torch.Tensor, *, dist_only: bool = False,
              no_bary: bool = False, parts: bool = False):
    """:func:`soft_geometry` of triangles given as the nine tensors ``coords`` (``x0, y0, z0, x1,
    ..., z2``; contiguous ones make the arithmetic about twice as fast as strided views of
    ``[..., 3, 3]``, with the same values bit for bit). With ``parts`` (and neither
    ``dist_only`` nor ``no_bary``), the barycentrics as rows (``[3, ...]``) and also what
    :class:`_Geometry`'s backward pass needs: ``(area, l, inside, edge, t, rx, ry)`` with the
    barycentrics before clamping ``l`` (``[3, ...]``), the
    nearest edge ``edge`` (int64, the first of equal ones; edge j runs from corner j to corner
    j + 1), the parameter ``t`` of the nearest point on it and the vector ``(rx, ry)`` from that
    point to the sample."""
    x0, y0, z0, x1, y1, z1, x2, y2, z2 = coords
    area, l0, l1, l2 = _affine(coords, px, py)
    inside = (l0 >= 0) & (l1 >= 0) & (l2 >= 0)

    def seg2(ax, ay, bx, by):  # squared distance to segment a-b, and the nearest point's t, r
        ex, ey = bx - ax, by - ay
        ee = ex * ex + ey * ey
        ee = torch.where(ee > 0, ee, torch.ones_like(ee))
        dx, dy = px - ax, py - ay
        t = ((dx * ex + dy * ey) / ee).clamp(0.0, 1.0)
        rx, ry = dx - t * ex, dy - t * ey
        return rx * rx + ry * ry, t, rx, ry

    s0, s1, s2 = seg2(x0, y0, x1, y1), seg2(x1, y1, x2, y2), seg2(x2, y2, x0, y0)
    d2 = torch.minimum(torch.minimum(s0[0], s1[0]), s2[0])
    dist = torch.where(inside, d2, -d2)
    if dist_only:
        return dist
    c0, c1, c2 = _clamped(l0, l1, l2)
    depth = c0 * z0 + c1 * z1 + c2 * z2
    if not parts:
        return dist, None if no_bary else torch.stack((c0, c1, c2), dim=-1), depth
    first, second = s0[0] == d2, s1[0] == d2
    edge = torch.where(first, 0, torch.where(second, 1, 2))
    near = [torch.where(first, a, torch.where(second, b, c)) for a, b, c in zip(s0[1:], s1[1:], s2[1:])]
    return dist, torch.stack((c0, c1, c2)), depth, (area, torch.stack((l0, l1, l2)), inside, edge, *near)


def _affine(coords, px: torch.Tensor, py: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``(area, l0, l1, l2)``: the doubled signed area (1 where it is 0) and the affine
    barycentrics of :func:`_geometry`'s triangles at the points, in the raster rule's operation order."""
    x0, y0, _, x1, y1, _, x2, y2, _ = coords
    area = (x1 - x0) * (y2 - y0) - (y1 - y0) * (x2 - x0)
    area = torch.where(area != 0, area, torch.ones_like(area))
    l0 = ((x2 - x1) * (py - y1) - (y2 - y1) * (px - x1)) / area
    l1 = ((x0 - x2) * (py - y2) - (y0 - y2) * (px - x2)) / area
    l2 = ((x1 - x0) * (py - y0) - (y1 - y0) * (px - x0)) / area
    return area, l0, l1, l2


def _clamped(l0: torch.Tensor, l1: torch.Tensor, l2: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The barycentrics clamped to >= 0 and renormalized (their sum is >= 1: l0 + l1 + l2 == 1)."""
    c0, c1, c2 = l0.clamp(min=0.0), l1.clamp(min=0.0), l2.clamp(min=0.0)
    total = c0 + c1 + c2
    return c0 / total, c1 / total, c2 / total


def _perspective(lam, w) -> list[torch.Tensor]:
    """Perspective-correct barycentrics from the three affine ones ``lam`` and the corners' clip
    ``w`` (three tensors of one shape each): ``(lam_j / w_j) / sum_k (lam_k / w_k)``."""
    q = [lam[j] / w[j] for j in range(3)]
    total = q[0] + q[1] + q[2]
    return [q[j] / total for j in range(3)]


def _corner_rows(screen: torch.Tensor, corner: torch.Tensor) -> torch.Tensor:
    """float ``[3 coordinates, 3 corners, N]``, contiguous: the vertices ``screen`` (``[V, 3]``) at
    ``corner`` (int64 ``[3, N]``: the vertex of each corner of N triangles)."""
    return screen.t().contiguous().index_select(1, corner.reshape(-1)).view(3, 3, -1)


def _row_coords(rows: torch.Tensor) -> list[torch.Tensor]:
    """:func:`_geometry`'s nine coordinates from :func:`_corner_rows`."""
    return [rows[k, corner] for corner in range(3) for k in range(3)]


class _Geometry(torch.autograd.Function):
    """:func:`soft_geometry` of the triangles with corners ``corner`` (int64 ``[3, N]``) of the
    vertices ``screen`` (``[V, 3]``) at ``[N]`` points (the barycentrics as rows, ``[3, N]``),
    with a closed-form backward pass into
    ``screen`` (the fast path's step 4; autograd through the expressions, as the oracle does,
    keeps about sixty temporaries per point and runs several times as many operations).

    The derivatives: ``depth = sum c_i z_i`` with ``c_i = m_i / T``, ``m_i = max(l_i, 0)``,
    ``T = sum m_i`` and ``l_i = E_i / area``, ``E_i`` the edge function (affine in each corner)
    of the edge opposite corner ``i`` at the point. ``area`` is a common factor of the ``m_i``,
    so ``c`` does not depend on it: only the ``E_i`` carry gradients. ``dist = +-d2`` as in
    :func:`_miss_terms` (nearest edge ``a -> b``: ``d d2/da = -2 (1 - t) r``,
    ``d d2/db = -2 t r``)."""

    @staticmethod
    def forward(ctx, screen, corner, px, py):
        rows = _corner_rows(screen, corner)
        dist, lam, depth, parts = _geometry(_row_coords(rows), px, py, parts=True)
        ctx.save_for_backward(rows, corner, px, py, lam, *parts)
        ctx.vertices = screen.shape[0]
        return dist, lam, depth

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g_dist, g_lam, g_depth):
        rows, corner, px, py, lam, area, l, inside, edge, t, rx, ry = ctx.saved_tensors
        X, Y, Z = rows.unbind(0)  # [3 corners, N] each, contiguous
        c = lam
        g_c = torch.zeros_like(c) if g_lam is None else g_lam.clone(memory_format=torch.contiguous_format)
        g_z = torch.zeros_like(c)
        if g_depth is not None:
            g_c.addcmul_(Z, g_depth)
            g_z = c * g_depth
        # the edge functions' share, through the clamp, the renormalization and the area
        total = l.clamp(min=0.0).sum(0)
        g_e = (g_c - (g_c * c).sum(0)).div_(total).div_(area).masked_fill_(l < 0, 0.0)
        dx, dy = X - px, Y - py
        gx, gy = torch.empty_like(c), torch.empty_like(c)
        for k in range(3):  # corner k is the a of edge function k - 1 and the b of edge function k + 1
            m, p = (k - 1) % 3, (k + 1) % 3
            torch.mul(g_e[m], dy[p], out=gx[k]).sub_(g_e[p] * dy[m])
            torch.mul(g_e[p], dx[m], out=gy[k]).sub_(g_e[m] * dx[p])
        grad = torch.zeros(3, ctx.vertices, dtype=gx.dtype, device=gx.device)
        at = corner.reshape(-1)
        for k, g in enumerate((gx, gy, g_z)):  # 1D sums per coordinate (faster than [N, 3] rows), see add_at
            add_at(grad[k], at, g.reshape(-1))
        if g_dist is not None:  # onto the nearest edge's two corners a -> b, straight into the vertices
            coef = torch.where(inside, -2.0 * g_dist, 2.0 * g_dist)
            b_share = coef * t
            a_share = coef - b_share
            a = corner.gather(0, edge[None])[0]
            b = corner.gather(0, torch.where(edge == 2, 0, edge + 1)[None])[0]
            for vertex, share in ((a, a_share), (b, b_share)):
                add_at(grad[0], vertex, share * rx)
                add_at(grad[1], vertex, share * ry)
        return grad.t(), None, None, None


def exp_normal(x: torch.Tensor) -> torch.Tensor:
    """``exp(x)``, with 0 where it is within a factor e of the dtype's smallest normal number or
    below (``x`` below ``log(tiny) + 1``: about -86.3 in float32 and -707.4 in float64).

    torch's CPU ``exp`` takes a slow path where its result is subnormal or 0: measured at one
    thread, 131k float32 arguments below -87.3 take 1.3-3.9 ms, against 0.11 ms for ordinary
    ones (the margin of 1 keeps the clamped arguments' own results normal). Soft blending meets
    such arguments constantly (the weights ``exp(logit - top)`` of faces far behind, and the
    silhouette sums of deeply covered pixels), while what they would add lies below the rounding
    of every sum they enter: ``1 - exp(x)`` is exactly 1 there either way."""
    floor = exp_floor(x.dtype)
    return torch.where(x < floor, 0.0, torch.exp(x.clamp(min=floor)))


def exp_floor(dtype: torch.dtype) -> float:
    """The argument below which :func:`exp_normal` gives 0 in ``dtype``: ``log(tiny) + 1``."""
    return math.log(torch.finfo(dtype).tiny) + 1.0


def faces_kept(screen: torch.Tensor, faces: torch.Tensor, cull_backfaces: bool) -> torch.Tensor:
    """bool ``[B, F]``: faces with nonzero screen area (and, with culling, counter-clockwise on screen).

    ``screen`` is float ``[B, V, 3]``; culling drops faces with positive area in the raster rule's
    edge function (clockwise with y down), as the hard rasterizers do.
    """
    return _kept(screen[:, faces], cull_backfaces)


def _kept(tri: torch.Tensor, cull_backfaces: bool) -> torch.Tensor:
    """bool ``[...]`` :func:`faces_kept` of triangles ``[..., 3, 3]``."""
    x, y = tri[..., 0], tri[..., 1]
    area = (x[..., 1] - x[..., 0]) * (y[..., 2] - y[..., 0]) - (y[..., 1] - y[..., 0]) * (x[..., 2] - x[..., 0])
    keep = area != 0
    if cull_backfaces:
        keep &= area < 0
    return keep


# ---- memory budget ----------------------------------------------------------------------------
#: The tensors a call returns may take up to this many times ``memory_budget``, on top of it;
#: a larger request is refused as a mistake (it would take the machine's memory, not a budget).
RETURNED_PER_BUDGET = 8


def _item(dtype: torch.dtype) -> int:
    return torch.finfo(dtype).bits // 8


def _face_bytes(dtype: torch.dtype) -> int:
    """Bytes per face of one batch element's face table (edges, grown boxes, row and column
    ranges, and their temporaries while it is built; the float64 reach table, whose
    temporaries are gone before the first tile), kept while that element's tiles run, and of a
    tile's per-face span counts."""
    return 34 * _item(dtype) + 96 + 8 * _REACH_ROWS


#: The selected face indices are kept for the backward pass when they take at most
#: ``1 / KEEP_SHARE`` of the budget; otherwise the backward pass selects them again.
KEEP_SHARE = 4
#: When the vertices need gradients, the candidates' silhouette gradient terms are kept for the
#: backward pass in ``1 / TERMS_SHARE`` of the budget (the tiles work in the rest).
TERMS_SHARE = 4
#: Bytes per ``(face, row)`` span of a group of spans in step 1: face, row, first and last
#: column, width, the span's float64 reach (``[10]``, see :func:`_reach_table`) and the
#: temporaries that cut the span to it, and the list of candidate counts.
_SPAN_BYTES = 400


def _bytes_per_fragment(dtype: torch.dtype) -> int:
    """Working bytes one candidate fragment takes in step 2: its gathered corners and about 40
    live float temporaries, and its int64 span, face, row, column and pixel."""
    return 49 * _item(dtype) + 64


def _select_bytes_per_slot(dtype: torch.dtype) -> int:
    """Bytes per K slot of a tile in step 3: the running top-K (depth, distance, face) and the
    merge of a chunk's candidates with it (``[pixels, 2K]`` keys, sort indices and gathered copies)."""
    return 12 * _item(dtype) + 136


def gather_bytes_per_slot(dtype: torch.dtype, clip_space: bool, filled_only: bool = False) -> int:
    """Bytes per K slot of a tile in step 4 with autograd on, and its backward pass: the
    per-fragment geometry (about 60 temporaries saved for backward, and their gradients), the
    scattered ``[rows, W, K]`` results and the slot and vertex indices. Measured (every slot
    filled, forward and backward): about 880 B in float32 and 1,560 B in float64.

    With ``filled_only``, the part only filled slots take: all but the scattered results (bary,
    depth and dist, and screen_bary for clip-space input) and their gradients, which every slot
    of the tile takes."""
    total = (165 + (30 if clip_space else 0)) * _item(dtype) + 200
    return total - 2 * (8 if clip_space else 5) * _item(dtype) if filled_only else total


@dataclass(frozen=True)
class SoftPlan:
    """How one soft-mode call is cut into tiles whose working set fits ``memory_budget``.

    Attributes:
        tiles: ``(b, r0, r1, c0, c1)`` for each tile, in order: pixels ``r0 <= row < r1``,
            ``c0 <= col < c1`` of batch element ``b``. Whole rows (``c0 = 0``, ``c1 = W``) when one
            row fits, else pieces of one row.
        faces_per_pixel: K.
        max_frags: candidate fragments per span chunk of the selection (0 without selection).
        max_spans: ``(face, row)`` spans expanded at once in the selection (0 without selection).
        direct: what autograd saves for every tile together fits the budget (it is counted in
            ``fixed``): tiles then run with autograd on, and the backward pass is autograd's own.
        keep_index: the selected face indices of every tile are kept for the backward pass
            (``keep_bytes`` of them); otherwise the backward pass selects again.
        budget: ``memory_budget``, bytes.
        fixed: bytes held for the whole call (one element's face table, the kept indices).
        slot_bytes: the tile function's bytes per K slot (forward with autograd, and backward).
        filled_bytes: the part of ``slot_bytes`` taken only by slots a face fills (the rest is taken
            by every slot of the pixels a tile function works on; see :meth:`TileLoop._fits_direct`).
        select_bytes: the selection's bytes per K slot (0 without selection).
        fragment_bytes: bytes per candidate fragment of a span chunk.
        returned: bytes of the tensors the call returns (on top of the budget).
    """

    tiles: tuple[tuple[int, int, int, int, int], ...]
    faces_per_pixel: int
    max_frags: int
    max_spans: int
    direct: bool
    keep_index: bool
    keep_bytes: int
    budget: int
    fixed: int
    slot_bytes: int
    select_bytes: int
    fragment_bytes: int
    returned: int
    filled_bytes: int = 0

    def working_set(self, tile: tuple[int, int, int, int, int]) -> int:
        """Estimated peak bytes while ``tile`` runs (the returned tensors aside): the fixed part,
        the tile's face indices (int64) and the larger of the selection (K-slot buffers, one group
        of spans and one chunk of candidates) and the tile function."""
        _, r0, r1, c0, c1 = tile
        slots = (r1 - r0) * (c1 - c0) * self.faces_per_pixel
        select = 0
        if self.select_bytes:
            select = slots * self.select_bytes + self.max_frags * self.fragment_bytes + self.max_spans * _SPAN_BYTES
        return self.fixed + slots * 8 + max(select, slots * self.slot_bytes)


def plan_tiles(where: str, *, batch: int, size: tuple[int, int], faces: int, faces_per_pixel: int,
               dtype: torch.dtype, budget: int, slot_bytes: int, returned: int, select: bool = True,
               keep_bytes: int = 0, filled_bytes: int = 0) -> SoftPlan:
    """Cut a ``batch x H x W`` soft-mode call into tiles that fit ``budget``: bands of rows, or
    pieces of a row when one row does not fit.

    Args:
        where: the public function's name, for messages.
        slot_bytes: the tile function's working bytes per K slot (see :meth:`SoftPlan.working_set`).
        filled_bytes: the part of ``slot_bytes`` that only filled slots take (see :class:`SoftPlan`).
        returned: bytes of the tensors the call returns; at most ``RETURNED_PER_BUDGET * budget``.
        select: whether tiles select their faces (:class:`FaceSelector`); else the face indices
            are given (shading existing fragments).
        keep_bytes: bytes to keep every tile's selected face indices for the backward pass; kept
            when they take at most ``1 / KEEP_SHARE`` of the budget, else selected again in backward.

    Raises:
        MemoryBudgetError: the returned tensors alone exceed ``RETURNED_PER_BUDGET * budget``, or
            the work of one pixel (its K slots, and the face table) does not fit; the message says
            what to change. Nothing has been allocated yet.
    """
    height, width = size
    K = faces_per_pixel
    keep = 0 < keep_bytes <= budget // KEEP_SHARE
    select_bytes = _select_bytes_per_slot(dtype) if select else 0
    frag = _bytes_per_fragment(dtype)
    face_bytes = faces * _face_bytes(dtype) if select else 0
    fixed = face_bytes + (keep_bytes if keep else 0)
    tile_px = K * (8 + slot_bytes)  # per pixel of a tile, in the tile function
    select_px = K * (8 + select_bytes) + (frag + _SPAN_BYTES if select else 0)  # with >= 1 candidate and span
    need = face_bytes + max(tile_px, select_px)
    least = max(need, -(-returned // RETURNED_PER_BUDGET))
    if budget < least:
        why = []
        if returned > RETURNED_PER_BUDGET * budget:
            why.append(f"the returned tensors would take {_fmt(returned)} ({batch} x {height} x {width} pixels, "
                       f"faces_per_pixel={K}), more than {RETURNED_PER_BUDGET} x memory_budget")
        if budget < need:
            why.append(f"the work of one pixel with faces_per_pixel={K} needs {need} bytes ({max(tile_px, select_px)} "
                       f"per pixel" + (f", {face_bytes} for the table of {faces} faces" if select else "") + ")")
        raise MemoryBudgetError(
            f"{where}: memory_budget={budget} bytes is too small: {'; and '.join(why)}; raise memory_budget to "
            f"at least {least} bytes, lower faces_per_pixel, or render a smaller size or fewer images per call"
        )
    state = batch * height * width * tile_px  # what autograd saves when every tile runs with it on
    direct = state <= (budget - face_bytes) // 2
    if direct:  # held for the whole call; tiles work in the rest
        keep, fixed = False, face_bytes + state
    elif budget < fixed + max(tile_px, select_px):  # no room to keep the indices
        keep, fixed = False, face_bytes
    work = budget - fixed
    pixels = work // tile_px
    if select:  # about half for the K-slot buffers, the rest for spans and chunks of candidates
        pixels = min(pixels, max(1, work // (2 * select_px)))
    pixels = max(1, pixels)
    if pixels >= width:  # bands of whole rows, of equal height
        rows = min(height, pixels // width)
        rows = -(-height // -(-height // rows))
        cols = width
    else:  # pieces of one row, of equal width
        rows = 1
        cols = -(-width // -(-width // pixels))
    max_frags = max_spans = 0
    if select:  # what the K-slot buffers leave: a quarter for spans, the rest for candidates
        left = work - rows * cols * K * (8 + select_bytes)
        max_spans = max(rows, left // 4 // _SPAN_BYTES)
        max_frags = max(cols, (left - max_spans * _SPAN_BYTES) // frag)
    tiles = tuple((b, r0, min(height, r0 + rows), c0, min(width, c0 + cols))
                  for b in range(batch) for r0 in range(0, height, rows) for c0 in range(0, width, cols))
    return SoftPlan(tiles, K, max_frags, max_spans, direct, keep, keep_bytes if keep else 0, budget, fixed, slot_bytes,
                    select_bytes, frag, returned, min(filled_bytes, slot_bytes))


def _fmt(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


# ---- the call ---------------------------------------------------------------------------------
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
        distance in px^2 (0 where empty), ``alpha`` ``[B, H, W, 1]``, the soft silhouette over
        every face reaching the pixel (not only the K kept), and ``screen_bary`` for clip-space input.
        Float tensors are differentiable with respect to ``batch.vertices``. The work runs in
        tiles that fit ``settings.memory_budget``; the returned tensors come on top of it.

    Raises:
        MemoryBudgetError: the returned fragments exceed ``RETURNED_PER_BUDGET`` times
            ``settings.memory_budget``, or the budget cannot hold the work of one pixel.
    """
    where = "rasterize_soft"
    if not isinstance(batch, TriangleBatch):
        raise PyGpuTypeError(f"{where}: `batch` must be a TriangleBatch, got {type(batch).__name__}")
    height, width = check_size(where, size)
    s = settings if settings is not None else RasterSettings(mode="soft")
    if not isinstance(s, RasterSettings):
        raise PyGpuTypeError(f"{where}: `settings` must be a RasterSettings, got {type(s).__name__}")
    B, K, dtype, clip = batch.batch_size, s.faces_per_pixel, batch.dtype, batch.is_clip_space
    floats = 5 + (3 if clip else 0)  # bary, depth, dist (and screen_bary) per slot
    plan = plan_tiles(where, batch=B, size=(height, width), faces=batch.num_faces, faces_per_pixel=K, dtype=dtype,
                      budget=s.memory_budget, slot_bytes=gather_bytes_per_slot(dtype, clip),
                      returned=B * height * width * (K * (8 + floats * _item(dtype)) + _item(dtype)))
    screen = batch.screen_vertices((height, width))  # [B, V, 3], differentiable
    w = batch.vertices[..., 3] if clip else None  # [B, V]
    faces = batch.faces
    select = FaceSelector(screen.detach(), faces, (height, width), s, plan)

    def tile(t: tuple, fi: torch.Tensor, scr: torch.Tensor, wb: torch.Tensor | None):
        fr = gather_tile(scr, wb, faces, fi, (t[1], t[3]))
        alpha = (1.0 - exp_normal(select.log_miss(t, scr)))[None, ..., None]
        return (fr.bary, fr.depth, fr.dist, alpha) + ((fr.screen_bary,) if clip else ())

    dev = batch.device
    shape = (B, height, width, K)
    outputs = [torch.empty(*shape, 3, dtype=dtype, device=dev), torch.empty(shape, dtype=dtype, device=dev),
               torch.empty(shape, dtype=dtype, device=dev), torch.empty(B, height, width, 1, dtype=dtype, device=dev)]
    if clip:
        outputs.append(torch.empty(*shape, 3, dtype=dtype, device=dev))
    face_index = torch.empty(shape, dtype=torch.int64, device=dev)
    out = TileLoop(plan, select, tile, outputs, index_out=face_index)(screen, w)
    return Fragments(face_index, out[0], out[1], out[2], out[4] if clip else None, out[3])


# ---- steps 1-3: selection (no autograd) -----------------------------------------------------------
class FaceSelector:
    """Selects, tile by tile, the K nearest faces (by depth, then face index) whose blurred
    footprint reaches each pixel: steps 1-3 of the module docstring, without gradients.

    ``selector((b, r0, r1, c0, c1))`` returns int64 ``[r1 - r0, c1 - c0, K]`` face indices (-1
    padded) for the pixels ``r0 <= row < r1``, ``c0 <= col < c1`` of batch element ``b``. One
    element's face table is built when its first tile comes and kept until another element's
    tile comes (tiles come element by element). While ``room`` (bytes, 0 by default) lasts, the
    first selection of a tile also keeps its candidates' silhouette gradient terms for
    :class:`_LogMiss`'s backward pass (``kept_terms``, as :meth:`miss` does).

    Args:
        screen: float ``[B, V, 3]`` detached screen-space vertices.
        faces: int64 ``[F, 3]``.
        size: ``(H, W)``.
        settings: ``RasterSettings`` (``faces_per_pixel``, ``blur_radius``, ``cull_backfaces``).
        plan: the ``SoftPlan`` (its ``max_frags`` caps each span chunk).
    """

    def __init__(self, screen: torch.Tensor, faces: torch.Tensor, size: tuple[int, int], settings: RasterSettings,
                 plan: SoftPlan):
        self.screen, self.faces, self.size, self.settings, self.plan = screen, faces, size, settings, plan
        self._element: tuple[int, tuple] | None = None
        self._log_miss: torch.Tensor | None = None  # [B, H, W] sum log(1 - D), filled tile by tile
        self.kept_terms: dict = {}  # tile -> its candidates' gradient terms (see miss)
        self.room = 0  # bytes left for kept gradient terms
        self.deep = False  # the current element's faces overlap deeply (see _build)
        self.defer = False  # its gradient terms are evaluated once its pixels' sums are known (see _Terms)
        self._slots: dict = {}  # tile -> (distance, depth) of its selection: the last one, or all held
        self.hold_slots = False  # keep every tile's slot values (see slot_values) until release
        self._weighted: dict = {}  # tile -> its slots with blend weight, recorded by the shading (held)
        #: per batch element, the depth beyond a pixel's nearest fragment past which no face has
        #: blend weight (:func:`blend_window`), or None: the selection then keeps, per pixel, only
        #: what a blended image needs (see :func:`_front_filter`) instead of the K nearest
        self.window: list[float] | None = None

    def hold_all(self) -> None:
        """Keep every tile's slot values from now until :meth:`release` (the :class:`TileLoop`
        hook for selecting every tile's faces before shading any)."""
        self.hold_slots = True

    def release(self) -> None:
        """Drop the cached face table and the last selection's slot values."""
        self._element = None
        self._slots, self._weighted, self.hold_slots = {}, {}, False

    def forward_done(self) -> None:
        """The :class:`TileLoop` hook at the end of a forward pass that its backward pass will
        follow: the face table goes, held slot values stay for the backward pass's shading (the
        plan counts them with the kept face indices) until :meth:`release`."""
        self._element = None
        if not self.hold_slots:
            self._slots, self._weighted = {}, {}

    def _table(self, b: int):
        if self._element is None or self._element[0] != b:
            self._element = None
            self._element = (b, self._build(b))
        return self._element[1]

    @torch.no_grad()
    def _build(self, b: int):
        """The edge table of element ``b``'s faces (``[19, F]``, :func:`_edge_table`), its live
        faces (nonzero area, not culled, blur box on screen), with their pixel ranges (int64 ``[n]`` each) and reach (``[10, n]``,
        :func:`_reach_table`), and every face's nearest corner depth (``[F]``: no fragment of the
        face is nearer). The live faces come in face order (a mesh's neighbours are near in
        memory), or nearest first by that depth where their boxes cover the frame more than
        ``_SORT_OVERDRAW`` times over (so that pixels are done early, see :func:`_hidden_depth`).
        Sets ``deep`` (that order) and ``defer`` (the faces' cores, :func:`_core_area`, cover at
        least ``_DEFER_SHARE`` of the frame: the silhouette gradient terms are deferred, see
        :class:`_Terms`)."""
        height, width = self.size
        radius = self.settings.blur_radius
        verts = self.screen[b]  # [V, 3]
        F = self.faces.shape[0]
        tri = verts.index_select(0, self.faces.reshape(-1)).view(F, 3, 3)  # [F, 3, 3]
        keep = _kept(tri, self.settings.cull_backfaces)
        lo = tri[..., :2].amin(dim=1) - radius  # [F, 2]
        hi = tri[..., :2].amax(dim=1) + radius
        c0 = torch.ceil(lo[:, 0] - 0.5).clamp(min=0).long()
        c1 = torch.floor(hi[:, 0] - 0.5).clamp(max=width - 1).long()
        r0 = torch.ceil(lo[:, 1] - 0.5).clamp(min=0).long()
        r1 = torch.floor(hi[:, 1] - 0.5).clamp(max=height - 1).long()
        live = flat_nonzero(keep & (c0 <= c1) & (r0 <= r1))  # [n] face ids
        z = tri[..., 2]
        zmin = torch.minimum(torch.minimum(z[:, 0], z[:, 1]), z[:, 2])  # [F]: no fragment of a face lies nearer
        boxes = ((r1 - r0 + 1) * (c1 - c0 + 1)).index_select(0, live)
        box_total, core_total = torch.stack((boxes.sum().double(), _core_area(tri.index_select(0, live),
                                                                               self.settings.sigma, verts.dtype))).tolist()
        self.deep = box_total > _SORT_OVERDRAW * height * width
        self.defer = core_total >= _DEFER_SHARE * height * width
        if self.deep:  # faces overlap deeply: nearest first
            live = live.index_select(0, torch.sort(zmin.index_select(0, live), stable=True).indices)
        reach = torch.empty(_REACH_ROWS, live.numel(), dtype=torch.float64, device=verts.device)
        for i in range(0, live.numel(), _LINE_BLOCK):  # in blocks: their float64 temporaries stay small
            part = tri.index_select(0, live[i:i + _LINE_BLOCK])
            reach[:, i:i + _LINE_BLOCK] = _reach_table(_reach_lines(part, radius))
        return _edge_table(tri), live, *(t.index_select(0, live) for t in (r0, r1, c0, c1)), reach, zmin

    def spans(self, tile: Tile, limit: Callable | None = None):
        """The tile's candidate fragments, as chunks ``(tri, face, row, col0, span_w, n)`` of
        ``n <= plan.max_frags`` candidates (one span may exceed it alone): ``[S]`` spans of
        ``span_w`` pixels from ``(row, col0)`` of face ``face`` (see :func:`_candidates`);
        ``tri`` is the element's (detached) edge table (see :meth:`_build`). Steps 1-2 of
        the module docstring; shared by the selection and by the silhouette's backward pass.

        With ``limit``, each group of faces is first given to ``limit(face, top, n_rows, left,
        n_cols)`` (int64 ``[n]`` each: the faces and their boxes clipped to the tile), asked when
        the group's turn comes, which returns the indices of the faces to expand into spans (None:
        all of them): faces behind every pixel of their box that is done are dropped before any
        of their spans is made."""
        b, row0, row1, col0, col1 = tile
        if self.faces.shape[0] == 0:
            return
        tri, live, f_r0, f_r1, f_c0, f_c1, reach, _ = self._table(b)
        # 1. bin: the live faces whose grown box reaches the tile
        near = flat_nonzero((f_r0 < row1) & (f_r1 >= row0) & (f_c0 < col1) & (f_c1 >= col0))
        if near.numel() == 0:
            return
        # index_select throughout: indexing with an index tensor (t[near]) is about 4x slower on the CPU
        f_r0, f_r1, f_c0, f_c1, face = (t.index_select(0, near) for t in (f_r0, f_r1, f_c0, f_c1, live))
        reach = reach.index_select(1, near)
        top = f_r0.clamp(min=row0)
        n_rows = f_r1.clamp(max=row1 - 1) - top + 1
        left = f_c0.clamp(min=col0)
        n_cols = f_c1.clamp(max=col1 - 1) - left + 1
        # groups of faces (nearest first) with at most max_spans spans each (a face has <= rows spans)
        # and, with a limit, boxes of at most _GROUP_CAP chunks' candidates, so that it is asked often
        ends = torch.cumsum(n_rows, 0)
        areas = torch.cumsum(n_rows * n_cols, 0) if limit is not None else None
        lo, n = 0, face.numel()
        while lo < n:
            done = int(ends[lo - 1]) if lo else 0
            hi = max(lo + 1, int(torch.searchsorted(ends, done + self.plan.max_spans, right=True)))
            if areas is not None:
                seen = int(areas[lo - 1]) if lo else 0
                cap = int(torch.searchsorted(areas, seen + _GROUP_CAP * _CHUNK_CANDIDATES, right=True))
                hi = min(hi, max(lo + 1, cap))
            group = [t[lo:hi] for t in (face, top, n_rows, left, n_cols)] + [reach[:, lo:hi]]
            keep = None if limit is None else limit(*group[:5])
            if keep is not None:  # faces behind every pixel their box holds in the tile
                if keep.numel() == 0:
                    lo = hi
                    continue
                group = [t.index_select(0, keep) for t in group[:5]] + [group[5].index_select(1, keep)]
            yield from self._group(tri, *group)
            lo = hi

    @torch.no_grad()
    def __call__(self, tile: Tile) -> torch.Tensor:
        b, row0, row1, col0, col1 = tile
        s = self.settings
        K = s.faces_per_pixel
        device = self.screen.device
        rows, width = row1 - row0, col1 - col0
        best_face = torch.full((rows * width, K), -1, dtype=torch.int64, device=device)
        best_depth = torch.full((rows * width, K), math.inf, dtype=self.screen.dtype, device=device)
        best_dist = torch.zeros((rows * width, K), dtype=self.screen.dtype, device=device)
        log_miss = torch.zeros(rows * width, dtype=self.screen.dtype, device=device)
        reach = -(s.blur_radius ** 2)  # keep fragments with dist >= reach (D >= cutoff)
        zmin = self._table(b)[-1]
        terms = None
        if self.room > 0 and tile not in self.kept_terms:
            terms = _Terms(self.room, self.screen.dtype, deferred=self.defer)
        evaluated, memo = 0, [-1, None]  # chunks evaluated so far; the hidden depths at that count
        front = None  # with a window: per pixel, the nearest depths of the fragments not covering it and covering it
        if self.window is not None:
            front = (self.window[b], torch.full((2, rows * width), math.inf, dtype=log_miss.dtype, device=device))

        def hidden_now():  # the limit and the next chunk ask at the same state: computed once
            if memo[0] != evaluated:
                bound = None if front is None else _front_bound(*front)
                memo[:] = [evaluated, _hidden_depth(log_miss, best_depth, best_face, bound)]
            return memo[1]

        def limit(*group):  # faces behind every done pixel of their box are not expanded
            hidden = hidden_now()
            return None if hidden is None else _box_limit(hidden, zmin, rows, width, (row0, col0))(*group)

        pruned = terms is None or terms.deferred  # then the backward pass need not see the same chunks
        for i, (tri, face, row, c0, span_w, n) in enumerate(self.spans(tile, limit if pruned else None)):
            hidden = None if i == 0 else hidden_now()
            keep = None if hidden is None else _visible_spans(hidden, zmin, face, row, c0, span_w, (row0, col0), width)
            if keep is not None:  # whole spans behind done pixels
                face, row, c0, span_w = (t.index_select(0, keep) for t in (face, row, c0, span_w))
                n = int(span_w.sum())
                if n == 0:
                    if terms is not None:
                        terms.close()
                    continue
            _chunk(tri, face, row, c0, span_w, n, width, reach, K, best_depth, best_face, (row0, col0),
                   log_miss=log_miss, sigma=s.sigma, fresh=i == 0, terms=terms, best_dist=best_dist,
                   hidden=hidden, zmin=zmin, front=front)
            evaluated += 1
        self._keep_miss(tile, log_miss)
        if terms is not None and (terms.chunks or terms.overflow):
            used = terms.finish(self._table(b)[0], log_miss, -_saturated(log_miss.dtype), (row0, col0), width, s.sigma,
                                reach)
            if terms.blocks is not None:
                self.kept_terms[tile] = terms.blocks
                self.room -= used
        if not self.hold_slots:
            self._slots.clear()
        self._slots[tile] = (best_dist.view(rows, width, K), best_depth.view(rows, width, K))
        return best_face.view(rows, width, K)

    def slot_values(self, tile: Tile) -> tuple[torch.Tensor, torch.Tensor] | None:
        """float ``[rows, cols, K]`` distance and depth of the faces the last call selected for
        ``tile`` (:func:`soft_geometry`'s values, bit for bit), or None for another tile. With
        ``hold_slots`` (set by :class:`TileLoop` when it selects every tile's faces before
        shading any), every tile's are kept until :meth:`release`."""
        return self._slots.get(tile)

    def keep_weighted(self, tile: Tile, live: torch.Tensor) -> None:
        """Hold ``live`` (bool ``[rows, cols, K]``: the tile's slots whose blend weight is not 0, as
        the forward pass's shading found them) with the tile's slot values, while those are held."""
        if self.hold_slots and tile in self._slots:
            self._weighted[tile] = live

    def weighted(self, tile: Tile) -> torch.Tensor | None:
        """The tile's slots with blend weight held by :meth:`keep_weighted`, or None."""
        return self._weighted.get(tile)

    @torch.no_grad()
    def miss(self, tile: Tile, room: int = 0) -> int:
        """The silhouette's ``sum log(1 - D)`` over the tile's candidates alone, without selecting
        faces (steps 1-2, and of step 3 only the sum; the same values as :meth:`__call__`'s, bit
        for bit: each pixel adds its fragments in the same order), kept for :meth:`log_miss`. A
        pixel whose sum is below ``-_saturated`` (its alpha is exactly 1) takes no further terms
        (whole spans whose pixels all are so are skipped).

        With ``room`` (bytes), the gradient terms (:func:`_miss_terms`) of the candidates at the
        pixels whose alpha is not exactly 1 are kept too, chunk by chunk while they fit, for the
        backward pass (``kept_terms[tile]``, see :class:`_Terms`). Returns the bytes kept."""
        b, row0, row1, col0, col1 = tile
        s, dtype = self.settings, self.screen.dtype
        width = col1 - col0
        log_miss = torch.zeros((row1 - row0) * width, dtype=dtype, device=self.screen.device)
        reach = -(s.blur_radius ** 2)
        zmin = self._table(b)[-1]
        terms = _Terms(room, dtype, deferred=self.defer) if room > 0 else None
        floor, look, k = -_saturated(dtype), False, 0  # k: blocks evaluated so far
        memo = [-1, None]  # the done pixels' depths at that count

        def done_now():  # the limit and the next chunk ask at the same state: computed once
            if memo[0] != k:
                memo[:] = [k, torch.where(log_miss < floor, -math.inf, math.inf)]
            return memo[1]

        def limit(*group):  # faces whose box holds only pixels whose alpha is exactly 1 are not expanded
            if not look:
                return None
            return _box_limit(done_now(), zmin, row1 - row0, width, (row0, col0))(*group)

        pruned = terms is None or terms.deferred  # then the backward pass need not see the same chunks
        for chunk in self.spans(tile, limit if pruned else None):
            keep = None
            if look:  # whole spans whose pixels all have alpha exactly 1 already
                keep = _visible_spans(done_now(), zmin, *chunk[1:5], (row0, col0), width)
            hits = []
            for tri, f, r, c, pix in _candidate_blocks([chunk], (row0, col0), width, [keep]):
                look = look or (k % _SATURATION_CHECK == _SATURATION_CHECK - 1
                                and int((log_miss < floor).sum()) * _HIDDEN_SHARE >= log_miss.numel())
                k += 1
                hits.append(self._miss_block(log_miss, terms, tri, f, r, c, pix, look, floor, reach))
            if terms is None:
                continue
            if terms.deferred and hits:
                terms.close(*(torch.cat(v) for v in zip(*hits)))
            else:
                terms.close()
        self._keep_miss(tile, log_miss)
        if terms is None or not (terms.chunks or terms.overflow):
            return 0
        used = terms.finish(self._table(b)[0], log_miss, floor, (row0, col0), width, s.sigma, reach)
        if terms.blocks is None:
            return 0
        self.kept_terms[tile] = terms.blocks
        return used

    def _miss_block(self, log_miss, terms, tri, f, r, c, pix, look: bool, floor: float,
                    reach: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Add one block of candidates' ``log(1 - D)`` into ``log_miss`` (with ``look``, only those at
        pixels whose sum is not below ``floor`` yet), keeping their gradient terms in ``terms``
        when it evaluates them eagerly; returns the reached ones' faces and pixels."""
        if look:  # skip the candidates at pixels whose alpha is exactly 1 already
            live = flat_nonzero(log_miss.index_select(0, pix) >= floor)
            if live.numel() == 0:
                return f[:0], pix[:0]
            if live.numel() < pix.numel():
                f, r, c, pix = (t.index_select(0, live) for t in (f, r, c, pix))
        sigma = self.settings.sigma
        if terms is not None and not terms.deferred:
            dist = terms.evaluate(tri, f, c, r, pix, sigma, reach)[0]
        else:
            dist = _miss_terms(tri, f, c, r, sigma, reach, dist_only=True)
        hit = flat_nonzero(dist >= reach)
        pix = pix.index_select(0, hit)
        add_at(log_miss, pix, nnf.logsigmoid(dist.index_select(0, hit) / -sigma))
        return f.index_select(0, hit), pix

    def _keep_miss(self, tile: Tile, log_miss: torch.Tensor) -> None:
        b, row0, row1, col0, col1 = tile
        if self._log_miss is None:  # one float per pixel of the frame, for the silhouette
            B = self.screen.shape[0]
            self._log_miss = torch.zeros(B, *self.size, dtype=self.screen.dtype, device=self.screen.device)
        self._log_miss[b, row0:row1, col0:col1] = log_miss.view(row1 - row0, col1 - col0)

    def log_miss(self, tile: Tile, screen: torch.Tensor) -> torch.Tensor:
        """float ``[rows, cols]``: ``sum log(1 - D)`` over every candidate fragment of the tile (the
        log of the silhouette's miss probability), differentiable with respect to ``screen``
        (``[V, 3]``, the tile's element). The value is the one the selection computed for this
        tile (kept for the whole frame, one float per pixel); the backward pass visits the tile's
        candidates again, one chunk at a time."""
        b, r0, r1, c0, c1 = tile
        if self._log_miss is None:  # pragma: no cover - every tile is selected before it is shaded
            self(tile)
        value = self._log_miss[b, r0:r1, c0:c1]
        if not (torch.is_grad_enabled() and screen.requires_grad):
            return value
        return _LogMiss.apply(screen, value, self, tile)

    def _group(self, tri, face, top, n_rows, left, n_cols, reach):
        """Expand a group of faces reaching a tile into ``(face, row)`` spans and yield them in
        chunks of at most ``plan.max_frags`` candidates (see :meth:`spans`). Each span covers only
        the columns of its row that the face's reach (``reach``, see :func:`_reach_table`) can hold."""
        device = face.device
        span_face = torch.repeat_interleave(face, n_rows)  # [S] (face, row) spans, nearest faces first
        first = torch.cumsum(n_rows, 0) - n_rows
        offset = torch.arange(span_face.numel(), device=device) - torch.repeat_interleave(first, n_rows)
        span_row = torch.repeat_interleave(top, n_rows) + offset
        box0 = torch.repeat_interleave(left, n_rows)
        box1 = box0 + torch.repeat_interleave(n_cols, n_rows) - 1
        owner = torch.repeat_interleave(torch.arange(face.numel(), device=device), n_rows)  # [S] reach columns
        # one gather per row: torch's CPU index_select along dim 1 of a float64 table is ~3.5x slower
        span_c0, span_c1 = _reach_columns([r.index_select(0, owner) for r in reach], span_row, box0, box1)
        del first, offset, box0, box1, owner
        alive = flat_nonzero(span_c1 >= span_c0)
        if alive.numel() < span_face.numel():
            span_face, span_row, span_c0, span_c1 = (t.index_select(0, alive) for t in (span_face, span_row, span_c0,
                                                                                        span_c1))
        span_w = span_c1 - span_c0 + 1
        del span_c1, alive
        # 2. chunk: consecutive spans (nearest faces first) of at most max_frags candidates in all
        ends = torch.cumsum(span_w, 0)  # the cuts are searched in the tensor: a list of every end costs more
        n_spans, max_frags, start, done = span_w.numel(), min(self.plan.max_frags, _CHUNK_CANDIDATES), 0, 0
        while start < n_spans:
            stop = max(start + 1, int(torch.searchsorted(ends, done + max_frags, right=True)))
            end = int(ends[stop - 1])
            yield tri, span_face[start:stop], span_row[start:stop], span_c0[start:stop], span_w[start:stop], end - done
            start, done = stop, end


def _reach_lines(tri: torch.Tensor, radius: float) -> torch.Tensor:
    """float64 ``[n, 3, 3]``: for each edge of the triangles ``[n, 3, 3]``, ``(nx, ny, c)`` of the
    half-plane ``nx * x + ny * y >= c`` that holds every point within ``radius`` of the face: the
    edge's line (unit inward normal) moved outward by ``radius``, and by a margin for the float
    rounding of the distance the candidates are tested with. The three half-planes bound the
    face's reach more tightly than its box where the face is slanted (with the box, they bound it
    at sharp corners)."""
    xy = tri[..., :2].double()  # [n, 3, 2]
    e = xy.roll(-1, dims=1) - xy  # edge j runs from corner j to corner j + 1
    to_opposite = xy.roll(-2, dims=1) - xy
    area = e[..., 0] * to_opposite[..., 1] - e[..., 1] * to_opposite[..., 0]  # [n, 3], one sign per face
    normal = torch.stack((-e[..., 1], e[..., 0]), dim=-1) * torch.sign(area)[..., None]
    normal = normal / torch.linalg.vector_norm(normal, dim=-1, keepdim=True).clamp(min=1e-300)
    margin = 1e-3 + 1e-5 * xy.abs().amax(dim=(1, 2))[:, None]  # px: far above float32's rounding there
    c = (normal * xy).sum(dim=-1) - radius - margin
    return torch.cat((normal, c[..., None]), dim=-1)


def _core_area(tri: torch.Tensor, sigma: float, dtype: torch.dtype) -> torch.Tensor:
    """float64 ``[]``: the total area (px^2) of the triangles' cores (``[n, 3, 3]``), the points
    deeper inside than ``sqrt(_saturated * sigma)``, where one face alone makes alpha exactly 1:
    each triangle shrunk toward its incenter by that depth (``area * (1 - depth / inradius)^2``)."""
    xy = tri[..., :2].double()
    e = xy.roll(-1, dims=1) - xy
    perimeter = torch.linalg.vector_norm(e, dim=-1).sum(-1)
    area = 0.5 * (e[:, 0, 0] * e[:, 1, 1] - e[:, 0, 1] * e[:, 1, 0]).abs()
    inradius = 2.0 * area / perimeter.clamp(min=1e-300)
    depth = math.sqrt(_saturated(dtype) * sigma)
    return (area * (1.0 - depth / inradius.clamp(min=1e-300)).clamp(min=0.0) ** 2).sum()


#: Rows of the faces' reach table (:func:`_reach_table`), one per bound coefficient.
_REACH_ROWS = 10


def _reach_table(lines: torch.Tensor) -> torch.Tensor:
    """float64 ``[10, n]``: the reach half-planes ``lines`` (``[n, 3, 3]``, see :func:`_reach_lines`)
    as bounds on the column of a row's centers, each linear in the row's center ``y`` (one row
    per coefficient, so that the bounds of a span's face are gathered as contiguous rows).

    ``nx * x + ny * y >= c`` holds for ``x >= c / nx - (ny / nx) y`` where ``nx > 0`` (a left
    bound), for ``x <= c / nx - (ny / nx) y`` where ``nx < 0`` (a right bound), and for every or no
    ``x`` where ``nx == 0`` (a horizontal edge: ``c - ny * y <= 0``). A triangle has one or two left
    bounds, one or two right bounds and at most one horizontal edge, so the rows are
    ``(la0, lb0, la1, lb1)``: the left bounds ``a - b y`` (the first one twice when there is one),
    ``(ra0, rb0, ra1, rb1)`` the right ones, and ``(hc, hny)`` the horizontal edge (``-inf, 0``
    when there is none). A face without a left (right) bound, which only rounding can make,
    gets ``-inf`` (``+inf``) there."""
    nx, ny, c = lines.unbind(-1)  # [n, 3] each
    safe = torch.where(nx == 0, 1.0, nx)
    a, b = c / safe, ny / safe
    usable = torch.isfinite(a) & torch.isfinite(b)  # a subnormal nx overflows: no bound, a looser reach
    left, right = usable & (nx > 0), usable & (nx < 0)
    # per face, the first and the last left edge, the first and the last right one (argmax finds
    # the first set flag; on the flipped flags, the last), all at once
    sides = torch.stack((left, left.flip(1), right, right.flip(1)), dim=1)  # [n, 4, 3]
    k = sides.to(torch.int8).argmax(dim=2)  # [n, 4]
    k[:, 1::2] = 2 - k[:, 1::2]  # the flipped searches' positions in edge order
    none = ~sides.any(dim=2)
    a_k, b_k = a.gather(1, k), b.gather(1, k).masked_fill_(none, 0.0)
    a_k[:, :2].masked_fill_(none[:, :2], -math.inf)  # no left bound: every column
    a_k[:, 2:].masked_fill_(none[:, 2:], math.inf)  # no right bound: every column
    ends = torch.stack((a_k, b_k), dim=2)
    flat = nx == 0
    h = flat.to(torch.int8).argmax(dim=1, keepdim=True)
    any_flat = flat.any(dim=1, keepdim=True)
    horizontal = (torch.where(any_flat, c.gather(1, h), -math.inf), torch.where(any_flat, ny.gather(1, h), 0.0))
    return torch.cat((ends.reshape(-1, 8), *horizontal), dim=1).t().contiguous()


def _reach_columns(reach, row: torch.Tensor, c0: torch.Tensor, c1: torch.Tensor):
    """Columns ``[s0, s1]`` (int64 ``[S]``) of box spans ``[c0, c1]`` on pixel rows ``row`` whose
    centers satisfy the span's reach (the 10 float64 ``[S]`` rows of :func:`_reach_table`); empty
    spans come back with ``s1 < s0``."""
    la0, lb0, la1, lb1, ra0, rb0, ra1, rb1, hc, hny = reach
    y = row.double() + 0.5
    lo = torch.maximum(la0 - lb0 * y, la1 - lb1 * y)
    hi = torch.minimum(ra0 - rb0 * y, ra1 - rb1 * y)
    hi = torch.where(hc - hny * y > 0, -math.inf, hi)  # a horizontal edge's far side: no column
    lo = torch.ceil(lo.clamp(-2.0, 2.0**40) - 0.5).long()  # first column whose center is >= lo
    hi = torch.floor(hi.clamp(-2.0**40, 2.0**40) - 0.5).long()
    return torch.maximum(lo, c0), torch.minimum(hi, c1)


class _LogMiss(torch.autograd.Function):
    """``sum log(1 - D)`` per pixel of a tile over all its candidates: the forward value is given
    (computed by the selection); the backward pass applies the closed-form derivative of
    :func:`_miss_terms`, to the terms the forward pass kept for the tile (:class:`_Terms`) and to
    the candidates of the chunks it did not keep, evaluated again. Only candidates at pixels
    whose alpha is not exactly 1 are evaluated: where it is, the silhouette has no gradient (and
    the selection skipped faces only there)."""

    @staticmethod
    def forward(ctx, screen, value, selector, tile):
        ctx.save_for_backward(screen)
        ctx.selector, ctx.tile = selector, tile
        return value.clone()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        (screen,) = ctx.saved_tensors
        sel: FaceSelector = ctx.selector
        b, r0, r1, c0, c1 = ctx.tile
        width = c1 - c0
        # where alpha is exactly 1 (the sum is below -_saturated) it has no gradient: the selection
        # stopped adding terms there, so what it added is dropped as well
        done = sel._log_miss[b, r0:r1, c0:c1].reshape(-1) < -_saturated(screen.dtype)
        g = torch.where(done, 0.0, grad.reshape(-1))
        faces, s = sel.faces, sel.settings
        flat = faces.reshape(-1)  # corner c of face f is vertex flat[3 f + c]; edge 3 f + j runs from corner j
        xy = torch.zeros(2, screen.shape[0], dtype=screen.dtype, device=screen.device)  # [x, y] of each vertex

        def add(pix, edge, terms):  # 1D sums into the vertices (measured faster than rows of [n, 4])
            terms = terms * g.index_select(0, pix)
            a = flat.index_select(0, edge)
            b = flat.index_select(0, edge + 1 - 3 * (edge % 3 == 2))  # the edge's second corner, j + 1 mod 3
            for k, vertex in enumerate((a, a, b, b)):
                add_at(xy[k % 2], vertex, terms[k])

        with torch.no_grad():
            kept = sel.kept_terms.pop(ctx.tile, None)
            for blocks in kept or ():  # the chunks the forward pass kept
                for block in blocks or ():
                    add(*block)
            if kept is None or None in kept:  # the others: evaluated again at the pixels not done
                zmin = sel._table(b)[-1]
                open_ = torch.where(done, -math.inf, math.inf)  # whole spans at done pixels are skipped
                for k, chunk in enumerate(sel.spans(ctx.tile)):
                    if kept is not None and kept[k] is not None:
                        continue
                    keep = _visible_spans(open_, zmin, *chunk[1:5], (r0, c0), width)
                    for tri, f, r, c, pix in _candidate_blocks([chunk], (r0, c0), width, [keep]):
                        live = flat_nonzero(~done.index_select(0, pix))
                        if live.numel() == 0:
                            continue
                        if live.numel() < pix.numel():
                            f, r, c, pix = (t.index_select(0, live) for t in (f, r, c, pix))
                        _, edge, terms = _miss_terms(tri, f, c, r, s.sigma, -(s.blur_radius ** 2))
                        add(pix, edge, terms)
            total = torch.zeros_like(screen)
            total[:, :2] = xy.t()
        return total, None, None, None


def _miss_terms(table: torch.Tensor, face: torch.Tensor, col: torch.Tensor, row: torch.Tensor, sigma: float,
                reach: float, dist_only: bool = False, depth: bool = False):
    """The silhouette's terms of candidates ``(face, row, col)`` (``[n]`` each; their faces' edges
    from the table ``[19, F]``, see :func:`_edge_table`): ``dist`` (float ``[n]``, the one :func:`soft_geometry`
    computes, operation for operation, so the reach test agrees with the selection's bit for bit),
    the nearest edge ``3 * face + j`` (int64 ``[n]``; edge j runs from corner j to corner j + 1)
    and ``d log(1 - D) / d (a, b)`` for its corners (float ``[4, n]``: ``ax, ay, bx, by``), zero
    for candidates outside the reach (``dist < reach``).

    ``log(1 - D) = logsigmoid(-dist / sigma)``, so its derivative is ``-D / sigma`` times that of
    ``dist = +-d2``, the squared distance to the nearest edge ``a -> b``: at the nearest point
    ``a + t (b - a)`` (``r`` from it to the pixel) ``d d2 / d a = -2 (1 - t) r`` and
    ``d d2 / d b = -2 t r`` (the derivative through ``t`` vanishes: ``r`` is normal to the edge, or
    ``t`` is clamped). With ``dist_only``, only ``dist``. With ``depth``, the depth follows
    ``dist`` (float ``[n]``, :func:`soft_geometry`'s, operation for operation: the selection ranks
    by it)."""
    dtype = table.dtype
    px, py = col.to(dtype).add_(0.5), row.to(dtype).add_(0.5)
    own = table.index_select(1, face)  # [19, n], see _edge_table
    xa, ya, ex, ey, ee = own[0:3], own[3:6], own[6:9], own[9:12], own[12:15]  # [3, n]: per edge
    dx, dy = px - xa, py - ya
    cross = (ex * dy).sub_(ey * dx).div_(own[15])  # soft_geometry's l2, l0, l1 (edge j is opposite corner j + 2)
    inside = cross.amin(0) >= 0  # all three >= 0 (NaN: not), in two operations instead of eight
    t = (dx * ex).add_(dy * ey).div_(ee).clamp_(0.0, 1.0)
    rx, ry = dx.sub_(t * ex), dy.sub_(t * ey)
    d2 = (rx * rx).add_(ry * ry)  # [3, n]
    near = d2.amin(0)
    dist = torch.where(inside, near, -near)
    out = (dist,) if not depth else (dist, _clamped_depth(cross, own[16:19]))
    if dist_only:
        return out if depth else dist
    # 2 * D / sigma * sign(dist): the coefficient of d d2 / d (corner)
    coef = torch.sigmoid(dist / sigma).mul_(2.0 / sigma)
    coef = torch.where(dist >= reach, torch.where(inside, coef, -coef), 0.0)
    first = d2[0] == near  # the nearest edge, the first of equal ones (their corner terms agree)
    second = (d2[1] == near) & ~first
    t, rx, ry = (torch.where(first, v[0], torch.where(second, v[1], v[2])) for v in (t, rx, ry))
    b_share = coef * t
    a_share = coef - b_share
    edge = torch.where(first, 0, torch.where(second, 1, 2)).add_(face * 3)
    return (*out, edge, torch.stack((a_share * rx, a_share * ry, b_share * rx, b_share * ry)))


class _Terms:
    """The silhouette gradient terms (:func:`_miss_terms`) a tile keeps for :class:`_LogMiss`'s
    backward pass, chunk by chunk of its spans while they fit ``room`` bytes.

    Two ways, chosen per face table (``deferred``):

    - **eager** (meshes): each block of candidates is evaluated with its terms at once
      (:meth:`evaluate`), the way that costs least when most pixels keep a gradient;
    - **deferred** (faces that overlap deeply, see :meth:`FaceSelector._build`): the selection
      evaluates distances only, each chunk hands in its reached candidates (face and tile pixel),
      and once the tile's sums are complete :meth:`finish` evaluates the terms only of those at
      pixels whose alpha is not exactly 1. Elsewhere the silhouette has no gradient, and in such
      scenes that is most pixels (94% of a 256^2 frame of 1k random triangles), whose terms would
      be evaluated for nothing.

    ``blocks``: one entry per chunk, a list of ``(pixel, edge, terms)`` blocks, or None for a
    chunk not kept (the backward pass evaluates it again). Deferred, a tile keeps all of its
    chunks or none (``blocks`` None): its chunks may have skipped faces the backward pass does not
    know of (see :meth:`FaceSelector.spans`), so it evaluates every chunk again rather than some."""

    def __init__(self, room: int, dtype: torch.dtype, deferred: bool):
        self.room, self.used, self.size, self.deferred = room, 0, _term_bytes(dtype), deferred
        self.chunks: list = []  # per chunk: a list of blocks (eager), (face, pixel) (deferred), () or None
        self.blocks: list | None = []
        self._open: list | None = []  # the blocks of the chunk being evaluated (eager); None once it overflows
        self.overflow = False  # deferred: a chunk did not fit, so the tile keeps nothing

    def evaluate(self, table, face, col, row, pix, sigma: float, reach: float, depth: bool = False):
        """Eager: ``dist`` (and with ``depth`` the depth) of one block of candidates at tile pixels
        ``pix``, keeping the block's terms when they fit."""
        size = face.numel() * self.size
        if self._open is None or self.used + size > self.room:
            if self._open:  # the chunk is evaluated again in the backward pass: its blocks go
                self.used -= sum(block[0].numel() for block in self._open) * self.size
            self._open = None
            out = _miss_terms(table, face, col, row, sigma, reach, dist_only=True, depth=depth)
            return out if depth else (out,)
        *out, edge, grad = _miss_terms(table, face, col, row, sigma, reach, depth=depth)
        self._open.append((pix, edge, grad))  # int64 indices, as scatter_add_ takes (see add_at)
        self.used += size
        return out

    def close(self, face: torch.Tensor | None = None, pix: torch.Tensor | None = None) -> None:
        """End a chunk: eager, its blocks (or None, when they overflowed the room; what they took is
        given back); deferred, its reached candidates (int64 ``[n]`` each, none when not given),
        counted at their terms' size, the most they keep."""
        if not self.deferred:
            self.chunks.append(self._open)  # None when it overflowed
            self._open = []
            return
        if self.overflow or face is None or face.numel() == 0:
            self.chunks.append(())
            return
        size = face.numel() * self.size
        if self.used + size > self.room:
            self.overflow, self.chunks, self.used = True, [], 0
            return
        self.chunks.append((face, pix))
        self.used += size

    def finish(self, table: torch.Tensor, log_miss: torch.Tensor, floor: float, origin: tuple[int, int], width: int,
               sigma: float, reach: float) -> int:
        """Deferred: evaluate the kept chunks' terms at the pixels whose sum ``log_miss`` is not below
        ``floor`` (corners from ``table``, pixels of the tile at ``origin``, rows ``width`` long).
        Returns the bytes the tile's terms take."""
        if not self.deferred:
            self.blocks, self.chunks = self.chunks, []
            return self.used
        if self.overflow:
            self.blocks, self.chunks = None, []
            return 0
        self.used = 0
        for entry in self.chunks:
            if not entry:
                self.blocks.append(entry)
                continue
            face, pix = entry
            live = flat_nonzero(log_miss.index_select(0, pix) >= floor)
            face, pix = face.index_select(0, live), pix.index_select(0, live)
            row, col = split_index(pix, width)
            row, col = row + origin[0], col + origin[1]
            parts = []
            for i in range(0, pix.numel(), _BLOCK):
                part = slice(i, i + _BLOCK)
                _, edge, grad = _miss_terms(table, face[part], col[part], row[part], sigma, reach)
                parts.append((pix[part], edge, grad))
            self.blocks.append(parts)
            self.used += pix.numel() * self.size
        self.chunks = []
        return self.used


def _clamped_depth(cross: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """float ``[...]``: the depth :func:`soft_geometry` interpolates with the clamped, renormalized
    barycentrics, from :func:`_miss_terms`' ``cross`` (``l2, l0, l1``, ``[3, ...]``) and the depths
    ``z`` of the corners in that order (``z2, z0, z1``, ``[3, ...]``, see :func:`_edge_table`): the
    operations of :func:`_clamped` and of ``c0 * z0 + c1 * z1 + c2 * z2``, in their order, but three
    at once (eight operations instead of thirteen)."""
    c = cross.clamp(min=0.0)
    c = c.div_(c[1] + c[2] + c[0])  # (c0 + c1) + c2
    p = c.mul_(z)
    return p[1] + p[2] + p[0]


def _span_runs(face, row, col0, span_w, lanes: int):
    """Spans (``[S]`` each) cut into runs of ``lanes`` columns, span by span from the left: int64
    ``[R]`` face, row, first column and columns left in the span (``> lanes`` except in its last run)."""
    device = face.device
    nrun = split_index(span_w + (lanes - 1), lanes)[0]
    R = int(nrun.sum())
    span = torch.repeat_interleave(torch.arange(face.numel(), device=device), nrun, output_size=R)
    start = (torch.arange(R, device=device) - (torch.cumsum(nrun, 0) - nrun).index_select(0, span)) * lanes
    return face.index_select(0, span), row.index_select(0, span), col0.index_select(0, span) + start, \
        span_w.index_select(0, span) - start


def _run_geometry(table: torch.Tensor, face, row, col, left, lanes: int, reach: float, dist: torch.Tensor,
                  depth: torch.Tensor) -> None:
    """:func:`_miss_terms`' ``dist`` and depth (``dist_only``, ``depth``) of the candidates of runs
    (:func:`_span_runs`: ``[R]`` each), written into ``dist`` and ``depth`` (float ``[R, lanes]``);
    on the lanes that do not reach their pixel (past their span's end, or ``dist`` not ``>=
    reach``) ``dist = -inf`` and ``depth = +inf``. The same operations on the same values, so
    the same bits, but each run gathers its face's edges once and the row-constant terms are
    computed once per run, not per candidate. The work is lane-major (``[lanes, R]``), so that
    every operation's inner loop runs along the runs."""
    dtype = table.dtype
    lane = torch.arange(lanes, device=face.device)[:, None]  # [L, 1]
    px = (col + lane).to(dtype).add_(0.5)  # [L, R]
    py = row.to(dtype).add_(0.5)  # [R]
    own = table.index_select(1, face)[:, None]  # [19, 1, R], see _edge_table
    xa, ya, ex, ey, ee = own[0:3], own[3:6], own[6:9], own[9:12], own[12:15]  # [3, 1, R]: per edge
    dx, dy = px - xa, py - ya  # [3, L, R], [3, 1, R]
    cross = torch.sub(ex * dy, ey * dx).div_(own[15])  # soft_geometry's l2, l0, l1
    # amin over the edges: one operation for the three selects and two minimum calls (a minimum
    # is exact, NaN propagates as there, and a zero's sign is made + below)
    least = cross.amin(0)  # inside: all >= 0 (NaN: not)
    t = (dx * ex).add_(dy * ey).div_(ee).clamp_(0.0, 1.0)
    rx, ry = dx.sub_(t * ex), dy - t * ey
    d2 = (rx * rx).add_(ry * ry)  # [3, L, R], no -0.0
    near = d2.amin(0)
    # where(inside, near, -near) as a sign copy, without a mask: NaN counts as negative and -0.0
    # as +0.0, as `least >= 0` has them (torch's CPU where and masked_fill take 1.5-4 ns per element)
    signed = torch.copysign(near, torch.nan_to_num(least, nan=-1.0).add_(0.0))
    ok = (signed >= reach).logical_and_(lane < left)  # reached (NaN: not)
    dist.T.copy_(torch.where(ok, signed, -math.inf))
    depth.T.copy_(torch.where(ok, _clamped_depth(cross, own[16:19]), math.inf))


def _edge_table(tri: torch.Tensor) -> torch.Tensor:
    """float ``[19, F]``: what :func:`_miss_terms` needs of each of the triangles ``[F, 3, 3]``, one
    contiguous row per value for gathers: per edge ``j`` (from corner ``j`` to corner ``j + 1``,
    rows ``3 k + j``) its first corner ``(xa, ya)`` (rows 0-5), its vector ``(ex, ey)`` (rows 6-11)
    and its squared length ``ee`` (rows 12-14, 1 where 0), then the doubled signed area (row 15, 1
    where 0) and the corners' depths in the order of the barycentrics that edges 0, 1, 2 give (corners
    2, 0, 1: rows 16-18, see :func:`_clamped_depth`). Computed once per face, with the operations
    that evaluating them per candidate did (so the same bits), instead of for every candidate."""
    x, y = tri[..., 0].t(), tri[..., 1].t()  # [3, F]: corner j of every face
    ex, ey = x.roll(-1, 0) - x, y.roll(-1, 0) - y
    ee = ex * ex + ey * ey
    area = ex[0] * (y[2] - y[0]) - ey[0] * (x[2] - x[0])
    return torch.cat((x, y, ex, ey, torch.where(ee > 0, ee, torch.ones_like(ee)),
                      torch.where(area != 0, area, torch.ones_like(area))[None], tri[..., 2].t().roll(1, 0)))


#: Candidates evaluated together in the per-candidate arithmetic of steps 2-3 and of the
#: silhouette's backward pass: its few dozen float temporaries of this length stay in the CPU's
#: cache (about 1.5x faster than streaming whole chunks through memory, measured at 1 thread),
#: while each block's few dozen operations are paid for few enough times. Against 16,384, this
#: measured 0.94x on the 1k-random-triangle forward (and forward + backward) at 256^2 and the
#: same on the icosphere, the torus and 10k triangles (one thread, a 1 MB L2 cache).
_BLOCK = 32768
#: Most candidates in one chunk of spans: between chunks the pixels whose K slots are full and
#: whose alpha is exactly 1 stop taking the faces behind them.
_CHUNK_CANDIDATES = 1 << 18
#: Faces come nearest first when their boxes cover the frame more than this many times over.
_SORT_OVERDRAW = 8
#: The silhouette gradient terms are deferred (:class:`_Terms`) when the faces' cores
#: (:func:`_core_area`) cover at least this share of the frame (overlaps counted).
_DEFER_SHARE = 0.5
#: The pixels that stop taking faces behind them are looked up for every candidate of a chunk
#: only when at least one in this many of the tile's pixels has stopped.
_HIDDEN_SHARE = 8
#: ``py_gpu.silhouette`` counts the tile's pixels whose alpha is exactly 1 every this many blocks
#: until enough are (see ``_HIDDEN_SHARE``) to look them up for every candidate.
_SATURATION_CHECK = 4
#: Side in pixels of the square blocks over which :func:`_box_limit` takes the hidden depths' maxima.
_LIMIT_BLOCK = 16
#: With a limit (see :meth:`FaceSelector.spans`), a group of faces has boxes of at most this many
#: chunks' candidates (``_CHUNK_CANDIDATES``), so that the limit is asked often.
_GROUP_CAP = 8
#: Faces whose reach lines (:func:`_reach_lines`) are computed together while a face table is built.
_LINE_BLOCK = 16384


def _candidates(face, row, col0, span_w, n: int):
    """The ``n`` candidate fragments of spans (``[S]`` each), flat, span by span from the left:
    int64 ``[n]`` face, row and column of each."""
    device = face.device
    span = torch.repeat_interleave(torch.arange(face.numel(), device=device), span_w, output_size=n)
    first = torch.cumsum(span_w, 0) - span_w
    col = torch.arange(n, device=device) + (col0 - first).index_select(0, span)
    return face.index_select(0, span), row.index_select(0, span), col


def _candidate_blocks(spans, origin: tuple[int, int], width: int, kept_spans: list | None = None):
    """The candidates of a tile's span chunks (:meth:`FaceSelector.spans`) in blocks of
    ``_BLOCK``, in order: ``(table, face, row, col, pixel)``, the last ``[n]`` each, ``pixel`` in
    the tile whose top-left pixel is ``origin`` and whose rows are ``width`` long. With
    ``kept_spans`` (one entry per chunk: int64 indices of its spans, or None for all), only
    those spans."""
    for k, (table, face, row, col0, span_w, n) in enumerate(spans):
        keep = kept_spans[k] if kept_spans else None
        if keep is not None:
            face, row, col0, span_w = (t.index_select(0, keep) for t in (face, row, col0, span_w))
            n = int(span_w.sum())
        face_n, row_n, col = _candidates(face, row, col0, span_w, n)
        for i in range(0, n, _BLOCK):
            f, r, c = face_n[i:i + _BLOCK], row_n[i:i + _BLOCK], col[i:i + _BLOCK]
            yield table, f, r, c, (r - origin[0]) * width + (c - origin[1])


def _chunk(tri, face, row, col0, span_w, n: int, width: int, reach: float, K: int,
           best_depth: torch.Tensor, best_face: torch.Tensor, origin: tuple[int, int] = (0, 0), *,
           log_miss: torch.Tensor | None = None, sigma: float = 1.0, fresh: bool = False,
           terms: _Terms | None = None, best_dist: torch.Tensor | None = None,
           hidden: torch.Tensor | None = None, zmin: torch.Tensor | None = None, front: tuple | None = None) -> None:
    """Evaluate the ``n`` candidates of one chunk of spans and merge their per-pixel top-K into
    ``best_*``, the ``[rows * width, K]`` buffers of the tile whose top-left pixel is
    ``origin = (row, col)`` (``fresh``: they are still empty; ``best_dist``, when given, receives
    the kept slots' distances); add every reached fragment's ``log(1 - D)`` into ``log_miss``
    (``[rows * width]``) when given, and keep the candidates' silhouette gradient terms in
    ``terms`` (:class:`_Terms`).

    With ``hidden`` (float ``[rows * width]``, :func:`_hidden_depth`) and ``zmin`` (each face's
    nearest depth, ``[F]``), the candidates of faces whose nearest depth lies beyond their pixel's
    ``hidden`` are not evaluated: they can enter neither the K nearest nor the silhouette.
    With ``front`` (``(window, split)``, see :func:`_front_filter`), the fragments no
    blended image needs are dropped before the K nearest are taken."""
    device, dtype = tri.device, tri.dtype
    eager = terms is not None and not terms.deferred
    lanes = _run_lanes(n, face.numel()) if hidden is None and not eager else 0
    if lanes:
        _run_chunk(tri, face, row, col0, span_w, lanes, width, reach, K, best_depth, best_face, origin,
                   log_miss, sigma, fresh, terms, best_dist, front)
        return
    face_n, row_n, col = _candidates(face, row, col0, span_w, n)
    dist, depth = torch.empty(n, dtype=dtype, device=device), torch.empty(n, dtype=dtype, device=device)
    for i in range(0, n, _BLOCK):  # blocks whose temporaries stay in the cache
        part = slice(i, i + _BLOCK)
        f, r, c = face_n[part], row_n[part], col[part]
        pix = (r - origin[0]) * width + (c - origin[1]) if eager or hidden is not None else None
        live = None
        if hidden is not None:
            live = flat_nonzero(~(zmin.index_select(0, f) > hidden.index_select(0, pix)))
            if live.numel() == f.numel():
                live = None
            else:
                dist[part] = -math.inf  # not reached
                if live.numel() == 0:
                    continue
                f, r, c, pix = (t.index_select(0, live) for t in (f, r, c, pix))
        if eager:
            d, z = terms.evaluate(tri, f, c, r, pix, sigma, reach, depth=True)
        else:  # soft_geometry's distance and depth, bit for bit
            d, z = _miss_terms(tri, f, c, r, sigma, reach, dist_only=True, depth=True)
        if live is None:
            dist[part], depth[part] = d, z
        else:
            put_at(dist[part], live, d)
            put_at(depth[part], live, z)
    hit = flat_nonzero(dist >= reach)  # [N] reached, nearest faces first
    pix = ((row_n - origin[0]) * width + (col - origin[1])).index_select(0, hit)  # tile pixels
    z, d = depth.index_select(0, hit), dist.index_select(0, hit)
    del dist, depth, row_n, col
    _merge_reached(pix, z, (face_n, hit), d, K, best_depth, best_face, log_miss, sigma, fresh, terms, best_dist, front)


def _run_lanes(n: int, spans: int) -> int:
    """Lanes per run for a chunk of ``spans`` spans holding ``n`` candidates: 16 or 8 when the
    spans are wide enough that runs waste few lanes on their ends, else 0 (one candidate each)."""
    if n >= 24 * spans:
        return 16
    return 8 if n >= 12 * spans else 0


def _run_chunk(tri, face, row, col0, span_w, lanes: int, width: int, reach: float, K: int, best_depth, best_face,
               origin, log_miss, sigma: float, fresh: bool, terms, best_dist, front) -> None:
    """:func:`_chunk` without ``hidden`` and eager terms, its candidates evaluated in runs
    (:func:`_run_geometry`); the reached fragments and their order are the same."""
    run_f, run_r, run_c, left = _span_runs(face, row, col0, span_w, lanes)
    run_pix = (run_r - origin[0]) * width + (run_c - origin[1])  # the tile pixel of each run's first lane
    R = run_f.numel()
    dist = torch.empty(R, lanes, dtype=tri.dtype, device=tri.device)
    depth = torch.empty_like(dist)
    step = max(1, _BLOCK // lanes)
    for i in range(0, R, step):  # blocks whose temporaries stay in the cache
        part = slice(i, i + step)
        _run_geometry(tri, run_f[part], run_r[part], run_c[part], left[part], lanes, reach, dist[part], depth[part])
    shift = lanes.bit_length() - 1  # int64 `hit >> shift` measured 2.4x slower than bitwise_right_shift
    if terms is None and front is not None:  # the silhouette sum and the window filter over every lane
        _merge_lanes(dist.view(-1), depth.view(-1), run_f, run_pix, shift, K, best_depth, best_face, log_miss, sigma,
                     fresh, best_dist, front)
        return
    hit = flat_nonzero(dist.view(-1) >= reach)  # [N] reached, nearest faces first
    run = torch.bitwise_right_shift(hit, shift)
    pix = run_pix.index_select(0, run) + (hit & (lanes - 1))
    z, d = depth.view(-1).index_select(0, hit), dist.view(-1).index_select(0, hit)
    del dist, depth, run_r, run_c, left
    _merge_reached(pix, z, (run_f, run), d, K, best_depth, best_face, log_miss, sigma, fresh, terms, best_dist, front)


def _merge_lanes(dist, depth, run_f, run_pix, shift: int, K: int, best_depth, best_face, log_miss, sigma: float,
                 fresh: bool, best_dist, front) -> None:
    """:func:`_merge_reached` (without gradient terms, with a window filter) for every lane of a
    chunk's runs, before compacting them: ``dist`` and ``depth`` (float ``[R * 2^shift]``, from
    :func:`_run_geometry`) of the lanes, ``run_f`` and ``run_pix`` (int64 ``[R]``) the face and
    first tile pixel of each run. Almost every lane a run's span holds is reached, so the reached
    lanes are not gathered first: the lanes that are not (``dist = -inf``, ``depth = +inf``) add
    exactly 0 to the silhouette sum (``logsigmoid(+inf)``) and cannot lower the window's depths,
    and the window filter's one compaction also drops them. The sums take the same terms in the
    same order, and the kept fragments are the same, in the same order."""
    n_pix = best_depth.shape[0]
    lane = torch.arange(1 << shift, device=dist.device)
    pix = (run_pix[:, None] + lane).view(-1).clamp_(max=n_pix - 1)  # past a span's end: any pixel will do
    if log_miss is not None:
        add_at(log_miss, pix, nnf.logsigmoid(dist / -sigma))
    keep = _front_filter(front, pix, depth, dist, (run_pix, 1 << shift))
    if keep is None:  # every lane reached and kept
        keep = torch.arange(dist.numel(), device=dist.device)
    if keep.numel() == 0:
        return
    fid = run_f.index_select(0, torch.bitwise_right_shift(keep, shift))
    pix, z = pix.index_select(0, keep), depth.index_select(0, keep)
    d = None if best_dist is None else dist.index_select(0, keep)
    _keep_nearest(pix, z, fid, d, K, best_depth, best_face, best_dist, fresh)


def _merge_reached(pix, z, faces: tuple, d, K: int, best_depth, best_face, log_miss, sigma: float, fresh: bool,
                   terms, best_dist, front) -> None:
    """The end of :func:`_chunk` for its reached fragments (tile pixel, depth and distance, ``[N]``
    each, nearest faces first, and their faces ``table[index]`` given as ``faces = (table,
    index)``): the silhouette sum, the window filter and the K nearest. The faces are gathered
    for the fragments the window filter keeps (a quarter of a deep first chunk's), or for all
    when the gradient terms take them."""
    table, index = faces
    fid = None
    if terms is not None:
        fid = table.index_select(0, index)
        terms.close(fid, pix)
    if log_miss is not None:
        add_at(log_miss, pix, nnf.logsigmoid(d / -sigma))
    keep = _front_filter(front, pix, z, d) if front is not None and pix.numel() else None
    if keep is not None:
        pix, z, d = (t.index_select(0, keep) for t in (pix, z, d))
        fid = table.index_select(0, index.index_select(0, keep)) if fid is None else fid.index_select(0, keep)
    elif fid is None:
        fid = table.index_select(0, index)
    if pix.numel() == 0:
        return
    _keep_nearest(pix, z, fid, d if best_dist is not None else None, K, best_depth, best_face, best_dist, fresh)


def _keep_nearest(pix, z, fid, d, K: int, best_depth, best_face, best_dist, fresh: bool) -> None:
    """Step 3 for a chunk's reached fragments (tile pixel ``pix``, depth ``z``, face ``fid`` and
    optionally distance ``d``, ``[N]`` each, nearest faces first): each pixel's K nearest by (depth,
    face), merged into the ``[pixels, K]`` buffers ``best_*`` (``best_dist`` with ``d`` only).
    After the first chunk, the fragments that cannot enter (:func:`_not_beaten`) are dropped
    before the sort."""
    device = pix.device
    if not fresh:
        live = _not_beaten(pix, z, fid, K, best_depth, best_face)
        if live.numel() == 0:
            return
        if live.numel() < pix.numel():
            pix, z, fid = (t.index_select(0, live) for t in (pix, z, fid))
            d = None if d is None else d.index_select(0, live)
    o = _rank_order(pix, z, fid, best_depth.shape[0])
    pix = pix.index_select(0, o)
    n = pix.numel()
    first = torch.ones(n, dtype=torch.bool, device=device)  # each pixel's first fragment in the order
    first[1:] = pix[1:] != pix[:-1]
    at = torch.arange(n, device=device)
    rank = at - torch.where(first, at, 0).cummax(0).values  # place within the pixel's run
    kept = flat_nonzero(rank < K)  # the first K of each pixel
    order = o.index_select(0, kept)
    values = [t.index_select(0, order) for t in (z, fid) + (() if d is None else (d,))]
    rank = rank.index_select(0, kept)
    buffers = [best_depth, best_face] + ([] if d is None else [best_dist])
    if fresh:  # the buffers are still empty: no merge
        at = pix.index_select(0, kept) * K + rank
        for buf, v in zip(buffers, values):
            put_at(buf.view(-1), at, v)
        return
    touched = pix.index_select(0, flat_nonzero(first))  # [M]
    slot = (torch.cumsum(first, 0) - 1).index_select(0, kept) * K + rank  # the pixel's row of [M, K]
    fills = (math.inf, -1, 0.0)
    cand = [put_at(torch.full((touched.numel() * K,), fill, dtype=v.dtype, device=device), slot, v).view(-1, K)
            for v, fill in zip(values, fills)]
    # merge with what earlier chunks kept for the same pixels, again by (depth, face)
    both = [torch.cat((buf.index_select(0, touched), c), dim=1) for buf, c in zip(buffers, cand)]  # [M, 2K]
    o = _merge_order(both[0], both[1])[:, :K]
    for buf, merged in zip(buffers, both):
        buf.index_copy_(0, touched, merged.gather(1, o))


def _rank_order(pix, z, fid, n_pix: int) -> torch.Tensor:
    """int64 ``[N]``: the order of fragments (tile pixel ``pix`` of ``n_pix``, depth ``z``, face
    ``fid``) by ``(pixel, depth, face)``. The sorts are stable and fragments arrive nearest faces
    first, so the entries whose sort keys tie come out in arrival order: those runs alone are put
    in order afterwards (:func:`_ties_in_order`)."""
    if z.dtype == torch.float32:
        key = _coarse_key(pix, z, n_pix)
        if key is not None:
            # one int32 sort on (pixel, depth quantized over the chunk's range): about half the
            # cost of the int64 sort; equal quantized depths at a pixel are rare, and ordered after
            k, o = torch.sort(key, stable=True)
            return _ties_in_order(o, k[1:] == k[:-1], fid, z)
        # one sort on an int64 key: pixel in the high 32 bits, the float32 depth's bits mapped to
        # an order-preserving unsigned int in the low 32 (+0.0 replaces -0.0 first)
        k, o = torch.sort((pix << 32) | _ordered_bits(z), stable=True)
        return _ties_in_order(o, k[1:] == k[:-1], fid)
    o = torch.sort(z, stable=True).indices
    p, by_pix = torch.sort(pix.index_select(0, o), stable=True)
    o = o.index_select(0, by_pix)
    d = z.index_select(0, o)
    return _ties_in_order(o, (p[1:] == p[:-1]) & (d[1:] == d[:-1]), fid)


#: Fewest bits of quantized depth for which :func:`_rank_order` sorts an int32 key.
_MIN_DEPTH_BITS = 12


def _coarse_key(pix: torch.Tensor, z: torch.Tensor, n_pix: int) -> torch.Tensor | None:
    """int32 ``[N]`` sort key ``pixel << b | q`` with ``q`` the float32 depth quantized to the
    ``b = 31 - pixel bits`` bits left (at most 24, which float32 counts exactly), over the
    fragments' own depth range (``q`` is monotone in ``z``: a subtraction, a product, a clamp and a
    truncation, each nondecreasing); None when fewer than ``_MIN_DEPTH_BITS`` are left or the
    depths are not finite."""
    bits = min(24, 31 - max(1, (n_pix - 1).bit_length()))
    if bits < _MIN_DEPTH_BITS or z.numel() == 0:
        return None
    lo, hi = torch.aminmax(z)
    lo, hi = float(lo), float(hi)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    top = (1 << bits) - 1
    scale = top / (hi - lo) if hi > lo else 0.0
    q = (z - lo).mul_(scale).clamp_(0, top).to(torch.int32)
    return (pix.to(torch.int32) << bits) | q


def _ties_in_order(o: torch.Tensor, same: torch.Tensor, fid: torch.Tensor, z: torch.Tensor | None = None) -> torch.Tensor:
    """``o`` (an order of fragments) with each run of equal neighbours (``same[i]``: entries
    ``i`` and ``i + 1`` of ``o`` tie) reordered by face ``fid``, or with ``z`` by ``(z, fid)``,
    the rest untouched."""
    pairs = flat_nonzero(same)  # few: the work below is on the tied entries only
    if pairs.numel() == 0:
        return o
    at = torch.unique(torch.cat((pairs, pairs + 1)))  # the tied entries' positions, ascending
    starts = (at == 0) | ~same.index_select(0, (at - 1).clamp(min=0))  # the first entry of each run
    run = torch.cumsum(starts, 0)  # run number, nondecreasing
    mine = o.index_select(0, at)
    if z is None:
        order = torch.sort((run << 32) | fid.index_select(0, mine)).indices  # runs stay in place, faces ascend
    else:  # by face, then stably by (run, depth): runs stay in place, (depth, face) ascends
        order = torch.sort(fid.index_select(0, mine), stable=True).indices
        key = (run.index_select(0, order) << 32) | _ordered_bits(z.index_select(0, mine.index_select(0, order)))
        order = order.index_select(0, torch.sort(key, stable=True).indices)
    return put_at(o.clone(), at, mine.index_select(0, order))


def _not_beaten(pix, z, fid, K: int, best_depth, best_face) -> torch.Tensor:
    """int64 ``[M]``: the fragments (tile pixel ``pix``, depth ``z``, face ``fid``, ``[N]`` each,
    of a chunk after the first) that may still enter their pixel's K nearest: before its K-th
    kept slot by ``(depth, face)``, or at a pixel with an empty K-th slot. The others lose to that
    slot (a face has one candidate per pixel, so a fragment never meets its own face there)."""
    kth = best_depth[:, K - 1].index_select(0, pix)
    kth_face = best_face[:, K - 1].index_select(0, pix)
    return flat_nonzero((z < kth) | ((z == kth) & (fid < kth_face)) | (kth_face < 0))


def _hidden_depth(log_miss: torch.Tensor, best_depth: torch.Tensor, best_face: torch.Tensor,
                  bound: torch.Tensor | None = None) -> torch.Tensor | None:
    """float ``[pixels]``: per tile pixel, the depth beyond which a face changes nothing there,
    ``+inf`` where any face still can; None when too few pixels have one to pay for the test.

    At pixels whose silhouette sum is below ``-_saturated`` (alpha exactly 1, and it stays 1:
    every term is negative) that is the K-th kept slot's depth when the K slots are full (a face
    whose nearest depth lies beyond it is behind all K kept faces: it cannot enter them, ties
    included), or ``bound`` (float ``[pixels]``, :func:`_front_bound`) where nearer: the
    fragments beyond it are dropped anyway. Its ``log(1 - D)`` cannot change alpha there."""
    K = best_face.shape[1]
    depth = torch.where(best_face[:, K - 1] >= 0, best_depth[:, K - 1], math.inf)
    if bound is not None:
        depth = torch.minimum(depth, bound)
    done = (log_miss < -_saturated(log_miss.dtype)) & (depth < math.inf)
    if int(done.sum()) * _HIDDEN_SHARE < done.numel():
        return None
    return torch.where(done, depth, math.inf)


def blend_window(zrange: torch.Tensor, gamma: float, cutoff: float, vertex_depth: torch.Tensor) -> list[float]:
    """Per batch element, a depth ``w`` such that a fragment deeper than its pixel's nearest
    reached fragment by more than ``w`` has blend weight exactly 0 in the soft image (either
    composite), however the selection ends.

    Both composites are a softmax over logits ``logsigmoid(dist / sigma) + zn / gamma`` (plus a
    shift common to every slot, and the softras background) with ``zn = (zfar - depth) / (zfar -
    znear)``, and a weight is 0 where its logit lies more than ``-exp_floor`` below the largest
    one. The nearest fragment's logit is at least ``zn_1 / gamma + log(cutoff)`` (reached means
    ``D >= cutoff``) and any other's at most ``zn_k / gamma``; so a depth gap above
    ``gamma * (zfar - znear) * (-exp_floor - log(cutoff))`` gives 0. The window adds a margin of
    4 in the logits and one for float rounding of depths as large as those of ``zrange`` and
    ``vertex_depth`` (float ``[B, V]``), so that the computed logits obey it too.
    ``zrange``: float ``[B, 2]`` (:func:`py_gpu.shading.blend.depth_range`)."""
    dtype = zrange.dtype
    eps = torch.finfo(dtype).eps
    span = (zrange[:, 1] - zrange[:, 0]).abs()
    scale = torch.maximum(zrange.abs().amax(dim=1), vertex_depth.detach().abs().amax(dim=1)) \
        if vertex_depth.numel() else zrange.abs().amax(dim=1)
    logits = -exp_floor(dtype) - math.log(cutoff) + 4.0
    width = gamma * span * logits + 32.0 * eps * scale
    return [w if math.isfinite(w) else math.inf for w in width.tolist()]  # one host read


def _front_bound(window: float, split: torch.Tensor) -> torch.Tensor:
    """float ``[pixels]``: the depth past which :func:`_front_filter` drops a pixel's fragments,
    ``max(nearest + window, covering)``, from ``split`` (float ``[2, pixels]``): per pixel the
    nearest depth of the fragments that do not cover it and of those that do (``covering``), so
    that ``nearest`` is the smaller of the two."""
    covering = split[1]
    return torch.maximum(torch.minimum(split[0], covering) + window, covering)


def _front_filter(front: tuple, pix: torch.Tensor, z: torch.Tensor, d: torch.Tensor,
                  runs: tuple | None = None) -> torch.Tensor | None:
    """int64 indices of the fragments (tile pixel ``pix``, depth ``z``, distance ``d``) a blended
    image can need, or None for all; updates ``front = (window, split)``, per tile pixel the depth
    of the nearest fragment that does not cover it and of the nearest one that does (``d >= 0``)
    seen so far (float ``[2, pixels]``, both minima taken by one scatter; they only decrease,
    chunk after chunk). A candidate with ``z = +inf`` (a run's lane that does not reach its
    pixel) takes no part and is never kept. With ``runs = (first, lanes)`` (int64 ``[R]`` and an
    int), the candidates are runs' lanes: ``pix`` is ``first[r] + l`` for lane ``l`` of run ``r``
    (or less, past the tile's end, where it does not reach), so the bounds are gathered a run's
    ``lanes`` pixels at a time.

    A fragment deeper than ``nearest + window`` (:func:`blend_window`) and than ``covering`` is
    dropped: it has no blend weight, and it is behind a covering fragment, so it is neither the
    pixel's nearest covering face (the ``Frame``'s face and depth) nor in front of it (whether
    that one is among the K nearest). Those hold for the final values as well, which are no
    larger. The K slots then hold the K nearest of the rest: every slot the image, its face and
    depth and their gradients depend on, in the same order."""
    window, split = front
    # row 1: covering; torch.add(pix, d >= 0, alpha=...) measured 5x slower (its bool operand)
    row = (d >= 0).to(torch.int64).mul_(split.shape[1]).add_(pix)
    split.view(-1).scatter_reduce_(0, row, z, reduce="amin")
    bound = _front_bound(window, split).clamp_(max=torch.finfo(z.dtype).max)  # +inf: kept all but +inf
    if runs is None:
        bound = bound.index_select(0, pix)
    else:  # each run's pixels are consecutive: gather rows of `lanes` of them (a strided view)
        first, lanes = runs
        bound = torch.cat((bound, bound.new_full((lanes - 1,), -math.inf))).unfold(0, lanes, 1) \
            .index_select(0, first).view(-1)
    keep = flat_nonzero(z <= bound)
    return None if keep.numel() == z.numel() else keep


def _floor_log2(n: torch.Tensor, levels: int) -> torch.Tensor:
    """int64 ``floor(log2(n))`` of positive ``n``, capped at ``levels - 1``: the level of a sparse
    table whose window is the widest that fits ``n``."""
    out = torch.zeros_like(n)
    for k in range(1, levels):
        out += n >= (1 << k)
    return out


def _box_limit(hidden: torch.Tensor, zmin: torch.Tensor, rows: int, width: int, origin: tuple[int, int]):
    """A ``limit`` for :meth:`FaceSelector.spans`: the faces (``[n]`` ids, with boxes ``top, n_rows,
    left, n_cols`` in the tile whose top-left pixel is ``origin``) whose nearest depth ``zmin[face]``
    is not beyond the largest ``hidden`` depth (float ``[rows * width]``, :func:`_hidden_depth`) of
    the ``_LIMIT_BLOCK``-pixel square blocks their box touches; None when that is every face. The
    maxima over the blocks come from a two-dimensional sparse table (maxima over 2^i x 2^j blocks;
    four windows cover a box)."""
    bs = _LIMIT_BLOCK
    hb, wb = -(-rows // bs), -(-width // bs)
    grid = hidden.new_full((hb * bs, wb * bs), -math.inf)
    grid[:rows, :width] = hidden.view(rows, width)
    li, lj = hb.bit_length(), wb.bit_length()  # levels 0 .. floor(log2(n))
    table = hidden.new_full((li, lj, hb, wb), -math.inf)
    table[0, 0] = grid.view(hb, bs, wb, bs).amax(dim=(1, 3))
    for i in range(li):
        if i:
            step = 1 << (i - 1)
            table[i, 0, :hb - step] = torch.maximum(table[i - 1, 0, :hb - step], table[i - 1, 0, step:])
        for j in range(1, lj):
            step = 1 << (j - 1)
            table[i, j, :, :wb - step] = torch.maximum(table[i, j - 1, :, :wb - step], table[i, j - 1, :, step:])
    flat = table.view(-1)

    def limit(face, top, n_rows, left, n_cols):
        r0, c0 = (top - origin[0]) // bs, (left - origin[1]) // bs
        r1, c1 = (top - origin[0] + n_rows - 1) // bs, (left - origin[1] + n_cols - 1) // bs
        i, j = _floor_log2(r1 - r0 + 1, li), _floor_log2(c1 - c0 + 1, lj)
        one = torch.ones_like(i)
        r2, c2 = r1 - one.bitwise_left_shift(i) + 1, c1 - one.bitwise_left_shift(j) + 1  # the far windows' starts
        base = (i * lj + j) * (hb * wb)
        corners = [flat.index_select(0, base + r * wb + c) for r in (r0, r2) for c in (c0, c2)]
        most = torch.maximum(torch.maximum(corners[0], corners[1]), torch.maximum(corners[2], corners[3]))
        keep = flat_nonzero(~(zmin.index_select(0, face) > most))
        return None if keep.numel() == face.numel() else keep

    return limit


def _visible_spans(hidden: torch.Tensor, zmin: torch.Tensor, face, row, col0, span_w, origin: tuple[int, int],
                   width: int) -> torch.Tensor | None:
    """int64 indices of the spans (face ``face``, tile row ``row``, columns ``col0`` to ``col0 +
    span_w - 1``, ``[S]`` each) that may still show: those with a pixel whose ``hidden`` depth
    (float ``[pixels]``, :func:`_hidden_depth`) is not below the face's nearest depth
    ``zmin[face]``; None when every span may. The maximum of ``hidden`` over each span comes
    from a sparse table (maxima over windows of 1, 2, 4, ... pixels; two windows cover a span)."""
    n = hidden.numel()
    levels, step, longest = [hidden], 1, int(span_w.max())
    while 2 * step <= longest:
        prev = levels[-1]
        levels.append(torch.maximum(prev[:-step], prev[step:]))
        step *= 2
    table = hidden.new_full((len(levels), n), -math.inf)
    for j, level in enumerate(levels):
        table[j, :level.numel()] = level
    level = _floor_log2(span_w, len(levels))  # the widest window inside the span
    first = (row - origin[0]) * width + (col0 - origin[1]) + level * n
    last = first + span_w - torch.ones_like(level).bitwise_left_shift(level)  # the last window's start
    flat = table.view(-1)
    most = torch.maximum(flat.index_select(0, first), flat.index_select(0, last))
    keep = flat_nonzero(~(zmin.index_select(0, face) > most))
    return None if keep.numel() == face.numel() else keep


def _saturated(dtype: torch.dtype) -> float:
    """The silhouette sum ``sum log(1 - D)`` below which alpha ``1 - exp(sum)`` is exactly 1 in
    ``dtype``, with a margin: ``exp`` of it is far below the rounding unit (1.5 x ``-log(eps)``:
    about 24 in float32, 54 in float64)."""
    return -1.5 * math.log(torch.finfo(dtype).eps)


def _ordered_bits(z: torch.Tensor) -> torch.Tensor:
    """int64 in ``[0, 2^32)``: float32 ``z`` mapped to integers in the same order (+0.0 replaces
    -0.0 first)."""
    bits = (z + 0.0).view(torch.int32).to(torch.int64)
    return torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits) + 2**31


def _merge_order(z: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """int64 ``[M, 2K]``: the order of each row's slots by ``(depth, face)``, empty slots
    (``f = -1``) last."""
    if z.dtype == torch.float32:  # one sort on an int64 key: depth bits (ordered) above the face
        key = (_ordered_bits(z) << 31) | f.clamp(min=0)
        return torch.sort(torch.where(f >= 0, key, torch.iinfo(torch.int64).max), dim=1).indices
    big = torch.iinfo(torch.int64).max
    o = torch.sort(torch.where(f >= 0, f, big), dim=1, stable=True).indices
    return o.gather(1, torch.sort(z.gather(1, o), dim=1, stable=True).indices)


# ---- step 4: differentiable fragments ---------------------------------------------------------------
def gather_tile(screen: torch.Tensor, w: torch.Tensor | None, faces: torch.Tensor, face_index: torch.Tensor,
                origin: tuple[int, int], centers: tuple[torch.Tensor, torch.Tensor] | None = None,
                known: tuple[torch.Tensor, torch.Tensor] | None = None) -> Fragments:
    """Step 4 for one tile: differentiable distance, barycentrics and depth of its chosen faces.

    Args:
        screen: float ``[V, 3]`` screen-space vertices of the tile's batch element (with autograd).
        w: float ``[V]`` clip-space ``w`` of those vertices, or None for screen-space input.
        faces: int64 ``[F, 3]``.
        face_index: int64 ``[rows, cols, K]``, the tile's faces (-1 where empty).
        origin: ``(row, col)`` of the tile's top-left pixel.
        centers: for a compacted tile, int64 ``(row, col)`` (``[rows]`` each, absolute) of the
            pixels of a ``[rows, 1, K]`` ``face_index``; then ``origin`` is unused.
        known: the slots' distance and depth (float, ``face_index``'s shape) as the selection
            computed them (:meth:`FaceSelector.slot_values`); without autograd only the
            barycentrics are then evaluated.

    Returns:
        ``Fragments`` of shape ``[1, rows, cols, K]`` (``screen_bary`` when ``w`` is given). Only the
        non-empty slots are evaluated. Vertices are gathered with ``index_select``, whose
        backward sums in a fixed order on the CPU (see the module docstring).
    """
    frags, bary, screen_bary = gather_tile_planes(screen, w, faces, face_index, origin, centers, known)
    return Fragments(frags.face_index, torch.stack(bary, dim=-1), frags.depth, frags.dist,
                     None if screen_bary is None else torch.stack(screen_bary, dim=-1))


def slot_centers(slots: torch.Tensor, K: int, width: int, origin: tuple[int, int],
                 centers: tuple[torch.Tensor, torch.Tensor] | None, dtype: torch.dtype):
    """float ``[N]`` ``(px, py)``: the pixel centers of the flat slot ids ``slots`` of a tile block
    ``[rows, width, K]`` whose top-left pixel is ``origin``, or of a compacted ``[rows, 1, K]`` block
    of the pixels ``centers`` (int64 ``(row, col)``, ``[rows]`` each; see :func:`gather_tile`)."""
    pixel = split_index(slots, K)[0]
    if centers is None:
        row, col = split_index(pixel, width)
        return (col + origin[1]).to(dtype) + 0.5, (row + origin[0]).to(dtype) + 0.5
    return centers[1].index_select(0, pixel).to(dtype) + 0.5, centers[0].index_select(0, pixel).to(dtype) + 0.5


def gather_tile_planes(screen: torch.Tensor, w: torch.Tensor | None, faces: torch.Tensor, face_index: torch.Tensor,
                       origin: tuple[int, int], centers: tuple[torch.Tensor, torch.Tensor] | None = None,
                       known: tuple[torch.Tensor, torch.Tensor] | None = None):
    """:func:`gather_tile` with the barycentrics as planes: ``(frags, bary, screen_bary)``, the
    ``Fragments`` without ``bary`` and ``screen_bary``, and those as three ``[1, rows, cols, K]``
    planes each (``screen_bary`` None for screen-space input). The soft tile paths weigh colors
    plane by plane; interleaving them into ``[..., 3]`` and reading them back strided cost a
    tenth of a 1k-triangle rgb forward + backward."""
    rows, W, K = face_index.shape
    dtype, device = screen.dtype, screen.device
    flat = face_index.reshape(-1)  # [rows*W*K]
    si = flat_nonzero(flat >= 0)  # [N] slots
    fi = flat.index_select(0, si)
    px, py = slot_centers(si, K, W, origin, centers, dtype)
    corner = torch.stack([faces[:, j].index_select(0, fi) for j in range(3)])  # [3, N] (faces.t() gathers ~3-6x slower)
    if torch.is_grad_enabled() and screen.requires_grad:  # closed-form backward
        dist_n, lam, depth_n = _Geometry.apply(screen, corner, px, py)
        lam = lam.unbind(0)
    else:
        coords = _row_coords(_corner_rows(screen, corner))
        if known is None:
            dist_n, lam, depth_n = _geometry(coords, px, py)
            lam = lam.unbind(-1)
        else:  # the selection's distance and depth; only the barycentrics are evaluated
            dist_n, depth_n = (v.reshape(-1).index_select(0, si) for v in known)
            lam = _clamped(*_affine(coords, px, py)[1:])
    bary = lam if w is None else _perspective(lam, [w.index_select(0, corner[j]) for j in range(3)])
    n_slots = flat.numel()

    def scatter(values: torch.Tensor, fill: float) -> torch.Tensor:
        base = torch.full((n_slots,), fill, dtype=dtype, device=device)
        return base.scatter(0, si, values).view(1, rows, W, K)

    frags = Fragments(face_index[None], None, scatter(depth_n, math.inf), scatter(dist_n, 0.0))
    planes = [scatter(b, 0.0) for b in bary]
    return frags, planes, [scatter(b, 0.0) for b in lam] if w is not None else None


def plan_with_room(plan_for: Callable[[int], SoftPlan], budget: int, grad: bool) -> tuple[SoftPlan, int]:
    """``(plan, room)``: with ``grad``, a quarter of ``budget`` (``1 / TERMS_SHARE``) is ``room`` for
    the silhouette gradient terms the selection keeps (:class:`_Terms`) and ``plan_for`` cuts the
    tiles for the rest, if that can be done; else (and without ``grad``) the plan has all of it.

    Raises:
        MemoryBudgetError: from ``plan_for(budget)``, naming the budget given."""
    plan = plan_for(budget)
    if not grad:
        return plan, 0
    try:
        return plan_for(budget - budget // TERMS_SHARE), budget // TERMS_SHARE
    except MemoryBudgetError:
        return plan, 0


def _term_bytes(dtype: torch.dtype) -> int:
    """Bytes of one candidate's kept gradient terms (int64 pixel and edge, four floats)."""
    return 16 + 4 * _item(dtype)


def silhouette_soft(batch: TriangleBatch, size, settings: RasterSettings) -> torch.Tensor:
    """float ``[B, H, W, 1]``: the soft silhouette ``1 - prod (1 - D)`` over every face whose
    footprint reaches each pixel, of a drawable ``batch`` (screen space, or clip space with every
    ``w > 0``), differentiable with respect to the vertex positions.

    The same values as ``alpha`` of a soft :func:`py_gpu.render` (bit for bit), without selecting
    the K nearest faces, interpolating or blending: per tile, steps 1-2 and the sum of step 3
    (:meth:`FaceSelector.miss`); the backward pass is :class:`_LogMiss`'s. When the vertices need
    gradients, the candidates' gradient terms are kept for it while they fit ``1 / TERMS_SHARE`` of
    the budget (the tiles work in the rest); the later candidates' are evaluated again.

    Raises:
        MemoryBudgetError: the budget cannot hold the work of one pixel and the face table.
    """
    height, width = size
    B, dtype = batch.batch_size, batch.dtype
    item = _item(dtype)
    screen = batch.screen_vertices((height, width))  # [B, V, 3], differentiable

    def plan_for(budget: int) -> SoftPlan:
        return plan_tiles("silhouette", batch=B, size=(height, width), faces=batch.num_faces, faces_per_pixel=1,
                          dtype=dtype, budget=budget, slot_bytes=4 * item, returned=B * height * width * item)

    plan, room = plan_with_room(plan_for, settings.memory_budget, torch.is_grad_enabled() and screen.requires_grad)
    select = FaceSelector(screen.detach(), batch.faces, (height, width), settings, plan)
    for tile in plan.tiles:  # every tile's sum first: no autograd state is made between the temporaries
        room -= select.miss(tile, room)
    select.release()
    alpha = torch.empty(B, height, width, 1, dtype=dtype, device=batch.device)
    for tile in plan.tiles:
        b, r0, r1, c0, c1 = tile
        alpha[b, r0:r1, c0:c1, 0] = 1.0 - exp_normal(select.log_miss(tile, screen[b]))
    return alpha


# ---- the tile loop -----------------------------------------------------------------------------------
Tile = tuple[int, int, int, int, int]
IndexFn = Callable[[Tile], torch.Tensor]
TileFn = Callable[..., Sequence[torch.Tensor]]


class TileLoop:
    """Runs a tile function over the tiles of a :class:`SoftPlan` and fills whole-frame outputs,
    with a backward pass that evaluates one tile at a time again.

    Args:
        plan: the tiles.
        index_fn: ``index_fn(tile)`` -> int64 ``[r1 - r0, c1 - c0, K]`` face indices of a tile
            ``(b, r0, r1, c0, c1)`` (a :class:`FaceSelector`, or a slice of given fragments).
        tile_fn: ``tile_fn(tile, face_index, *tile_inputs)`` -> one tensor per output, each
            ``[1, r1 - r0, c1 - c0, ...]``: the tile's pixels of the outputs. It must depend on the
            inputs only through its arguments, and give the same values whatever the tiling.
        outputs: the whole-frame results, ``[B, H, W, ...]`` each, written tile by tile (floating
            ones are differentiable, others are not).
        index_out: optional int64 ``[B, H, W, K]`` that receives every tile's face indices (it is
            then returned last and read again by the backward pass).
        per_pixel: for each input, whether it is a ``[B, H, W, ...]`` per-pixel tensor (a tile
            gets its pixels) rather than a ``[B | 1, ...]`` per-element table (a tile gets row ``b``).
        partial: ``tile_fn`` takes a keyword ``wanted`` (one bool per output, or None for all):
            in the backward pass it is told which outputs received a gradient, and may return
            None for the others (a loss on the silhouette alone then skips the colors).

    Calling the loop with the inputs (tensors or None) returns the outputs (and ``index_out``).
    Gradients reach the inputs through a backward pass that, per tile, evaluates ``tile_fn``
    again with autograd on and backpropagates the tile's pixels of the output gradients; the
    tiles' input gradients are summed in tile order. So autograd keeps only the inputs and the
    face indices: ``index_out``, or with ``plan.keep_index`` a compact copy of each tile's, or
    nothing, and then ``index_fn`` runs again. When what autograd would save for all tiles fits
    the budget, the tiles simply run with autograd on instead: ``plan.direct`` (small calls), or,
    when the plan keeps the face indices, if the slots the tiles fill once every tile's faces are
    selected fit (:meth:`_fits_direct`; the plan counts every slot of every pixel, while faces
    often reach only part of the frame).
    """

    def __init__(self, plan: SoftPlan, index_fn: IndexFn, tile_fn: TileFn, outputs: Sequence[torch.Tensor], *,
                 index_out: torch.Tensor | None = None, per_pixel: Sequence[bool] = (), partial: bool = False):
        self.plan, self.index_fn, self.tile_fn, self.partial = plan, index_fn, tile_fn, partial
        self.outputs = list(outputs)
        self.index_out = index_out
        self.per_pixel = tuple(per_pixel)
        self.kept: list[torch.Tensor] = []
        self.preselected = False  # ``kept`` holds every tile's faces, selected before any tile ran

    def __call__(self, *inputs: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        if torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in inputs):
            if self.plan.direct:
                return self.forward_direct(inputs)
            if self.plan.keep_index and self.index_out is None:
                _hook(self.index_fn, "hold_all")  # a FaceSelector keeps every tile's slot values
                self.kept, self.preselected = [_compact(self.index_fn(tile)) for tile in self.plan.tiles], True
                if self._fits_direct(self.kept):
                    return self.forward_direct(inputs, self.kept)
            return _TileFunction.apply(self, *inputs)
        with torch.no_grad():
            self.forward(inputs, keep=False)
        return self.results()

    def _fits_direct(self, chosen: Sequence[torch.Tensor]) -> bool:
        """Whether what autograd saves for the tiles' selected faces ``chosen`` fits the budget as
        :func:`plan_tiles` requires of ``direct`` (half of what the fixed part leaves), counting
        only the slots the tiles use: a tile function works on the pixels some face reaches and
        on the K slots the deepest of them uses, and its per-fragment part
        (``plan.filled_bytes`` of ``plan.slot_bytes``) only on the filled ones (one host
        synchronization per tile)."""
        plan = self.plan
        dense = plan.slot_bytes - plan.filled_bytes
        need = 0
        for fi in chosen:
            if fi.numel() == 0:
                continue
            counts = (fi >= 0).sum(-1)  # [rows, cols] slots each pixel fills
            used, filled = torch.stack([(counts > 0).sum() * counts.max(), counts.sum()]).tolist()
            need += used * (8 + dense) + filled * plan.filled_bytes
        return need <= (plan.budget - plan.fixed) // 2

    def forward_direct(self, inputs, chosen: Sequence[torch.Tensor] | None = None) -> tuple[torch.Tensor, ...]:
        """Evaluate every tile with autograd on (what it saves fits the budget: ``plan.direct``, or
        :meth:`_fits_direct` for the tiles' faces ``chosen`` already selected)."""
        tiles = self.plan.tiles
        whole = len(tiles) == 1 and self.outputs[0].shape[0] == 1
        outputs = self.outputs
        for t, tile in enumerate(tiles):
            b, r0, r1, c0, c1 = tile
            fi = self.index_fn(tile) if chosen is None else chosen[t].long()
            if self.index_out is not None:
                self.index_out[b, r0:r1, c0:c1] = fi
            values = self.tile_fn(tile, fi, *self.tile_inputs(inputs, tile))
            if whole and all(v.shape == out.shape for v, out in zip(values, outputs)):
                outputs = list(values)  # one tile is the whole frame: no copy
                continue
            for out, value in zip(outputs, values):
                out[b, r0:r1, c0:c1] = value[0]
        _hook(self.index_fn, "release")
        return tuple(outputs) + ((self.index_out,) if self.index_out is not None else ())

    def results(self) -> tuple[torch.Tensor, ...]:
        return tuple(self.outputs) + ((self.index_out,) if self.index_out is not None else ())

    def tile_inputs(self, inputs, tile: Tile) -> list[torch.Tensor | None]:
        """The part of each input a tile sees: its pixels of per-pixel inputs, its element of tables."""
        b, r0, r1, c0, c1 = tile
        out = []
        for i, x in enumerate(inputs):
            if x is None:
                out.append(None)
            elif i < len(self.per_pixel) and self.per_pixel[i]:
                out.append(x[b, r0:r1, c0:c1])
            else:
                out.append(x[b] if x.shape[0] > 1 else x[0])
        return out

    def forward(self, inputs, keep: bool) -> None:
        """Evaluate every tile (no autograd) into the outputs; with ``keep``, remember what the
        backward pass needs."""
        chosen = self.kept if keep and self.preselected else None  # selected by __call__
        if keep and chosen is None:
            self.kept = []
        for t, tile in enumerate(self.plan.tiles):
            b, r0, r1, c0, c1 = tile
            fi = self.index_fn(tile) if chosen is None else chosen[t].long()  # [rows, cols, K]
            if self.index_out is not None:
                self.index_out[b, r0:r1, c0:c1] = fi
            elif keep and self.plan.keep_index and chosen is None:
                self.kept.append(_compact(fi))
            values = self.tile_fn(tile, fi, *self.tile_inputs(inputs, tile))
            for out, value in zip(self.outputs, values):
                out[b, r0:r1, c0:c1] = value[0]
        _hook(self.index_fn, "forward_done" if keep else "release")

    def backward(self, inputs, grads, needs) -> list[torch.Tensor | None]:
        """Input gradients from output gradients ``grads`` (None where an output got none)."""
        acc = [torch.zeros(x.shape, dtype=x.dtype, device=x.device) if need else None for x, need in zip(inputs, needs)]
        diff = [g if g is not None and out.is_floating_point() else None for out, g in zip(self.outputs, grads)]
        if not any(n for n in needs) or all(g is None for g in diff):
            return acc
        for t, tile in enumerate(self.plan.tiles):
            b, r0, r1, c0, c1 = tile
            tile_grads = [None if g is None else g[b, r0:r1, c0:c1][None] for g in diff]
            if self.index_out is not None:
                fi = self.index_out[b, r0:r1, c0:c1]
            elif self.plan.keep_index:
                fi = self.kept[t].long()
            else:
                fi = self.index_fn(tile)
            leaves = [None if x is None else x.detach().requires_grad_(need)
                      for x, need in zip(self.tile_inputs(inputs, tile), needs)]
            wanted = {"wanted": tuple(g is not None for g in tile_grads)} if self.partial else {}
            with torch.enable_grad():
                values = self.tile_fn(tile, fi, *leaves, **wanted)
            pairs = [(v, g) for v, g in zip(values, tile_grads) if g is not None and v is not None and v.requires_grad]
            wrt = [i for i, leaf in enumerate(leaves) if leaf is not None and leaf.requires_grad]
            if not pairs or not wrt:
                continue
            got = torch.autograd.grad([v for v, _ in pairs], [leaves[i] for i in wrt], [g for _, g in pairs],
                                      allow_unused=True)
            for i, g in zip(wrt, got):
                if g is None:
                    continue
                if i < len(self.per_pixel) and self.per_pixel[i]:
                    acc[i][b, r0:r1, c0:c1] += g
                else:
                    acc[i][b if inputs[i].shape[0] > 1 else 0] += g
        _hook(self.index_fn, "release")
        return acc


def _compact(face_index: torch.Tensor) -> torch.Tensor:
    """The face indices in the smallest int dtype that holds them (int32 below 2^31 faces)."""
    if face_index.numel() == 0 or int(face_index.max()) < 2**31 - 1:
        return face_index.to(torch.int32)
    return face_index.clone()


def _hook(index_fn, name: str) -> None:
    """Call ``index_fn``'s optional hook ``name`` (:class:`TileLoop` index functions may be plain
    functions; a :class:`FaceSelector` has ``hold_all``, ``forward_done`` and ``release``)."""
    hook = getattr(index_fn, name, None)
    if hook is not None:
        hook()


class _TileFunction(torch.autograd.Function):
    """Autograd node of a :class:`TileLoop`: saves the inputs (not copies), recomputes tiles in backward."""

    @staticmethod
    def forward(ctx, loop: TileLoop, *inputs):
        ctx.set_materialize_grads(False)
        loop.forward(inputs, keep=True)
        ctx.loop = loop
        ctx.save_for_backward(*inputs)
        results = loop.results()
        ctx.mark_non_differentiable(*[r for r in results if not r.is_floating_point()])
        return results

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *grads):
        loop: TileLoop = ctx.loop
        inputs = ctx.saved_tensors
        return (None, *loop.backward(inputs, grads[: len(loop.outputs)], ctx.needs_input_grad[1:]))
