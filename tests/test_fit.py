"""py_gpu.fit: orbit cameras, random rotations, mesh regularizers, surface sampling, chamfer distance."""

from __future__ import annotations

import gc
import math

import pytest
import torch

import py_gpu
from py_gpu import PyGpuTypeError, PyGpuValueError, fit
from py_gpu.camera import Camera, rotation_angle


def _tetrahedron(dtype=torch.float64, device=None):
    """A regular tetrahedron with circumradius 1 centred at the origin, wound outward."""
    v = torch.tensor([[1.0, 1, 1], [1, -1, -1], [-1, 1, -1], [-1, -1, 1]], dtype=dtype, device=device) / math.sqrt(3.0)
    f = torch.tensor([[0, 1, 2], [0, 3, 1], [0, 2, 3], [1, 3, 2]], device=device)
    return v, f


def _grid(n=4, dtype=torch.float64, device=None):
    m = py_gpu.shapes.plane(2.0, n, dtype=dtype, device=device)
    return m.positions, m.faces


# ---- orbit_camera -----------------------------------------------------------------------------------
@pytest.mark.parametrize("el, az, want", [
    (0.0, 0.0, (0.0, 0.0, 2.0)),
    (0.0, 90.0, (2.0, 0.0, 0.0)),
    (0.0, 180.0, (0.0, 0.0, -2.0)),
    (90.0, 0.0, (0.0, 2.0, 0.0)),
    (-90.0, 30.0, (0.0, -2.0, 0.0)),
    (30.0, 45.0, (2 * math.cos(math.pi / 6) * math.sqrt(0.5), 1.0, 2 * math.cos(math.pi / 6) * math.sqrt(0.5))),
])
def test_orbit_camera_positions_by_hand(el, az, want):
    cam = fit.orbit_camera(2.0, el, az, at=(1.0, -1.0, 0.5))
    want = torch.tensor(want) + torch.tensor([1.0, -1.0, 0.5])
    assert torch.allclose(cam.position[0], want, atol=1e-5)
    # the target is straight ahead, `distance` away down -Z
    ahead = cam.world_to_view(torch.tensor([[1.0, -1.0, 0.5]]))
    assert torch.allclose(ahead[0, 0], torch.tensor([0.0, 0.0, -2.0]), atol=1e-5)
    r = cam.view[0, :3, :3]
    assert torch.allclose(r @ r.T, torch.eye(3), atol=1e-6) and float(torch.det(r)) > 0


def test_orbit_camera_is_look_at_away_from_the_poles_and_batched(device):
    d = torch.tensor([2.0, 3.0, 4.0], device=device)
    el = torch.tensor([10.0, -40.0, 80.0], device=device)
    az = torch.tensor([-120.0, 0.0, 200.0], device=device)
    cam = fit.orbit_camera(d, el, az, fov_y=50.0, aspect=1.5)
    assert cam.view.shape == (3, 4, 4) and cam.device.type == device.type
    for k in range(3):
        ref = Camera.perspective(cam.position[k].cpu(), (0.0, 0.0, 0.0), fov_y=50.0, aspect=1.5)
        assert torch.allclose(cam.view[k].cpu(), ref.view[0], atol=1e-5)
        assert torch.allclose(cam.projection[0].cpu(), ref.projection[0], atol=1e-6)
    rad = fit.orbit_camera(d, el * math.pi / 180, az * math.pi / 180, degrees=False)
    assert torch.allclose(rad.view, cam.view, atol=1e-5)
    one = fit.orbit_camera(2.0, torch.tensor([0.0, 45.0], device=device), 0.0)  # numbers broadcast
    assert one.view.shape == (2, 4, 4)


def test_orbit_camera_gradcheck_float64():
    at = torch.tensor([0.3, -0.2, 0.1], dtype=torch.float64, requires_grad=True)

    def f(d, el, az, at):
        cam = fit.orbit_camera(d, el, az, at=at)
        return cam.view, cam.position

    args = [torch.tensor([2.0, 3.5], dtype=torch.float64, requires_grad=True),
            torch.tensor([20.0, 89.0], dtype=torch.float64, requires_grad=True),
            torch.tensor([-30.0, 100.0], dtype=torch.float64, requires_grad=True), at]
    assert torch.autograd.gradcheck(f, args)
    # through the pole as well (look_at is undefined there, the orbit is smooth)
    pole = [torch.tensor([2.0], dtype=torch.float64, requires_grad=True),
            torch.tensor([90.0], dtype=torch.float64, requires_grad=True),
            torch.tensor([15.0], dtype=torch.float64, requires_grad=True), at]
    assert torch.autograd.gradcheck(f, pole)


