"""antialias(): gradients (gradcheck, finite differences), bitwise exactness away from silhouettes,
the silhouette gradient hard renders lack, clip space, batches, topology, an Adam fit, bad input."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import py_gpu
from py_gpu import Fragments, PyGpuTypeError, PyGpuValueError, TriangleBatch
from py_gpu.fixtures import mesh_fixture
from py_gpu.shading import antialias, edge_topology

from conftest import TOLERANCES

# A back triangle partly covered by a front one, over the background, at 8x8. Every edge crosses
# the pixel rows and columns at least 0.03 px away from a pixel center and from the midpoint
# between two centers, no vertex lies within 0.03 px of a row or column of centers, and no
# edge's width and height differ by less than 0.03 px (45 degrees); the first test checks. Small
# perturbations then change no pixel's coverage and no pair's choice of edge.
_XY = [[0.7, 1.3, 0.8], [7.3, 0.7, 0.8], [3.9, 7.4, 0.8],  # back
       [1.9, 3.0, 0.3], [6.2, 3.4, 0.3], [3.4, 6.3, 0.3]]  # front
_FACES = torch.tensor([[0, 1, 2], [3, 4, 5]])
_SIZE = (8, 8)


def _skip_float64(device: torch.device) -> None:
    if device.type == "mps":
        pytest.skip("MPS has no float64")


def _scene(device, dtype=torch.float64) -> torch.Tensor:
    return torch.tensor([_XY], dtype=dtype, device=device)


def _clearance(xy: torch.Tensor, faces: torch.Tensor, size) -> float:
    """Smallest distance (px) from an edge crossing of a row or column of pixel centers to a
    center or a midpoint, from a vertex to a row or column of centers, and between an edge's
    width and height (at 45 degrees an edge moves from the y pairs to the x pairs)."""
    H, W = size
    xy = xy.detach().double().cpu()[0]
    best = float("inf")
    for f in faces.tolist():
        for k in range(3):
            p, q = xy[f[k]], xy[f[(k + 1) % 3]]
            best = min(best, abs(abs(float(q[0] - p[0])) - abs(float(q[1] - p[1]))))  # 45 degrees
            for along, count in ((0, H), (1, W)):  # rows (crossing x), then columns (crossing y)
                across = 1 - along
                for line in torch.arange(count, dtype=torch.float64) + 0.5:
                    lo, hi = sorted((float(p[across]), float(q[across])))
                    if not lo < line < hi:
                        continue
                    s = (line - p[across]) / (q[across] - p[across])
                    u = float(p[along] + s * (q[along] - p[along]))
                    best = min(best, abs(u * 2 - round(u * 2)) / 2)
    for v in xy[:, :2].flatten().tolist():
        best = min(best, abs((v - 0.5) - round(v - 0.5)))
    return best


def _colors(device, dtype, V: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(1, V, 3, generator=g, dtype=torch.float64).to(device=device, dtype=dtype)


def _shade(vertices, faces, colors, size, background=(0.1, 0.2, 0.3)):
    """Hard rasterize, interpolate vertex colors, put them over a background: (image, fragments)."""
    frags = py_gpu.rasterize(TriangleBatch(vertices, faces), size)
    color = py_gpu.interpolate(colors, frags, faces)[..., 0, :]  # [B, H, W, 3]
    bg = torch.tensor(background, dtype=color.dtype, device=color.device)
    return torch.where(frags.face_index >= 0, color, bg), frags


def test_scene_keeps_clear_of_pixel_centers():
    assert _clearance(_scene("cpu"), _FACES, _SIZE) > 0.03


def test_gradcheck_color_and_vertices(device):
    _skip_float64(device)
    verts = _scene(device)
    frags = py_gpu.rasterize(TriangleBatch(verts, _FACES), _SIZE)
    g = torch.Generator().manual_seed(2)
    color = torch.rand(1, *_SIZE, 3, generator=g, dtype=torch.float64).to(device).requires_grad_()
    faces = _FACES.to(device)
    verts = verts.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda c, v: antialias(c, frags, v, faces), (color, verts))


def test_gradients_match_central_finite_differences(device):
    """The whole recipe (rasterize, interpolate, antialias): autograd agrees with central
    differences of the loss in every vertex x and y to 1e-3 relative."""
    _skip_float64(device)
    faces = _FACES.to(device)
    colors = _colors(device, torch.float64, 6)
    weights = torch.rand(1, *_SIZE, 3, generator=torch.Generator().manual_seed(3), dtype=torch.float64).to(device)

    def loss(verts):
        image, frags = _shade(verts, faces, colors, _SIZE)
        return (antialias(image, frags, verts, faces) * weights).sum()

    verts = _scene(device).requires_grad_()
    (grad,) = torch.autograd.grad(loss(verts), verts)
    h = 1e-3
    numeric = torch.zeros_like(grad)
    with torch.no_grad():
        for i in range(verts.shape[1]):
            for j in range(2):
                step = torch.zeros_like(verts)
                step[0, i, j] = h
                numeric[0, i, j] = (loss(verts + step) - loss(verts - step)) / (2 * h)
    scale = float(grad[..., :2].abs().max())
    assert scale > 0.1
    torch.testing.assert_close(grad[..., :2], numeric[..., :2], rtol=1e-3, atol=1e-3 * scale)


def test_unchanged_bitwise_away_from_silhouettes(device, dtype):
    verts = _scene(device, dtype)
    faces = _FACES.to(device)
    frags = py_gpu.rasterize(TriangleBatch(verts, faces), _SIZE)
    color = torch.rand(1, *_SIZE, 3, generator=torch.Generator().manual_seed(4), dtype=dtype).to(device)
    out = antialias(color, frags, verts, faces)
    assert out.dtype == dtype and out.shape == color.shape
    fid = frags.face_index[0, ..., 0]
    same = torch.ones_like(fid, dtype=torch.bool)
    same[:, 1:] &= fid[:, 1:] == fid[:, :-1]
    same[:, :-1] &= fid[:, :-1] == fid[:, 1:]
    same[1:, :] &= fid[1:, :] == fid[:-1, :]
    same[:-1, :] &= fid[:-1, :] == fid[1:, :]
    assert bool(same.any()) and not bool(same.all())
    assert torch.equal(out[0][same], color[0][same])
    assert not torch.equal(out[0][~same], color[0][~same])  # the silhouettes were blended


def test_full_screen_quad_is_unchanged_bitwise(device, dtype):
    """Two faces sharing a diagonal, covering the whole image: no silhouette, no change."""
    H, W = 9, 11
    verts = torch.tensor([[[-2.3, -1.7, 0.5], [W + 2.1, -1.9, 0.4], [-2.2, H + 1.6, 0.6],
                           [W + 2.4, H + 2.2, 0.5]]], dtype=dtype, device=device)
    faces = torch.tensor([[0, 1, 2], [1, 3, 2]], device=device)
    image, frags = _shade(verts, faces, _colors(device, dtype, 4), (H, W))
    assert bool((frags.face_index >= 0).all()) and frags.face_index.unique().numel() == 2
    assert torch.equal(antialias(image, frags, verts, faces), image)


def test_hard_renders_have_no_silhouette_gradient_and_antialias_adds_one(device, dtype):
    """Flat face colors: without antialiasing the loss does not depend on the vertices; with it,
    the x of a vertex on a silhouette gets a gradient."""
    verts = _scene(device, dtype).requires_grad_()
    faces = _FACES.to(device)
    face_colors = torch.tensor([[[0.9, 0.6, 0.2], [0.1, 0.5, 0.8]]], dtype=dtype, device=device)
    frags = py_gpu.rasterize(TriangleBatch(verts, faces), _SIZE)
    image = torch.where(frags.face_index >= 0, py_gpu.interpolate(face_colors, frags, faces, kind="face")[..., 0, :],
                        torch.zeros((), dtype=dtype, device=device))
    weights = torch.rand(1, *_SIZE, 3, generator=torch.Generator().manual_seed(5), dtype=dtype).to(device)
    assert not image.requires_grad  # nothing in the hard image depends on the vertices
    (grad,) = torch.autograd.grad((antialias(image, frags, verts, faces) * weights).sum(), verts)
    assert bool((grad[0, :, 0] != 0).all())  # every vertex here has a silhouette edge
    assert not bool(grad[..., 2].any())  # screen depth moves no edge


def _clip_scene(device, dtype=torch.float64) -> torch.Tensor:
    """Clip-space ``[1, 6, 4]`` vertices with varied w whose pixels are the scene's."""
    H, W = _SIZE
    screen = _scene(device, torch.float64)
    w = torch.tensor([[0.8, 1.3, 2.1, 1.7, 0.9, 1.1]], dtype=torch.float64, device=device)
    return torch.stack([(screen[..., 0] / (W / 2) - 1) * w, (1 - screen[..., 1] / (H / 2)) * w,
                        screen[..., 2] * w, w], -1).to(dtype)


