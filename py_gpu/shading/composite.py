"""Compositing: per-fragment colors over a background, hard (nearest face) or soft (blended).

Every path that turns ``Fragments`` into a ``Frame`` comes through here: the backends'
``render_frame``, the front end's clipped path and the ``Renderer``'s shading pass.

Soft mode works in the tiles of :mod:`py_gpu.raster.torch_soft` (bands of rows that fit
``RasterSettings.memory_budget``): :func:`render_soft_frame` selects each tile's faces, then
gathers, colors and blends them in blocks of a few MB of temporaries, and :func:`shade_soft`
blends given fragments tile by tile. Neither keeps a whole-frame K-slot tensor, nor anything per
tile for the backward pass, which evaluates one tile at a time again.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from .._check import PyGpuTypeError, check_rgb, check_size
from ..contracts import Fragments, Frame, TriangleBatch
from ..raster._scatter import flat_nonzero, put_at, split_index
from ..raster.torch_soft import (FaceSelector, TileLoop, _affine, _clamped, _perspective, blend_window, exp_normal,
                                 gather_bytes_per_slot, gather_tile_planes, plan_tiles, plan_with_room, rasterize_soft,
                                 slot_centers)
from ..settings import BlendSettings, RasterSettings
from .blend import blend_planes, depth_range, nearest_covering, silhouette, slot_weights, weighted
from .interpolate import corner_ids, gather_face, interpolate_vertex, weigh_corners

__all__ = ["background_tensor", "slot_colors", "composite_hard", "composite_soft", "at_slot",
           "shade_hard", "shade_soft", "shade_fragments", "render_soft", "render_soft_frame"]


def background_tensor(background, channels: int, dtype: torch.dtype, device) -> torch.Tensor:
    """float ``[C]``: the background RGB in the first ``min(3, C)`` channels, 0 in the others."""
    bg = torch.zeros(channels, dtype=dtype, device=device)
    n = min(3, channels)
    bg[:n] = torch.tensor(list(background)[:n], dtype=dtype, device=device)
    return bg


def slot_colors(batch: TriangleBatch, frags: Fragments) -> torch.Tensor:
    """float ``[B, H, W, K, C]``: each fragment's color (vertex colors interpolated, face colors
    gathered, white without colors) in ``frags.bary``'s dtype; 0 where empty."""
    return _slot_colors(batch.vertex_colors, batch.face_colors, batch.faces, frags)


def _slot_colors(vertex_colors: torch.Tensor | None, face_colors: torch.Tensor | None, faces: torch.Tensor,
                 frags: Fragments) -> torch.Tensor:
    """:func:`slot_colors` from the color tensors (``[B | 1, V, C]`` / ``[B | 1, F, C]``, or None)."""
    dtype = frags.bary.dtype
    if face_colors is not None:
        return gather_face(face_colors.to(dtype), frags.face_index)
    if vertex_colors is not None:
        return interpolate_vertex(vertex_colors.to(dtype), faces, frags.face_index, frags.bary)
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
                   blend_settings: BlendSettings, zrange: torch.Tensor | None = None,
                   weights: torch.Tensor | None = None) -> tuple[Frame, torch.Tensor]:
    """Soft blend of ``colors`` ``[B, H, W, K, C]`` (or a list of C ``[B, H, W, K]`` planes) over the
    background, in ``blend_settings.composite``'s form (``zrange``: float ``[B, 2]`` depth range,
    see :func:`py_gpu.shading.blend.depth_range`; None derives it from the fragments; ``weights``:
    the ``"over"`` form's :func:`~py_gpu.shading.blend.face_weights`, when already computed).

    Returns the ``Frame`` (soft silhouette alpha; depth and face of the nearest fragment whose
    face contains the pixel center) and that fragment's slot, int64 ``[B, H, W]``.
    """
    planes = list(colors) if isinstance(colors, (list, tuple)) else colors.unbind(-1)
    bg = background_tensor(background, len(planes), planes[0].dtype, planes[0].device)
    image = blend_planes(planes, frags, bg, settings, blend_settings, zrange, weights)
    face, depth, slot = nearest_covering(frags)
    return Frame(image=image, alpha=silhouette(frags, settings), depth=depth, face_index=face), slot