def test_orbit_camera_refuses_bad_input():
    with pytest.raises(PyGpuValueError, match="distance"):
        fit.orbit_camera(0.0, 0.0, 0.0)
    with pytest.raises(PyGpuValueError, match="batch sizes"):
        fit.orbit_camera(torch.ones(2), torch.zeros(3), 0.0)
    with pytest.raises(PyGpuTypeError, match="elevation"):
        fit.orbit_camera(1.0, "up", 0.0)
    with pytest.raises(PyGpuValueError, match="NaN"):
        fit.orbit_camera(1.0, float("nan"), 0.0)
    with pytest.raises(PyGpuValueError, match="at"):
        fit.orbit_camera(1.0, 0.0, 0.0, at=(0.0, 1.0))


# ---- rotations ------------------------------------------------------------------------------------------
def test_random_rotations_are_uniform_rotations(device):
    g = torch.Generator().manual_seed(11)
    r = fit.random_rotations(20000, generator=g, dtype=torch.float64, device=device)
    assert r.shape == (20000, 3, 3) and r.device.type == device.type
    eye = torch.eye(3, dtype=torch.float64, device=device)
    assert torch.allclose(r @ r.transpose(1, 2), eye.expand_as(r), atol=1e-12)
    assert torch.allclose(torch.linalg.det(r), torch.ones(20000, dtype=torch.float64, device=device), atol=1e-12)
    # under the Haar measure every entry has mean 0 (variance 1/3: the mean's std is ~0.004 here)
    assert float(r.mean(0).abs().max()) < 0.02
    # and the rotation angle has density (1 - cos t) / pi: mean angle pi/2 + 2/pi
    assert abs(float(rotation_angle(r).mean()) - (math.pi / 2 + 2 / math.pi)) < 0.02
    again = fit.random_rotations(20000, generator=torch.Generator().manual_seed(11), dtype=torch.float64, device=device)
    assert torch.equal(r, again)


@pytest.mark.parametrize("angle", [0.0, 0.5, 10.0, 45.0, 120.0, 180.0])
def test_random_rotation_near_has_exactly_the_angle(angle):
    g = torch.Generator().manual_seed(5)
    r = fit.random_rotation_near(angle, 500, g, dtype=torch.float64)
    assert r.shape == (500, 3, 3)
    got = rotation_angle(r) * 180.0 / math.pi
    assert torch.allclose(got, torch.full_like(got, angle), atol=1e-5)
    assert torch.allclose(torch.linalg.det(r), torch.ones(500, dtype=torch.float64), atol=1e-12)
    base = fit.random_rotations(500, generator=g, dtype=torch.float64)
    off = fit.random_rotation_near(angle, 500, g, rotation=base)
    got = rotation_angle(base, off) * 180.0 / math.pi
    assert torch.allclose(got, torch.full_like(got, angle), atol=1e-5)


def test_random_rotation_near_axes_vary_and_arguments_are_checked(device):
    g = torch.Generator().manual_seed(2)
    r = fit.random_rotation_near(torch.tensor([30.0, 60.0, 90.0], device=device), 3, g)
    assert r.device.type == device.type
    got = rotation_angle(r).cpu() * 180.0 / math.pi
    assert torch.allclose(got, torch.tensor([30.0, 60.0, 90.0]), atol=1e-3)
    axes = fit.random_rotation_near(90.0, 200, g, dtype=torch.float64)
    assert float((axes - axes.mean(0)).abs().mean()) > 0.1  # not all the same axis
    with pytest.raises(PyGpuValueError, match="180"):
        fit.random_rotation_near(200.0, 2)
    with pytest.raises(PyGpuValueError, match="n = 2"):
        fit.random_rotation_near(torch.tensor([1.0, 2.0, 3.0]), 2)
    with pytest.raises(PyGpuTypeError, match="n"):
        fit.random_rotations(2.5)


# ---- topology and regularizers ------------------------------------------------------------------------
def test_topology_edges_pairs_and_cache():
    v, f = _tetrahedron()
    topo = fit.mesh_topology(f)
    assert topo.edges.shape == (6, 2) and bool((topo.edges[:, 0] < topo.edges[:, 1]).all())
    assert topo.degree.tolist() == [3, 3, 3, 3]
    assert topo.pair_edges.shape == (6, 2)  # each edge of a closed manifold: one pair of faces
    assert fit.mesh_topology(f) is topo  # cached per tensor
    g = f.clone()
    assert fit.mesh_topology(g) is not topo
    g[0, 0] = 3  # modified in place: computed again
    assert fit.mesh_topology(g).faces[0, 0] == 3
    key = id(g)
    del g
    gc.collect()
    assert key not in fit._TOPOLOGY_CACHE  # a dropped faces tensor frees its entry
    # an edge shared by three faces gives three pairs
    fan = torch.tensor([[0, 1, 2], [1, 0, 3], [0, 1, 4]])
    assert fit.mesh_topology(fan).pair_edges.tolist() == [[0, 1]] * 3
    with pytest.raises(PyGpuValueError, match="faces"):
        fit.mesh_topology(torch.tensor([[0, -1, 2]]))
    with pytest.raises(PyGpuTypeError, match="faces"):
        fit.mesh_topology(torch.zeros(1, 3))


