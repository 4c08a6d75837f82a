"""Near-plane clipping: piece counts, winding, coverage of the in-front part, perspective-correct
attributes across the cut, batches cut differently per element, gradients; on every test device
(the NumPy rasterizer used to look at the result runs on the CPU, its results follow the batch)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given

from py_gpu import PyGpuValueError, TriangleBatch
from py_gpu.backends.cpu import NumpyBackend
from py_gpu.camera import Camera
from py_gpu.raster.clip import clip_batch, clip_near
from py_gpu.settings import RasterSettings
from helpers import float64_on, on_cpu
from strategies import clip_depths, fixture_safe_settings


def _tri(zs, dtype=torch.float64, device=None):
    """One clip-space triangle with the given z per corner (w = 1)."""
    v = torch.tensor([[-0.5, -0.5, zs[0], 1.0], [0.5, -0.5, zs[1], 1.0], [0.0, 0.5, zs[2], 1.0]], dtype=dtype)
    return TriangleBatch(v[None].to(device), torch.tensor([[0, 1, 2]], device=device))


@pytest.mark.parametrize("zs, pieces", [((0.5, 0.5, 0.5), 1), ((0.5, -0.5, -0.5), 1), ((0.5, 0.5, -0.5), 2),
                                        ((-0.5, -0.5, -0.5), 0), ((0.0, -0.5, -0.5), 1)])
def test_piece_counts_and_cut_on_plane(zs, pieces, device, dtype):
    out, face_map = clip_near(_tri(zs, dtype, device))
    assert out.vertices.device.type == face_map.device.type == device.type and out.vertices.dtype == dtype
    assert out.num_faces == pieces
    assert face_map.tolist() == [0] * pieces
    used = out.vertices[0, out.faces.reshape(-1)]
    assert bool((used[:, 2] >= -(1e-12 if dtype == torch.float64 else 1e-6)).all())
    assert bool((used[:, 3] > 0).all())


def test_uncut_batch_is_returned_unchanged(device):
    batch = _tri((0.2, 0.3, 0.4), torch.float32, device)
    out, face_map = clip_near(batch)
    assert out is batch
    assert face_map.tolist() == [0]


@pytest.mark.parametrize("guard", [None, 4.0])
@pytest.mark.parametrize("case", ["inside", "past_guard", "unused_behind", "near_cut"])
def test_quick_return_for_uncut_batches_equals_plane_by_plane_clipping(monkeypatch, device, case, guard):
    """A batch that no plane cuts is returned before any plane is applied; the result equals the
    plane-by-plane one, and a batch with a vertex past any plane (used or not) takes that path."""
    from py_gpu.raster import clip

    g = torch.Generator().manual_seed(5)
    v = torch.cat([torch.rand(2, 12, 2, generator=g, dtype=torch.float64) * 1.6 - 0.8,
                   torch.rand(2, 12, 1, generator=g, dtype=torch.float64) * 0.5 + 0.2,
                   torch.ones(2, 12, 1, dtype=torch.float64)], -1)
    if case == "past_guard":
        v[1, 3, 0] = 9.0  # x/w beyond the guard band of 4 image half-widths
    elif case == "unused_behind":
        v = torch.cat([v, torch.tensor([0.0, 0.0, -1.0, -1.0], dtype=torch.float64).expand(2, 1, 4)], 1)
    elif case == "near_cut":
        v[0, 5, 2] = -0.3
    faces = torch.randint(0, 12, (9, 3), generator=g)
    batch = TriangleBatch(v.to(device), faces.to(device), vertex_colors=torch.rand(2, v.shape[1], 3, generator=g,
                                                                                     dtype=torch.float64).to(device))
    attrs = {"uv": torch.rand(v.shape[1], 2, generator=g, dtype=torch.float64).to(device)}
    calls = {"quick": 0}
    real = clip._wholly_inside

    def counted(*args):
        quick = real(*args)
        calls["quick"] += quick
        return quick

    monkeypatch.setattr(clip, "_wholly_inside", counted)
    quick = clip_batch(batch, attributes=attrs, guard=guard)
    monkeypatch.setattr(clip, "_wholly_inside", lambda *args: False)
    full = clip_batch(batch, attributes=attrs, guard=guard)
    assert calls["quick"] == (case == "inside" or (case == "past_guard" and guard is None))
    assert quick.num_clipped == full.num_clipped
    assert torch.equal(quick.face_map, full.face_map) and torch.equal(quick.weights, full.weights)
    assert torch.equal(quick.batch.vertices, full.batch.vertices) and torch.equal(quick.batch.faces, full.batch.faces)
    assert torch.equal(quick.batch.vertex_colors, full.batch.vertex_colors)
    assert quick.attributes.keys() == full.attributes.keys()
    assert all(torch.equal(quick.attributes[k], full.attributes[k]) for k in full.attributes)


def _bary_fraction(d):
    """Exact fraction of a triangle's (barycentric) area where the linear function d >= 0."""
    ins = [x >= 0 for x in d]
    n = sum(ins)
    if n == 3:
        return 1.0
    if n == 0:
        return 0.0
    if n == 1:
        a = ins.index(True)
        b, c = [d[(a + 1) % 3], d[(a + 2) % 3]]
        return d[a] / (d[a] - b) * d[a] / (d[a] - c)
    a = ins.index(False)
    b, c = [d[(a + 1) % 3], d[(a + 2) % 3]]
    return 1.0 - d[a] / (d[a] - b) * d[a] / (d[a] - c)


