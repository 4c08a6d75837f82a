"""Fitting toolkit: orbit cameras, random rotations, mesh regularizers, surface sampling, chamfer distance.

The pieces a fitting script needs around ``Renderer.render``, each vectorized torch,
differentiable and device-agnostic:

- :func:`orbit_camera`: a batch of cameras on a sphere around a target, differentiable in its
  distance, elevation and azimuth (so a camera-pose fit can optimize them);
- :func:`random_rotations` (uniform on SO(3)) and :func:`random_rotation_near` (rotations of an
  exact angle about random axes: pose fits started a known angle off);
- mesh regularizers on ``positions [B, V, 3] or [V, 3]`` and ``faces [F, 3]``: :func:`edge_loss`,
  :func:`laplacian_loss` (with the per-vertex :func:`uniform_laplacian`),
  :func:`normal_consistency_loss`; their edge and adjacency tables come from
  :func:`mesh_topology`, computed once per faces tensor and cached;
- :func:`sample_points` (area-weighted uniform samples on the surface) and
  :func:`chamfer_distance` (chunked, so memory stays bounded).

Batch rule: a ``[B, ...]`` input gives ``[B, ...]`` results (losses: float ``[B]``, one per
mesh); an unbatched ``[V, 3]`` / ``[N, 3]`` input gives unbatched results (losses: a scalar).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import torch

from ._check import PyGpuTypeError, PyGpuValueError, check_faces, check_finite, check_float, check_shape, check_tensor
from .camera import Camera, axis_angle_to_matrix, perspective, quaternion_to_matrix, view_from_pose

__all__ = [
    "orbit_camera",
    "random_rotations",
    "random_rotation_near",
    "MeshTopology",
    "mesh_topology",
    "edge_loss",
    "uniform_laplacian",
    "laplacian_loss",
    "normal_consistency_loss",
    "sample_points",
    "chamfer_distance",
]


# ---- small helpers ---------------------------------------------------------------------------------
def _number_or_tensor(where: str, name: str, value, *, dtype, device) -> torch.Tensor:
    """A python number or a float tensor ``[]`` / ``[B]`` as a float tensor ``[B or 1]``."""
    if isinstance(value, torch.Tensor):
        check_float(where, name, value)
        if value.dim() > 1:
            raise PyGpuValueError(f"{where}: `{name}` must be a number or a tensor [] or [B], got shape {tuple(value.shape)}")
        t = value.reshape(-1)
    else:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PyGpuTypeError(f"{where}: `{name}` must be a number or a float tensor, got {value!r}")
        t = torch.tensor([float(value)], dtype=dtype, device=device)
    check_finite(where, name, t)
    return t


def _draw(where: str, kind: str, shape: tuple[int, ...], generator: torch.Generator | None, dtype, device) -> torch.Tensor:
    """``torch.rand`` / ``torch.randn`` of ``shape`` from ``generator`` (drawn on the generator's
    device, then moved), so a CPU generator seeds results on any device."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise PyGpuTypeError(f"{where}: `generator` must be a torch.Generator or None, got {type(generator).__name__}")
    draw_on = generator.device if generator is not None else device
    fn = torch.rand if kind == "rand" else torch.randn
    return fn(shape, generator=generator, dtype=dtype, device=draw_on).to(device)


def _count(where: str, name: str, n) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise PyGpuTypeError(f"{where}: `{name}` must be an int, got {n!r}")
    if n < 0:
        raise PyGpuValueError(f"{where}: `{name}` must be >= 0, got {n}")
    return n


def _mesh_args(where: str, positions, faces) -> tuple[torch.Tensor, "MeshTopology", bool]:
    """``(positions [B, V, 3], topology, batched)`` after checking both arguments."""
    check_tensor(where, "positions", positions)
    check_float(where, "positions", positions)
    batched = positions.dim() == 3
    check_shape(where, "positions", positions, (None, None, 3) if batched else (None, 3), "[B, V, 3] or [V, 3]")
    topo = faces if isinstance(faces, MeshTopology) else mesh_topology(faces)
    if topo.faces.device != positions.device:
        raise PyGpuValueError(f"{where}: `faces` is on {topo.faces.device} but `positions` on {positions.device}")
    nv = positions.shape[-2]
    if topo.num_vertices > nv:
        raise PyGpuValueError(f"{where}: `faces` indexes vertex {topo.num_vertices - 1} but `positions` has {nv} vertices")
    return (positions if batched else positions[None]), topo, batched