def test_edge_loss_known_values():
    sq = torch.tensor([[0.0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], dtype=torch.float64)
    f = torch.tensor([[0, 1, 2], [0, 2, 3]])
    # five unique edges: four of length 1, the diagonal sqrt(2)
    assert math.isclose(float(fit.edge_loss(sq, f)), (4 + 2) / 5, rel_tol=1e-12)
    want = (math.sqrt(2) - 1) ** 2 / 5
    assert math.isclose(float(fit.edge_loss(sq, f, target_length=1.0)), want, rel_tol=1e-12)
    v, t = _tetrahedron()
    side2 = 8.0 / 3.0  # edge of a regular tetrahedron of circumradius 1: sqrt(8/3)
    assert math.isclose(float(fit.edge_loss(v, t)), side2, rel_tol=1e-12)
    with pytest.raises(PyGpuValueError, match="target_length"):
        fit.edge_loss(sq, f, target_length=-1.0)


def test_laplacian_known_values():
    v, f = _tetrahedron()
    # each vertex's neighbors are the other three, whose mean is -v/3: |v + v/3| = 4/3
    assert math.isclose(float(fit.laplacian_loss(v, f)), 4.0 / 3.0, rel_tol=1e-12)
    pos, faces = _grid(4)
    lap = fit.uniform_laplacian(pos, faces)
    xz = pos[:, [0, 2]]
    interior = (xz.abs() < 0.999).all(-1)
    assert int(interior.sum()) == 9
    assert float(lap[interior].abs().max()) < 1e-12
    assert float(lap[~interior].abs().max()) > 0.1  # the border is pulled inward
    assert float(lap[:, 1].abs().max()) == 0.0  # and stays in the plane


def test_normal_consistency_known_values():
    v, f = _tetrahedron()
    # adjacent outward normals of a regular tetrahedron meet at arccos(-1/3)
    assert math.isclose(float(fit.normal_consistency_loss(v, f)), 4.0 / 3.0, rel_tol=1e-12)
    pos, faces = _grid(4)
    assert abs(float(fit.normal_consistency_loss(pos, faces))) < 1e-12
    bent = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=torch.float64)
    right_angle = torch.tensor([[0, 1, 2], [1, 0, 3]])
    assert math.isclose(float(fit.normal_consistency_loss(bent, right_angle)), 1.0, rel_tol=1e-12)
    flipped = torch.tensor([[0, 1, 2], [0, 1, 3]])  # inconsistent winding measures the same fold
    assert math.isclose(float(fit.normal_consistency_loss(bent, flipped)), 1.0, rel_tol=1e-12)
    lone = torch.tensor([[0, 1, 2]])
    assert float(fit.normal_consistency_loss(bent, lone)) == 0.0


@pytest.mark.parametrize("loss", [fit.edge_loss, fit.laplacian_loss, fit.normal_consistency_loss,
                                  lambda p, f: fit.edge_loss(p, f, target_length=0.7)])
def test_losses_gradcheck_and_batches(loss):
    g = torch.Generator().manual_seed(4)
    pos, faces = _grid(3)
    pos = pos + 0.1 * torch.randn(pos.shape, generator=g, dtype=torch.float64)
    batch = torch.stack([pos, pos * 1.3 + 0.2])
    assert torch.autograd.gradcheck(lambda p: loss(p, faces), (batch.clone().requires_grad_(True),))
    v, f = _tetrahedron()
    assert torch.autograd.gradcheck(lambda p: loss(p, f), (v.clone().requires_grad_(True),))
    per_mesh = loss(batch, faces)
    assert per_mesh.shape == (2,) and loss(pos, faces).shape == ()
    assert torch.allclose(per_mesh[0], loss(pos, faces)) and torch.allclose(per_mesh[1], loss(batch[1], faces))
    assert torch.allclose(loss(pos, fit.mesh_topology(faces)), loss(pos, faces))