def test_gradcheck_clip_space_vertices(device):
    _skip_float64(device)
    clip = _clip_scene(device)
    faces = _FACES.to(device)
    frags = py_gpu.rasterize(TriangleBatch(clip, faces), _SIZE)
    color = torch.rand(1, *_SIZE, 3, generator=torch.Generator().manual_seed(9), dtype=torch.float64).to(device)
    assert torch.autograd.gradcheck(lambda v: antialias(color, frags, v, faces), (clip.requires_grad_(),))


def test_clip_space_equals_its_screen_space(device, dtype):
    H, W = _SIZE
    clip = _clip_scene(device, dtype).requires_grad_()
    faces = _FACES.to(device)
    batch = TriangleBatch(clip, faces)
    frags = py_gpu.rasterize(batch, _SIZE)
    color = torch.rand(1, H, W, 3, generator=torch.Generator().manual_seed(6), dtype=dtype).to(device)
    out = antialias(color, frags, clip, faces)
    expect = antialias(color, frags, batch.screen_vertices(_SIZE), faces)
    rtol, atol = TOLERANCES[dtype]
    torch.testing.assert_close(out, expect, rtol=rtol, atol=atol)
    assert not torch.equal(out, color)
    (grad,) = torch.autograd.grad(out.sum(), clip)
    assert bool(grad[..., (0, 1, 3)].any())


