"""Exact (hard-mode) rasterizer in pure torch: vectorized, device-agnostic, differentiable barycentrics.

It follows docs/raster-rule.md bit for bit, like :mod:`.reference` and :mod:`.numpy_raster`.
Two stages:

1. **Coverage and z-resolve** (under ``no_grad``, on snapped int64 coordinates). The batch's
   ``B * F`` faces are flattened into one list of "global faces" ``g = b * F + f``; the buffers
   hold every image, padded to whole 8-pixel tiles, so pixel ids never collide across images.
   - Setup, in face blocks that fit the memory budget: snap to the 1/256 grid, drop
     degenerate, culled and off-screen faces, compute each live face's pixel bounding box.
   - When the estimated overdraw is high, live faces are sorted front to back by a
     conservative nearest depth ``zmin``; chunks of them are then drawn in that order, and
     before a chunk is expanded the max depth of each 8x8 tile of the depth buffer rejects the
     bands of a face's rows (its rows within one row of tiles) that lie behind everything
     already drawn over the face's columns. (Low overdraw: one pass.)
   - Each face expands into its pixel rows; per (face, row) the three integer edge
     inequalities are solved for the exact covered column span, tie rule included, so work
     scales with the fragments, never with ``F * H * W``.
   - Long spans are cut into 8-aligned runs of 8 samples (runs hidden behind the buffer are
     dropped) and evaluated lane-parallel; short spans (small faces) sample by sample. Depth
     and barycentrics are float64 in the rule's exact operation order; the row-constant
     half of each barycentric numerator is computed once per span.
   - Per-face and per-span constants are stacked row-major tables (``[n, K]``), gathered with
     one ``index_select`` each; per-sample arithmetic writes in place into one buffer, and runs
     are evaluated in cache-sized pieces (``_PIECE_RUNS``), so large temporaries are not
     allocated (and page-faulted) per operation.
   - The resolve is in place: ``scatter_reduce("amin")`` of depth, then of the face id among
     the fragments at the new minimum, then the winners' barycentrics are stored. Minima are
     exact, so the result does not depend on the scatter order: deterministic on every device.
   :func:`global_face_ids` stops here without storing barycentrics (flat shading). On sorted
   frames where few fragments are predicted to be contested, it resolves by per-face depth
   bounds instead, with exact depths only where bounds overlap (:class:`_Contest`).
2. **Fragments** (:func:`pixel_fragments`). Without gradients, stage 1's values are final.
   When the vertices need gradients, barycentrics and depth of each covered pixel's winner are
   evaluated again from the unsnapped positions, with autograd, in exactly the expressions of
   :func:`rule.barycentrics` (same bits as stage 1), so they are differentiable with respect
   to the vertex positions (and ``w`` for clip-space input, through the perspective division).

All float work happens in float64 (float32 on MPS, which has no float64: there depth and
barycentrics are float32, coverage stays exact).
"""

from __future__ import annotations

import math

import torch

from .._check import MemoryBudgetError
from ..contracts import Fragments, TriangleBatch
from ..settings import RasterSettings
from ._scatter import flat_nonzero, put_at
from .rule import HALF_PIXEL, SUBPIXEL

# Bytes of temporaries per unit of work, used to size chunks from ``memory_budget``.
_BYTES_PER_PIXEL = 24  # depth buffer (8) + face buffer (8) + tile summaries / scratch
_BYTES_PER_LIVE_FACE = 96  # kept for every live face: id, zmin, bbox, sort keys
_BYTES_PER_SETUP_FACE = 640  # setup temporaries per face of a block
_BYTES_PER_FACE_TABLES = 248  # per-face tables kept for all live faces when sorting (optional)
_BYTES_PER_SPAN = 480  # per (face, row) span
_BYTES_PER_LANE = 240  # per sample of a piece of 8-pixel runs
_BYTES_PER_CONTESTED = 96  # per contested fragment of the depth-bound resolve: kept, then resolved
#: Candidates whose exact depths :meth:`_Contest.flush` evaluates at once (temporaries in cache).
_SETTLE_BLOCK = 16384
#: Face ids of a sorted frame are resolved by depth bounds (:class:`_Contest`) when about at most
#: this many fragments per pixel are predicted to be contested; else by exact depths throughout
#: (the seed fixture at 640x360: 0.06 contested per pixel at 1k triangles, 2x faster; 0.8 at 10k,
#: even; 2.3 at 30k, 1.6x slower).
_CONTEST_SHARE = 0.5
#: Estimated fragments per front-to-back chunk: small enough for early depth rejection to bite,
#: large enough that per-call overhead stays small.
_CHUNK_FRAGMENTS = 1 << 18
#: Most 8-pixel runs evaluated at once, even when the budget allows more: the float64
#: temporaries of a piece (512 KiB each) then stay in cache and are reused by the allocator
#: instead of being freshly mapped (page faults) for every operation.
_PIECE_RUNS = 8192
#: Sort faces front to back when the estimated fragments exceed this many per pixel.
_OVERDRAW_TO_SORT = 4
#: Spans shorter than this on average are expanded sample by sample instead of in 8-pixel runs.
_SPARSE_SPAN = 4
#: Largest factor by which a chunk grows after chunks whose faces were mostly hidden.
_MAX_GROW = 16.0
#: On CPU, where a host synchronization costs nothing, frames of more 8-pixel-run lanes than this
#: take the compacting path: the one-pass path evaluates whole bounding boxes (measured slower on
#: the 360x240 demo frame, 35 ms against 27 ms).
_ONE_PASS_CPU_LANES = 1 << 17
_TILE_BITS = 3
_TILE = 1 << _TILE_BITS  # pixels per run of the row summary; side of a summary tile


def compute_dtype(device: torch.device) -> torch.dtype:
    """float64 everywhere except MPS, which has no float64."""
    return torch.float32 if device.type == "mps" else torch.float64


def rasterize_hard(batch: TriangleBatch, size: tuple[int, int], settings: RasterSettings) -> Fragments:
    """Hard-mode ``Fragments`` (K = 1) of ``batch`` at ``size = (H, W)``, on the batch's device.

    Pixel for pixel identical to :func:`rasterize_reference` (face index; barycentrics and depth
    bit-identical in float64). ``bary``/``depth`` come back in the batch's dtype and carry
    gradients to ``batch.vertices``. Honors ``settings.cull_backfaces`` and
    ``settings.memory_budget``.

    Raises:
        MemoryBudgetError: ``settings.memory_budget`` cannot hold the frame buffers, the live
            faces, or one image row of fragments; the message gives the budget that would.
    """
    frags = rasterize_hard_exact(batch, size, settings)
    dtype = batch.dtype
    if frags.bary.dtype == dtype:
        return frags
    cast = lambda t: None if t is None else t.to(dtype)  # noqa: E731
    return Fragments(frags.face_index, cast(frags.bary), cast(frags.depth), None, cast(frags.screen_bary))


def rasterize_hard_exact(batch: TriangleBatch, size: tuple[int, int], settings: RasterSettings) -> Fragments:
    """Like :func:`rasterize_hard`, but ``bary``/``depth`` stay in the compute dtype (float64
    except on MPS), which is what exact shading needs."""
    return pixel_fragments(batch, size, resolve_faces(batch, size, settings))


# --------------------------------------------------------------------------------------------
# Stage 1: coverage and z-resolve (no autograd)
# --------------------------------------------------------------------------------------------