def shade_hard(batch: TriangleBatch, frags: Fragments, background) -> Frame:
    """Hard-mode ``Frame`` of ``batch``'s colors at ``frags`` (K = 1), in ``frags.bary``'s dtype."""
    return composite_hard(slot_colors(batch, frags), frags, background)


def shade_soft(batch: TriangleBatch, frags: Fragments, background, settings: RasterSettings,
               blend_settings: BlendSettings) -> Frame:
    """Soft-mode ``Frame`` of ``batch``'s colors at soft ``frags``, blended in tiles that fit
    ``settings.memory_budget`` (the same values as :func:`composite_soft` on the whole frame).

    Raises:
        MemoryBudgetError: the budget cannot hold the work of one pixel, or the frame is larger
            than ``RETURNED_PER_BUDGET`` times the budget.
    """
    if frags.dist is None:
        raise PyGpuTypeError("soft blending needs soft Fragments (with `dist`); rasterize with mode='soft'")
    B, H, W, K = frags.face_index.shape
    colors = batch.face_colors if batch.face_colors is not None else batch.vertex_colors
    C = 3 if colors is None else colors.shape[-1]
    dtype = frags.bary.dtype
    plan = plan_tiles("shade_soft", batch=B, size=(H, W), faces=batch.num_faces, faces_per_pixel=K, dtype=dtype,
                      budget=settings.memory_budget, slot_bytes=shade_bytes_per_slot(dtype, C),
                      returned=_frame_bytes(B, H, W, C, dtype), select=False)
    faces = batch.faces
    clip = frags.screen_bary is not None

    def index(t: tuple) -> torch.Tensor:
        b, r0, r1, c0, c1 = t
        return frags.face_index[b, r0:r1, c0:c1]

    zrange = _batch_range(batch, frags, blend_settings)

    def tile(t, fi, bary, depth, dist, screen_bary, alpha, vertex_colors, face_colors, zr):
        part = Fragments(fi[None], bary[None], depth[None], dist[None], screen_bary[None] if clip else None,
                         None if alpha is None else alpha[None])
        return _blend_tile(_color_planes(vertex_colors, face_colors, faces, fi, part.bary[0].unbind(-1)), part,
                           background, settings, blend_settings, zr[None])

    loop = TileLoop(plan, index, tile, _frame_outputs(B, H, W, C, dtype, frags.face_index.device),
                    per_pixel=(True, True, True, True, True))
    image, alpha, depth, face = loop(frags.bary, frags.depth, frags.dist, frags.screen_bary, frags.alpha,
                                     batch.vertex_colors, batch.face_colors, zrange)
    return Frame(image=image, alpha=alpha, depth=depth, face_index=face)