def test_edges_behind_the_camera_are_left_alone(device):
    """A clip-space vertex with w <= 0: its edges are not antialiased, nothing is NaN."""
    verts = torch.tensor([[[-0.6, -0.5, 0.5, 1.0], [0.7, -0.4, 0.5, 1.0], [0.1, 0.8, 0.5, 1.0],
                           [0.2, 0.3, 0.5, -1.0]]], dtype=torch.float32, device=device)
    faces = torch.tensor([[0, 1, 2]], device=device)
    frags = py_gpu.rasterize(TriangleBatch(verts[:, :3], faces), _SIZE)
    color = torch.rand(1, *_SIZE, 3, dtype=torch.float32).to(device)
    out = antialias(color, frags, verts, torch.tensor([[0, 1, 3]], device=device))
    assert torch.isfinite(out).all()


def test_a_batch_is_its_items(device, dtype):
    faces = _FACES.to(device)
    a = _scene(device, dtype)
    b = a + torch.tensor([0.4, -0.3, 0.0], dtype=dtype, device=device)
    verts = torch.cat([a, b])
    frags = py_gpu.rasterize(TriangleBatch(verts, faces), _SIZE)
    color = torch.rand(2, *_SIZE, 3, generator=torch.Generator().manual_seed(7), dtype=dtype).to(device)
    topology = edge_topology(faces)
    out = antialias(color, frags, verts, faces, topology=topology)
    for i in range(2):
        one = Fragments(frags.face_index[i:i + 1], frags.bary[i:i + 1], frags.depth[i:i + 1])
        assert torch.equal(out[i:i + 1], antialias(color[i:i + 1], one, verts[i:i + 1], faces))
    # [V, 3] vertices (or a batch of 1) are shared by every image
    first = Fragments(frags.face_index[:1].expand(2, -1, -1, -1), frags.bary[:1].expand(2, -1, -1, -1, -1),
                      frags.depth[:1].expand(2, -1, -1, -1))
    shared = antialias(color, first, a[0], faces)
    assert torch.equal(shared[:1], out[:1])


