"""Near-plane clipping in homogeneous clip space (vectorized torch, differentiable).

A triangle crossing the near plane is cut there: one vertex in front gives one triangle, two in
front give a quad split into two triangles. Triangles wholly behind are dropped; nothing in front
is ever lost, so a camera inside a room or on a ground plane sees no holes.

Cutting happens in clip space ``(x, y, z, w)``, where straight lines stay straight; each new
vertex is ``(1 - t) a + t b`` of an edge ``a -> b`` with ``t = d_a / (d_a - d_b)`` (``d`` the signed
distance to the plane). Any attribute interpolated the same way and then rasterized with
perspective-correct barycentrics is exactly what the unclipped triangle would give, so attributes
stay perspective-correct across the cut.

**Batches.** Faces are shared by the batch, but ``w`` differs per batch element, so a face can be
cut in one element and not in another. The output keeps one shared face list: a face that is in
front in *every* element keeps its original vertex indices; a face that is cut (or behind) in
*some* element gets up to two output faces with their own new vertices, computed per element.
In elements where a slot is not needed, its three vertices are one point far outside the view
(``x/w = y/w = -64``): a zero-area triangle, which covers nothing in every rasterizer (padding with
degenerate faces). A face behind the plane in every element is dropped.

Output faces keep the input order (sorted by input face, then by piece), so the raster rule's
"lower face index wins" tie-break orders pieces as their source faces.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._check import PyGpuTypeError, PyGpuValueError, check_float
from ..contracts import Fragments, TriangleBatch
from ._scatter import flat_nonzero

__all__ = ["ClipResult", "clip_near", "clip_batch", "unclip_fragments", "NEAR_PLANES"]

#: Near planes by name: coefficients ``(a, b, c)`` of ``d = a z + b w + c``, in front where ``d >= 0``.
#: ``"zero_to_one"`` is py_gpu's convention (NDC z in [0, 1], near at ``z = 0``); ``"gl"`` is
#: OpenGL's ``z >= -w`` (NDC z in [-1, 1]); ``"w"`` only makes ``w >= 1e-6``.
NEAR_PLANES = {"zero_to_one": (1.0, 0.0, 0.0), "gl": (1.0, 1.0, 0.0), "w": (0.0, 1.0, -1e-6)}
#: Clip-space position of padding vertices: far outside the view, depth 1.
_FAR_POINT = (-64.0, -64.0, 1.0, 1.0)


@dataclass(frozen=True, eq=False)
class ClipResult:
    """The clipped batch and how its faces relate to the input.

    Attributes:
        batch: the clipped ``TriangleBatch``: clip space ``[B, V', 4]`` with every ``w > 0``,
            faces ``[F', 3]``, colors carried over (vertex colors interpolated, face colors
            gathered).
        face_map: int64 ``[F']``, the input face each output face comes from.
        weights: float ``[B, F', 3, 3]``: output corner ``k`` of face ``f'`` in element ``b`` is
            ``sum_j weights[b, f', k, j] * (input corner j of face face_map[f'])``. Identity rows
            for uncut faces; zero rows for padding. Differentiable in the input vertices.
        attributes: the extra per-vertex attributes ``{name: [B, V', C]}`` carried through the cut.
        num_clipped: number of input faces that were cut or dropped in at least one element.
    """

    batch: TriangleBatch
    face_map: torch.Tensor
    weights: torch.Tensor
    attributes: dict
    num_clipped: int

    def unclip(self, fragments: Fragments) -> Fragments:
        """``fragments`` of ``self.batch`` re-expressed on the input faces (see :func:`unclip_fragments`)."""
        return unclip_fragments(fragments, self)


def clip_near(batch: TriangleBatch, *, plane: str = "zero_to_one") -> tuple[TriangleBatch, torch.Tensor]:
    """Clip a clip-space batch against the near plane.

    Args:
        batch: a clip-space ``TriangleBatch`` (``[B, V, 4]`` vertices).
        plane: which near plane, a key of :data:`NEAR_PLANES` (default: ``z = 0``, py_gpu's camera
            convention).

    Returns:
        ``(clipped, face_map)``: a ``TriangleBatch`` whose every ``w`` is > 0, and int64 ``[F']``
        mapping each output face to its input face. Use :func:`clip_batch` to also carry extra
        per-vertex attributes or to map fragments back to the input faces.
    """
    result = clip_batch(batch, plane=plane)
    return result.batch, result.face_map


def clip_batch(batch: TriangleBatch, *, attributes: dict | None = None, plane: str = "zero_to_one",
               guard: float | None = None) -> ClipResult:
    """Clip ``batch`` against the near plane, carrying ``attributes`` (``{name: [B, V, C] or [V, C]}``).

    With ``guard = G``, triangles are also cut against the guard band ``|x| <= G w``,
    ``|y| <= G w``: everything that can reach the image (``|x/w|, |y/w| <= 1``) is kept exactly,
    and screen coordinates stay within ``(G + 1) / 2`` image widths, so a triangle that projects
    arbitrarily far off screen is cut, never dropped or overflowed. Faces cut by several planes
    compose their piece weights, so ``unclip`` still maps fragments to the input faces.

    See the module docstring for how faces cut in only some batch elements are handled.

    Raises:
        PyGpuTypeError / PyGpuValueError: screen-space input, an unknown ``plane``, badly shaped
            attributes, or a projection that leaves ``w <= 0`` in front of the plane.
    """
    where = "clip_batch"
    if not isinstance(batch, TriangleBatch):
        raise PyGpuTypeError(f"{where}: `batch` must be a TriangleBatch, got {type(batch).__name__}")
    if not batch.is_clip_space:
        raise PyGpuValueError(f"{where}: `batch` must hold clip-space [B, V, 4] vertices, got [B, V, 3] screen space")
    if plane not in NEAR_PLANES:
        raise PyGpuValueError(f"{where}: unknown `plane` {plane!r}; choose one of {sorted(NEAR_PLANES)}")
    if guard is not None and not (isinstance(guard, (int, float)) and guard >= 1):
        raise PyGpuValueError(f"{where}: `guard` must be a number >= 1 (image half-widths), got {guard!r}")
    attrs = _check_attributes(where, attributes or {}, batch.batch_size, batch.vertices.shape[1], batch.vertices.device)
    a, b, c = NEAR_PLANES[plane]
    G = None if guard is None else float(guard)
    guards = () if G is None else ((-1.0, 0.0, 0.0, G), (1.0, 0.0, 0.0, G), (0.0, -1.0, 0.0, G), (0.0, 1.0, 0.0, G))
    near = ((0.0, 0.0, a, b), c)
    if _wholly_inside(batch.vertices, [near] + [(k, 0.0) for k in guards]):  # the usual case
        return _unclipped(batch, attrs)
    result, cut = _clip_plane(where, batch, attrs, *near)
    if guard is None:
        return result
    cut = cut.clone()
    for coeffs in guards:
        step, step_cut = _clip_plane(where, result.batch, result.attributes, coeffs, 0.0)
        if step.num_clipped == 0:
            continue
        cut[result.face_map[step_cut]] = True
        weights = step.weights @ result.weights[:, step.face_map]
        result = ClipResult(step.batch, result.face_map[step.face_map], weights, step.attributes, int(cut.sum()))
    return result


def _distance(v: torch.Tensor, coeffs, offset: float) -> torch.Tensor:
    """float ``[B, V]``: the signed (scaled) distance ``coeffs . (x, y, z, w) + offset`` of the
    vertices ``v`` (``[B, V, 4]``) to a plane, in front where ``>= 0``."""
    return sum(k * v[..., i] for i, k in enumerate(coeffs) if k != 0.0) + offset


def _wholly_inside(v: torch.Tensor, planes) -> bool:
    """Whether every vertex (used by a face or not) has ``w > 0`` and lies in front of every plane
    ``(coeffs, offset)``: then no plane cuts a face, and clipping changes nothing."""
    if v.shape[0] * v.shape[1] == 0:
        return False
    front = torch.stack([_distance(v, coeffs, offset) >= 0 for coeffs, offset in planes] + [v[..., 3] > 0])
    return bool(front.all())


def _unclipped(batch: TriangleBatch, attrs: dict) -> ClipResult:
    """The clip result of a batch that no plane cuts: the batch itself, every face its own."""
    B, F, dev = batch.batch_size, batch.faces.shape[0], batch.vertices.device
    eye = torch.eye(3, dtype=batch.vertices.dtype, device=dev).expand(B, F, 3, 3)
    return ClipResult(batch, torch.arange(F, device=dev), eye, dict(attrs), 0)


def _clip_plane(where: str, batch: TriangleBatch, attrs: dict, coeffs, offset: float) -> tuple[ClipResult, torch.Tensor]:
    """One plane ``d = coeffs . (x, y, z, w) + offset >= 0``: the clip result and a bool ``[F]``
    of the input faces that were cut or dropped in some element."""
    v = batch.vertices  # [B, V, 4]
    B, V = v.shape[:2]
    faces = batch.faces  # [F, 3]
    F = faces.shape[0]
    dtype, dev = v.dtype, v.device

    d = _distance(v, coeffs, offset)  # [B, V]
    dF = d[:, faces]  # [B, F, 3]
    inside = dF >= 0
    n_in = inside.sum(-1)  # [B, F]
    all_in = (n_in == 3).all(0)  # [F]
    all_out = (n_in == 0).all(0)
    mixed = ~all_in & ~all_out
    n_clipped = int((~all_in).sum())

    if n_clipped == 0 and bool((v[..., 3] > 0).all()):
        out = _unclipped(batch, attrs)
        _check_w(where, v, faces)
        return out, ~all_in

    m_idx = flat_nonzero(mixed)  # [M]
    M = m_idx.shape[0]
    need2 = (n_in[:, m_idx] == 2).any(0)  # [M]
    W = _piece_weights(dF[:, m_idx], inside[:, m_idx], n_in[:, m_idx])  # [B, M, 2, 3, 3]
    used = torch.stack([torch.ones_like(need2), need2], 1).reshape(-1)  # [2M]
    S = int(used.sum())
    W_used = W.reshape(B, 2 * M, 3, 3)[:, used]  # [B, S, 3, 3]
    src_face = m_idx.repeat_interleave(2)[used]  # [S]
    slot = torch.arange(2, device=dev).repeat(M)[used]  # [S]

    def carry(values: torch.Tensor) -> torch.Tensor:
        """Per-vertex values [B, V, C] -> values of the S*3 new vertices [B, 3S, C]."""
        corner = values[:, faces[src_face]]  # [B, S, 3, C]
        return (W_used @ corner).reshape(B, 3 * S, values.shape[-1])

    new_pos = carry(v)  # [B, 3S, 4]
    pad = (W_used.reshape(B, 3 * S, 3) == 0).all(-1, keepdim=True)  # [B, 3S, 1] padding vertices
    far = torch.tensor(_FAR_POINT, dtype=dtype, device=dev)
    new_pos = torch.where(pad, far, new_pos)

    keep_idx = flat_nonzero(all_in)  # [K] uncut faces
    new_faces = V + torch.arange(3 * S, device=dev).reshape(S, 3)
    all_faces = torch.cat([faces[keep_idx], new_faces])
    keys = torch.cat([2 * keep_idx, 2 * src_face + slot])
    order = torch.argsort(keys, stable=True)
    out_faces = all_faces[order]
    face_map = (keys // 2)[order]
    eye = torch.eye(3, dtype=dtype, device=dev).expand(B, keep_idx.shape[0], 3, 3)
    weights = torch.cat([eye, W_used], 1)[:, order]

    vertices = torch.cat([v, new_pos], 1)
    _check_w(where, vertices, out_faces)
    # input vertices no output face uses may lie behind the camera: park them at the far point
    vertices = torch.where(vertices[..., 3:] > 0, vertices, far)
    vcol = fcol = None
    if batch.vertex_colors is not None:
        vcol = torch.cat([batch.vertex_colors, carry(batch.vertex_colors)], 1)
    if batch.face_colors is not None:
        fcol = batch.face_colors[:, face_map]
    out_attrs = {k: torch.cat([t, carry(t)], 1) for k, t in attrs.items()}
    clipped = TriangleBatch(vertices, out_faces, vertex_colors=vcol, face_colors=fcol)
    return ClipResult(clipped, face_map, weights, out_attrs, n_clipped), ~all_in


def _piece_weights(dm: torch.Tensor, inside: torch.Tensor, n_in: torch.Tensor) -> torch.Tensor:
    """Weights ``[B, M, 2, 3, 3]`` of the (up to) two pieces of each face over its input corners.

    ``dm``: float ``[B, M, 3]`` plane distances of the corners; ``inside``: bool ``[B, M, 3]``;
    ``n_in``: int ``[B, M]``. Rotating the corners so that the lone vertex (the one inside when one
    is, the one outside when two are) comes first keeps the winding.
    """
    dtype = dm.dtype
    lone = torch.where(n_in == 1, inside.to(torch.int8).argmax(-1), (~inside).to(torch.int8).argmax(-1))
    r = torch.where((n_in == 1) | (n_in == 2), lone, torch.zeros_like(lone))  # [B, M]
    k = torch.arange(3, device=dm.device)
    rot = (r[..., None] + k) % 3  # [B, M, 3] input corner of rotated corner a, b, c
    E = torch.nn.functional.one_hot(rot, 3).to(dtype)  # [B, M, 3, 3]
    da, db, dc = torch.gather(dm, -1, rot).unbind(-1)

    def cut(d0, d1):
        den = d0 - d1
        safe = torch.where(den == 0, torch.ones_like(den), den)
        return torch.where(den == 0, torch.zeros_like(den), d0 / safe)[..., None]

    Ea, Eb, Ec = E[..., 0, :], E[..., 1, :], E[..., 2, :]
    t_ab, t_ca = cut(da, db), cut(dc, da)
    Pab = (1 - t_ab) * Ea + t_ab * Eb
    Pca = (1 - t_ca) * Ec + t_ca * Ea
    zero = torch.zeros_like(Ea)
    n = n_in[..., None, None]
    piece0 = torch.where(n == 3, torch.stack([Ea, Eb, Ec], -2),
                         torch.where(n == 2, torch.stack([Pab, Eb, Ec], -2),
                                     torch.where(n == 1, torch.stack([Ea, Pab, Pca], -2), torch.stack([zero] * 3, -2))))
    piece1 = torch.where(n == 2, torch.stack([Pab, Ec, Pca], -2), torch.stack([zero] * 3, -2))
    return torch.stack([piece0, piece1], 2)


def _check_attributes(where: str, attributes: dict, B: int, V: int, device) -> dict:
    if not isinstance(attributes, dict):
        raise PyGpuTypeError(f"{where}: `attributes` must be a dict of name -> [B, V, C] tensors")
    out = {}
    for name, t in attributes.items():
        if not isinstance(t, torch.Tensor):
            raise PyGpuTypeError(f"{where}: attribute {name!r} must be a tensor, got {type(t).__name__}")
        check_float(where, f"attributes[{name!r}]", t)
        if t.dim() == 2:
            t = t.unsqueeze(0)
        if t.dim() != 3 or t.shape[1] != V or t.shape[0] not in (1, B):
            raise PyGpuValueError(f"{where}: attribute {name!r} must have shape [B={B}, V={V}, C] or [V, C], got {tuple(t.shape)}")
        if t.device != device:
            raise PyGpuValueError(f"{where}: attribute {name!r} is on {t.device}, the vertices on {device}")
        out[name] = t.expand(B, -1, -1)
    return out


def _check_w(where: str, vertices: torch.Tensor, faces: torch.Tensor) -> None:
    w = vertices[..., 3]
    used = torch.zeros(w.shape[1], dtype=torch.bool, device=w.device)
    used[faces.reshape(-1)] = True
    if bool((w[:, used] <= 0).any()):
        raise PyGpuValueError(
            f"{where}: after clipping some vertex still has w <= 0: this projection puts points with w <= 0 in "
            "front of the chosen near plane; use a py_gpu.camera projection or plane='w'"
        )


def unclip_fragments(fragments: Fragments, result: ClipResult) -> Fragments:
    """Re-express ``fragments`` of ``result.batch`` on the input faces.

    ``face_index`` becomes the input face (-1 stays -1) and ``bary`` the perspective-correct
    weights of the input face's corners (``bary @ weights``), so per-vertex attributes of the
    original mesh can be interpolated directly. ``depth``, ``dist`` and ``alpha`` are unchanged;
    ``screen_bary`` is dropped (it is affine in the clipped triangle only). Differentiable.
    """
    face = fragments.face_index  # [B, H, W, K]
    if result.num_clipped == 0:
        return fragments
    B = face.shape[0]
    valid = face >= 0
    # one padding row (index F') for empty fragments, so nothing indexes an empty table when
    # every face was behind the plane
    n_out = result.face_map.shape[0]
    pad_face = torch.where(valid, face, torch.full_like(face, n_out))
    face_map = torch.cat([result.face_map, result.face_map.new_full((1,), -1)])
    orig = face_map[pad_face]
    w = result.weights.to(fragments.bary.dtype)  # [B, F', 3, 3]
    w = torch.cat([w, w.new_zeros(B, 1, 3, 3)], 1)
    idx = pad_face.reshape(B, -1)[..., None, None].expand(-1, -1, 3, 3)
    wsel = torch.gather(w, 1, idx).reshape(*face.shape, 3, 3)  # [B, H, W, K, 3, 3]
    bary = (fragments.bary.unsqueeze(-1) * wsel).sum(-2)
    return Fragments(orig, bary, fragments.depth, fragments.dist, None, fragments.alpha)
