"""Analytic antialiasing of silhouette edges on hard renders, differentiable with respect to vertex positions.

The idea is the antialiasing pass of nvdiffrast (Laine et al. 2020, *Modular Primitives for
High-Performance Differentiable Rendering*). A hard render is a step function of the vertex
positions, so it has no gradient through its silhouettes. For every pair of horizontally or
vertically adjacent pixels that show different faces, this pass finds the silhouette edge of the
nearer face that crosses the segment between the two pixel centers, computes the crossing point
from the edge's screen-space endpoints, and mixes the color of one pixel into the other by the
distance of the crossing from that pixel's center. The output is then a continuous function of
the vertex positions, and the crossing point carries a gradient to them.

Per pair of pixels ``A`` and ``B`` (``B`` one pixel right of or below ``A``), with ``t`` the crossing
point's distance from ``A``'s center (0 at ``A``, 1 at ``B``):

- ``t < 1/2``: ``A`` becomes ``A + (1/2 - t) (B - A)`` (the edge passes through ``A``'s square);
- ``t > 1/2``: ``B`` becomes ``B + (t - 1/2) (A - B)``.

A pixel takes the sum of the changes from its (up to four) pairs. Every other pixel is returned
bitwise unchanged.

Two choices go beyond the paper's outline. The search walks: when the front face's edge on the
segment is not a silhouette, it continues into the face across that edge, and so on, because near
the outline of a dense mesh the silhouette edge belongs to a face narrower than a pixel that
neither pixel shows. And each edge is handled by one pair direction only (x pairs take edges
steeper than 45 degrees, y pairs the others), so that a pixel along a straight edge is blended
once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._check import (
    PyGpuTypeError,
    PyGpuValueError,
    check_faces,
    check_finite,
    check_float,
    check_shape,
    check_tensor,
)
from ..contracts import Fragments

__all__ = ["antialias", "edge_topology"]

#: How far (px) past a pixel center a crossing may lie and still be taken as that pixel's edge.
#: Coverage is decided on vertices snapped to 1/256 px, the crossing from the unsnapped ones, so
#: the two can disagree by a little; such crossings are clamped onto the segment.
CROSSING_SLACK = 0.125

#: Most faces one pair's walk crosses before it gives up (see ``_find_silhouette``); near the
#: outline of a dense mesh a few dozen faces narrower than a pixel can lie between two centers.
MAX_WALK = 256

_NEXT = (1, 2, 0)  # edge k of a face joins its corners k and _NEXT[k]


def edge_topology(faces: torch.Tensor) -> torch.Tensor:
    """The face on the other side of each edge of each face.

    Compute it once per mesh and pass it to :func:`antialias` as ``topology`` (it depends on the
    faces only, never on the vertex positions).

    Args:
        faces: int64 (or int32) ``[F, 3]`` vertex indices.

    Returns:
        int64 ``[F, 3]``: entry ``[f, k]`` is the face sharing edge ``k`` of face ``f`` (the edge from
        corner ``k`` to corner ``(k + 1) % 3``), or -1 when no other face has that edge or more
        than two faces share it (a boundary or non-manifold edge: always a silhouette).
    """
    where = "edge_topology"
    check_tensor(where, "faces", faces)
    faces = check_faces(where, faces, num_verts=int(faces.max()) + 1 if faces.numel() else 0)
    return _edge_topology(faces)


def _edge_topology(faces: torch.Tensor) -> torch.Tensor:
    F = faces.shape[0]
    if F == 0:
        return torch.empty(0, 3, dtype=torch.int64, device=faces.device)
    a = faces  # [F, 3] first corner of edge k
    b = faces[:, list(_NEXT)]  # [F, 3] second corner
    lo, hi = torch.minimum(a, b).reshape(-1), torch.maximum(a, b).reshape(-1)  # [3F]
    key = lo * (int(faces.max()) + 1) + hi  # one key per undirected edge
    order = torch.argsort(key, stable=True)
    _, inverse, counts = torch.unique_consecutive(key[order], return_inverse=True, return_counts=True)
    start = torch.cumsum(counts, 0) - counts  # first sorted position of each edge
    pos = torch.arange(3 * F, device=faces.device)
    first = start[inverse]
    partner_pos = torch.where(pos == first, first + 1, first)  # the other entry of a pair
    paired = counts[inverse] == 2
    partner = order[partner_pos.clamp(max=3 * F - 1)]  # entry id f * 3 + k of the other face's edge
    neighbour = torch.where(paired, torch.div(partner, 3, rounding_mode="floor"), torch.full_like(partner, -1))
    out = torch.empty(3 * F, dtype=torch.int64, device=faces.device)
    out[order] = neighbour
    return out.reshape(F, 3)


def antialias(color: torch.Tensor, fragments: Fragments, vertices: torch.Tensor, faces: torch.Tensor, *,
              topology: torch.Tensor | None = None) -> torch.Tensor:
    """Antialias the silhouette edges of a hard render, with gradients to ``color`` and ``vertices``.

    Args:
        color: float ``[B, H, W, C]`` shaded image (for example ``py_gpu.interpolate`` of colors
            at ``fragments``, textured, lit, over a background).
        fragments: hard ``Fragments`` (``K = 1``) of the same batch: ``face_index`` int64
            ``[B, H, W, 1]`` (-1 where empty) and ``depth`` ``[B, H, W, 1]``, which orders the two
            faces of a pixel pair (the nearer one owns the edge).
        vertices: float ``[B, V, 3]`` screen space ``(x_px, y_px, depth)`` or ``[B, V, 4]`` clip
            space ``(x, y, z, w)``, the vertices that were rasterized (``[V, 3|4]`` or a batch of
            1 is shared by the whole batch). Clip space maps to pixels as ``TriangleBatch`` does,
            with the size of ``color``.
        faces: int64 (or int32) ``[F, 3]``, the faces the fragments index.
        topology: optional int64 ``[F, 3]`` from :func:`edge_topology` (computed here when
            ``None``); pass it to skip that work when the same mesh is antialiased again.

    Returns:
        float ``[B, H, W, C]`` in ``color``'s dtype: ``color`` with the silhouette pixels blended;
        every pixel no silhouette edge passes through is bitwise equal to ``color``. Differentiable
        with respect to ``color`` and, through the edge crossings, ``vertices``.

    An edge is a silhouette when no other face shares it (or more than one does), or when the
    face across it lies on the same side of it on screen (one of the two faces away). Edges with
    an endpoint at ``w <= 0`` (behind the camera) are not antialiased.

    Raises:
        PyGpuTypeError: a non-tensor, non-float ``color`` or ``vertices``, non-integer ``faces`` or
            ``topology``, ``fragments`` that is not a ``Fragments``.
        PyGpuValueError: soft fragments (``K > 1``), mismatched shapes, devices or batch sizes,
            NaN/inf in ``color`` or ``vertices``, face indices out of range.
    """
    color, vertices, faces, topology = _check_inputs(color, fragments, vertices, faces, topology)
    B, H, W, C = color.shape
    face_index = fragments.face_index[..., 0]  # int64 [B, H, W]
    depth = fragments.depth[..., 0]  # [B, H, W]
    vertices = vertices.to(torch.promote_types(color.dtype, vertices.dtype))
    xy, ahead = _screen_xy(vertices, H, W)  # [Bv, V, 2] px, bool [Bv, V] (w > 0)
    silhouette = _silhouette_edges(vertices, faces, topology)  # bool [Bv, F, 3]
    geometry = (xy, ahead, silhouette, faces, topology)

    delta = torch.zeros_like(color)
    touched = torch.zeros(B, H, W, dtype=torch.bool, device=color.device)
    for axis in (2, 1):  # 2: horizontal pairs (x), 1: vertical pairs (y)
        to_a, to_b = _pair_weights(face_index, depth, geometry, axis)  # [B, H, W-1] or [B, H-1, W]
        first = color.narrow(axis, 0, color.shape[axis] - 1)  # pixel A of every pair
        second = color.narrow(axis, 1, color.shape[axis] - 1)  # pixel B
        diff = second - first
        delta = delta + _pad(to_a[..., None].to(color.dtype) * diff, axis, after=True)
        delta = delta - _pad(to_b[..., None].to(color.dtype) * diff, axis, after=False)
        touched = touched | _pad(to_a > 0, axis, after=True) | _pad(to_b > 0, axis, after=False)
    return torch.where(touched[..., None], color + delta, color)


def _pad(t: torch.Tensor, axis: int, *, after: bool) -> torch.Tensor:
    """Pad ``[B, H, W-1, ...]`` (axis 2) or ``[B, H-1, W, ...]`` (axis 1) back to the image size with one
    zero row or column, after (the pair's first pixel) or before (its second pixel)."""
    shape = list(t.shape)
    shape[axis] = 1
    zero = torch.zeros(shape, dtype=t.dtype, device=t.device)
    return torch.cat((t, zero) if after else (zero, t), dim=axis)


def _screen_xy(vertices: torch.Tensor, H: int, W: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pixel ``(x, y)`` ``[Bv, V, 2]`` of every vertex, and whether it is in front of the camera."""
    if vertices.shape[-1] == 3:
        return vertices[..., :2], torch.ones(vertices.shape[:2], dtype=torch.bool, device=vertices.device)
    w = vertices[..., 3]
    ahead = w > 0
    safe_w = torch.where(ahead, w, torch.ones((), dtype=w.dtype, device=w.device))
    x = (vertices[..., 0] / safe_w + 1.0) * (W / 2.0)
    y = (1.0 - vertices[..., 1] / safe_w) * (H / 2.0)
    return torch.stack((x, y), dim=-1), ahead


def _pair_weights(face_index: torch.Tensor, depth: torch.Tensor, geometry, axis: int):
    """Blend weights of the pairs of pixels adjacent along ``axis`` (2: x, 1: y).

    Returns two ``[B, H, W-1]`` (or ``[B, H-1, W]``) float maps, indexed by the pair's first pixel
    ``A``: the weight with which ``B``'s color is mixed into ``A``, and ``A``'s into ``B``. At most
    one of the two is non-zero per pair.
    """
    xy = geometry[0]
    n = face_index.shape[axis] - 1
    fa, fb = face_index.narrow(axis, 0, n), face_index.narrow(axis, 1, n)  # [B, H', W']
    zeros = torch.zeros(fa.shape, dtype=xy.dtype, device=xy.device)
    pair = (fa != fb).nonzero(as_tuple=True)  # (b, row, col) of A
    if pair[0].numel() == 0:
        return zeros, zeros
    fa, fb = fa[pair], fb[pair]  # [N]
    da, db = depth.narrow(axis, 0, n)[pair], depth.narrow(axis, 1, n)[pair]
    a_in_front = (fb < 0) | ((fa >= 0) & ((da < db) | ((da == db) & (fa < fb))))
    segment = _Segment(
        batch=pair[0] if xy.shape[0] > 1 else torch.zeros_like(pair[0]),
        u=pair[axis].to(xy.dtype) + 0.5,  # pixel A's center along the segment (col + 0.5 or row + 0.5)
        v=pair[3 - axis].to(xy.dtype) + 0.5,  # and across it
        along=0 if axis == 2 else 1,  # the coordinate (x or y) that runs along the segment
        forward=a_in_front,
        far_face=torch.where(a_in_front, fb, fa),
    )
    t, found = _find_silhouette(torch.where(a_in_front, fa, fb), segment, geometry)
    t = t.clamp(0.0, 1.0)
    zero = torch.zeros((), dtype=xy.dtype, device=xy.device)
    w_a = torch.where(found & (t < 0.5), 0.5 - t, zero)  # B's color into A
    w_b = torch.where(found & (t > 0.5), t - 0.5, zero)  # A's color into B
    return zeros.index_put(pair, w_a), zeros.index_put(pair, w_b)


@dataclass(frozen=True)
class _Segment:
    """The segments between the centers of N pixel pairs of one direction."""

    batch: torch.Tensor  # int64 [N] the image of each pair (0 when the vertices are shared)
    u: torch.Tensor  # float [N] A's center along the segment
    v: torch.Tensor  # float [N] A's center across it
    along: int  # the coordinate that runs along the segment: 0 (x pairs) or 1 (y pairs)
    forward: torch.Tensor  # bool [N] the walk runs from A to B (A's face is in front)
    far_face: torch.Tensor  # int64 [N] the face at the walk's far end (-1: background)


def _find_silhouette(face: torch.Tensor, seg: _Segment, geometry) -> tuple[torch.Tensor, torch.Tensor]:
    """Walk along each pair's segment from the front face to the first silhouette edge it crosses.

    The walk starts in the front face at its own pixel's center and leaves each face through the
    farther of the (two) edges that span the segment's line. A non-silhouette edge leads into the
    face across it: near a dense mesh's outline, faces narrower than a pixel lie between the two
    centers, and the outline is an edge of one of them. The walk ends at a silhouette edge, at the
    other pixel's face, or past the other center.

    Returns ``t`` float ``[N]`` (the crossing from A's center, differentiable; 0 where none) and
    ``found`` bool ``[N]``.
    """
    xy, ahead, silhouette_edges, faces, topology = geometry
    N = face.shape[0]
    along, across = seg.along, 1 - seg.along
    sign = seg.forward.to(xy.dtype) * 2.0 - 1.0  # walk coordinate: tau = sign * t + origin, 0 -> 1
    origin = (~seg.forward).to(xy.dtype)
    alive = torch.arange(N, device=face.device)  # pairs still walking
    previous = torch.full_like(face, -2)  # the face the walk came from (-2: none yet)
    hit_index, hit_t = [], []
    for _ in range(MAX_WALK):
        if alive.numel() == 0:
            break
        b = seg.batch[alive]
        corners = faces[face]  # [M, 3]
        ends = corners[:, list(_NEXT)]  # [M, 3] second corner of each edge
        p0, p1 = xy[b[:, None], corners], xy[b[:, None], ends]  # [M, 3, 2] edge endpoints, px
        u0, u1, v0, v1 = p0[..., along], p1[..., along], p0[..., across], p1[..., across]  # [M, 3]
        u, v = seg.u[alive, None], seg.v[alive, None]
        spans = ((v0 < v) != (v1 < v)) & (topology[face] != previous[:, None])  # half-open; not the way in
        span = torch.where(spans, v1 - v0, torch.ones((), dtype=xy.dtype, device=xy.device))
        t = u0 + (v - v0) / span * (u1 - u0) - u  # [M, 3] crossing, from A's center toward B's
        tau = sign[alive, None] * t.detach() + origin[alive, None]
        k = torch.where(spans, tau, torch.full_like(tau, -float("inf"))).argmax(dim=1, keepdim=True)
        crossed = spans.gather(1, k)[:, 0]
        tau, t = tau.gather(1, k)[:, 0], t.gather(1, k)[:, 0]
        start, end = corners.gather(1, k)[:, 0], ends.gather(1, k)[:, 0]
        on_segment = crossed & (tau >= -CROSSING_SLACK)
        silhouette = silhouette_edges[b, face, k[:, 0]]
        # one pair direction per edge: x pairs take the steep edges, y pairs the shallow ones, so
        # that a pixel along an edge is blended once (an edge at exactly 45 degrees goes to x pairs)
        run = (u1 - u0).detach().abs().gather(1, k)[:, 0]
        rise = (v1 - v0).detach().abs().gather(1, k)[:, 0]
        suits = (rise >= run) if along == 0 else (rise > run)
        hit = on_segment & silhouette & (tau <= 1.0 + CROSSING_SLACK) & suits & ahead[b, start] & ahead[b, end]
        hit_index.append(alive[hit])
        hit_t.append(t[hit])
        nxt = topology[face, k[:, 0]]
        walk = (on_segment & ~silhouette & (tau < 1.0) & (nxt != seg.far_face[alive])
                & ahead[b, start] & ahead[b, end])
        alive, previous, face = alive[walk], face[walk], nxt[walk]
    index = torch.cat(hit_index)
    found = torch.zeros(N, dtype=torch.bool, device=index.device)
    found[index] = True
    t = torch.zeros(N, dtype=xy.dtype, device=xy.device).index_put((index,), torch.cat(hit_t))  # each pair once
    return t, found


def _silhouette_edges(vertices: torch.Tensor, faces: torch.Tensor, topology: torch.Tensor) -> torch.Tensor:
    """bool ``[Bv, F, 3]``: edge ``k`` of face ``f`` is a silhouette in image ``b``.

    True on a boundary or non-manifold edge, and when the third vertex of the face across the edge
    lies on the same side of the edge's screen line as the face's own third vertex (or on the
    line): then one of the two faces points away. The sides are signs of homogeneous ``(x, y, w)``
    determinants (``w = 1`` in screen space), which stay right when a third vertex is behind the
    camera.
    """
    if vertices.shape[-1] == 4:
        hom = vertices[..., (0, 1, 3)].detach()
    else:
        hom = torch.cat((vertices[..., :2], torch.ones_like(vertices[..., :1])), dim=-1).detach()
    start, end = faces, faces[:, list(_NEXT)]  # [F, 3] edge k runs from corner k to corner k + 1
    own_third = faces[:, [2, 0, 1]]
    other = topology  # [F, 3] the face across each edge, -1 if none
    their_third = faces[other.clamp(min=0)].sum(dim=-1) - start - end
    their_third = torch.where(other >= 0, their_third, own_third)
    line = torch.linalg.cross(hom[:, start], hom[:, end], dim=-1)  # [Bv, F, 3, 3] homogeneous edge lines
    own = (line * hom[:, own_third]).sum(-1)  # [Bv, F, 3]
    theirs = (line * hom[:, their_third]).sum(-1)
    return (other < 0) | (own * theirs >= 0)


def _check_inputs(color, fragments, vertices, faces, topology):
    where = "antialias"
    if not isinstance(fragments, Fragments):
        raise PyGpuTypeError(f"{where}: `fragments` must be a Fragments, got {type(fragments).__name__}")
    check_tensor(where, "color", color)
    check_tensor(where, "vertices", vertices)
    check_tensor(where, "faces", faces)
    check_float(where, "color", color)
    check_float(where, "vertices", vertices)
    check_shape(where, "color", color, (None, None, None, None), "[B, H, W, C]")
    face_index, depth = fragments.face_index, fragments.depth
    if face_index.dim() != 4:
        raise PyGpuValueError(
            f"{where}: `fragments.face_index` must have shape [B, H, W, K], got {tuple(face_index.shape)}"
        )
    if face_index.shape[3] != 1:
        raise PyGpuValueError(
            f"{where}: needs hard fragments (K = 1), got K = {face_index.shape[3]}; soft fragments "
            "already have gradients through silhouettes (render with mode='soft' instead)"
        )
    B, H, W, _ = color.shape
    if tuple(face_index.shape[:3]) != (B, H, W):
        raise PyGpuValueError(
            f"{where}: `fragments` are {tuple(face_index.shape[:3])} (B, H, W) but `color` is {(B, H, W)}"
        )
    if tuple(depth.shape) != tuple(face_index.shape):
        raise PyGpuValueError(
            f"{where}: `fragments.depth` must have the shape of `face_index` {tuple(face_index.shape)}, "
            f"got {tuple(depth.shape)}"
        )
    if vertices.dim() == 2:
        vertices = vertices.unsqueeze(0)
    check_shape(where, "vertices", vertices, (None, None, (3, 4)), "[B, V, 3] (screen) or [B, V, 4] (clip)")
    if vertices.shape[0] not in (1, B):
        raise PyGpuValueError(f"{where}: `vertices` has batch size {vertices.shape[0]} but `color` has {B}")
    device = color.device
    named = [("fragments.face_index", face_index), ("fragments.depth", depth), ("vertices", vertices),
             ("faces", faces)] + ([("topology", topology)] if isinstance(topology, torch.Tensor) else [])
    for name, t in named:
        if t.device != device:
            raise PyGpuValueError(
                f"{where}: `{name}` is on {t.device} but `color` is on {device}; move every tensor to one device"
            )
    check_finite(where, "color", color)
    check_finite(where, "vertices", vertices)
    faces = check_faces(where, faces, vertices.shape[1])
    F = faces.shape[0]
    if face_index.numel() and int(face_index.max()) >= F:
        raise PyGpuValueError(
            f"{where}: `fragments.face_index` refers to face {int(face_index.max())} but `faces` has {F}"
        )
    if topology is None:
        topology = _edge_topology(faces)
    else:
        check_tensor(where, "topology", topology)
        if topology.dtype != torch.int64:
            raise PyGpuTypeError(f"{where}: `topology` must be int64 (from edge_topology), got {topology.dtype}")
        check_shape(where, "topology", topology, (F, 3), f"[F, 3] = [{F}, 3] (edge_topology(faces))")
        if topology.numel() and (int(topology.min()) < -1 or int(topology.max()) >= F):
            raise PyGpuValueError(
                f"{where}: `topology` holds face ids outside -1..{F - 1}; build it with edge_topology(faces)"
            )
    return color, vertices, faces, topology