@fixture_safe_settings()
@given(zs=clip_depths())
def test_pieces_tile_the_front_part_and_keep_winding(device, zs):
    res = clip_batch(_tri(zs, float64_on(device), device))
    w = res.weights[0].cpu()  # [F', 3, 3]: rows are barycentric coordinates of the piece corners
    dets = torch.linalg.det(w) if w.shape[0] else torch.zeros(0, dtype=torch.float64)
    assert bool((dets >= -1e-12).all()), "pieces keep the input winding"
    assert dets.sum().item() == pytest.approx(_bary_fraction(zs), abs=1e-9)


def test_unused_vertices_behind_camera_are_parked(device):
    v = torch.tensor([[[-0.5, -0.5, 0.5, 1.0], [0.5, -0.5, 0.5, 1.0], [0.0, 0.5, 0.5, 1.0], [0.0, 0.0, -1.0, -1.0]]],
                     device=device)
    out, face_map = clip_near(TriangleBatch(v, torch.tensor([[0, 1, 2]], device=device)))
    assert bool((out.vertices[..., 3] > 0).all())
    assert torch.equal(out.vertices[0, :3], v[0, :3])
    assert face_map.tolist() == [0]


def test_colors_and_attributes_carried(device, dtype):
    batch = _tri((0.5, -0.5, 0.5), dtype, device)
    vcol = torch.eye(3, dtype=dtype, device=device)[None]
    res = clip_batch(TriangleBatch(batch.vertices, batch.faces, vertex_colors=vcol), attributes={"id": vcol * 2})
    out = res.batch
    # every output corner's color is its barycentric weight vector over the input corners
    corners = out.vertex_colors[0, out.faces]  # [F', 3, 3]
    assert torch.allclose(corners, res.weights[0])
    assert torch.allclose(res.attributes["id"][0, out.faces], 2 * res.weights[0])
    assert out.num_faces == 2 and out.vertex_colors.device.type == device.type
    fc = torch.tensor([[[0.1, 0.2, 0.3]]], dtype=dtype, device=device)
    out2, _ = clip_near(TriangleBatch(batch.vertices, batch.faces, face_colors=fc))
    assert torch.allclose(out2.face_colors, fc.expand(1, out2.num_faces, 3))


def _ground(n=4, half=20.0, dtype=torch.float64, device=None):
    """A large ground plane at y = 0, as (positions [V, 3], faces [F, 3]) on ``device``."""
    t = torch.linspace(-half, half, n + 1, dtype=dtype)
    zz, xx = torch.meshgrid(t, t, indexing="ij")
    pos = torch.stack([xx, torch.zeros_like(xx), zz], -1).reshape(-1, 3)
    i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    i, j = i.reshape(-1), j.reshape(-1)
    a, b, c, d = i * (n + 1) + j, i * (n + 1) + j + 1, (i + 1) * (n + 1) + j + 1, (i + 1) * (n + 1) + j
    faces = torch.cat([torch.stack([a, c, b], 1), torch.stack([a, d, c], 1)])
    return pos.to(device), faces.to(device)