def _safe_norm(v: torch.Tensor) -> torch.Tensor:
    """``|v|`` over the last dim with a zero (not NaN) gradient at ``v = 0``."""
    sq = (v * v).sum(-1)
    pos = sq > 0
    return torch.where(pos, sq.clamp_min(torch.finfo(v.dtype).tiny).sqrt(), torch.zeros_like(sq))


# ---- cameras ---------------------------------------------------------------------------------------
def orbit_camera(distance, elevation, azimuth, *, at=(0.0, 0.0, 0.0), degrees: bool = True, fov_y=60.0,
                 aspect=1.0, near: float = 0.1, far: float = 100.0) -> Camera:
    """A batch of perspective cameras on spheres around ``at``, each looking at it.

    Convention (right-handed, +Y up): the camera sits at
    ``at + distance * (cos(el) sin(az), sin(el), cos(el) cos(az))``. **Elevation** is the angle
    from the xz plane toward +Y (90 looks straight down from above); **azimuth** turns around
    +Y from +Z toward +X (azimuth 0 puts the camera on +Z, 90 on +X). The camera's right axis
    is ``(cos(az), 0, -sin(az))`` and its up axis is ``back x right``: for ``|el| < 90`` this is
    exactly ``look_at(eye, at, up=+Y)``, and it stays smooth through the poles, where
    ``look_at`` is undefined.

    Args:
        distance: float ``[]`` / ``[B]`` tensor or number, > 0.
        elevation, azimuth: float ``[]`` / ``[B]`` tensors or numbers; degrees unless
            ``degrees=False`` (radians). The three broadcast to one batch size ``B``.
        at: float ``[3]`` or ``[B, 3]`` target (tensor or sequence).
        fov_y, aspect, near, far: as :func:`py_gpu.camera.perspective` (``fov_y`` in degrees).

    Returns:
        ``Camera`` with ``view`` float ``[B, 4, 4]`` and ``projection`` ``[B or 1, 4, 4]``,
        differentiable in ``distance``, ``elevation``, ``azimuth``, ``at``, ``fov_y`` and
        ``aspect`` (the tensor ones). dtype and device follow the first tensor argument
        (float32 on the CPU when all are numbers).
    """
    where = "orbit_camera"
    like = next((t for t in (distance, elevation, azimuth, at) if isinstance(t, torch.Tensor)), None)
    dtype = like.dtype if like is not None and like.is_floating_point() else torch.float32
    device = like.device if like is not None else None
    d = _number_or_tensor(where, "distance", distance, dtype=dtype, device=device)
    el = _number_or_tensor(where, "elevation", elevation, dtype=dtype, device=device)
    az = _number_or_tensor(where, "azimuth", azimuth, dtype=dtype, device=device)
    d, el, az = d.to(dtype), el.to(dtype), az.to(dtype)
    devices = {t.device for t in (d, el, az)}
    if len(devices) > 1:
        raise PyGpuValueError(f"{where}: `distance`, `elevation` and `azimuth` are on different devices {sorted(map(str, devices))}")
    if bool((d.detach() <= 0).any()):
        raise PyGpuValueError(f"{where}: `distance` must be > 0, got {distance}")
    sizes = {t.shape[0] for t in (d, el, az)} - {1}
    if len(sizes) > 1:
        raise PyGpuValueError(f"{where}: batch sizes of `distance`, `elevation`, `azimuth` differ: {sorted(sizes)}")
    B = sizes.pop() if sizes else 1
    d, el, az = d.expand(B), el.expand(B), az.expand(B)
    if degrees:
        el, az = el * (math.pi / 180.0), az * (math.pi / 180.0)
    target = at if isinstance(at, torch.Tensor) else torch.as_tensor(at, dtype=dtype, device=d.device)
    check_float(where, "at", target)
    target = target.to(d.device, dtype)
    if target.dim() == 1:
        target = target[None]
    check_shape(where, "at", target, (None, 3), "[3] or [B, 3]")
    check_finite(where, "at", target)
    if target.shape[0] not in (1, B):
        raise PyGpuValueError(f"{where}: `at` has batch size {target.shape[0]} but the angles {B}")
    ce, se, ca, sa = torch.cos(el), torch.sin(el), torch.cos(az), torch.sin(az)
    zero = torch.zeros_like(ce)
    back = torch.stack([ce * sa, se, ce * ca], -1)  # [B, 3] camera +Z (away from the target)
    right = torch.stack([ca, zero, -sa], -1)  # [B, 3] camera +X
    up = torch.stack([-se * sa, ce, -se * ca], -1)  # [B, 3] camera +Y = back x right
    rotation = torch.stack([right, up, back], -1)  # [B, 3, 3] columns: camera axes in world space
    eye = target + d[:, None] * back  # [B, 3]
    view = view_from_pose(rotation, eye)
    fov_t = fov_y.to(d.device, dtype) if isinstance(fov_y, torch.Tensor) else fov_y
    asp_t = aspect.to(d.device, dtype) if isinstance(aspect, torch.Tensor) else aspect
    projection = perspective(fov_t, asp_t, near, far, dtype=dtype, device=d.device)
    return Camera(view, projection)


