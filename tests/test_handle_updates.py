"""Handles whose positions change keep correct normals: in place, through update_positions, and
while positions are being optimized."""

from __future__ import annotations

import pytest
import torch

from py_gpu import Camera, MeshBatch, PyGpuValueError, Renderer
from py_gpu.mesh import vertex_normals
from py_gpu.shading.lights import AmbientLight, DirectionalLight
from py_gpu.shapes import icosphere

LIGHTS = [AmbientLight(0.2), DirectionalLight((-0.4, -1.0, -0.6), 0.9)]
CAM = Camera.perspective((0.0, 0.3, 3.0))


def _bumped(mesh: MeshBatch) -> torch.Tensor:
    p = mesh.positions
    return p * (1.0 + 0.25 * torch.sin(5 * p[:, :1]) * torch.cos(3 * p[:, 1:2]))


def _fresh(positions, faces):
    r = Renderer((32, 32), dtype=torch.float64)
    return r.render(r.upload(MeshBatch(positions, faces)), CAM, lights=LIGHTS).image


def test_in_place_position_edits_recompute_normals():
    sphere = icosphere(2, dtype=torch.float64)
    target = _bumped(sphere).clone()
    r = Renderer((32, 32), dtype=torch.float64)
    h = r.upload(MeshBatch(sphere.positions.clone(), sphere.faces))
    before = r.render(h, CAM, lights=LIGHTS).image
    with torch.no_grad():
        h.positions.copy_(target)
    after = r.render(h, CAM, lights=LIGHTS).image
    want = _fresh(target, sphere.faces)
    torch.testing.assert_close(after, want, rtol=0, atol=1e-12)
    assert float((after - before).abs().max()) > 0.1


def test_update_positions_with_and_without_normals():
    sphere = icosphere(2, dtype=torch.float64)
    r = Renderer((32, 32), dtype=torch.float64)
    h = r.upload(MeshBatch(sphere.positions.clone(), sphere.faces))
    h.update_positions(_bumped(sphere))
    torch.testing.assert_close(r.render(h, CAM, lights=LIGHTS).image, _fresh(_bumped(sphere), sphere.faces),
                               rtol=0, atol=1e-12)
    h.update_positions(_bumped(sphere), normals=sphere.normals)  # explicit normals are kept as given
    assert torch.equal(h.current_normals(), sphere.normals)
    with pytest.raises(PyGpuValueError, match="shape"):
        h.update_positions(torch.zeros(3, 3))


def test_user_normals_are_not_overwritten():
    sphere = icosphere(1, dtype=torch.float64)
    flat_up = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64).expand_as(sphere.positions)
    r = Renderer((16, 16), dtype=torch.float64)
    h = r.upload(MeshBatch(sphere.positions, sphere.faces, normals=flat_up))
    with torch.no_grad():
        h.positions.mul_(1.1)
    assert torch.equal(h.current_normals(), flat_up)


def test_optimized_positions_get_normals_with_gradients():
    sphere = icosphere(1, dtype=torch.float64)
    r = Renderer((16, 16), dtype=torch.float64)
    h = r.upload(MeshBatch(sphere.positions.clone().requires_grad_(True), sphere.faces))
    opt = torch.optim.SGD([h.positions], lr=0.05)
    for _ in range(2):
        opt.zero_grad()
        r.render(h, CAM, lights=LIGHTS).image.mean().backward()
        opt.step()
    torch.testing.assert_close(h.current_normals(), vertex_normals(h.positions, h.faces))