def test_losses_on_device_and_bad_input(device):
    pos, faces = _grid(3, dtype=torch.float32, device=device)
    pos = pos.clone().requires_grad_(True)
    total = fit.edge_loss(pos, faces) + fit.laplacian_loss(pos, faces) + fit.normal_consistency_loss(pos, faces)
    total.backward()
    assert pos.grad is not None and bool(torch.isfinite(pos.grad).all())
    with pytest.raises(PyGpuValueError, match="positions"):
        fit.edge_loss(pos.detach()[:, :2], faces)
    with pytest.raises(PyGpuValueError, match="vertices"):
        fit.laplacian_loss(pos.detach()[:3], faces)
    with pytest.raises(PyGpuTypeError, match="positions"):
        fit.normal_consistency_loss(pos.detach().long(), faces)


# ---- sample_points ------------------------------------------------------------------------------------
def _on_some_face(points, tri, tol):
    """bool [N]: each point lies on one of the triangles tri [F, 3, 3] (plane distance and inside test)."""
    a, b, c = tri[:, 0], tri[:, 1], tri[:, 2]
    n = torch.cross(b - a, c - a, dim=-1)
    n = n / n.norm(dim=-1, keepdim=True)
    p = points[:, None, :]  # [N, 1, 3]
    height = ((p - a) * n).sum(-1).abs()  # [N, F]

    def side(u, w):
        return (torch.cross((w - u).expand_as(p - u), p - u, dim=-1) * n).sum(-1)

    inside = (side(a, b) >= -tol) & (side(b, c) >= -tol) & (side(c, a) >= -tol)
    return ((height < tol) & inside).any(-1)


def test_sample_points_lie_on_the_surface(device):
    sphere = py_gpu.shapes.icosphere(2, dtype=torch.float64, device=device)
    g = torch.Generator().manual_seed(9)
    pts, nrm = fit.sample_points(sphere.positions, sphere.faces, 2000, generator=g, return_normals=True)
    assert pts.shape == (2000, 3) and nrm.shape == (2000, 3) and pts.device.type == device.type
    tri = sphere.positions[sphere.faces]
    assert bool(_on_some_face(pts, tri, 1e-9).all())
    r = pts.norm(dim=-1)
    assert float(r.max()) <= 1.0 + 1e-12 and float(r.min()) > 0.9  # on the facets, inside the unit sphere
    assert torch.allclose(nrm.norm(dim=-1), torch.ones(2000, dtype=torch.float64, device=device))
    assert float((nrm * pts).sum(-1).min()) > 0.9  # outward
    again = fit.sample_points(sphere.positions, sphere.faces, 2000, generator=torch.Generator().manual_seed(9))
    assert torch.equal(pts, again)


def test_sample_points_per_face_fraction_follows_area():
    # three separate triangles of areas 1, 2 and 3 (and one of area 0), far apart along x
    tris = []
    for k, area in enumerate([1.0, 2.0, 3.0, 0.0]):
        s = math.sqrt(2 * area)
        tris += [[10.0 * k, 0, 0], [10.0 * k + s, 0, 0], [10.0 * k, s, 0]]
    pos = torch.tensor(tris, dtype=torch.float64)
    faces = torch.arange(12).reshape(4, 3)
    pts = fit.sample_points(pos, faces, 20000, generator=torch.Generator().manual_seed(1))
    which = torch.floor((pts[:, 0] + 1.0) / 10.0).long()
    frac = torch.bincount(which, minlength=4).double() / 20000
    want = torch.tensor([1 / 6, 2 / 6, 3 / 6, 0.0], dtype=torch.float64)
    assert torch.allclose(frac, want, atol=0.015), frac  # the binomial std is below 0.004
    assert float(frac[3]) == 0.0


def test_sample_points_gradients_and_batches():
    sphere = py_gpu.shapes.icosphere(1, dtype=torch.float64)
    pos = torch.stack([sphere.positions, sphere.positions * 2.0]).requires_grad_(True)
    pts = fit.sample_points(pos, sphere.faces, 300, generator=torch.Generator().manual_seed(3))
    assert pts.shape == (2, 300, 3)
    assert float(pts[1].detach().norm(dim=-1).max()) > 1.5  # each mesh samples its own surface
    pts[..., 0].sum().backward()
    # each point is a convex combination of its corners: the x gradients sum to n per mesh
    assert torch.allclose(pos.grad[..., 0].sum(-1), torch.full((2,), 300.0, dtype=torch.float64))
    assert float(pos.grad[..., 1:].abs().max()) == 0.0
    with pytest.raises(PyGpuValueError, match="area"):
        fit.sample_points(torch.zeros(3, 3), torch.tensor([[0, 1, 2]]), 4)
    with pytest.raises(PyGpuValueError, match="no faces"):
        fit.sample_points(torch.zeros(3, 3), torch.zeros(0, 3, dtype=torch.int64), 4)