# ---- rotations -------------------------------------------------------------------------------------
def random_rotations(n: int, *, generator: torch.Generator | None = None, dtype: torch.dtype = torch.float32,
                     device=None) -> torch.Tensor:
    """``n`` rotation matrices float ``[n, 3, 3]`` drawn uniformly (Haar measure) from SO(3).

    A 4-D standard Gaussian normalized to unit length is uniform on the unit quaternions'
    sphere S^3, and S^3 covers SO(3) twice evenly, so the matrices are uniform (Shoemake,
    "Uniform random rotations", Graphics Gems III). ``generator`` (any device) makes them
    reproducible; the draw happens on its device and is moved to ``device``.
    """
    n = _count("random_rotations", "n", n)
    q = _draw("random_rotations", "randn", (n, 4), generator, dtype, device)
    return quaternion_to_matrix(q)


def random_rotation_near(angle_deg, n: int = 1, generator: torch.Generator | None = None, *,
                         rotation: torch.Tensor | None = None, dtype: torch.dtype | None = None,
                         device=None) -> torch.Tensor:
    """``n`` rotations float ``[n, 3, 3]`` of exactly ``angle_deg`` degrees about uniformly random axes.

    With ``rotation`` (float ``[3, 3]`` or ``[n, 3, 3]``) the result is ``delta @ rotation``:
    a rotation exactly ``angle_deg`` away from it (``rotation_angle(rotation, result)`` is the
    angle), the start of a pose fit "X degrees off". ``angle_deg``: a number or a float tensor
    ``[]`` / ``[n]`` in ``[0, 180]``. dtype and device follow ``rotation``, else the arguments
    (float32 on the CPU by default).
    """
    where = "random_rotation_near"
    n = _count(where, "n", n)
    if rotation is not None:
        check_tensor(where, "rotation", rotation)
        check_float(where, "rotation", rotation)
        if rotation.shape[-2:] != (3, 3) or rotation.dim() not in (2, 3) or (rotation.dim() == 3 and rotation.shape[0] not in (1, n)):
            raise PyGpuValueError(f"{where}: `rotation` must have shape [3, 3] or [n={n}, 3, 3], got {tuple(rotation.shape)}")
        dtype = dtype or rotation.dtype
        device = device if device is not None else rotation.device
    if isinstance(angle_deg, torch.Tensor):
        dtype = dtype or (angle_deg.dtype if angle_deg.is_floating_point() else None)
        device = device if device is not None else angle_deg.device
    dtype = dtype or torch.float32
    angle = _number_or_tensor(where, "angle_deg", angle_deg, dtype=dtype, device=device).to(device, dtype)
    if angle.shape[0] not in (1, n):
        raise PyGpuValueError(f"{where}: `angle_deg` has {angle.shape[0]} values but n = {n}")
    if bool(((angle.detach() < 0) | (angle.detach() > 180)).any()):
        raise PyGpuValueError(f"{where}: `angle_deg` must be in [0, 180] degrees, got {angle_deg}")
    axis = _draw(where, "randn", (n, 3), generator, dtype, angle.device)
    axis = axis / axis.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(dtype).tiny)
    delta = axis_angle_to_matrix(axis * (angle * (math.pi / 180.0))[:, None])
    if rotation is None:
        return delta
    return delta @ rotation.to(delta.device, delta.dtype)