def test_ground_plane_no_holes_and_perspective_correct_positions(device):
    size = (48, 64)
    pos, faces = _ground()
    cam = Camera.perspective((0.3, 1.0, 2.0), (0.0, 0.0, -5.0), fov_y=70.0, aspect=64 / 48, near=0.1, far=100.0)
    cam = cam.to(dtype=torch.float64)
    clip = cam.world_to_clip(pos).to(device, float64_on(device))
    res = clip_batch(TriangleBatch(clip, faces.to(device)), attributes={"world": pos[None].to(device)})
    assert res.num_clipped > 0 and res.batch.device.type == device.type
    frags = NumpyBackend().rasterize(res.batch, size, settings=RasterSettings())
    un = on_cpu(res.unclip(frags))
    frags = on_cpu(frags)
    face = un.face_index[0, ..., 0]
    # every pixel below the horizon sees the ground: the horizon row is where the view ray is level
    rows = torch.arange(size[0], dtype=torch.float64) + 0.5
    cols = torch.arange(size[1], dtype=torch.float64) + 0.5
    ndc_y = 1 - 2 * rows / size[0]
    ndc_x = 2 * cols / size[1] - 1
    inv = torch.linalg.inv(cam.matrix[0])
    yy, xx = torch.meshgrid(ndc_y, ndc_x, indexing="ij")
    near_pt = torch.stack([xx, yy, torch.zeros_like(xx), torch.ones_like(xx)], -1) @ inv.T
    far_pt = torch.stack([xx, yy, torch.ones_like(xx), torch.ones_like(xx)], -1) @ inv.T
    p0 = near_pt[..., :3] / near_pt[..., 3:]
    p1 = far_pt[..., :3] / far_pt[..., 3:]
    s = p0[..., 1] / (p0[..., 1] - p1[..., 1])  # ray parameter where y = 0
    hit = (s > 0) & (s < 1)
    expected = p0 + s[..., None] * (p1 - p0)
    inside = hit & (expected[..., 0].abs() < 19.5) & (expected[..., 2].abs() < 19.5)
    assert int(inside.sum()) > 0.3 * size[0] * size[1]
    assert bool((face[inside] >= 0).all()), "holes in the ground plane"
    # interpolate world positions of the ORIGINAL faces with the unclipped barycentrics
    corner = pos[faces[face.clamp(min=0)]]  # [H, W, 3, 3]
    world = (un.bary[0, ..., 0, :, None] * corner).sum(-2)
    err = (world - expected).norm(dim=-1)[inside]
    assert float(err.max()) < 1e-6 * 20
    # the same through the carried attribute, with the clipped batch's own barycentrics
    carried = res.attributes["world"].cpu()[0, res.batch.faces.cpu()[frags.face_index[0, ..., 0].clamp(min=0)]]
    world2 = (frags.bary[0, ..., 0, :, None] * carried).sum(-2)
    assert float((world2 - expected).norm(dim=-1)[inside].max()) < 1e-6 * 20


def test_batch_elements_cut_differently_match_single_renders(device):
    f64 = float64_on(device)
    pos, faces = _ground(n=3, dtype=f64, device=device)
    eyes = torch.tensor([[0.0, 1.0, 30.0], [0.0, 0.5, 1.0]], dtype=f64, device=device)  # far away / standing on it
    cam = Camera.perspective(eyes, torch.tensor([0.0, 0.0, -3.0], dtype=f64, device=device), fov_y=60.0)
    clip = cam.world_to_clip(pos)
    assert clip.device.type == device.type
    colors = torch.rand(1, pos.shape[0], 3, generator=torch.Generator().manual_seed(0), dtype=f64).to(device)
    out, fmap = clip_near(TriangleBatch(clip, faces, vertex_colors=colors))
    backend = NumpyBackend()
    both = backend.render_frame(out, (32, 32))
    for b in range(2):
        single, smap = clip_near(TriangleBatch(clip[b:b + 1], faces, vertex_colors=colors))
        one = backend.render_frame(single, (32, 32))
        assert torch.equal(both.face_index[b] >= 0, one.face_index[0] >= 0)
        f_both = torch.where(both.face_index[b] >= 0, fmap[both.face_index[b].clamp(min=0)], -1)
        f_one = torch.where(one.face_index[0] >= 0, smap[one.face_index[0].clamp(min=0)], -1)
        assert torch.equal(f_both, f_one)
        assert torch.allclose(both.image[b], one.image[0], atol=1e-9)


def test_clip_gradcheck(device):
    f64 = float64_on(device)
    v = torch.tensor([[[-0.5, -0.4, 0.6, 1.2], [0.6, -0.5, -0.3, 0.9], [0.1, 0.7, -0.4, 1.1]]], dtype=f64,
                     device=device, requires_grad=True)
    faces = torch.tensor([[0, 1, 2]], device=device)
    col = torch.rand(1, 3, 3, dtype=f64, generator=torch.Generator().manual_seed(1)).to(device).requires_grad_(True)

    def f(v, col):
        out, _ = clip_near(TriangleBatch(v, faces, vertex_colors=col))
        return out.vertices, out.vertex_colors

    assert torch.autograd.gradcheck(f, (v, col))


def test_bad_input(device):
    on = dict(device=device)
    with pytest.raises(PyGpuValueError):
        clip_near(TriangleBatch(torch.zeros(1, 3, 3, **on), torch.tensor([[0, 1, 2]], **on)))
    with pytest.raises(PyGpuValueError):
        clip_near(_tri((0.5, 0.5, 0.5), torch.float32, device), plane="nope")
    bad = TriangleBatch(torch.tensor([[[0.0, 0.0, 0.5, -1.0], [1.0, 0.0, 0.5, -1.0], [0.0, 1.0, 0.5, -1.0]]], **on),
                        torch.tensor([[0, 1, 2]], **on))
    with pytest.raises(PyGpuValueError, match="w <= 0"):
        clip_near(bad)
    out, _ = clip_near(bad, plane="w")
    assert out.num_faces == 0
    assert math.isfinite(float(out.vertices.sum()))