# ---- chamfer_distance ---------------------------------------------------------------------------------
def _chamfer_brute(a, b):
    d = ((a[:, :, None, :] - b[:, None, :, :]) ** 2).sum(-1)  # [B, N, M]
    return d.min(2).values.mean(1) + d.min(1).values.mean(1)


def test_chamfer_zero_symmetric_and_shifted(device):
    g = torch.Generator().manual_seed(8)
    a = torch.rand(2, 300, 3, generator=g, dtype=torch.float64).to(device)
    b = torch.rand(2, 200, 3, generator=g, dtype=torch.float64).to(device)
    assert torch.equal(fit.chamfer_distance(a, a), torch.zeros(2, dtype=torch.float64, device=device))
    assert torch.allclose(fit.chamfer_distance(a, b), fit.chamfer_distance(b, a))
    # a unit-spaced grid and its copy shifted by s < 1/2: each point's nearest is its own copy
    ax = torch.arange(5, dtype=torch.float64, device=device)
    grid = torch.stack(torch.meshgrid(ax, ax, ax, indexing="ij"), -1).reshape(1, -1, 3)
    s = 0.1
    shifted = grid + torch.tensor([0.0, s, 0.0], dtype=torch.float64, device=device)
    assert math.isclose(float(fit.chamfer_distance(grid, shifted)), 2 * s * s, rel_tol=1e-12)
    unbatched = fit.chamfer_distance(grid[0], shifted[0])
    assert unbatched.shape == ()


def test_chamfer_matches_brute_force_and_chunking_is_invisible():
    g = torch.Generator().manual_seed(6)
    a = torch.randn(3, 257, 3, generator=g, dtype=torch.float64)
    b = torch.randn(3, 131, 3, generator=g, dtype=torch.float64)
    want = _chamfer_brute(a, b)
    got = fit.chamfer_distance(a, b)
    assert torch.allclose(got, want, rtol=1e-12, atol=0)
    for chunk in (1, 7, 64, 10_000):
        assert torch.equal(fit.chamfer_distance(a, b, chunk_size=chunk), got)
    # gradients equal the brute-force ones
    a1, b1 = a.clone().requires_grad_(True), b.clone().requires_grad_(True)
    fit.chamfer_distance(a1, b1, chunk_size=5).sum().backward()
    a2, b2 = a.clone().requires_grad_(True), b.clone().requires_grad_(True)
    _chamfer_brute(a2, b2).sum().backward()
    assert torch.allclose(a1.grad, a2.grad) and torch.allclose(b1.grad, b2.grad)


def test_chamfer_large_sets_stay_chunked(monkeypatch):
    g = torch.Generator().manual_seed(7)
    a = torch.rand(1, 20000, 3, generator=g)
    b = a[:, torch.randperm(20000, generator=g)[:2000]] + 1e-3
    seen = []
    real = fit._nearest

    def spy(src, dst, rows):
        seen.append(rows * dst.shape[1])
        return real(src, dst, rows)

    monkeypatch.setattr(fit, "_nearest", spy)
    d = fit.chamfer_distance(a, b)
    assert max(seen) <= fit.CHAMFER_PAIRS_PER_CHUNK  # a chunk never holds more pair distances
    assert float(d) > 0 and math.isfinite(float(d))
    sub = a[:, :1000]
    assert torch.allclose(fit.chamfer_distance(sub, b[:, :300]), _chamfer_brute(sub, b[:, :300]), rtol=1e-5)


def test_chamfer_refuses_bad_input():
    a = torch.rand(2, 5, 3)
    with pytest.raises(PyGpuValueError, match="batch"):
        fit.chamfer_distance(a, torch.rand(3, 5, 3))
    with pytest.raises(PyGpuValueError, match="batch both"):
        fit.chamfer_distance(a, torch.rand(5, 3))
    with pytest.raises(PyGpuValueError, match="at least one"):
        fit.chamfer_distance(a, torch.rand(2, 0, 3))
    with pytest.raises(PyGpuTypeError, match="float64"):
        fit.chamfer_distance(a, torch.rand(2, 5, 3, dtype=torch.float64))
    with pytest.raises(PyGpuValueError, match="chunk_size"):
        fit.chamfer_distance(a, a, chunk_size=0)
    with pytest.raises(PyGpuValueError, match="shape"):
        fit.chamfer_distance(torch.rand(2, 5, 2), a)