# ---- topology ------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class MeshTopology:
    """Edge and adjacency tables of one face list, on the faces' device.

    Attributes:
        faces: int64 ``[F, 3]``.
        num_vertices: vertices referenced (``faces.max() + 1``; 0 without faces).
        edges: int64 ``[E, 2]`` unique undirected edges ``(lo, hi)`` with ``lo < hi``.
        degree: int64 ``[num_vertices]`` neighbors of each vertex along ``edges``.
        pair_edges: int64 ``[P, 2]`` the edge ``(lo, hi)`` shared by each pair of faces.
        pair_opposite: int64 ``[P, 2]`` the two faces' corners opposite that edge. Every pair of
            faces sharing an edge appears once (an edge of ``k`` faces gives ``k (k - 1) / 2``).
    """

    faces: torch.Tensor
    num_vertices: int
    edges: torch.Tensor
    degree: torch.Tensor
    pair_edges: torch.Tensor
    pair_opposite: torch.Tensor


#: ``id(faces) -> (weak reference, faces._version, topology)``; entries vanish with their tensor.
_TOPOLOGY_CACHE: dict[int, tuple] = {}


def mesh_topology(faces: torch.Tensor) -> MeshTopology:
    """The :class:`MeshTopology` of int ``[F, 3]`` ``faces``, computed once and cached per tensor.

    The cache holds a weak reference to ``faces`` (the topology keeps its own copy) and its
    version counter, so a new or modified faces tensor is computed again and a dropped one frees
    its entry. The losses call this;
    pass the result instead of ``faces`` to skip even the lookup.
    """
    where = "mesh_topology"
    check_tensor(where, "faces", faces)
    hit = _TOPOLOGY_CACHE.get(id(faces))
    if hit is not None and hit[0]() is faces and hit[1] == faces._version:
        return hit[2]
    topo = _build_topology(where, faces)
    key = id(faces)
    try:
        ref = weakref.ref(faces, lambda _r, key=key: _TOPOLOGY_CACHE.pop(key, None))
    except TypeError:  # not weak-referenceable: do not cache
        return topo
    _TOPOLOGY_CACHE[key] = (ref, faces._version, topo)
    return topo