def test_edge_topology():
    faces = torch.tensor([[0, 1, 2], [1, 3, 2], [1, 2, 4], [5, 6, 7]])
    top = edge_topology(faces)
    assert top.dtype == torch.int64 and top.shape == (4, 3)
    # edge 1-2 has three faces (non-manifold): -1 everywhere; the rest are boundaries
    assert bool((top == -1).all())
    top = edge_topology(faces[:2])
    assert top.tolist() == [[-1, 1, -1], [-1, -1, 0]]
    assert edge_topology(torch.empty(0, 3, dtype=torch.int64)).shape == (0, 3)


def test_a_folded_edge_is_a_silhouette_and_a_flat_one_is_not(device):
    """Two faces on one edge. Flat (on opposite sides of it on screen) the edge is interior: the
    result differs from treating every edge as a silhouette (topology all -1). Folded (the second
    face on the same side, facing away) the edge is a silhouette: the result is the same."""
    faces = torch.tensor([[0, 1, 2], [1, 0, 3]], device=device)
    base = [[1.3, 1.2, 0.3], [6.6, 6.7, 0.3], [1.2, 6.6, 0.3]]
    flat = torch.tensor([base + [[6.7, 1.3, 0.3]]], device=device)
    folded = torch.tensor([base + [[3.2, 6.9, 0.6]]], device=device)
    every_edge = torch.full((2, 3), -1, dtype=torch.int64, device=device)
    color = torch.rand(1, *_SIZE, 3, generator=torch.Generator().manual_seed(8)).to(device)
    for verts, silhouette in ((flat, False), (folded, True)):
        frags = py_gpu.rasterize(TriangleBatch(verts, faces), _SIZE)
        out = antialias(color, frags, verts, faces)
        assert torch.equal(out, antialias(color, frags, verts, faces, topology=every_edge)) == silhouette
        assert not torch.equal(out, color)  # the outer edges are silhouettes either way


def test_a_closed_mesh_is_blended_on_its_outline_only(device, dtype):
    """An icosphere: its interior edges (front-facing neighbours) are left alone, its outline
    (edges whose neighbour faces away, behind faces narrower than a pixel) is blended."""
    batch = mesh_fixture("icosphere", 1280, 64, 64, dtype=dtype, device=device)
    frags = py_gpu.rasterize(batch, (64, 64))
    color = py_gpu.interpolate(batch.vertex_colors, frags, batch.faces)[..., 0, :]
    out = antialias(color, frags, batch.vertices, batch.faces)
    covered = frags.face_index[0, ..., 0] >= 0
    outline = torch.zeros_like(covered)  # pixels with a 4-neighbour on the other side of the outline
    outline[:, 1:] |= covered[:, 1:] != covered[:, :-1]
    outline[:, :-1] |= covered[:, 1:] != covered[:, :-1]
    outline[1:] |= covered[1:] != covered[:-1]
    outline[:-1] |= covered[1:] != covered[:-1]
    changed = (out != color).any(-1)[0]
    assert not bool((changed & ~outline).any())
    assert int(changed.sum()) > 0.4 * int(outline.sum())  # one pixel of each pair across the outline


def test_an_empty_mesh_changes_nothing(device):
    verts = torch.zeros(1, 0, 3, device=device)
    faces = torch.zeros(0, 3, dtype=torch.int64, device=device)
    frags = py_gpu.rasterize(TriangleBatch(verts, faces), _SIZE)
    color = torch.rand(1, *_SIZE, 3).to(device)
    assert torch.equal(antialias(color, frags, verts, faces), color)


def test_adam_fits_a_triangle_to_an_antialiased_target(device):
    """Screen-space vertices 1-2 px off are pulled onto the target's to < 0.05 px by the
    silhouette gradient alone (the colors are flat)."""
    H = W = 32
    faces = torch.tensor([[0, 1, 2]], device=device)
    topology = edge_topology(faces)
    target_xy = torch.tensor([[6.3, 5.1], [26.7, 9.4], [12.2, 27.6]], device=device)
    depth = torch.full((3, 1), 0.5, device=device)
    white = torch.ones(1, 1, 1, 1, device=device)
    background = torch.full((1, 1, 1, 1), 0.1, device=device)

    def image(xy):
        verts = torch.cat([xy, depth], -1)[None]
        frags = py_gpu.rasterize(TriangleBatch(verts, faces), (H, W))
        color = torch.where(frags.face_index >= 0, white, background)
        return antialias(color, frags, verts, faces, topology=topology)

    with torch.no_grad():
        target = image(target_xy)
    offset = torch.tensor([[1.2, -0.9], [-1.1, 1.3], [0.8, 1.0]], device=device)
    xy = (target_xy + offset).requires_grad_()
    steps = 150
    opt = torch.optim.Adam([xy], lr=0.1)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    for _ in range(steps):
        opt.zero_grad()
        ((image(xy) - target) ** 2).sum().backward()
        opt.step()
        schedule.step()
    error = float((xy.detach() - target_xy).norm(dim=1).max())
    assert error < 0.05, error


