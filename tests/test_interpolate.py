"""interpolate(): values, parity with a plain gather-and-sum (forward and gradients), gradcheck,
validation, and an Adam fit of vertex colors; on every test device."""

from __future__ import annotations

import pytest
import torch

import py_gpu
from py_gpu import Fragments, PyGpuTypeError, PyGpuValueError, RasterSettings, TriangleBatch
from py_gpu.fixtures import mesh_fixture
from py_gpu.raster.torch_hard import rasterize_hard
from py_gpu.shading.interpolate import interpolate
from helpers import compare_impls, float64_on

# Two triangles sharing an edge plus one in front, with vertices away from the 1/256 snapping
# boundaries (x * 256 is 0.1 .. 0.4 away from a half step) so small perturbations change no
# pixel's coverage.
_SCREEN = torch.tensor([[[1.1, 1.3, 0.5], [10.3, 2.2, 0.4], [2.4, 9.1, 0.6], [11.2, 10.9, 0.3],
                         [4.3, 3.2, 0.1], [8.2, 4.4, 0.2], [5.1, 7.3, 0.15]]], dtype=torch.float64)
_FACES = torch.tensor([[0, 1, 2], [1, 3, 2], [4, 5, 6]])
_SIZE = (12, 13)


def _clip_vertices() -> torch.Tensor:
    """Clip-space ``[1, 7, 4]`` vertices with varied w whose screen positions are ``_SCREEN``'s."""
    H, W = _SIZE
    w = torch.tensor([[0.8, 1.3, 2.1, 1.7, 0.9, 1.1, 1.5]], dtype=torch.float64)
    x = (_SCREEN[..., 0] / (W / 2.0) - 1.0) * w
    y = (1.0 - _SCREEN[..., 1] / (H / 2.0)) * w
    z = _SCREEN[..., 2] * w
    return torch.stack([x, y, z, w], -1)


def _rand(*shape, seed: int, device, dtype=torch.float64) -> torch.Tensor:
    """Seeded uniform values drawn on the CPU (the same on every device), then moved."""
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(device, dtype)


def test_per_vertex_and_per_face_values(device):
    f64 = float64_on(device)
    screen, faces = _SCREEN.to(device), _FACES.to(device)
    colors = _rand(1, 7, 3, seed=1, device=device)
    batch = TriangleBatch(screen, faces, vertex_colors=colors)
    frags = py_gpu.rasterize(batch, _SIZE)
    out = interpolate(colors, frags, faces)
    assert out.shape == (1, *_SIZE, 1, 3) and out.device.type == device.type and out.dtype == f64
    face = frags.face_index[0, 5, 6, 0]
    assert int(face) == 2
    b = frags.bary[0, 5, 6, 0]
    i = faces[face]
    expect = b[0] * colors[0, i[0]] + b[1] * colors[0, i[1]] + b[2] * colors[0, i[2]]
    assert torch.equal(out[0, 5, 6, 0], expect)
    empty = frags.face_index[..., 0] < 0
    assert bool(empty.any()) and bool((out[0][empty[0]] == 0).all())
    # matches the exact shader
    frame = py_gpu.render(batch, _SIZE)
    covered = ~empty
    assert torch.equal(out[..., 0, :][covered], frame.image[covered])

    per_face = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [0.5, 0.25]]], dtype=torch.float64, device=device)
    gathered = interpolate(per_face, frags, faces)
    assert gathered.shape == (1, *_SIZE, 1, 2)
    assert torch.equal(gathered[0, 5, 6, 0], per_face[0, 2])
    assert bool((gathered[0][empty[0]] == 0).all())


def _naive_interpolate(values: torch.Tensor, frags: Fragments, faces: torch.Tensor) -> torch.Tensor:
    """Per-vertex interpolation written out plainly: gather the three corners, weight, sum."""
    corners = values[0][faces[frags.face_index.clamp(min=0)]]  # [B, H, W, K, 3, C]
    out = (frags.bary[..., None] * corners).sum(-2)
    return torch.where(frags.mask[..., None], out, torch.zeros((), dtype=out.dtype, device=out.device))


@pytest.mark.parametrize("space", ["screen", "clip"])
def test_interpolate_matches_a_plain_gather_and_sum(space, device, dtype):
    """interpolate() against the naive formula: values and the gradients to the attributes and,
    through the barycentrics of the torch rasterizer, to the vertex positions."""
    verts = (_SCREEN if space == "screen" else _clip_vertices()).to(device, dtype)
    faces = _FACES.to(device)
    colors = _rand(1, 7, 3, seed=6, device=device, dtype=dtype)

    def pipeline(shade):
        def run(v, c):
            frags = rasterize_hard(TriangleBatch(v, faces), _SIZE, RasterSettings())
            return shade(c, frags, faces), frags.face_index
        return run

    result = compare_impls(pipeline(interpolate), pipeline(_naive_interpolate),
                           (verts.requires_grad_(True), colors.requires_grad_(True)), seed=7, label=space)
    out, face = result.outputs
    assert out.dtype == dtype and out.device.type == device.type
    assert int((face >= 0).sum()) > 40 and bool((face < 0).any())
    gv, gc = result.grads
    assert float(gv[..., :2].abs().sum()) > 0 and float(gc.abs().sum()) > 0