def render_soft_frame(batch: TriangleBatch, size: tuple[int, int], background, settings: RasterSettings,
                      blend_settings: BlendSettings) -> Frame:
    """Soft-mode ``Frame`` of a drawable ``batch`` (screen space, or clip space with every ``w > 0``).

    Each tile (rows, or a piece of a row) is selected, then gathered, colored and blended in
    blocks of at most ``_SHADE_SLOTS`` slots, so the working set is one tile's (it fits
    ``settings.memory_budget``) and only the ``Frame`` is whole-frame. Where no face reaches part
    of a tile, only the reached pixels are gathered and blended (the others are the background,
    alpha 0, no face). With autograd, every tile's faces are selected first, and the selected face
    indices (int32), with their distance and depth for the shading and which of them have blend
    weight, are kept when they take at most ``1 / KEEP_SHARE`` (a quarter) of the budget;
    otherwise the backward pass selects each tile's faces again. The values are those of :func:`shade_soft` on
    :func:`py_gpu.raster.torch_soft.rasterize_soft`'s fragments.

    Raises:
        MemoryBudgetError: the budget cannot hold the work of one pixel (and the face table), or
            the frame is larger than ``RETURNED_PER_BUDGET`` times the budget.
    """
    H, W = size
    B, F, K, dtype, clip = batch.batch_size, batch.num_faces, settings.faces_per_pixel, batch.dtype, batch.is_clip_space
    colors = batch.face_colors if batch.face_colors is not None else batch.vertex_colors
    C = 3 if colors is None else colors.shape[-1]
    screen = batch.screen_vertices((H, W))  # [B, V, 3], differentiable
    w = batch.vertices[..., 3] if clip else None  # [B, V]
    faces = batch.faces

    def plan_for(budget: int):
        return plan_tiles("render (soft)", batch=B, size=(H, W), faces=F, faces_per_pixel=K, dtype=dtype,
                          budget=budget, slot_bytes=gather_bytes_per_slot(dtype, clip) + shade_bytes_per_slot(dtype, C),
                          filled_bytes=gather_bytes_per_slot(dtype, clip, filled_only=True),
                          returned=_frame_bytes(B, H, W, C, dtype),
                          keep_bytes=B * H * W * K * (5 + 2 * (torch.finfo(dtype).bits // 8)))

    plan, room = plan_with_room(plan_for, settings.memory_budget, torch.is_grad_enabled() and screen.requires_grad)
    select = FaceSelector(screen.detach(), faces, (H, W), settings, plan)
    select.room = room  # the silhouette's gradient terms are kept while they fit
    zrange = depth_range(screen[..., 2], blend_settings, clip_space=clip)  # [B, 2], detached
    # the Frame needs, per pixel, only the faces with blend weight and the nearest covering one
    select.window = blend_window(zrange, blend_settings.gamma, settings.cutoff, screen[..., 2])

    def tile(t, fi, scr, wb, vertex_colors, face_colors, zr, wanted=None):
        alpha = (1.0 - exp_normal(select.log_miss(t, scr)))[None, ..., None]
        if wanted is not None and not (wanted[0] or wanted[2]):  # a gradient on the silhouette alone
            return None, alpha, None, None
        rows, cols, K = fi.shape
        hit = flat_nonzero(fi[..., 0].reshape(-1) >= 0)  # pixels some face reaches
        compact = hit.numel() <= _COMPACT_SHARE * rows * cols
        known = select.slot_values(t)  # the selection's distance and depth, used without autograd

        # a backward pass for the image (and alpha) alone: slots whose blend weight is exactly 0
        # carry no gradient into it, so only the weighted ones are evaluated again
        weighted_only = wanted is not None and not wanted[2] and blend_settings.composite == "over"
        if weighted_only and known is not None:
            fi, known = _weighted_slots(fi, known, settings, blend_settings, zr, select.weighted(t))
        # a forward pass that a backward pass follows records which slots have weight, for it
        record = None
        if not torch.is_grad_enabled() and select.hold_slots and blend_settings.composite == "over":
            record = torch.zeros(rows * cols, K, dtype=torch.bool, device=fi.device)

        def shade(fi, part_alpha, origin, centers, known, at=None):
            fi = _occupied(fi)
            known = None if known is None else [v[..., :fi.shape[-1]] for v in known]
            if known is None or torch.is_grad_enabled():
                part, bary, _ = gather_tile_planes(scr, wb, faces, fi, origin, centers, known)
                part = dataclasses.replace(part, alpha=part_alpha)
                colors = _color_planes(vertex_colors, face_colors, faces, fi, [b[0] for b in bary])
            else:  # the selection's distance and depth; the colors straight from the slots
                part = Fragments(fi[None], None, known[1][None], known[0][None], None, part_alpha)
                weights = live = None
                if blend_settings.composite == "over":  # colors only where a face has weight
                    weights = slot_weights(known[0][None], known[1][None], settings.sigma, blend_settings.gamma,
                                           zr[None])  # face_weights, the same bits
                    live = weights[0] > 0
                    if record is not None:  # at: the block's first tile row, or its pixels
                        n = live.shape[-1]
                        if isinstance(at, int):
                            record.view(rows, cols, K)[at:at + live.shape[0], :, :n] = live
                        else:
                            record[:, :n].index_copy_(0, at, live.reshape(-1, n))
                colors = _slot_colors_at(scr, wb, faces, vertex_colors, face_colors, fi, origin, centers, live)
                image, _, depth, face = _blend_tile(colors, part, background, settings, blend_settings, zr[None],
                                                    weights)
                return image, depth, face
            image, _, depth, face = _blend_tile(colors, part, background, settings, blend_settings, zr[None])
            return image, depth, face

        if not compact:  # blocks of whole rows
            deep = None
            if (weighted_only or not torch.is_grad_enabled()) and known is not None:  # deep pixels on their own
                fi, known, deep = _shallow(fi, known)
            width = fi.shape[-1]
            step = max(1, _SHADE_SLOTS // (width * cols))
            image, depth, face = _joined(shade(fi[r:r + step], alpha[:, r:r + step], (t[1] + r, t[3]), None,
                                               None if known is None else [v[r:r + step] for v in known], r)
                                         for r in range(0, rows, step))
            if deep is not None:  # shaded K wide, compacted, over the shallow pass's values
                at, deep_fi, deep_known = deep
                row, col = split_index(at, cols)
                row, col = row + t[1], col + t[3]
                d_image, d_depth, d_face = shade(deep_fi, alpha.view(-1).index_select(0, at).view(1, -1, 1, 1), (0, 0),
                                                 (row, col), deep_known, at)
                image = image.view(-1, image.shape[-1]).index_copy(0, at, d_image.view(-1, image.shape[-1])) \
                    .view(image.shape)
                depth = depth.reshape(-1).scatter(0, at, d_depth.reshape(-1)).view(depth.shape)
                face = face.reshape(-1).scatter(0, at, d_face.reshape(-1)).view(face.shape)
            if record is not None:
                select.keep_weighted(t, record.view(rows, cols, K))
            return image, alpha, depth, face
        # only the reached pixels, as [1, P, 1, K] blocks; the others are background
        fi, part_alpha = fi.view(-1, 1, K).index_select(0, hit), alpha.view(-1, 1).index_select(0, hit)
        known = None if known is None else [v.view(-1, 1, K).index_select(0, hit) for v in known]
        row, col = split_index(hit, cols)
        row, col = row + t[1], col + t[3]
        step = max(1, _SHADE_SLOTS // K)
        image, depth, face = _joined(shade(fi[p:p + step], part_alpha[p:p + step].view(1, -1, 1, 1), (0, 0),
                                           (row[p:p + step], col[p:p + step]),
                                           None if known is None else [v[p:p + step] for v in known],
                                           hit[p:p + step])
                                     for p in range(0, max(1, hit.numel()), step))
        if record is not None:
            select.keep_weighted(t, record.view(rows, cols, K))
        bg = background_tensor(background, image.shape[-1], image.dtype, image.device)
        return (_expand(image.view(-1, image.shape[-1]), hit, rows, cols, bg), alpha,
                _expand(depth.view(-1), hit, rows, cols, math.inf), _expand(face.view(-1), hit, rows, cols, -1))

    loop = TileLoop(plan, select, tile, _frame_outputs(B, H, W, C, dtype, batch.device), partial=True)
    image, alpha, depth, face = loop(screen, w, batch.vertex_colors, batch.face_colors, zrange)
    return Frame(image=image, alpha=alpha, depth=depth, face_index=face)


#: A soft tile is shaded only at the pixels some face reaches (compacted) when they are at most
#: this share of its pixels; the others show the background (alpha 0, no face).
_COMPACT_SHARE = 0.9
#: At most this many K slots of a tile are shaded (gathered, colored, blended) at once: the
#: tile's pixels go in blocks of that many slots. Each operation's temporaries then stay a few
#: MB, which the allocator hands out again instead of mapping fresh pages for each one (at 2^18
#: slots and more, page faults took about a third of a 1k-triangle 256^2 rgb forward + backward).
_SHADE_SLOTS = 1 << 17


def _joined(blocks) -> tuple[torch.Tensor, ...]:
    """The ``(image, depth, face)`` of consecutive blocks joined along dim 1 (rows, or pixels)."""
    blocks = list(blocks)
    if len(blocks) == 1:
        return blocks[0]
    return tuple(torch.cat(parts, dim=1) for parts in zip(*blocks))


def _expand(values: torch.Tensor, at: torch.Tensor, rows: int, cols: int, fill) -> torch.Tensor:
    """``[1, rows, cols, ...]``: ``values`` (``[P, ...]``) at the flat pixels ``at``, ``fill``
    (a scalar or a ``[C]`` tensor) elsewhere; differentiable with respect to ``values``."""
    tail = values.shape[1:]
    if isinstance(fill, torch.Tensor):
        base = fill.expand(rows * cols, *tail)
    else:
        base = torch.full((rows * cols, *tail), fill, dtype=values.dtype, device=values.device)
    return base.index_copy(0, at, values).view(1, rows, cols, *tail)


def _weighted_slots(face_index: torch.Tensor, known, settings: RasterSettings, blend_settings: BlendSettings,
                    zrange: torch.Tensor, live: torch.Tensor | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``face_index`` ``[rows, cols, K]`` with the slots whose ``"over"`` blend weight is exactly 0
    emptied and the others moved to the front of their pixel (in order), and ``known`` (the
    slots' distance and depth) moved with them. ``live``: the slots with weight, when the forward
    pass recorded them (:meth:`FaceSelector.keep_weighted`); else they are found from ``known``.

    Such a slot's weight ``exp_normal(logit - top)`` is 0 below the floor, with a zero derivative,
    and every other weight's derivative with respect to its logit carries that 0 as a factor: the
    image and its gradients are the same without it. The selection keeps faces far behind the
    nearest one (4-8 in 10 of a 1k-triangle frame's slots at the default ``gamma``)."""
    dist, depth = known
    if live is None:  # else the forward pass's shading recorded them (bool [rows, cols, K])
        part = Fragments(face_index[None], None, depth[None], dist[None])
        live = weighted(part, settings, blend_settings, zrange[None])[0]  # [rows, cols, K]
    K = face_index.shape[-1]
    at = torch.where(live, torch.cumsum(live, dim=-1) - 1, K)  # the live slots' new places; K: dropped
    moved = []
    for values, fill in ((face_index, -1), (dist, 0.0), (depth, math.inf)):
        out = torch.full((*values.shape[:-1], K + 1), fill, dtype=values.dtype, device=values.device)
        moved.append(out.scatter_(-1, at, values)[..., :K])
    return moved[0], moved[1:]


#: Without autograd (and in the image backward pass, on the slots with weight), a tile's pixels
#: filling more than half its K slots are shaded on their own (and the others only half as wide)
#: while they are at most this share of its pixels.
_DEEP_SHARE = 1 / 16


def _shallow(face_index: torch.Tensor, known):
    """``(face_index, known, deep)``: a tile's faces ``[rows, cols, K]`` and their slot values cut to
    the slots its shallow pixels fill, and ``deep`` = ``(at, faces, values)`` for the few pixels that
    fill more (their flat indices, and their slots as ``[P, 1, K]``), to be shaded on their own; or
    the inputs and None when that does not pay.

    Per pixel the values are the same either way: kept faces fill the first slots, and a pixel's
    blend only ever meets its own slots (see :func:`_occupied`)."""
    rows, cols, K = face_index.shape
    if K < 4:
        return face_index, known, None
    width = K // 2
    # the pixels filling more than `width` slots are those whose slot `width` is filled (kept
    # faces fill the first slots): one comparison, not a count over K (torch's CPU sum over a
    # short last dim is slow)
    at = flat_nonzero(face_index[..., width].reshape(-1) >= 0)
    if at.numel() > _DEEP_SHARE * rows * cols or at.numel() == 0:
        return face_index, known, None
    deep = (at, face_index.view(-1, 1, K).index_select(0, at), [v.view(-1, 1, K).index_select(0, at) for v in known])
    return (face_index[..., :width].contiguous(), [v[..., :width].contiguous() for v in known], deep)


def _occupied(face_index: torch.Tensor) -> torch.Tensor:
    """``face_index`` ``[..., K]`` cut to the slots some pixel uses (at least one): kept faces fill
    the first slots, and empty slots add nothing to a blend, so the frame is the same while the
    work follows the deepest pixel's count rather than K. Where some pixel fills the last slot
    (dense scenes, most tiles), that is K: one comparison on that slot first, before a count over
    K (torch's CPU sum over a short last dim is slow)."""
    if face_index.numel() == 0:
        return face_index[..., :1]
    if bool((face_index[..., -1] >= 0).any()):
        return face_index
    used = int((face_index >= 0).sum(-1).max())
    return face_index[..., :max(1, used)]


def shade_bytes_per_slot(dtype: torch.dtype, channels: int) -> int:
    """Bytes per K slot of a tile while its colors are interpolated and blended with autograd on,
    and in its backward pass (the blend's ``[rows, W, K]`` temporaries and the ``[rows, W, K, C]``
    color products, with their gradients). With :func:`gather_bytes_per_slot`, measured for RGB
    (every slot filled, forward and backward): about 900 B in float32 and 1,700 B in float64."""
    item = torch.finfo(dtype).bits // 8
    return (9 + 12 * channels) * item


def _frame_bytes(B: int, H: int, W: int, C: int, dtype: torch.dtype) -> int:
    """Bytes of a soft ``Frame``: image (C), alpha and depth floats and the int64 face index per pixel."""
    return B * H * W * ((C + 2) * (torch.finfo(dtype).bits // 8) + 8)


def _frame_outputs(B: int, H: int, W: int, C: int, dtype: torch.dtype, device) -> list[torch.Tensor]:
    """Uninitialized image, alpha, depth and face index of a soft ``Frame``, filled tile by tile."""
    return [torch.empty(B, H, W, C, dtype=dtype, device=device), torch.empty(B, H, W, 1, dtype=dtype, device=device),
            torch.empty(B, H, W, dtype=dtype, device=device), torch.empty(B, H, W, dtype=torch.int64, device=device)]


def _color_planes(vertex_colors: torch.Tensor | None, face_colors: torch.Tensor | None, faces: torch.Tensor,
                  face_index: torch.Tensor, bary, corner: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """A tile's slot colors as one ``[1, rows, cols, K]`` plane per channel (0 where empty), from one
    element's ``[V, C]`` vertex colors (weighted by the three ``[rows, cols, K]`` planes ``bary``),
    ``[F, C]`` face colors, or white without colors: :func:`slot_colors`' values, bit for bit, for
    the faces ``face_index`` ``[rows, cols, K]`` (``corner``: their three corners' vertex ids, ``[N]``
    each, when already gathered)."""
    rows, cols, K = face_index.shape
    valid = face_index >= 0
    dtype, device = bary[0].dtype, bary[0].device
    zero = torch.zeros((), dtype=dtype, device=device)
    if face_colors is not None or vertex_colors is None or faces.shape[0] == 0:
        if face_colors is None or faces.shape[0] == 0:
            one = torch.ones((), dtype=dtype, device=device)
            return [torch.where(valid, one, zero)[None] for _ in range(3)]
        safe = face_index.reshape(-1).clamp(min=0)
        table = face_colors.to(dtype)
        return [torch.where(valid, table[:, c].index_select(0, safe).view(rows, cols, K), zero)[None]
                for c in range(table.shape[1])]
    if corner is None:
        corner = corner_ids(faces, face_index)
    return [plane[None] for plane in weigh_corners(vertex_colors.to(dtype).t().contiguous(), corner, bary, valid)]


def _slot_colors_at(screen: torch.Tensor, w: torch.Tensor | None, faces: torch.Tensor,
                    vertex_colors: torch.Tensor | None, face_colors: torch.Tensor | None, face_index: torch.Tensor,
                    origin: tuple[int, int], centers: tuple[torch.Tensor, torch.Tensor] | None,
                    live: torch.Tensor | None = None) -> list[torch.Tensor]:
    """:func:`_color_planes` of a tile's block without autograd, from one element's screen vertices
    ``screen`` ``[V, 3]`` (and clip ``w`` ``[V]``), for the faces ``face_index`` ``[rows, cols, K]``
    at the pixels of :func:`gather_tile`'s ``origin`` / ``centers``: the values of
    :func:`gather_tile`'s barycentrics and the colors, bit for bit, computed over every slot (empty
    ones give 0) rather than gathered to the filled slots and scattered back, and with the
    barycentrics' corner ids shared by the colors. With ``live`` (bool, ``face_index``'s shape),
    vertex colors are interpolated at those slots only (gathered there and scattered back) and
    are 0 at the others: for a blend whose weights are 0 there, the same image."""
    rows, cols, K = face_index.shape
    dtype, device = screen.dtype, screen.device
    if face_colors is not None or vertex_colors is None or faces.shape[0] == 0:  # no barycentrics needed
        ones = torch.ones((), dtype=dtype, device=device).expand(rows, cols, K)
        return _color_planes(vertex_colors, face_colors, faces, face_index, [ones] * 3)
    if live is not None:
        return _live_colors(screen, w, faces, vertex_colors, face_index, origin, centers, live)
    corner = corner_ids(faces, face_index)  # [N] vertex ids per corner
    if centers is None:
        px = (torch.arange(cols, device=device) + origin[1]).to(dtype).add_(0.5).view(1, cols, 1)
        py = (torch.arange(rows, device=device) + origin[0]).to(dtype).add_(0.5).view(rows, 1, 1)
    else:
        px = (centers[1].to(dtype) + 0.5).view(rows, 1, 1)
        py = (centers[0].to(dtype) + 0.5).view(rows, 1, 1)
    bary = _corner_bary(screen, w, corner, px, py, (rows, cols, K))
    return _color_planes(vertex_colors, face_colors, faces, face_index, bary, corner)


def _corner_bary(screen: torch.Tensor, w: torch.Tensor | None, corner, px: torch.Tensor, py: torch.Tensor,
                 shape) -> list[torch.Tensor]:
    """:func:`gather_tile`'s barycentrics (clamped, and perspective-correct with clip ``w``) of
    the faces whose corners are the vertex ids ``corner`` (three int64 ``[N]``) of ``screen``
    (``[V, 3]``), at the points ``px``, ``py`` (broadcast against ``shape``, the corners' values
    viewed as it): three float tensors."""
    xy = screen[:, :2].t().contiguous()  # [2, V]
    coords = []
    for j in range(3):
        coords += [xy[0].index_select(0, corner[j]).view(shape), xy[1].index_select(0, corner[j]).view(shape), None]
    bary = list(_clamped(*_affine(coords, px, py)[1:]))
    if w is not None:  # perspective-correct, as gather_tile
        bary = _perspective(bary, [w.index_select(0, corner[j]).view(shape) for j in range(3)])
    return bary


def _live_colors(screen: torch.Tensor, w: torch.Tensor | None, faces: torch.Tensor, vertex_colors: torch.Tensor,
                 face_index: torch.Tensor, origin: tuple[int, int], centers, live: torch.Tensor) -> list[torch.Tensor]:
    """:func:`_slot_colors_at`'s vertex colors at the ``live`` slots only (0 elsewhere): the same
    expressions per slot, so the same bits there."""
    rows, cols, K = face_index.shape
    dtype, device = screen.dtype, screen.device
    at = flat_nonzero(live.reshape(-1))  # [N] slots
    px, py = slot_centers(at, K, cols, origin, centers, dtype)
    corner = corner_ids(faces, face_index.reshape(-1).index_select(0, at))
    bary = _corner_bary(screen, w, corner, px, py, (at.numel(),))
    planes = weigh_corners(vertex_colors.to(dtype).t().contiguous(), corner, bary)
    return [put_at(torch.zeros(rows * cols * K, dtype=dtype, device=device), at, plane).view(1, rows, cols, K)
            for plane in planes]


def _batch_range(batch: TriangleBatch, frags: Fragments, blend_settings: BlendSettings) -> torch.Tensor:
    """float ``[B, 2]`` soft-blend depth range of ``batch`` (see :func:`py_gpu.shading.blend.depth_range`)."""
    if batch.is_clip_space or not blend_settings.auto_range:
        return depth_range(frags.depth, blend_settings, clip_space=batch.is_clip_space)
    return depth_range(batch.vertices[..., 2], blend_settings, clip_space=False)


def _blend_tile(colors, part: Fragments, background, settings: RasterSettings,
                blend_settings: BlendSettings, zrange: torch.Tensor, weights: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, ...]:
    """A tile's ``(image, alpha, depth, face_index)``, each ``[1, rows, W, ...]``, from its color
    planes (see :func:`composite_soft`)."""
    frame, _ = composite_soft(colors, part, background, settings, blend_settings, zrange, weights)
    return frame.image, frame.alpha, frame.depth, frame.face_index


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
    :func:`py_gpu.raster.torch_soft.rasterize_soft`, which then runs fused with the blend
    (:func:`render_soft_frame`); tests pass the brute-force oracle. The
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
    if rasterizer is rasterize_soft:
        return render_soft_frame(batch, size, bg, s, b)
    return shade_soft(batch, rasterizer(batch, size, s), bg, s, b)