def _build_topology(where: str, faces: torch.Tensor) -> MeshTopology:
    f = faces
    if f.dtype in (torch.int32, torch.int16, torch.uint8, torch.int8):
        f = f.long()
    nv = int(f.max()) + 1 if f.numel() else 0
    f = check_faces(where, f, max(nv, 1))
    if f is faces:  # the cache must not keep the caller's tensor alive
        f = f.clone()
    device = f.device
    F = f.shape[0]
    # each face's three edges (corner k, k+1) and the corner opposite each
    a = f[:, [0, 1, 2]].reshape(-1)  # [3F]
    b = f[:, [1, 2, 0]].reshape(-1)
    opp = f[:, [2, 0, 1]].reshape(-1)
    lo, hi = torch.minimum(a, b), torch.maximum(a, b)
    key = lo * max(nv, 1) + hi  # [3F] one integer per undirected edge
    uniq, inverse, counts = torch.unique(key, sorted=True, return_inverse=True, return_counts=True)
    edges = torch.stack([uniq // max(nv, 1), uniq % max(nv, 1)], -1)  # [E, 2]
    degree = torch.zeros(nv, dtype=torch.int64, device=device)
    if edges.numel():
        ones = torch.ones(edges.shape[0], dtype=torch.int64, device=device)
        degree = degree.index_add(0, edges[:, 0], ones).index_add(0, edges[:, 1], ones)
    # pairs of face-edge occurrences on the same edge: sort occurrences by edge, pair each with later ones
    order = torch.argsort(inverse, stable=True)  # [3F] occurrences grouped by edge
    start = torch.cumsum(counts, 0) - counts  # [E] first slot of each group
    slot = torch.arange(3 * F, device=device)
    group = inverse[order]  # [3F] edge of each sorted slot
    later = start[group] + counts[group] - 1 - slot  # occurrences after this one in its group
    first = torch.repeat_interleave(slot, later)  # [P]
    step = torch.arange(first.shape[0], device=device) - torch.repeat_interleave(torch.cumsum(later, 0) - later, later)
    second = first + 1 + step  # [P]
    i, j = order[first], order[second]  # occurrence indices into the [3F] lists
    pair_edges = torch.stack([lo[i], hi[i]], -1)
    pair_opposite = torch.stack([opp[i], opp[j]], -1)
    return MeshTopology(f, nv, edges, degree, pair_edges, pair_opposite)


# ---- regularizers ------------------------------------------------------------------------------------
def _finish(per_mesh: torch.Tensor, batched: bool) -> torch.Tensor:
    return per_mesh if batched else per_mesh[0]


def edge_loss(positions: torch.Tensor, faces, *, target_length: float = 0.0) -> torch.Tensor:
    """Mean over unique edges of ``(|v_i - v_j| - target_length)^2``.

    With ``target_length = 0`` (the default) this is the mean squared edge length, which keeps
    a deforming mesh's edges short and even. ``positions``: float ``[B, V, 3]`` or ``[V, 3]``;
    ``faces``: int ``[F, 3]`` or a :class:`MeshTopology`. Returns float ``[B]`` (or ``[]``); 0
    for a mesh without edges. Differentiable in ``positions``.
    """
    where = "edge_loss"
    pos, topo, batched = _mesh_args(where, positions, faces)
    target = float(target_length)
    if not math.isfinite(target) or target < 0:
        raise PyGpuValueError(f"{where}: `target_length` must be a finite number >= 0, got {target_length!r}")
    if topo.edges.shape[0] == 0:
        return _finish(pos.sum((-1, -2)) * 0.0, batched)
    e = pos[:, topo.edges[:, 1]] - pos[:, topo.edges[:, 0]]  # [B, E, 3]
    if target == 0.0:
        per_edge = (e * e).sum(-1)
    else:
        per_edge = (_safe_norm(e) - target) ** 2
    return _finish(per_edge.mean(-1), batched)


def uniform_laplacian(positions: torch.Tensor, faces) -> torch.Tensor:
    """Uniform Laplacian float ``[B, V, 3]`` (or ``[V, 3]``): ``v - mean(neighbors of v)`` per
    vertex (neighbors along mesh edges); 0 for vertices on no edge. Zero at the interior
    vertices of a flat regular grid. Differentiable in ``positions``."""
    pos, topo, batched = _mesh_args("uniform_laplacian", positions, faces)
    lap = _laplacian(pos, topo)
    return lap if batched else lap[0]


def _laplacian(pos: torch.Tensor, topo: MeshTopology) -> torch.Tensor:
    V = pos.shape[1]
    i, j = topo.edges[:, 0], topo.edges[:, 1]
    sums = torch.zeros_like(pos).index_add(1, i, pos[:, j]).index_add(1, j, pos[:, i])  # [B, V, 3]
    degree = torch.zeros(V, dtype=pos.dtype, device=pos.device)
    degree[: topo.num_vertices] = topo.degree.to(pos.dtype)
    mean = sums / degree.clamp_min(1.0)[None, :, None]
    return torch.where((degree > 0)[None, :, None], pos - mean, torch.zeros_like(pos))


def laplacian_loss(positions: torch.Tensor, faces) -> torch.Tensor:
    """Uniform Laplacian smoothing: the mean over vertices on at least one edge of
    ``|v - mean(neighbors of v)|`` (see :func:`uniform_laplacian`).

    ``positions``: float ``[B, V, 3]`` or ``[V, 3]``; ``faces``: int ``[F, 3]`` or a
    :class:`MeshTopology`. Returns float ``[B]`` (or ``[]``). A regular tetrahedron of
    circumradius ``r`` gives ``4 r / 3``. Differentiable in ``positions`` (with a zero
    gradient where a vertex's Laplacian is exactly 0).
    """
    pos, topo, batched = _mesh_args("laplacian_loss", positions, faces)
    used = topo.degree > 0
    if not bool(used.any()):
        return _finish(pos.sum((-1, -2)) * 0.0, batched)
    norms = _safe_norm(_laplacian(pos, topo))[:, : topo.num_vertices]  # [B, V']
    return _finish(norms[:, used].mean(-1), batched)


def normal_consistency_loss(positions: torch.Tensor, faces) -> torch.Tensor:
    """Mean over pairs of faces sharing an edge of ``1 - cos`` of the angle between their normals.

    Each face's normal is taken relative to the shared edge ``(lo, hi)`` and its opposite corner,
    ``n0 = (hi - lo) x (a - lo)`` and ``n1 = -(hi - lo) x (b - lo)``, which are the two faces'
    normals when the mesh is consistently wound and still measure the fold when it is not. 0 on
    a flat sheet, 2 for a pair folded flat onto itself; a regular tetrahedron gives 4/3.

    ``positions``: float ``[B, V, 3]`` or ``[V, 3]``; ``faces``: int ``[F, 3]`` or a
    :class:`MeshTopology`. Returns float ``[B]`` (or ``[]``); 0 when no two faces share an
    edge. Differentiable in ``positions``.
    """
    pos, topo, batched = _mesh_args("normal_consistency_loss", positions, faces)
    if topo.pair_edges.shape[0] == 0:
        return _finish(pos.sum((-1, -2)) * 0.0, batched)
    lo, hi = pos[:, topo.pair_edges[:, 0]], pos[:, topo.pair_edges[:, 1]]  # [B, P, 3]
    a, b = pos[:, topo.pair_opposite[:, 0]], pos[:, topo.pair_opposite[:, 1]]
    e = hi - lo
    n0 = torch.cross(e, a - lo, dim=-1)
    n1 = -torch.cross(e, b - lo, dim=-1)
    tiny = torch.finfo(pos.dtype).tiny
    cos = (n0 * n1).sum(-1) / (_safe_norm(n0) * _safe_norm(n1)).clamp_min(tiny ** 0.5)
    return _finish((1.0 - cos).mean(-1), batched)


# ---- point sets -----------------------------------------------------------------------------------------
def sample_points(positions: torch.Tensor, faces: torch.Tensor, n: int, *, generator: torch.Generator | None = None,
                  return_normals: bool = False):
    """``n`` points drawn uniformly (by area) from each mesh's surface.

    A face is chosen with probability proportional to its area, then a point uniformly inside it
    (corner weights ``1 - sqrt(r1)``, ``sqrt(r1) (1 - r2)``, ``sqrt(r1) r2`` for uniform
    ``r1, r2``). The choice of face and weights carries no gradient; the points are the
    weighted corners, so gradients flow to ``positions``.

    Args:
        positions: float ``[B, V, 3]`` or ``[V, 3]``.
        faces: int ``[F, 3]`` (shared by the batch).
        n: samples per mesh.
        generator: optional ``torch.Generator`` (any device) for reproducible samples.
        return_normals: also return the unit normals of the sampled faces.

    Returns:
        float ``[B, n, 3]`` (or ``[n, 3]``) points; with ``return_normals`` a pair
        ``(points, normals)`` of that shape.

    Raises:
        PyGpuValueError: a mesh has no faces or zero total area.
    """
    where = "sample_points"
    n = _count(where, "n", n)
    pos, topo, batched = _mesh_args(where, positions, faces)
    f = topo.faces
    B = pos.shape[0]
    if f.shape[0] == 0:
        raise PyGpuValueError(f"{where}: the mesh has no faces to sample")
    tri = pos[:, f]  # [B, F, 3, 3]
    normal = torch.cross(tri[:, :, 1] - tri[:, :, 0], tri[:, :, 2] - tri[:, :, 0], dim=-1)  # [B, F, 3], |n| = 2 area
    area = _safe_norm(normal.detach())  # [B, F]
    cdf = torch.cumsum(area, -1)
    total = cdf[:, -1:]
    if bool((total <= 0).any()):
        raise PyGpuValueError(f"{where}: a mesh has zero surface area; nothing to sample")
    r = _draw(where, "rand", (B, n, 3), generator, pos.dtype, pos.device)
    face = torch.searchsorted(cdf, (r[..., 0] * total).contiguous(), right=True).clamp_max(f.shape[0] - 1)  # [B, n]
    s = r[..., 1].sqrt()
    w = torch.stack([1.0 - s, s * (1.0 - r[..., 2]), s * r[..., 2]], -1)  # [B, n, 3] corner weights
    corners = torch.gather(tri, 1, face[:, :, None, None].expand(B, n, 3, 3))  # [B, n, 3 corners, 3]
    points = (w[..., None] * corners).sum(-2)
    if not batched:
        points = points[0]
    if not return_normals:
        return points
    nrm = torch.gather(normal, 1, face[:, :, None].expand(B, n, 3))
    nrm = nrm / _safe_norm(nrm)[..., None].clamp_min(torch.finfo(pos.dtype).tiny)
    return points, (nrm if batched else nrm[0])


#: Largest number of pair distances one chamfer chunk holds (times 3 coordinates).
CHAMFER_PAIRS_PER_CHUNK = 1 << 22


def _nearest(src: torch.Tensor, dst: torch.Tensor, rows: int) -> torch.Tensor:
    """int64 ``[B, N]``: index of the nearest point of ``dst [B, M, 3]`` for each of ``src [B, N, 3]``
    (exact squared differences, ``rows`` source points at a time; ties go to the lower index)."""
    out = []
    for k in range(0, src.shape[1], rows):
        d = ((src[:, k:k + rows, None, :] - dst[:, None, :, :]) ** 2).sum(-1)  # [B, rows, M]
        out.append(d.argmin(-1))
    return torch.cat(out, 1)


def chamfer_distance(a: torch.Tensor, b: torch.Tensor, *, chunk_size: int | None = None) -> torch.Tensor:
    """Symmetric chamfer distance: ``mean_i min_j |a_i - b_j|^2 + mean_j min_i |a_i - b_j|^2``.

    Args:
        a: float ``[B, N, 3]`` or ``[N, 3]``.
        b: float ``[B, M, 3]`` or ``[M, 3]`` (same batching, dtype and device as ``a``).
        chunk_size: points compared against the whole other set at a time; by default as many as
            keep a chunk within :data:`CHAMFER_PAIRS_PER_CHUNK` pair distances per batch.

    Returns:
        float ``[B]`` (or ``[]``). The nearest neighbours are found without gradient, chunk by
        chunk, so memory stays bounded (``[B, chunk_size, M]``) for sets of tens of thousands
        of points; the distances to them are then recomputed with gradient (memory ``O(N + M)``).
        The result does not depend on ``chunk_size``.
    """
    where = "chamfer_distance"
    for name, t in (("a", a), ("b", b)):
        check_tensor(where, name, t)
        check_float(where, name, t)
        check_shape(where, name, t, (None, None, 3) if t.dim() == 3 else (None, 3), "[B, N, 3] or [N, 3]")
    if a.dim() != b.dim():
        raise PyGpuValueError(f"{where}: `a` is {tuple(a.shape)} and `b` is {tuple(b.shape)}; batch both or neither")
    if a.device != b.device:
        raise PyGpuValueError(f"{where}: `a` is on {a.device} but `b` on {b.device}")
    if a.dtype != b.dtype:
        raise PyGpuTypeError(f"{where}: `a` is {a.dtype} but `b` is {b.dtype}")
    batched = a.dim() == 3
    A, Bp = (a, b) if batched else (a[None], b[None])
    if A.shape[0] != Bp.shape[0]:
        raise PyGpuValueError(f"{where}: batch sizes differ: {A.shape[0]} (a) and {Bp.shape[0]} (b)")
    if A.shape[1] == 0 or Bp.shape[1] == 0:
        raise PyGpuValueError(f"{where}: both point sets need at least one point, got {A.shape[1]} and {Bp.shape[1]}")
    if chunk_size is not None:
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise PyGpuValueError(f"{where}: `chunk_size` must be a positive int, got {chunk_size!r}")
    batch = max(A.shape[0], 1)

    def rows(other: int) -> int:
        return chunk_size or max(1, CHAMFER_PAIRS_PER_CHUNK // (batch * other))

    with torch.no_grad():
        ab = _nearest(A.detach(), Bp.detach(), rows(Bp.shape[1]))  # [B, N]
        ba = _nearest(Bp.detach(), A.detach(), rows(A.shape[1]))  # [B, M]
    near_b = torch.gather(Bp, 1, ab[..., None].expand(-1, -1, 3))
    near_a = torch.gather(A, 1, ba[..., None].expand(-1, -1, 3))
    out = ((A - near_b) ** 2).sum(-1).mean(-1) + ((Bp - near_a) ** 2).sum(-1).mean(-1)
    return out if batched else out[0]
