"""NumPy rasterizer, vectorized across triangles, bit-identical to the reference.

Algorithm (per batch element):
  1. snap all faces to the 1/256 grid and orient them positively (int64); compute per-face
     float64 constants of the barycentric formula and a conservative nearest depth;
  2. sort faces front to back by that depth and cut them into chunks (by an estimate of their
     fragments, and by the memory budget);
  3. per chunk, expand each face into the pixel rows of its snapped bounding box and solve the
     three integer edge inequalities for the exact covered column span, tie rule included;
  4. split spans at 16-pixel depth blocks and drop segments whose block is already nearer than
     the face can be (early depth rejection; conservative, so results are unchanged);
  5. evaluate float64 barycentrics and depth per surviving fragment in the rule's operation
     order, and resolve per pixel: min depth, then min face index among equal depths. The
     resolve does not depend on the order in which faces arrive, so sorting is free.
"""

from __future__ import annotations

import numpy as np
import torch

from .._check import MemoryBudgetError
from ..contracts import Fragments, TriangleBatch
from ..settings import DEFAULT_MEMORY_BUDGET
from .rule import HALF_PIXEL, SUBPIXEL

# Bytes of temporaries per fragment and per (face, row) span, used to size chunks, and of the
# per-pixel buffers: results (face int64, 3 barycentrics and depth float64) and resolve state.
_BYTES_PER_PIXEL_OUT = 40
_BYTES_PER_PIXEL_RESOLVE = 81
_BYTES_PER_FRAGMENT = 160
_BYTES_PER_SPAN = 200