class _Scene:
    """Detached per-call geometry: flat screen coordinates and the face table."""

    def __init__(self, batch: TriangleBatch, size: tuple[int, int]):
        self.height, self.width = size
        self.B, self.F = batch.batch_size, batch.num_faces
        self.V = batch.vertices.shape[1]
        self.device = batch.device
        self.dtype = compute_dtype(self.device)
        screen = batch.screen_vertices(size).detach().to(self.dtype)  # [B, V, 3]
        self.sx, self.sy, self.sz = (c.reshape(-1) for c in screen.permute(2, 0, 1))  # [B*V] each
        self.faces_t = batch.faces.T.contiguous()  # int64 [3, F]

    def image_of(self, g: torch.Tensor) -> torch.Tensor:
        """int64 ``[n]`` batch element of global faces ``g``."""
        if self.B == 1:
            return torch.zeros_like(g)
        return torch.div(g, self.F, rounding_mode="floor")

    def corners(self, g: torch.Tensor) -> torch.Tensor:
        """int64 ``[3, n]``: flat vertex ids ``b * V + v`` of the corners of global faces ``g``."""
        if self.B == 1:
            return torch.stack([row.index_select(0, g) for row in self.faces_t])
        b = self.image_of(g)
        f = g - b * self.F
        return torch.stack([row.index_select(0, f) for row in self.faces_t]) + b * self.V

    def gather(self, coord: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """float ``[3, n]`` coordinate ``coord [B*V]`` at corner ids ``idx [3, n]``."""
        return coord.index_select(0, idx.reshape(-1)).view(idx.shape)

    def snapped(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """int64 ``[3, n]`` x and y on the 1/256 grid (round half to even)."""
        X = torch.round(self.gather(self.sx, idx) * SUBPIXEL).long()
        Y = torch.round(self.gather(self.sy, idx) * SUBPIXEL).long()
        return X, Y


def _ceil_div(a: torch.Tensor, b) -> torch.Tensor:
    return -torch.div(-a, b, rounding_mode="floor")


def _min3(t: torch.Tensor) -> torch.Tensor:
    return torch.minimum(torch.minimum(t[0], t[1]), t[2])


def _max3(t: torch.Tensor) -> torch.Tensor:
    return torch.maximum(torch.maximum(t[0], t[1]), t[2])


def _bounds(X: torch.Tensor, Y: torch.Tensor, width: int, height: int, cull: bool):
    """Live mask and clipped pixel bounding box ``(r0, r1, c0, c1)`` of snapped faces ``[3, n]``."""
    area = (X[1] - X[0]) * (Y[2] - Y[0]) - (Y[1] - Y[0]) * (X[2] - X[0])
    valid = area < 0 if cull else area != 0
    r0 = _ceil_div(_min3(Y) - HALF_PIXEL, SUBPIXEL).clamp_(min=0)
    r1 = torch.div(_max3(Y) - HALF_PIXEL, SUBPIXEL, rounding_mode="floor").clamp_(max=height - 1)
    c0 = _ceil_div(_min3(X) - HALF_PIXEL, SUBPIXEL).clamp_(min=0)
    c1 = torch.div(_max3(X) - HALF_PIXEL, SUBPIXEL, rounding_mode="floor").clamp_(max=width - 1)
    live = valid & (r0 <= r1) & (c0 <= c1)
    return live, r0, r1, c0, c1


def _bary_inputs(scene: _Scene, idx: torch.Tensor, X: torch.Tensor, Y: torch.Tensor) -> list[torch.Tensor]:
    """16 float ``[n]`` per-face constants of the rule's barycentric formula.

    In order: ``x2-x1, y2-y1, x0-x2, y0-y2, x1-x0, y1-y0, x0, y0, x1, y1, x2, y2, d, z0, z1, z2``,
    exactly the sub-expressions of :func:`rule.barycentrics` (snapped positions where the float
    area is exactly zero), so the per-fragment remainder gives bit-identical results.
    """
    x, y, z = scene.gather(scene.sx, idx), scene.gather(scene.sy, idx), scene.gather(scene.sz, idx)  # [3, n]
    d = (x[1] - x[0]) * (y[2] - y[0]) - (y[1] - y[0]) * (x[2] - x[0])
    fallback = d == 0.0  # applied unconditionally: asking whether any face needs it would sync
    x = torch.where(fallback, X.to(x.dtype) / SUBPIXEL, x)
    y = torch.where(fallback, Y.to(y.dtype) / SUBPIXEL, y)
    d = torch.where(fallback, (x[1] - x[0]) * (y[2] - y[0]) - (y[1] - y[0]) * (x[2] - x[0]), d)
    return [x[2] - x[1], y[2] - y[1], x[0] - x[2], y[0] - y[2], x[1] - x[0], y[1] - y[0],
            x[0], y[0], x[1], y[1], x[2], y[2], d, z[0], z[1], z[2]]


def _z_range(consts: list[torch.Tensor], X: torch.Tensor, Y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Conservative depth bounds ``(zmin, zmax)`` per face: the affine depth at the snapped corners
    (covered samples lie inside the snapped triangle) minus / plus a generous rounding margin, so
    that the rule's float depth of every covered sample lies in ``[zmin, zmax]``; ``(-inf, +inf)``
    if unknown (non-finite values anywhere)."""
    e0x, e0y, e1x, e1y, e2x, e2y, x0, y0, x1, y1, x2, y2, d, z0, z1, z2 = consts
    px, py = X.to(d.dtype) / SUBPIXEL, Y.to(d.dtype) / SUBPIXEL  # [3, n]
    l0 = (e0x * (py - y1) - e0y * (px - x1)) / d
    l1 = (e1x * (py - y2) - e1y * (px - x2)) / d
    l2 = (e2x * (py - y0) - e2y * (px - x0)) / d
    zc = l0 * z0 + l1 * z1 + l2 * z2  # [3, n]
    cond = _max3(l0.abs() + l1.abs() + l2.abs())
    scale = torch.maximum(torch.maximum(z0.abs(), z1.abs()), z2.abs())
    eps = 1e-9 if d.dtype == torch.float64 else 1e-5
    margin = eps * (1.0 + cond) * (scale + 1e-300)
    zmin, zmax = _min3(zc) - margin, _max3(zc) + margin
    known = torch.isfinite(zmin) & torch.isfinite(zmax)
    return torch.where(known, zmin, -math.inf), torch.where(known, zmax, math.inf)


def _edges(X: torch.Tensor, Y: torch.Tensor) -> list[torch.Tensor]:
    """14 int64 ``[n]`` per-face values for the exact column spans of each pixel row.

    With the face oriented positively, edge k's function at the sample of (col, row) is
    ``E_k = dx_k * py + k_k + beta_k * col`` with ``py = 256 row + 128`` (in subpixels), and the
    sample is covered when every ``E_k >= t_k`` (``t = 0`` on owned edges, 1 otherwise), that is
    ``beta_k * col >= -m_k`` with ``m_k = dx_k * py + (k_k - t_k)``. An edge with ``beta > 0``
    bounds the covered columns from the left, one with ``beta < 0`` from the right, and a flat
    one (``beta = 0``) covers a row whole or not at all. A live face has one or two edges of each
    side and at most one flat edge, so the table holds them by role: two left edges ``dx, k - t,
    beta``, two right edges ``dx, k - t, -beta`` (an edge twice when it is its side's only one),
    then the flat edge's ``dx, k - t`` (zeros when there is none: it then excludes nothing).
    """
    area = (X[1] - X[0]) * (Y[2] - Y[0]) - (Y[1] - Y[0]) * (X[2] - X[0])
    flip = area < 0
    X = torch.where(flip, X[[0, 2, 1]], X)  # positive orientation
    Y = torch.where(flip, Y[[0, 2, 1]], Y)
    ax, ay = X, Y
    dx, dy = X.roll(-1, 0) - ax, Y.roll(-1, 0) - ay  # [3, n]
    owned = (dy < 0) | ((dy == 0) & (dx < 0))
    # E(col, py) - t = dx*(py - ay) - dy*(256 col + 128 - ax) - t = dx*py + kt + beta*col
    kt = -dx * ay - dy * (HALF_PIXEL - ax) - (~owned).long()
    beta = -dy * SUBPIXEL

    left, right, flat = beta > 0, beta < 0, beta == 0
    rows = []  # [3, 1, n] per role: (dx, k - t, +-beta) of the role's edge
    for mask, values in ((left, torch.stack([dx, kt, beta])), (right, torch.stack([dx, kt, -beta]))):
        first = torch.where(mask[0], 0, torch.where(mask[1], 1, 2))  # [n]: the side's first edge ...
        last = torch.where(mask[2], 2, torch.where(mask[1], 1, 0))  # ... and its last (the same if one)
        for j in (first, last):
            rows.append(values.gather(1, j.expand(3, 1, -1)))
    j = torch.where(flat[0], 0, torch.where(flat[1], 1, 2))
    has_flat = flat.any(0)
    rows.append(torch.stack([dx, kt]).gather(1, j.expand(2, 1, -1)) * has_flat)  # zeros: no flat edge
    return list(torch.cat(rows).view(14, -1).unbind(0))


def _row_spans(edges: list[torch.Tensor], rows: torch.Tensor, c0: torch.Tensor, c1: torch.Tensor):
    """Exact covered columns ``[s0, s1]`` (int64 ``[S]`` each) of spans on ``rows`` with gathered
    per-span ``edges`` (see :func:`_edges`), clipped to ``[c0, c1]``."""
    py = rows * SUBPIXEL + HALF_PIXEL  # [S]
    s0, s1 = c0, c1
    for j in (0, 3):  # left edges: col >= ceil(-m / beta) = -floor(m / beta)
        dx, kt, beta = edges[j:j + 3]
        m = (dx * py).add_(kt)
        s0 = torch.maximum(s0, torch.div(m, beta, rounding_mode="floor").neg_())
    for j in (6, 9):  # right edges, with -beta > 0: col <= floor(-m / beta) = floor(m / -beta)
        dx, kt, nbeta = edges[j:j + 3]
        m = (dx * py).add_(kt)
        s1 = torch.minimum(s1, torch.div(m, nbeta, rounding_mode="floor"))
    dead = (edges[12] * py).add_(edges[13]) < 0  # the flat edge excludes the whole row
    return s0, torch.where(dead, -1, s1)


class _Buffers:
    """The z-buffer of stage 1, padded to whole 8-pixel tiles, and its max-depth summaries.

    Pixel id ``(b * Hp + row) * Wp + col`` with ``Hp``/``Wp`` the image size rounded up to
    multiples of 8.
    - ``depth``: float ``[B*Hp*Wp]``, +inf where empty, -inf in the padding.
    - ``winner``: int64 ``[B*Hp*Wp]``, global face id, ``empty`` (``B * F``, past the last face) where
      empty, so that ``winner`` indexes a table of ``B * F`` faces and a background row.
    - ``bary``: float ``[3, B*Hp*Wp]``, the winner's affine barycentrics (0 where empty), or
      ``None`` when only the face ids are wanted.
    """

    def __init__(self, B: int, H: int, W: int, F: int, dtype: torch.dtype, device: torch.device,
                 with_bary: bool = True):
        self.B, self.H, self.W = B, H, W
        self.Hp, self.Wp = -(-H // _TILE) * _TILE, -(-W // _TILE) * _TILE
        padded = (self.Hp, self.Wp) != (H, W)
        d = torch.full((B, self.Hp, self.Wp), -math.inf if padded else math.inf, dtype=dtype, device=device)
        if padded:
            d[:, :H, :W] = math.inf
        self.depth = d.reshape(-1)
        #: pixel count; ``winner`` and ``bary`` have one more slot, a sink for masked-out writes
        self.n = B * self.Hp * self.Wp
        self.empty = B * F
        self.winner = torch.full((self.n + 1,), self.empty, dtype=torch.int64, device=device)
        self.bary = torch.zeros(3, self.n + 1, dtype=dtype, device=device) if with_bary else None
        self.drawn = False
        self.one_pass = False
        #: face ids resolved in ranks (:class:`_Contest`, then ``winner`` is None): int32 ``[n + 1]``
        #: rank per pixel and int64 ``[ranks + 2]`` global face id per rank
        self.ranks: tuple[torch.Tensor, torch.Tensor] | None = None

    def summarize(self, values: torch.Tensor | None = None) -> None:
        """Refresh the max-depth summaries from the depth buffer, or from other per-pixel
        ``values [B*Hp*Wp]`` that the rejection compares in their place (between chunks)."""
        values = self.depth if values is None else values
        #: [B*Hp*(Wp/8)]: max depth over each run of 8 pixels of a row
        self.row_max = values.view(-1, _TILE).amax(1)
        #: [B*(Hp/8)*(Wp/8)]: max depth over each 8x8 tile
        self.tile_max = self.row_max.view(-1, _TILE, self.Wp >> _TILE_BITS).amax(1).reshape(-1)

    def visible_bands(self, b, r0, r1, c0, c1, zmin):
        """The bands of faces (pixel boxes ``[r0, r1] x [c0, c1]`` of images ``b``, nearest depth
        ``zmin``, or the rank that :class:`_Contest`'s summaries compare) that may show: a band is
        a face's rows within one row of 8x8 tiles, hidden when every tile it touches lies nearer
        than ``zmin``. Returns ``(face, first, count, kept)``:
        per visible band its face (index into the inputs), first row and row count, and the
        fraction of bands kept."""
        dev = b.device
        tr0, tr1 = r0 >> _TILE_BITS, r1 >> _TILE_BITS
        nb = tr1 - tr0 + 1  # bands per face
        tc0, nt = c0 >> _TILE_BITS, (c1 >> _TILE_BITS) - (c0 >> _TILE_BITS) + 1  # first tile, tiles per band
        n_bands, n_tiles = torch.stack([nb.sum(), (nb * nt).sum()]).tolist()
        face = torch.repeat_interleave(torch.arange(nb.numel(), device=dev), nb, output_size=n_bands)
        band_row = (tr0 - (torch.cumsum(nb, 0) - nb)).index_select(0, face) + torch.arange(n_bands, device=dev)
        nt_band = nt.index_select(0, face)
        tile_band = torch.repeat_interleave(torch.arange(n_bands, device=dev), nt_band, output_size=n_tiles)
        wt = self.Wp >> _TILE_BITS
        first_tile = (b.index_select(0, face) * (self.Hp >> _TILE_BITS) + band_row) * wt + tc0.index_select(0, face)
        tile = (first_tile - (torch.cumsum(nt_band, 0) - nt_band)).index_select(0, tile_band) \
            + torch.arange(n_tiles, device=dev)
        low = -math.inf if self.tile_max.is_floating_point() else torch.iinfo(self.tile_max.dtype).min
        band_max = torch.full((n_bands,), low, dtype=self.tile_max.dtype, device=dev)
        band_max.scatter_reduce_(0, tile_band, self.tile_max.index_select(0, tile), reduce="amax")
        vis = flat_nonzero(band_max >= zmin.index_select(0, face))
        face, band_row = face.index_select(0, vis), band_row.index_select(0, vis)
        first = torch.maximum(r0.index_select(0, face), band_row << _TILE_BITS)
        last = torch.minimum(r1.index_select(0, face), (band_row << _TILE_BITS) + (_TILE - 1))
        return face, first, last - first + 1, vis.numel() / max(n_bands, 1)

    def crop(self, t: torch.Tensor) -> torch.Tensor:
        """``[..., B*Hp*Wp]`` -> ``[..., B, H, W]``, the image part."""
        return t[..., : self.n].view(*t.shape[:-1], self.B, self.Hp, self.Wp)[..., : self.H, : self.W]


def _budget(settings: RasterSettings, B: int, H: int, W: int, F: int):
    """Split ``memory_budget`` into block/span/run limits, or raise saying what to change.

    Returns ``(max_block, max_spans, max_runs, work)``: faces per setup block, (face, row) spans
    per chunk, 8-pixel runs per piece of fragments, and the bytes left for work.
    """
    budget = settings.memory_budget
    fixed = B * (H + _TILE) * (W + _TILE) * _BYTES_PER_PIXEL + B * F * _BYTES_PER_LIVE_FACE
    row_runs = -(-W // _TILE) + 1
    need_work = row_runs * _TILE * _BYTES_PER_LANE + _BYTES_PER_SPAN + _BYTES_PER_SETUP_FACE
    if budget < fixed + need_work:
        raise MemoryBudgetError(
            f"rasterize (torch, hard): memory_budget={budget} bytes cannot hold a {B}x{H}x{W} frame with "
            f"{F} faces per image (needs at least {fixed + need_work} bytes: {_BYTES_PER_PIXEL} per pixel, "
            f"{_BYTES_PER_LIVE_FACE} per face, plus one image row of fragments). Raise memory_budget, or "
            "render fewer images / a smaller size / fewer faces per call"
        )
    work = budget - fixed
    max_runs = max(row_runs, work // (_TILE * _BYTES_PER_LANE))
    max_spans = max(1, work // _BYTES_PER_SPAN)
    max_block = max(1, work // _BYTES_PER_SETUP_FACE)
    return max_block, max_spans, max_runs, work


@torch.no_grad()
def resolve_faces(batch: TriangleBatch, size: tuple[int, int], settings: RasterSettings,
                  with_bary: bool = True) -> _Buffers:
    """Stage 1: the winning global face id ``b * F + f`` of every pixel, its depth and (with
    ``with_bary``) its affine barycentrics, as filled :class:`_Buffers`."""
    scene = _Scene(batch, size)
    B, F, H, W = scene.B, scene.F, scene.height, scene.width
    dev = scene.device
    max_block, max_spans, max_runs, work = _budget(settings, B, H, W, F)
    buf = _Buffers(B, H, W, F, scene.dtype, dev, with_bary)
    if B * F == 0:
        return buf
    whole = None  # the setup of all faces at once, when one block holds them
    if B * F <= max_block:
        whole = _setup(scene, torch.arange(B * F, device=dev), settings)
        if _one_pass(scene, buf, settings, max_spans, max_runs, whole):
            return buf

    # -- setup in blocks: live faces and their bounding boxes -----------------------------------
    live_g, live_box = [], []
    for start in range(0, B * F, max_block):
        if whole is not None:  # the one-pass attempt made it
            g, _, _, _, live, r0, r1, c0, c1 = whole
            whole = None
        else:
            g, _, _, _, live, r0, r1, c0, c1 = _setup(
                scene, torch.arange(start, min(B * F, start + max_block), device=dev), settings)
        keep = flat_nonzero(live)
        if keep.numel():
            live_g.append(g.index_select(0, keep))
            live_box.append(torch.stack([t.index_select(0, keep) for t in (r0, r1, c0, c1)]))
        del live, r0, r1, c0, c1
    if not live_g:
        return buf
    g_all = torch.cat(live_g)
    box_all = torch.cat(live_box, dim=1)  # int64 [4, L]: r0, r1, c0, c1
    del live_g, live_box
    nrows = box_all[1] - box_all[0] + 1
    est = nrows * (box_all[3] - box_all[2] + 1) // 2  # about half the box is covered
    est_total = int(est.sum())
    max_frags = max_runs * _TILE
    chunk_frags = min(max_frags, _CHUNK_FRAGMENTS)
    sort = est_total > max(chunk_frags, _OVERDRAW_TO_SORT * B * H * W)
    tables = None  # per-face tables of all live faces, in drawing order, when they fit
    contest = None  # the depth-bound resolve of face ids (sorted chunks without barycentrics)
    if sort:
        # High overdraw: draw front to back by a conservative nearest depth, so that faces
        # hidden behind earlier chunks are rejected cheaply. (The resolve does not depend on
        # the order.) The per-face setup is done here once for all live faces when its tables
        # fit the budget, so that each chunk takes a slice of them; else chunks redo it.
        n_live = g_all.numel()
        keep_tables = 2 * n_live * _BYTES_PER_FACE_TABLES <= work
        zmin = torch.empty(n_live, dtype=scene.dtype, device=dev)
        contest_wanted = not with_bary  # face ids only: resolved by depth bounds (_Contest)
        zmax = torch.empty_like(zmin) if contest_wanted else None
        parts = []
        for start in range(0, n_live, max_block):
            t = _face_tables(scene, g_all[start:start + max_block])
            zmin[start:start + t[2].numel()] = t[2]
            if zmax is not None:
                zmax[start:start + t[3].numel()] = t[3]
            if keep_tables:
                parts.append(t[:2])
            del t
        # (the depth-bound resolve needs ranks in the exact order of zmin; else float32 keys do)
        order = torch.sort(zmin if contest_wanted else zmin.float(), stable=True).indices
        g_all, nrows, est = (t.index_select(0, order) for t in (g_all, nrows, est))
        box_all = box_all.index_select(1, order)
        if keep_tables:
            consts = torch.cat([c for c, _ in parts]) if len(parts) > 1 else parts[0][0]
            edge_tab = torch.cat([e for _, e in parts]) if len(parts) > 1 else parts[0][1]
            del parts
            tables = (consts.index_select(0, order), edge_tab.index_select(0, order), zmin.index_select(0, order))
            del consts, edge_tab
        if contest_wanted:  # exact depths only where contested, unless most pixels would be
            zmin_s, zmax_s = zmin.index_select(0, order), zmax.index_select(0, order)
            reach = torch.searchsorted(zmin_s, zmax_s, right=True) - 1  # see _Contest
            # about est_total * (a face's share of faces whose depth bounds overlap its own) are contested
            overlap = int((reach - torch.arange(n_live, device=dev)).sum())
            if est_total * overlap <= _CONTEST_SHARE * B * H * W * n_live * n_live:
                contest = _Contest(buf, g_all, zmin_s, zmax_s, reach, None if tables is None else tables[0],
                                   max(1, work // _BYTES_PER_CONTESTED))
            del zmin_s, zmax_s, reach
        del order, zmin, zmax
    else:  # low overdraw: early rejection would not pay for itself; chunks only bound memory
        chunk_frags = max_frags

    def summarize():  # the summaries for the next chunk's rejection
        if contest is not None:
            contest.summarize(buf)  # in ranks, from the depth bounds of each pixel's face
        else:
            buf.summarize()

    row_ends = torch.cumsum(nrows, 0).cpu()
    est_ends = torch.cumsum(est + 1, 0).cpu()
    nrows_cpu = nrows.cpu()
    n_live = g_all.numel()
    lo, grow = 0, 1.0
    while lo < n_live:
        row_base = int(row_ends[lo - 1]) if lo else 0
        est_base = int(est_ends[lo - 1]) if lo else 0
        hi = int(torch.searchsorted(row_ends, row_base + max_spans, right=True))
        hi = min(hi, int(torch.searchsorted(est_ends, est_base + int(chunk_frags * grow), right=True)))
        hi = max(hi, lo + 1)
        g, box = g_all[lo:hi], box_all[:, lo:hi]
        tab = _face_tables(scene, g, sort) if tables is None else [t[lo:hi] for t in tables]
        if contest is not None:
            contest.base = lo  # the rank of the chunk's first face
        if buf.drawn:
            summarize()
        if int(nrows_cpu[lo]) > max_spans:  # one face taller than the span budget: split its rows
            for r in range(0, int(nrows_cpu[lo]), max_spans):
                count = min(max_spans, int(nrows_cpu[lo]) - r)
                _draw(scene, buf, g, box, tab, r, count, max_runs, False, contest)
                buf.drawn = True
                summarize()
        else:
            kept = _draw(scene, buf, g, box, tab, 0, None, max_runs, sort and buf.drawn, contest)
            # when most faces of a chunk were hidden, the next chunks can be larger
            grow = min(_MAX_GROW, 1.0 / max(kept, 1.0 / _MAX_GROW))
        buf.drawn = True
        lo = hi
    if contest is not None:
        contest.finish(scene, buf)
    return buf


def _setup(scene: _Scene, g: torch.Tensor, settings: RasterSettings):
    """Snapped corners and pixel boxes of global faces ``g``: ``(g, idx, X, Y, live, r0, r1, c0,
    c1)`` with corner ids ``idx`` and snapped ``X``, ``Y`` (``[3, n]`` each), see :func:`_bounds`."""
    idx = scene.corners(g)  # [3, n]
    X, Y = scene.snapped(idx)
    return (g, idx, X, Y, *_bounds(X, Y, scene.width, scene.height, settings.cull_backfaces))


def _one_pass(scene: _Scene, buf: _Buffers, settings: RasterSettings, max_spans: int, max_runs: int,
              setup) -> bool:
    """Draw every face (their :func:`_setup`) in one pass with a single host synchronization (the
    read of the work sizes); False, drawing nothing, when the frame needs the chunked path (high
    overdraw, where front-to-back chunks reject hidden faces, or more spans than the budget holds).

    Shapes never depend on values after that read: dead faces get no rows, a span's 8-pixel
    runs cover its face's whole bounding box (lanes outside the exact span are masked), and
    the resolve writes masked-out values into the buffers' sink slot instead of compacting."""
    B, H, W = scene.B, scene.height, scene.width
    dev = scene.device
    g, idx, X, Y, live, r0, r1, c0, c1 = setup
    nrows = torch.where(live, r1 - r0 + 1, 0)  # [n]
    truns = torch.where(live, (c1 >> _TILE_BITS) - (c0 >> _TILE_BITS) + 1, 0)  # runs per row
    est = nrows * (c1 - c0 + 1) // 2
    n_spans, n_runs, est_total = torch.stack([nrows.sum(), (nrows * truns).sum(), est.sum()]).tolist()  # the sync
    if est_total > max(min(max_runs * _TILE, _CHUNK_FRAGMENTS), _OVERDRAW_TO_SORT * B * H * W) or n_spans > max_spans:
        return False
    if dev.type == "cpu" and n_runs * _TILE > _ONE_PASS_CPU_LANES:
        return False
    buf.one_pass = True
    if n_spans == 0:
        return True
    consts = torch.stack(_bary_inputs(scene, idx, X, Y), dim=1)  # [n, 16]
    edge_tab = torch.stack(_edges(X, Y), dim=1)  # [n, 14]
    span_face = torch.repeat_interleave(g, nrows, output_size=n_spans)  # [S]
    span_start = torch.cumsum(nrows, 0) - nrows
    rows = (r0 - span_start).index_select(0, span_face) + torch.arange(n_spans, device=dev)
    s0, s1 = _row_spans(edge_tab.index_select(0, span_face).unbind(1), rows, c0.index_select(0, span_face),
                        c1.index_select(0, span_face))  # s1 < s0: nothing covered
    nrun = truns.index_select(0, span_face)
    run_span = torch.repeat_interleave(torch.arange(n_spans, device=dev), nrun, output_size=n_runs)  # [R]
    row_id = scene.image_of(span_face) * buf.Hp + rows
    t0 = c0.index_select(0, span_face) >> _TILE_BITS
    run = (row_id * (buf.Wp >> _TILE_BITS) + t0 - (torch.cumsum(nrun, 0) - nrun)).index_select(0, run_span) \
        + torch.arange(n_runs, device=dev)  # [R] run id in the padded buffers
    span_tab = _span_table(consts, span_face, rows, None)
    span_int = torch.stack([s0, s1, span_face], dim=1)  # [S, 3]
    step = min(max_runs, _PIECE_RUNS)
    for i0 in range(0, n_runs, step):
        _fragments(buf, run[i0:i0 + step], run_span[i0:i0 + step], span_tab, span_int, masked=True)
    return True


def _face_tables(scene: _Scene, g: torch.Tensor, with_zmin: bool = True):
    """Per-face setup of global faces ``g [n]``, stacked row-major so that chunks slice and spans
    gather whole rows: float ``[n, 16]`` barycentric constants (:func:`_bary_inputs`), int64
    ``[n, 14]`` edge values (:func:`_edges`) and float ``[n]`` conservative depth bounds ``zmin``,
    ``zmax`` (:func:`_z_range`, ``None`` without ``with_zmin``)."""
    idx = scene.corners(g)  # [3, n]
    X, Y = scene.snapped(idx)
    consts = _bary_inputs(scene, idx, X, Y)
    zmin, zmax = _z_range(consts, X, Y) if with_zmin else (None, None)
    return torch.stack(consts, dim=1), torch.stack(_edges(X, Y), dim=1), zmin, zmax


def _take(table, index: torch.Tensor) -> list[torch.Tensor]:
    """Each of the ``[n]`` tensors of ``table`` gathered at ``index [N]``."""
    return [row.index_select(0, index) for row in table]


def _draw(scene: _Scene, buf: _Buffers, g, box, tables, row_offset: int, row_count: int | None, max_runs: int,
          reject: bool, contest: "_Contest | None" = None) -> float:
    """Rasterize global faces ``g [n]`` with pixel boxes ``box [4, n]`` and per-face ``tables``
    (:func:`_face_tables`) into ``buf``: rows ``row_offset`` .. ``+ row_count`` of each face's
    box, or all of them. With ``reject``, bands of rows and runs hidden behind the buffer are
    skipped. With ``contest``, coverage is resolved by depth bounds (:class:`_Contest`).
    Returns the fraction of the faces' bands not rejected."""
    dev = g.device
    consts, edge_tab, zmin = tables[:3]  # [n, 16], [n, 14], [n]
    r0, r1, c0, c1 = box
    b = scene.image_of(g)
    # what the rejection compares with the buffer's summaries: the faces' nearest depths, or
    # with a contest their ranks (its summaries are in ranks)
    near = zmin if contest is None else torch.arange(contest.base, contest.base + g.numel(), device=dev,
                                                        dtype=torch.int32)
    if reject:  # only the bands of rows that may show
        owner, first, counts, kept = buf.visible_bands(b, r0, r1, c0, c1, near)
        if owner.numel() == 0:
            return 0.0
    else:
        owner, first, kept = None, r0 + row_offset, 1.0
        counts = r1 - first + 1
        if row_count is not None:
            counts = counts.clamp(max=row_count)
    # (face, row) spans and their exact covered columns
    n_spans = int(counts.sum())
    span_owner = torch.repeat_interleave(torch.arange(counts.numel(), device=dev), counts, output_size=n_spans)
    span_start = torch.cumsum(counts, 0) - counts
    rows = (first - span_start).index_select(0, span_owner) + torch.arange(n_spans, device=dev)
    span_face = span_owner if owner is None else owner.index_select(0, span_owner)
    edges = edge_tab.index_select(0, span_face).unbind(1)  # 14 x [S]
    s0, s1 = _row_spans(edges, rows, c0.index_select(0, span_face), c1.index_select(0, span_face))
    del edges
    keep = flat_nonzero(s1 >= s0)
    if keep.numel() == 0:
        return kept
    span_face, rows, s0, s1 = _take((span_face, rows, s0, s1), keep)
    row_id = b.index_select(0, span_face) * buf.Hp + rows  # [S] row of the padded buffers
    lengths = s1 - s0 + 1
    total = int(lengths.sum())
    if contest is None and total < _SPARSE_SPAN * s0.numel():
        # short spans (small faces): one fragment per covered sample, no wasted lanes
        span_tab = _span_table(consts, span_face, rows, zmin if reject else None)
        gid = g.index_select(0, span_face)
        ends = torch.cumsum(lengths, 0).cpu()
        piece = max_runs * _TILE
        begin = 0
        while begin < total:  # pieces of at most `piece` fragments; spans are never split
            i0 = int(torch.searchsorted(ends, begin, right=True))
            i1 = max(i0 + 1, int(torch.searchsorted(ends, begin + piece, right=True)))
            stop = int(ends[i1 - 1])
            _fragments_sparse(buf, s0[i0:i1], lengths[i0:i1], row_id[i0:i1], stop - begin,
                              span_tab[i0:i1], gid[i0:i1])
            begin = stop
        return kept

    # runs: the 8-aligned pieces of the spans (pixel ids run * 8 + lane, lane in 0..7)
    t0, t1 = s0 >> _TILE_BITS, s1 >> _TILE_BITS
    nrun = t1 - t0 + 1
    n_run = int(nrun.sum())
    run_span = torch.repeat_interleave(torch.arange(s0.numel(), device=dev), nrun, output_size=n_run)
    run_start = torch.cumsum(nrun, 0) - nrun
    run = (row_id * (buf.Wp >> _TILE_BITS) + t0 - run_start).index_select(0, run_span) \
        + torch.arange(n_run, device=dev)  # [R] run id in the padded buffers
    code = _run_codes(s0, s1, nrun, run_start, n_run)  # [R] the covered lanes of each run
    if reject:  # runs hidden behind the buffer
        run_near = near.index_select(0, span_face).index_select(0, run_span)
        vis = flat_nonzero(buf.row_max.index_select(0, run) >= run_near)
        if vis.numel() == 0:
            return kept
        run_span, run = run_span.index_select(0, vis), run.index_select(0, vis)
        code = code.index_select(0, vis)

    step = min(max_runs, _PIECE_RUNS)
    if contest is not None:  # coverage only: the covered lanes of each run and its face's rank
        rank = near.index_select(0, span_face).index_select(0, run_span)
        for i0 in range(0, run.numel(), step):
            contest.cover(run[i0:i0 + step], code[i0:i0 + step], rank[i0:i0 + step])
            if contest.count > contest.cap:  # the recorded fragments would outgrow the budget
                contest.flush(scene, buf)
        return kept
    # sorted faces: each piece also drops the runs hidden behind what the earlier pieces drew
    span_zmin = None if zmin is None else zmin.index_select(0, span_face)
    span_tab = _span_table(consts, span_face, rows, None)
    span_int = torch.stack([s0, s1, g.index_select(0, span_face)], dim=1)  # [S, 3]: covered columns, face id
    del consts
    # (smaller pieces reject more but cost more per call: 2048 runs measured slower than 8192)
    for i0 in range(0, run.numel(), step):  # pieces that fit the memory budget (and the cache)
        _fragments(buf, run[i0:i0 + step], run_span[i0:i0 + step], span_tab, span_int, span_zmin=span_zmin,
                   code=code[i0:i0 + step])
    return kept


def _span_table(consts: torch.Tensor, span_face, rows, zmin) -> torch.Tensor:
    """float ``[S, 13 (+1)]`` per span: the row-constant parts of the rule's barycentric
    expressions (``a_k = e_kx * (py - y_k')``), the face constants the rest needs
    (``e0y, e1y, e2y, x1, x2, x0, d, z0, z1, z2``), and optionally ``zmin``. One stacked table, so
    that fragments gather all of it with one ``index_select``."""
    # reorder the (few) face rows first, so that spans gather them with one plain row copy:
    # e0x, y1, e1x, y2, e2x, y0 (for the a_k), then the 10 columns the samples need
    face = consts.index_select(1, torch.tensor(_SPAN_COLUMNS, device=consts.device))  # [n, 16]
    c = face.index_select(0, span_face)  # [S, 16]
    py = rows.to(c.dtype) + 0.5
    tab = torch.empty(c.shape[0], 13 if zmin is None else 14, dtype=c.dtype, device=c.device)
    for k in range(3):  # a_k = e_kx * (py - y_k')
        torch.mul(c[:, 2 * k], py - c[:, 2 * k + 1], out=tab[:, k])
    tab[:, 3:13] = c[:, 6:]
    if zmin is not None:
        tab[:, 13] = zmin.index_select(0, span_face)
    return tab


#: columns of :func:`_bary_inputs` read by :func:`_span_table`: ``e0x, y1, e1x, y2, e2x, y0``, then
#: ``e0y, e1y, e2y, x1, x2, x0, d, z0, z1, z2``
_SPAN_COLUMNS = (0, 9, 2, 11, 4, 7, 1, 3, 5, 8, 10, 6, 12, 13, 14, 15)


def _fragments_sparse(buf: _Buffers, s0, lengths, row_id, n: int, span_tab, gid) -> None:
    """Expand spans (first column ``s0``, ``lengths``, buffer row ``row_id``) into their ``n``
    samples, one fragment each, and resolve them into ``buf``."""
    dev = s0.device
    span = torch.repeat_interleave(torch.arange(s0.numel(), device=dev), lengths, output_size=n)
    start = torch.cumsum(lengths, 0) - lengths
    col = (s0 - start).index_select(0, span) + torch.arange(n, device=dev)  # [N]
    pix = (row_id * buf.Wp).index_select(0, span) + col
    old = buf.depth.index_select(0, pix)
    if span_tab.shape[1] > 13:  # early depth rejection per fragment (conservative)
        alive = flat_nonzero(old >= span_tab[:, 13].index_select(0, span))
        if alive.numel() == 0:
            return
        if alive.numel() != n:
            span, col, pix, old = _take((span, col, pix, old), alive)
    tab = span_tab.index_select(0, span).unbind(1)[:13]  # 13 x [N]
    px = col.to(span_tab.dtype) + 0.5
    lz = _bary_depth(tab, px)  # [4, N]: l0, l1, l2, z
    z = lz[3]
    ok = z < math.inf  # NaN and +inf never cover a sample
    z.masked_fill_(~ok, math.inf)
    buf.depth.scatter_reduce_(0, pix, z, reduce="amin", include_self=True)
    at_min = flat_nonzero((z == buf.depth.index_select(0, pix)) & ok)
    if at_min.numel() == 0:
        return
    _settle(buf, pix.index_select(0, at_min), old.index_select(0, at_min),
            gid.index_select(0, span.index_select(0, at_min)), lz, at_min)


def _settle(buf: _Buffers, pix, old, gid, lz, at_min) -> None:
    """Second half of the resolve, for the fragments ``at_min [M]`` (of ``lz [4, N]``: ``l0, l1,
    l2, z``) whose depth equals the buffer's new minimum, at pixels ``pix [M]`` with previous depth
    ``old [M]``: the lowest face id ``gid [M]`` wins; the winner's barycentrics are stored."""
    lost = flat_nonzero(lz[3].index_select(0, at_min) < old)
    buf.winner.index_fill_(0, pix.index_select(0, lost), buf.empty)  # the old winner lost these
    buf.winner.scatter_reduce_(0, pix, gid, reduce="amin", include_self=True)
    if buf.bary is None:  # face ids only
        return
    won = flat_nonzero(buf.winner.index_select(0, pix) == gid)  # one per pixel
    wp, won = pix.index_select(0, won), at_min.index_select(0, won)
    for k in range(3):
        put_at(buf.bary[k], wp, lz[k].index_select(0, won))


def _settle_masked(buf: _Buffers, pix, old, gid, lz, at_min) -> None:
    """:func:`_settle` without compaction (no host synchronization): every fragment takes part,
    those not ``at_min`` (bool ``[N]``) write only into the buffers' sink slot ``buf.n``."""
    sink = torch.full_like(pix, buf.n)
    lost = at_min & (lz[3] < old)
    buf.winner.index_fill_(0, torch.where(lost, pix, sink), buf.empty)  # the old winner lost these
    buf.winner.scatter_reduce_(0, pix, torch.where(at_min, gid, buf.empty), reduce="amin", include_self=True)
    if buf.bary is None:  # face ids only
        return
    won = torch.where(at_min & (buf.winner.index_select(0, pix) == gid), pix, sink)  # one per pixel
    buf.bary.index_copy_(1, won, lz[:3])


def _bary_depth(tab: torch.Tensor, px: torch.Tensor) -> torch.Tensor:
    """float ``[4, *px.shape]``: ``l0, l1, l2, z`` of samples at columns ``px`` (pixel centers)
    from the 13 span table columns ``tab`` (broadcast against ``px``).

    Exactly the rule's expressions ``l0 = (a0 - e0y * (px - x1)) / d`` etc. and
    ``z = l0 * z0 + l1 * z1 + l2 * z2`` (left to right), written with in-place operations into one
    buffer so that no temporaries are allocated per operation."""
    a0, a1, a2, e0y, e1y, e2y, x1, x2, x0, d, z0, z1, z2 = tab
    out = torch.empty((4, *px.shape), dtype=px.dtype, device=px.device)
    l0, l1, l2, z = out
    for lk, ak, eky, xk in ((l0, a0, e0y, x1), (l1, a1, e1y, x2), (l2, a2, e2y, x0)):
        torch.sub(px, xk, out=lk)
        lk.mul_(eky)  # e_ky * (px - x_k'), multiplication commutes exactly
        torch.sub(ak, lk, out=lk)
        lk.div_(d)
    torch.mul(l0, z0, out=z)
    tmp = l1 * z1
    z.add_(tmp)
    torch.mul(l2, z2, out=tmp)
    z.add_(tmp)
    return out


_COVERAGE: dict = {}


def _coverage_table(device: torch.device) -> torch.Tensor:
    """bool ``[10 * 10, 8]``: row ``(first + 1) * 10 + (last + 1)`` marks the lanes
    ``first <= lane <= last`` of a run, for ``first, last`` in ``-1 .. 8``."""
    table = _COVERAGE.get(device)
    if table is None:
        ends = torch.arange(-1, _TILE + 1, device=device)  # [10]
        lane = torch.arange(_TILE, device=device)
        table = (lane >= ends[:, None, None]) & (lane <= ends[None, :, None])  # [10, 10, 8]
        table = _COVERAGE[device] = table.reshape(-1, _TILE)
    return table


def _lane_code(buf: _Buffers, run, s0, s1, col0=None) -> torch.Tensor:
    """int64 ``[R]``: the row of :func:`_coverage_table` that marks the lanes of runs ``run [R]``
    inside their span's covered columns ``[s0, s1]`` (first..last, clamped to -1..8)."""
    if col0 is None:
        col0 = (run % (buf.Wp >> _TILE_BITS)) << _TILE_BITS  # [R] column of lane 0
    first, last = (s0 - col0).clamp_(-1, _TILE), (s1 - col0).clamp_(-1, _TILE)
    return (first + 1) * (_TILE + 2) + (last + 1)


def _run_codes(s0, s1, nrun, run_start, n_run: int) -> torch.Tensor:
    """int64 ``[R]``: :func:`_lane_code` of every run of spans ``[s0, s1]`` (``nrun`` runs each,
    the first at ``run_start``), from the spans alone: a span's inner runs are covered whole, its
    first run from column ``s0 % 8`` and its last up to ``s1 % 8``."""
    side = _TILE + 2
    whole = _TILE + 1  # first lane -1, last lane 8 (both clamped)
    code = torch.full((n_run,), whole, dtype=torch.int64, device=s0.device)
    first, last = (s0 & (_TILE - 1)) + 1, (s1 & (_TILE - 1)) + 1
    code.index_copy_(0, run_start, first * side + whole)
    code.index_copy_(0, run_start + nrun - 1, torch.where(nrun == 1, first * side + last, last))
    return code


def _fragments(buf: _Buffers, run, run_span, span_tab, span_int, masked: bool = False, span_zmin=None,
               code=None) -> None:
    """Evaluate the ``[R, 8]`` samples of runs ``run [R]`` (of spans ``run_span [R]``) and
    resolve them into ``buf``. Lanes outside their span's covered columns are ignored. With
    ``span_zmin`` (float ``[S]``, a lower bound of each span's depths), runs lying behind every
    pixel the buffer holds now are dropped first. ``code [R]`` (:func:`_run_codes`) gives each
    run's covered lanes; without it they are worked out from the runs' columns."""
    runs = buf.depth.view(-1, _TILE)
    if span_zmin is not None:
        old = runs.index_select(0, run)  # [R, 8]
        vis = flat_nonzero(old.amax(1) >= span_zmin.index_select(0, run_span))
        if vis.numel() == 0:
            return
        if vis.numel() != run.numel():
            run, run_span = run.index_select(0, vis), run_span.index_select(0, vis)
            code = None if code is None else code.index_select(0, vis)
    tab = span_tab.index_select(0, run_span)[:, :, None].unbind(1)  # 13 x [R, 1]
    lane = torch.arange(_TILE, device=run.device)  # [8]
    col0 = (run % (buf.Wp >> _TILE_BITS)) << _TILE_BITS  # [R] column of lane 0
    if code is None:
        s0, s1, gid = span_int.index_select(0, run_span).unbind(1)
        code = _lane_code(buf, run, s0, s1, col0)
    else:
        gid = span_int[:, 2].index_select(0, run_span)
    covered = _coverage_table(run.device).index_select(0, code)  # [R, 8]
    px = (col0.to(span_tab.dtype) + 0.5)[:, None] + lane.to(span_tab.dtype)  # exact: integers + 0.5
    lz = _bary_depth(tab, px).view(4, -1)  # [4, R*8]: l0, l1, l2, z
    z = lz[3]
    ok = (covered.view(-1) & (z < math.inf))  # NaN and +inf never cover a sample
    z.masked_fill_(~ok, math.inf)
    old = runs.index_select(0, run).view(-1)  # [R*8]
    pix = ((run << _TILE_BITS)[:, None] + lane).view(-1)  # [R*8]
    buf.depth.scatter_reduce_(0, pix, z, reduce="amin", include_self=True)
    if masked:
        _settle_masked(buf, pix, old, gid.repeat_interleave(_TILE, output_size=pix.numel()), lz,
                       (z == runs.index_select(0, run).view(-1)) & ok)
        return
    at_min = flat_nonzero((z == runs.index_select(0, run).view(-1)) & ok)
    if at_min.numel() == 0:
        return
    _settle(buf, pix.index_select(0, at_min), old.index_select(0, at_min), gid.index_select(0, at_min >> _TILE_BITS),
            lz, at_min)


class _Contest:
    """Face ids of front-to-back chunks resolved by depth bounds, exact depths only where needed.

    The faces are ranked in drawing order, which sorts them by ``zmin``. Every pixel first takes
    the covering face of lowest rank, ``w``: since later chunks hold higher ranks, a pixel's ``w``
    is final once a chunk has covered it. Another face ``f`` covering the pixel can only be
    nearer than ``w`` (or tie with it) when their depth bounds overlap, ``zmin[f] <= zmax[w]``
    (:func:`_z_range`), that is when ``rank(f) <= reach[w]``, the last rank whose ``zmin`` is at
    most ``zmax[w]``; such a fragment is *contested* and recorded. Faces with unknown bounds
    count as ``(-inf, +inf)``. :meth:`finish` evaluates the rule's exact depth for the contested
    fragments and the ``w`` of their pixels (and wherever ``w``'s bounds are unknown) and
    resolves those pixels as :func:`_settle` does: nearest depth, then lowest global face id.
    Everywhere else ``w`` wins: every other face covering the pixel lies strictly behind it.

    The hidden-band and hidden-run rejection between chunks works in ranks too: a face of rank
    ``r`` lies behind a pixel exactly when ``r > reach[w]`` (``zmin[r] > zmax[w]``), so the
    buffer's summaries hold the maxima of ``reach[w]`` (:meth:`summarize`) and the rejection
    compares ranks with them, with the same outcome as comparing ``zmin`` with the maxima of
    ``zmax[w]``. :meth:`finish` fills ``buf.winner`` with global face ids and sets ``buf.depth``
    to ``None``.
    """

    def __init__(self, buf: _Buffers, g: torch.Tensor, zmin: torch.Tensor, zmax: torch.Tensor, reach: torch.Tensor,
                 consts: torch.Tensor | None, cap: int):
        n_live = g.numel()
        dev = g.device
        #: [16, n_live] barycentric constants by rank (:func:`_face_tables`, one row per column, so
        #: that the few candidates of :meth:`finish` gather each with a plain copy), or None
        self.consts = None if consts is None else consts.T.contiguous()
        self.none, self.pad = n_live, n_live + 1  # the ranks of "no face" and of the padding
        self.g = torch.cat([g, g.new_full((2,), buf.empty)])  # rank -> global face id
        self.zmax = torch.cat([zmax, zmax.new_full((2,), math.inf)])
        self.unknown = not bool(torch.isfinite(zmax).all())  # some faces' depths are unbounded
        reach = reach.int()  # per rank the last rank whose zmin is at most its zmax (zmin is sorted)
        #: int32 [n_live + 2]: ``reach``; "no face" and the padding contest nothing
        self.reach = torch.cat([reach, reach.new_full((2,), -1)])
        #: int32 [n_live + 2]: what the summaries take of each pixel's rank: ``reach``, and where
        #: no face is, past every rank (nothing is hidden there); the padding hides everything
        self.hides = torch.cat([reach, reach.new_tensor([n_live, -1])])
        #: int32 [100, 8]: added to a run's rank, per row of :func:`_coverage_table`: 0 on covered
        #: lanes, ``pad`` elsewhere (so an uncovered lane's value is never below a pixel's own)
        self.lanes = (~_coverage_table(dev)).int() * self.pad
        self.base = 0  # rank of the first face of the chunk being drawn
        self.pix: list[torch.Tensor] = []  # contested fragments: pixel ids and ranks
        self.rank: list[torch.Tensor] = []
        self.count = 0  # contested fragments recorded
        self.cap = cap  # recorded fragments that trigger a flush
        self.rank_of: torch.Tensor | None = None  # int32 [B * F + 1]: global face id -> rank, once needed
        #: int32 [n + 1]: per pixel the rank of ``w`` (int32: half the memory traffic of int64)
        self.best = torch.full((buf.n + 1,), n_live, dtype=torch.int32, device=dev)
        if (buf.Hp, buf.Wp) != (buf.H, buf.W):
            self.best[: buf.n].masked_fill_(buf.depth == -math.inf, self.pad)  # the padding (drawn nothing yet)

    def cover(self, run, code, rank) -> None:
        """Resolve the covered samples of runs ``run [R]`` (covered lanes ``code [R]``, see
        :func:`_lane_code`, of faces of int32 rank ``rank [R]``)."""
        lane_rank = (self.lanes.index_select(0, code) + rank[:, None]).view(-1)
        pix = ((run << _TILE_BITS)[:, None] + torch.arange(_TILE, device=run.device)).view(-1)  # [R*8]
        self.best.scatter_reduce_(0, pix, lane_rank, reduce="amin", include_self=True)
        w = self.best.index_select(0, pix)
        # covered (so at least w), not w, and not behind w's bounds; uncovered lanes exceed every reach
        contested = (lane_rank > w) & (lane_rank <= self.reach.index_select(0, w))
        at = flat_nonzero(contested)
        if at.numel():
            self.pix.append(pix.index_select(0, at))
            self.rank.append(lane_rank.index_select(0, at))
            self.count += at.numel()

    def summarize(self, buf: _Buffers) -> None:
        """The buffer's summaries for the next chunk's rejection, in ranks (see the class)."""
        buf.summarize(self.hides.index_select(0, self.best[: buf.n]))

    def flush(self, scene: _Scene, buf: _Buffers) -> None:
        """Exact resolve of the pixels contested so far into ``best``, which then holds their
        winner (not always their lowest rank): valid between pieces, since later pieces hold
        higher ranks, which contest a pixel against its winner as against ``w``. Bounds the
        memory of the recorded fragments (``cap``) and ends the resolve (:meth:`finish`)."""
        settle = list(self.pix)  # pixels whose w takes part: those contested (repeats do no harm)
        if self.unknown:  # and those whose w has unbounded depth: does it cover at all?
            rank = self.best[: buf.n]
            settle.append(flat_nonzero(torch.isinf(self.zmax.index_select(0, rank)) & (rank < self.none)))
        if not settle:
            return
        settle = torch.cat(settle)
        pix = torch.cat([settle, *self.pix])  # [N] candidates: the w of those pixels, the contested
        rank = torch.cat([self.best.index_select(0, settle), *self.rank])
        self.pix, self.rank, self.count = [], [], 0
        gid = self.g.index_select(0, rank)
        z = torch.empty(pix.numel(), dtype=buf.depth.dtype, device=pix.device)
        for i in range(0, pix.numel(), _SETTLE_BLOCK):  # blocks whose temporaries stay in the cache
            part = slice(i, i + _SETTLE_BLOCK)
            if self.consts is None:
                idx = scene.corners(gid[part])
                c = _bary_inputs(scene, idx, *scene.snapped(idx))
            else:
                c = [row.index_select(0, rank[part]) for row in self.consts]
            z[part] = _exact_depth(buf, c, pix[part])
        ok = z < math.inf  # NaN and +inf never cover a sample
        z.masked_fill_(~ok, math.inf)
        near = buf.depth  # not a bound here (the summaries are in ranks): the candidates' nearest exact depth
        near.index_fill_(0, pix, math.inf)
        near.scatter_reduce_(0, pix, z, reduce="amin", include_self=True)
        at = flat_nonzero(ok & (z == near.index_select(0, pix)))
        won = buf.winner  # unused otherwise: the nearest candidates' lowest global id
        won.index_fill_(0, pix, buf.empty)
        won.scatter_reduce_(0, pix.index_select(0, at), gid.index_select(0, at), reduce="amin", include_self=True)
        if self.rank_of is None:  # global face id -> rank
            self.rank_of = torch.full((buf.empty + 1,), self.none, dtype=torch.int32, device=pix.device)
            self.rank_of.index_copy_(0, self.g[: self.none],
                                     torch.arange(self.none, dtype=torch.int32, device=pix.device))
        self.best.index_copy_(0, pix, self.rank_of.index_select(0, won.index_select(0, pix)))  # none: nothing covers

    def finish(self, scene: _Scene, buf: _Buffers) -> None:
        """The last :meth:`flush`; ``buf.ranks`` := ``(best, g)``: per pixel (and the sink slot) its
        face's rank, and per rank its global face id."""
        self.flush(scene, buf)
        buf.ranks, buf.winner, buf.depth = (self.best, self.g), None, None


def _exact_depth(buf: _Buffers, c, pix: torch.Tensor) -> torch.Tensor:
    """float ``[N]``: the rule's depth at padded pixel ids ``pix`` of faces with the constants
    ``c`` (16 x ``[N]``, :func:`_bary_inputs`), in the same operations as the span path
    (:func:`_span_table`, :func:`_bary_depth`), so the same bits."""
    rows = torch.div(pix, buf.Wp, rounding_mode="floor") % buf.Hp
    py = rows.to(c[0].dtype) + 0.5
    px = (pix % buf.Wp).to(c[0].dtype) + 0.5
    cols = [c[k] for k in _SPAN_COLUMNS]
    a = [cols[2 * k] * (py - cols[2 * k + 1]) for k in range(3)]  # a_k = e_kx * (py - y_k'), as _span_table
    return _bary_depth(a + cols[6:], px)[3]


def global_face_ids(batch: TriangleBatch, size: tuple[int, int], settings: RasterSettings) -> torch.Tensor:
    """int64 ``[B, H, W]``: the global face id ``b * F + f`` of every pixel's face, ``B * F`` where
    empty (a row index into a ``[B * F + 1, ...]`` table whose last row is the background)."""
    buf = resolve_faces(batch, size, settings, with_bary=False)
    if buf.winner is None:  # resolved in ranks (_Contest)
        best, g = buf.ranks
        return buf.crop(g.index_select(0, best))
    return buf.crop(buf.winner)


def global_face_rows(batch: TriangleBatch, size: tuple[int, int], settings: RasterSettings,
                     table: torch.Tensor) -> torch.Tensor:
    """``[B, H, W, C]``: the row of ``table`` (``[B * F + 1, C]``, the last row for empty pixels)
    of every pixel's face, as ``table[global_face_ids(...)]``. Where the faces were resolved in
    ranks, the few rows of the drawn faces are gathered first, then by rank."""
    buf = resolve_faces(batch, size, settings, with_bary=False)
    if buf.winner is None:  # resolved in ranks (_Contest)
        best, g = buf.ranks
        rows = table.index_select(0, g).index_select(0, best)  # [n + 1, C]
    else:
        rows = table.index_select(0, buf.winner)
    return rows[: buf.n].view(buf.B, buf.Hp, buf.Wp, -1)[:, : buf.H, : buf.W].contiguous()


# --------------------------------------------------------------------------------------------
# Stage 2: fragments of the winners
# --------------------------------------------------------------------------------------------


def pixel_fragments(batch: TriangleBatch, size: tuple[int, int], buf: _Buffers) -> Fragments:
    """``Fragments`` from the resolved buffers of stage 1, in the compute dtype.

    When the batch's vertices need gradients, barycentrics and depth are evaluated again per
    covered pixel from the unsnapped positions, with autograd, in exactly the rule's
    expressions (so the values are the same bits as stage 1's). Otherwise stage 1's values are
    used as they are. After a one-pass resolve every pixel is evaluated and the empty ones
    masked, so that no shape depends on values (no host synchronization); else only the
    covered pixels are.
    """
    height, width = size
    B, F = batch.batch_size, batch.num_faces
    dev = batch.device
    dtype = compute_dtype(dev)
    shape = (B, height, width, 1)
    n_pix = B * height * width
    winner = buf.crop(buf.winner).reshape(-1)  # [B*H*W] global face ids
    empty = winner == buf.empty
    clip = batch.is_clip_space
    grad = torch.is_grad_enabled() and batch.vertices.requires_grad
    if (not grad and not clip) or F == 0:  # stage 1's values are final
        b = torch.div(winner, max(F, 1), rounding_mode="floor") if B > 1 else 0
        face_index = torch.where(empty, -1, winner - b * F)
        return Fragments(
            face_index=face_index.reshape(shape),
            bary=buf.crop(buf.bary).permute(1, 2, 3, 0).reshape(*shape, 3),
            depth=buf.crop(buf.depth).reshape(shape),
            screen_bary=torch.zeros(*shape, 3, dtype=dtype, device=dev) if clip else None,
        )
    if buf.one_pass:  # every pixel, empty ones masked
        pixel = torch.arange(n_pix, device=dev)
        g = torch.where(empty, 0, winner)
    else:  # the covered pixels only
        pixel = flat_nonzero(~empty)  # [N]
        g = winner.index_select(0, pixel)
    b = torch.div(g, F, rounding_mode="floor") if B > 1 else torch.zeros_like(g)
    f = g - b * F
    l0, l1, l2, z, w = _winner_values(batch, size, buf, f, b, pixel, None if buf.one_pass else pixel, grad, dtype)
    if buf.one_pass:
        zero = torch.zeros((), dtype=dtype, device=dev)
        l0, l1, l2 = (torch.where(empty, zero, lk) for lk in (l0, l1, l2))
        z = torch.where(empty, math.inf, z)
        face_index = torch.where(empty, -1, f)
    else:
        face_index = put_at(torch.full((n_pix,), -1, dtype=torch.int64, device=dev), pixel, f)
        l0, l1, l2 = (torch.zeros(n_pix, dtype=dtype, device=dev).scatter(0, pixel, lk) for lk in (l0, l1, l2))
        z = torch.full((n_pix,), math.inf, dtype=dtype, device=dev).scatter(0, pixel, z)
        w = None if w is None else [torch.ones(n_pix, dtype=dtype, device=dev).scatter(0, pixel, wk) for wk in w]
    screen_bary = None
    if clip:
        screen_bary = torch.stack([l0, l1, l2], -1)
        q0, q1, q2 = l0 / w[0], l1 / w[1], l2 / w[2]
        s = q0 + q1 + q2
        s = torch.where(empty, 1.0, s)
        l0, l1, l2 = q0 / s, q1 / s, q2 / s
    return Fragments(
        face_index=face_index.reshape(shape),
        bary=torch.stack([l0, l1, l2], -1).reshape(*shape, 3),
        depth=z.reshape(shape),
        screen_bary=None if screen_bary is None else screen_bary.reshape(*shape, 3),
    )


def _winner_values(batch: TriangleBatch, size, buf: _Buffers, f, b, pixel, covered, grad: bool, dtype):
    """float ``[N]`` ``l0, l1, l2, z`` (screen-space barycentrics and depth) of faces ``f`` of
    images ``b`` at flat pixels ``pixel`` (``b * H * W + row * W + col``), and the corners' ``w``
    (3 x ``[N]``, clip space only, else None). With ``grad`` evaluated again from the
    unsnapped positions with autograd; else read from stage 1's buffers (at ``covered``, or
    every pixel when None)."""
    height, width = size
    V = batch.vertices.shape[1]
    idx = torch.stack([row.index_select(0, f) for row in batch.faces.T]) + b * V  # [3, N] vertex ids
    w = None
    if batch.is_clip_space:
        w = batch.vertices[..., 3].to(dtype).reshape(-1).index_select(0, idx.reshape(-1)).view(3, -1)
    if not grad:
        if covered is None:
            l0, l1, l2 = (buf.crop(buf.bary[k]).reshape(-1) for k in range(3))
            return l0, l1, l2, buf.crop(buf.depth).reshape(-1), w
        l0, l1, l2 = (buf.crop(buf.bary[k]).reshape(-1).index_select(0, covered) for k in range(3))
        return l0, l1, l2, buf.crop(buf.depth).reshape(-1).index_select(0, covered), w
    screen = batch.screen_vertices(size).to(dtype)  # [B, V, 3], differentiable
    flat = screen.reshape(-1)
    x, y, zv = (flat.index_select(0, (idx * 3 + k).reshape(-1)).view(3, -1) for k in range(3))
    x0, x1, x2 = x
    y0, y1, y2 = y
    d = (x1 - x0) * (y2 - y0) - (y1 - y0) * (x2 - x0)
    # float area zero: the rule uses the snapped positions (applied everywhere: no sync to ask)
    fallback = d.detach() == 0.0
    sx = torch.round(x.detach() * SUBPIXEL) / SUBPIXEL
    sy = torch.round(y.detach() * SUBPIXEL) / SUBPIXEL
    x0, x1, x2 = torch.where(fallback, sx, x)
    y0, y1, y2 = torch.where(fallback, sy, y)
    d = (x1 - x0) * (y2 - y0) - (y1 - y0) * (x2 - x0)
    d = torch.where(d.detach() == 0.0, 1.0, d)  # empty pixels (face 0 stands in) stay finite
    rest = pixel - b * (height * width)
    row = torch.div(rest, width, rounding_mode="floor")
    px = (rest - row * width).to(dtype) + 0.5
    py = row.to(dtype) + 0.5
    l0 = ((x2 - x1) * (py - y1) - (y2 - y1) * (px - x1)) / d
    l1 = ((x0 - x2) * (py - y2) - (y0 - y2) * (px - x2)) / d
    l2 = ((x1 - x0) * (py - y0) - (y1 - y0) * (px - x0)) / d
    z = l0 * zv[0] + l1 * zv[1] + l2 * zv[2]
    return l0, l1, l2, z, w