def _bad_cases():
    verts = _scene("cpu", torch.float32)
    frags = py_gpu.rasterize(TriangleBatch(verts, _FACES), _SIZE)
    color = torch.rand(1, *_SIZE, 3)
    soft = py_gpu.rasterize(TriangleBatch(verts, _FACES), _SIZE, mode="soft")
    nan = color.clone()
    nan[0, 2, 3, 1] = float("nan")
    inf_verts = verts.clone()
    inf_verts[0, 1, 0] = float("inf")
    ok = dict(color=color, fragments=frags, vertices=verts, faces=_FACES)
    return [
        ("K = 1", PyGpuValueError, dict(ok, fragments=soft)),
        ("must be a Fragments", PyGpuTypeError, dict(ok, fragments=frags.face_index)),
        ("`color` must be a torch.Tensor", PyGpuTypeError, dict(ok, color=color.numpy())),
        ("`color` must be a floating-point", PyGpuTypeError, dict(ok, color=(color * 255).to(torch.uint8))),
        ("`color` must have shape", PyGpuValueError, dict(ok, color=color[0])),
        ("`fragments` are", PyGpuValueError, dict(ok, color=color[:, :, :7])),
        ("`vertices` must have shape", PyGpuValueError, dict(ok, vertices=verts[..., :2])),
        ("`vertices` must be a floating-point", PyGpuTypeError, dict(ok, vertices=verts.long())),
        ("batch size", PyGpuValueError, dict(ok, vertices=torch.cat([verts] * 3))),
        ("`color` contains NaN", PyGpuValueError, dict(ok, color=nan)),
        ("`vertices` contains NaN or inf", PyGpuValueError, dict(ok, vertices=inf_verts)),
        ("`faces` must be an int64", PyGpuTypeError, dict(ok, faces=_FACES.float())),
        ("index out of range", PyGpuValueError, dict(ok, faces=_FACES + 3)),
        ("refers to face 1", PyGpuValueError, dict(ok, faces=_FACES[:1])),
        ("`vertices` is on meta", PyGpuValueError, dict(ok, vertices=verts.to("meta"))),
        ("`topology` must have shape", PyGpuValueError, dict(ok, topology=torch.full((3, 3), -1))),
        ("`topology` must be int64", PyGpuTypeError, dict(ok, topology=torch.full((2, 3), -1.0))),
        ("outside -1..1", PyGpuValueError, dict(ok, topology=torch.full((2, 3), 5))),
    ]


@pytest.mark.parametrize("message, error, kwargs", _bad_cases(), ids=[c[0] for c in _bad_cases()])
def test_bad_input_is_refused_in_the_projects_words(message, error, kwargs):
    topology = kwargs.pop("topology", None)
    with pytest.raises(error, match="antialias") as info:
        antialias(kwargs["color"], kwargs["fragments"], kwargs["vertices"], kwargs["faces"], topology=topology)
    assert message in str(info.value)


def test_edge_topology_refuses_bad_faces():
    with pytest.raises(PyGpuTypeError, match="edge_topology"):
        edge_topology(_FACES.float())
    with pytest.raises(PyGpuValueError, match="edge_topology"):
        edge_topology(torch.tensor([[0, 1, -2]]))


def test_the_docs_example_runs():
    """docs/antialias.md's example runs as written and gives the vertices a gradient."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "antialias.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    namespace: dict = {}
    exec(compile(code, "docs/antialias.md", "exec"), namespace)
    assert bool(namespace["verts"].grad[..., :2].abs().gt(0).all())