def _ceil_div(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    return -((-a) // b)


def setup_faces(X: np.ndarray, Y: np.ndarray):
    """Snapped int64 ``[F, 3]`` corners -> per-face edge constants of the span solve.

    Each face is oriented positively; for its edge ``a -> b`` (direction ``dx, dy``, tie offset
    ``t = 0`` when the edge owns its samples, else 1) and the sample ``(256 c + 128, py)`` the rule
    needs ``E >= t`` with ``E = dx (py - ay) - dy (256 c + 128 - ax)``, which is
    ``beta * c >= need`` with ``beta = -256 dy`` and ``need = n0 - dx * py``.

    Returns ``(valid, area, dx, n0, beta)``, each ``[F]`` or ``[F, 3]`` int64 (``valid``: bool).
    """
    area = (X[:, 1] - X[:, 0]) * (Y[:, 2] - Y[:, 0]) - (Y[:, 1] - Y[:, 0]) * (X[:, 2] - X[:, 0])
    flip = area < 0
    order = np.where(flip[:, None], np.array([0, 2, 1]), np.array([0, 1, 2]))
    ax = np.take_along_axis(X, order, axis=1)
    ay = np.take_along_axis(Y, order, axis=1)
    dx, dy = np.roll(ax, -1, axis=1) - ax, np.roll(ay, -1, axis=1) - ay
    owned = (dy < 0) | ((dy == 0) & (dx < 0))
    n0 = np.where(owned, 0, 1) + dx * ay + dy * (HALF_PIXEL - ax)
    return area != 0, area, dx, n0, -dy * SUBPIXEL


def row_spans(rows: np.ndarray, dx: np.ndarray, n0: np.ndarray, beta: np.ndarray, width: int):
    """Exact covered column span ``[c0, c1]`` per (face, row) span; edge constants gathered ``[S, 3]``."""
    py = rows * SUBPIXEL + HALF_PIXEL  # [S]
    need = n0 - dx * py[:, None]  # beta * c >= need
    big = np.int64(1 << 40)
    safe_beta = np.where(beta == 0, 1, beta)
    # beta > 0: c >= ceil(need / beta);  beta < 0: c <= floor(need / beta) (the division flips it);
    # beta == 0 (horizontal edge): every column or none, by the sign of need
    lo = np.where(beta > 0, _ceil_div(need, safe_beta), np.where((beta == 0) & (need > 0), big, -big))
    hi = np.where(beta < 0, need // safe_beta, big)
    c0 = np.maximum(np.maximum(np.maximum(lo[:, 0], lo[:, 1]), lo[:, 2]), 0)
    c1 = np.minimum(np.minimum(np.minimum(hi[:, 0], hi[:, 1]), hi[:, 2]), width - 1)
    return c0, c1


#: Width of the depth blocks used for early rejection of whole span segments.
_BLOCK = 16
#: A chunk doubles the next chunk's size when it drew less than 1/this of its estimated fragments.
_GROW_WHEN_DRAWN_BELOW = 4


class _Resolver:
    """Per-pixel z-resolve across chunks (min depth, then min face index) plus a per-block depth
    maximum used to reject occluded span segments before they become fragments.

    Pixels are indexed ``row * padded_width + col``; padding columns hold -inf so they never
    raise a block's maximum.
    """

    def __init__(self, height: int, width: int):
        self.height, self.width = height, width
        self.blocks = -(-width // _BLOCK)
        self.stride = self.blocks * _BLOCK
        n = height * self.stride
        depth = np.full((height, self.stride), np.inf)
        depth[:, width:] = -np.inf
        self.depth = depth.reshape(-1)
        self.face = np.full(n, -1, dtype=np.int64)
        self.l = np.zeros((3, n))
        self.block_max = np.where(np.arange(self.blocks) * _BLOCK < width, np.inf, -np.inf)[None].repeat(height, 0)
        self._zc = np.full(n, np.inf)  # scratch, reset after each use
        self._fc = np.full(n, np.iinfo(np.int64).max)
        self._dirty = np.zeros(height * self.blocks, dtype=bool)

    def add(self, pix, face, z, l0, l1, l2) -> None:
        zc, fc = self._zc, self._fc
        np.minimum.at(zc, pix, z)
        at_min = z == zc[pix]
        np.minimum.at(fc, pix[at_min], face[at_min])
        win = np.flatnonzero(at_min & (face == fc[pix]))  # exactly one fragment per touched pixel
        zc[pix] = np.inf
        fc[pix] = np.iinfo(np.int64).max
        wp = pix[win]
        # chunks arrive front to back, not in face order: compare (depth, face) lexicographically
        old_z = self.depth[wp]
        new_z = z[win]
        better = (new_z < old_z) | ((new_z == old_z) & (face[win] < self.face[wp]))
        wp, idx = wp[better], win[better]
        self.depth[wp] = z[idx]
        self.face[wp] = face[idx]
        self.l[0, wp] = l0[idx]
        self.l[1, wp] = l1[idx]
        self.l[2, wp] = l2[idx]
        if wp.size:  # refresh the maxima of the blocks that changed
            dirty = self._dirty
            dirty[wp // _BLOCK] = True
            blk = np.flatnonzero(dirty)
            dirty[blk] = False
            self.block_max.reshape(-1)[blk] = self.depth.reshape(-1, _BLOCK)[blk].max(axis=1)

    def result(self):
        h, w, st = self.height, self.width, self.stride
        face = self.face.reshape(h, st)[:, :w].reshape(-1)
        depth = self.depth.reshape(h, st)[:, :w].reshape(-1)
        l = self.l.reshape(3, h, st)[:, :, :w].reshape(3, -1).T
        return face, l, depth


def rasterize_numpy(
    batch: TriangleBatch, size: tuple[int, int], *, memory_budget: int = DEFAULT_MEMORY_BUDGET, cull_backfaces: bool = False
) -> Fragments:
    """Hard-mode fragments (K = 1), bit-identical to :func:`rasterize_reference`."""
    height, width = size
    screen = batch.screen_vertices(size).detach().to("cpu", torch.float64).numpy()  # [B, V, 3]
    w_all = batch.vertices[..., 3].detach().to("cpu", torch.float64).numpy() if batch.is_clip_space else None
    faces = batch.faces.cpu().numpy()
    # the per-pixel buffers (results of every batch element, plus one element's resolve state)
    # are fixed; chunks of spans and fragments share what is left
    fixed = height * width * (_BYTES_PER_PIXEL_OUT * batch.batch_size + _BYTES_PER_PIXEL_RESOLVE)
    if fixed >= memory_budget:
        raise MemoryBudgetError(
            f"rasterize_numpy: memory_budget={memory_budget} bytes cannot hold the per-pixel buffers of "
            f"{batch.batch_size} image(s) of {width}x{height} ({fixed} bytes); raise memory_budget above "
            f"{2 * fixed}, render fewer images per call, or render the image in tiles"
        )
    memory_budget -= fixed
    max_frags = max(1, memory_budget // _BYTES_PER_FRAGMENT)
    max_spans = max(1, memory_budget // _BYTES_PER_SPAN)
    if width > max_frags or height > max_spans:
        raise MemoryBudgetError(
            f"rasterize_numpy: memory_budget={memory_budget} bytes cannot hold one row of a {width}x{height} "
            f"image; raise memory_budget to at least {max(width * _BYTES_PER_FRAGMENT, height * _BYTES_PER_SPAN)}"
        )
    out_face = np.empty((batch.batch_size, height * width), dtype=np.int64)
    out_l = np.empty((batch.batch_size, height * width, 3))
    out_z = np.empty((batch.batch_size, height * width))
    for b in range(batch.batch_size):
        res = _Resolver(height, width)
        _raster_element(screen[b], None if w_all is None else w_all[b], faces, height, width, res, max_frags, max_spans, cull_backfaces)
        out_face[b], out_l[b], out_z[b] = res.result()
    shape = (batch.batch_size, height, width, 1)
    return Fragments(
        face_index=torch.from_numpy(out_face).reshape(shape),
        bary=torch.from_numpy(out_l).reshape(*shape, 3),
        depth=torch.from_numpy(out_z).reshape(shape),
    )


def _raster_element(verts, ws, faces, height, width, res: _Resolver, max_frags: int, max_spans: int, cull: bool) -> None:
    if faces.shape[0] == 0:
        return
    tri = verts[faces]  # [F, 3, 3] float64
    X = np.rint(tri[..., 0] * SUBPIXEL).astype(np.int64)
    Y = np.rint(tri[..., 1] * SUBPIXEL).astype(np.int64)
    valid, area, edge_dx, edge_n0, edge_beta = setup_faces(X, Y)
    if cull:
        valid &= area < 0
    row0 = np.maximum(_ceil_div(Y.min(axis=1) - HALF_PIXEL, SUBPIXEL), 0)
    row1 = np.minimum((Y.max(axis=1) - HALF_PIXEL) // SUBPIXEL, height - 1)
    col0 = np.maximum(_ceil_div(X.min(axis=1) - HALF_PIXEL, SUBPIXEL), 0)
    col1 = np.minimum((X.max(axis=1) - HALF_PIXEL) // SUBPIXEL, width - 1)
    live = np.flatnonzero(valid & (row0 <= row1) & (col0 <= col1))
    if live.size == 0:
        return
    consts, zmin = _face_constants(tri, X, Y)
    # Front to back: the resolve is order-independent (min depth, then min face index), and
    # faces whose nearest possible depth is behind the depth buffer are rejected early.
    live = live[np.argsort(zmin[live], kind="stable")]
    nrows = (row1 - row0 + 1)[live]
    est = nrows * (col1 - col0 + 1)[live] // 2 + 1  # about half the box is covered
    starts = np.concatenate(([0], np.cumsum(nrows)))
    est_starts = np.concatenate(([0], np.cumsum(est)))
    # Chunks start small (early rejection needs a filled depth buffer) and grow while most of
    # what they would draw turns out hidden, which keeps the number of chunks low.
    chunk_frags = min(max_frags, max(4096, min(height * width // 8, 1 << 18)))
    chunk_cap = min(max_frags, max(chunk_frags, 1 << 19))
    f_lo, n_live = 0, live.size
    while f_lo < n_live:
        # faces [f_lo, f_hi): by rows (span budget) and estimated fragments (early-z granularity)
        f_hi = int(np.searchsorted(starts, starts[f_lo] + max_spans, side="right")) - 1
        f_hi = min(f_hi, int(np.searchsorted(est_starts, est_starts[f_lo] + chunk_frags, side="right")) - 1)
        f_hi = max(f_hi, f_lo + 1)
        if nrows[f_lo] > max_spans:  # one face taller than the span budget: split its rows
            for r in range(0, int(nrows[f_lo]), max_spans):
                _chunk(live[f_lo:f_lo + 1], row0[live[f_lo:f_lo + 1]] + r,
                       np.minimum(nrows[f_lo:f_lo + 1] - r, max_spans), edge_dx, edge_n0, edge_beta, col0, col1,
                       consts, zmin, ws, faces, width, res, max_frags)
            f_lo += 1
            continue
        sel = live[f_lo:f_hi]
        drawn = _chunk(sel, row0[sel], nrows[f_lo:f_hi], edge_dx, edge_n0, edge_beta, col0, col1, consts, zmin, ws,
                       faces, width, res, max_frags)
        if drawn * _GROW_WHEN_DRAWN_BELOW < int(est_starts[f_hi] - est_starts[f_lo]):
            chunk_frags = min(chunk_cap, chunk_frags * 2)
        f_lo = f_hi


def _face_constants(tri: np.ndarray, X: np.ndarray, Y: np.ndarray):
    """Per-face float64 constants of the barycentric formula, and a conservative nearest depth.

    The values are exactly the sub-expressions of :func:`rule.barycentrics`, so evaluating the
    rest per fragment gives bit-identical results.
    """
    x0, y0, z0 = tri[:, 0, 0], tri[:, 0, 1], tri[:, 0, 2]
    x1, y1, z1 = tri[:, 1, 0], tri[:, 1, 1], tri[:, 1, 2]
    x2, y2, z2 = tri[:, 2, 0], tri[:, 2, 1], tri[:, 2, 2]
    d = (x1 - x0) * (y2 - y0) - (y1 - y0) * (x2 - x0)
    fallback = d == 0.0
    if fallback.any():  # float area zero: the rule uses the snapped positions
        sx, sy = X / SUBPIXEL, Y / SUBPIXEL
        x0, y0 = np.where(fallback, sx[:, 0], x0), np.where(fallback, sy[:, 0], y0)
        x1, y1 = np.where(fallback, sx[:, 1], x1), np.where(fallback, sy[:, 1], y1)
        x2, y2 = np.where(fallback, sx[:, 2], x2), np.where(fallback, sy[:, 2], y2)
        d = (x1 - x0) * (y2 - y0) - (y1 - y0) * (x2 - x0)
    consts = np.stack([x2 - x1, y2 - y1, x0 - x2, y0 - y2, x1 - x0, y1 - y0, x0, y0, x1, y1, x2, y2, d, z0, z1, z2])
    # Nearest depth over the snapped triangle (covered samples lie inside it): the affine depth
    # evaluated at the snapped corners, minus a generous rounding margin.
    with np.errstate(divide="ignore", invalid="ignore"):
        zs = []
        for k in range(3):
            px, py = X[:, k] / SUBPIXEL, Y[:, k] / SUBPIXEL
            l0 = ((x2 - x1) * (py - y1) - (y2 - y1) * (px - x1)) / d
            l1 = ((x0 - x2) * (py - y2) - (y0 - y2) * (px - x2)) / d
            l2 = ((x1 - x0) * (py - y0) - (y1 - y0) * (px - x0)) / d
            zs.append((l0 * z0 + l1 * z1 + l2 * z2, np.abs(l0) + np.abs(l1) + np.abs(l2)))
        zmin = np.minimum(np.minimum(zs[0][0], zs[1][0]), zs[2][0])
        cond = np.maximum(np.maximum(zs[0][1], zs[1][1]), zs[2][1])
        scale = np.maximum(np.maximum(np.abs(z0), np.abs(z1)), np.abs(z2))
        zmin = zmin - 1e-9 * (1.0 + cond) * (scale + 1e-300)
    zmin = np.where(np.isfinite(zmin), zmin, -np.inf)
    return consts, zmin


def _chunk(sel, first_row, counts, edge_dx, edge_n0, edge_beta, col0, col1, consts, zmin, ws, faces, width, res, max_frags):
    """Rasterize faces ``sel`` over ``counts`` rows each, starting at ``first_row``."""
    span_face = np.repeat(sel, counts)
    offs = np.arange(span_face.size) - np.repeat(np.cumsum(counts) - counts, counts)
    rows = np.repeat(first_row, counts) + offs
    c0, c1 = row_spans(rows, edge_dx[span_face], edge_n0[span_face], edge_beta[span_face], width)
    c0 = np.maximum(c0, col0[span_face])
    c1 = np.minimum(c1, col1[span_face])
    keep = c1 >= c0
    span_face, rows, c0, c1 = span_face[keep], rows[keep], c0[keep], c1[keep]
    # split spans at depth-block boundaries; drop segments whose block is already nearer everywhere
    b0, b1 = c0 // _BLOCK, c1 // _BLOCK
    nseg = b1 - b0 + 1
    seg = np.repeat(np.arange(span_face.size), nseg)
    blk = np.repeat(b0, nseg) + (np.arange(seg.size) - np.repeat(np.cumsum(nseg) - nseg, nseg))
    srow, sface = rows[seg], span_face[seg]
    alive = res.block_max[srow, blk] >= zmin[sface]
    seg, blk, srow, sface = seg[alive], blk[alive], srow[alive], sface[alive]
    s0 = np.maximum(c0[seg], blk * _BLOCK)
    lengths = np.minimum(c1[seg], blk * _BLOCK + _BLOCK - 1) - s0 + 1
    ends = np.cumsum(lengths)
    n = int(ends[-1]) if ends.size else 0
    begin = 0
    drawn = 0
    while begin < n:  # fragments in pieces of at most max_frags (segments are never split)
        i0 = int(np.searchsorted(ends, begin, side="right"))
        i1 = max(i0 + 1, int(np.searchsorted(ends, begin + max_frags, side="right")))
        cnt = lengths[i0:i1]
        fr_seg = np.repeat(np.arange(i0, i1), cnt)
        col = np.arange(fr_seg.size) - np.repeat(np.cumsum(cnt) - cnt - s0[i0:i1], cnt)
        row = srow[fr_seg]
        face = sface[fr_seg]
        pix = row * res.stride + col
        alive = res.depth[pix] >= zmin[face]  # per-fragment early rejection (conservative)
        if not alive.all():
            pix, face, row, col = pix[alive], face[alive], row[alive], col[alive]
        if pix.size:
            _fragments(pix, face, row, col, consts, ws, faces, res)
        drawn += pix.size
        begin = int(ends[i1 - 1])
    return drawn


def _fragments(pix, face, row, col, consts, ws, faces, res: _Resolver) -> None:
    e0x, e0y, e1x, e1y, e2x, e2y, x0, y0, x1, y1, x2, y2, d, z0, z1, z2 = (c[face] for c in consts)
    px = col + 0.5
    py = row + 0.5
    l0 = (e0x * (py - y1) - e0y * (px - x1)) / d
    l1 = (e1x * (py - y2) - e1y * (px - x2)) / d
    l2 = (e2x * (py - y0) - e2y * (px - x0)) / d
    z = l0 * z0 + l1 * z1 + l2 * z2
    if ws is not None:
        wf = ws[faces[face]]  # [N, 3]
        q0, q1, q2 = l0 / wf[:, 0], l1 / wf[:, 1], l2 / wf[:, 2]
        s = q0 + q1 + q2
        l0, l1, l2 = q0 / s, q1 / s, q2 / s
    res.add(pix, face, z, l0, l1, l2)