@pytest.mark.parametrize("space", ["screen", "clip"])
def test_gradcheck_attributes_and_positions(space, device):
    f64 = float64_on(device)
    faces = _FACES.to(device)
    verts0 = (_SCREEN if space == "screen" else _clip_vertices()).to(device, f64)
    colors0 = _rand(1, 7, 2, seed=2, device=device)
    base = rasterize_hard(TriangleBatch(verts0, faces), _SIZE, RasterSettings())

    def fn(verts, colors):
        frags = rasterize_hard(TriangleBatch(verts, faces), _SIZE, RasterSettings())
        if not torch.equal(frags.face_index, base.face_index):  # the premise of the check
            raise AssertionError("a perturbation changed coverage")
        depth = torch.where(frags.face_index >= 0, frags.depth, 0.0)  # +inf where empty
        return interpolate(colors, frags, faces), depth

    verts = verts0.clone().requires_grad_(True)
    colors = colors0.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(fn, (verts, colors), eps=1e-6, atol=1e-7, rtol=1e-5)
    # and the positions really do get gradient through the barycentrics
    out, _ = fn(verts, colors)
    (g,) = torch.autograd.grad(out.square().sum(), verts)
    assert bool(g[..., :2].abs().sum() > 0)


def test_gradcheck_per_face_attributes(device):
    faces = _FACES.to(device)
    frags = rasterize_hard(TriangleBatch(_SCREEN.to(device, float64_on(device)), faces), _SIZE, RasterSettings())
    attrs = _rand(1, 3, 2, seed=4, device=device).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a: interpolate(a, frags, faces, kind="face"), (attrs,))


def test_float32_gradients_reach_float32_inputs(device):
    batch = mesh_fixture("icosphere", 100, 24, 24, dtype=torch.float32, device=device)
    verts = batch.vertices.clone().requires_grad_(True)
    frags = py_gpu.rasterize(TriangleBatch(verts, batch.faces), (24, 24))
    assert frags.bary.dtype == torch.float32
    interpolate(batch.vertex_colors, frags, batch.faces).sum().backward()
    assert verts.grad.dtype == torch.float32 and verts.grad.device.type == device.type
    assert bool(torch.isfinite(verts.grad).all()) and float(verts.grad.abs().sum()) > 0


@pytest.mark.slow
def test_fit_vertex_colors_with_adam(device):
    size = (40, 40)
    mesh = mesh_fixture("icosphere", 320, size[1], size[0], dtype=float64_on(device), device=device)
    target_colors = _rand(mesh.vertices.shape[1], 3, seed=5, device=device)[None]
    target = py_gpu.render(TriangleBatch(mesh.vertices, mesh.faces, vertex_colors=target_colors), size).image
    colors = torch.full_like(target_colors, 0.5).requires_grad_(True)
    opt = torch.optim.Adam([colors], lr=0.05)
    frags = py_gpu.rasterize(mesh, size)  # geometry is fixed: rasterize once
    covered = frags.face_index[..., 0] >= 0
    for _ in range(300):
        opt.zero_grad()
        image = interpolate(colors, frags, mesh.faces)[..., 0, :]
        loss = (image - target)[covered].abs().mean()
        loss.backward()
        opt.step()
    final = py_gpu.render(TriangleBatch(mesh.vertices, mesh.faces, vertex_colors=colors.detach()), size).image
    error = float((final - target).abs().mean())
    assert error < 1.0 / 255.0, error


def test_validation_errors(device):
    faces = _FACES.to(device)
    frags = py_gpu.rasterize(TriangleBatch(_SCREEN.to(device, torch.float32), faces), _SIZE)
    on = dict(device=device)
    colors = torch.rand(1, 7, 3, **on)
    assert interpolate(colors, frags, faces).shape == (1, *_SIZE, 1, 3)  # the valid call works
    with pytest.raises(PyGpuTypeError, match="floating-point"):
        interpolate(torch.ones(1, 7, 3, dtype=torch.int64, **on), frags, faces)
    with pytest.raises(PyGpuTypeError, match="Fragments"):
        interpolate(colors, "frags", faces)
    with pytest.raises(PyGpuTypeError, match="faces"):
        interpolate(colors, frags, faces.float())
    with pytest.raises(PyGpuValueError, match="vertex id"):
        interpolate(torch.rand(1, 5, 3, **on), frags, faces)
    with pytest.raises(PyGpuValueError, match="batch size"):
        interpolate(torch.rand(2, 7, 3, **on), frags, faces)
    with pytest.raises(PyGpuValueError, match="device"):
        interpolate(colors.to("meta"), frags, faces)
    with pytest.raises(PyGpuValueError, match="NaN"):
        interpolate(torch.full((1, 7, 3), float("nan"), **on), frags, faces)
    with pytest.raises(PyGpuValueError, match="kind"):
        interpolate(colors, frags, faces, kind="corner")
    bad = Fragments(frags.face_index + 5, frags.bary, frags.depth)
    with pytest.raises(PyGpuValueError, match="refers to face"):
        interpolate(colors, bad, faces)
