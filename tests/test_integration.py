"""Every backend through the public entry points, on clip-space scenes that cross the near plane."""

from __future__ import annotations

import pytest
import torch

import py_gpu
from py_gpu.shapes import icosphere
from helpers import float64_on


def _inside_sphere(dtype=torch.float64, requires_grad=False, device=None):
    """A camera at the center of a closed sphere: every face crosses or faces the near plane."""
    sphere = icosphere(2, 3.0, dtype=dtype)
    pos, f = sphere.positions, sphere.faces
    near, far = 0.1, 10.0
    x, y, z = pos[:, 0], pos[:, 1], pos[:, 2]
    clip = torch.stack([x, y, far * (-z - near) / (far - near), -z], -1)[None]
    clip = clip.detach().to(device).requires_grad_(requires_grad)
    colors = torch.rand(1, f.shape[0], 3, generator=torch.Generator().manual_seed(0), dtype=dtype).to(device)
    return py_gpu.TriangleBatch(clip, f.to(device), face_colors=colors), clip


@pytest.mark.parametrize("backend,other", [("reference", "numpy"), ("numpy", "reference")], ids=["reference", "numpy"])
def test_hard_mode_has_no_holes_and_backends_agree(backend, other):
    """Each exact CPU backend against a different one (the pure-Python reference is the oracle)."""
    assert backend != other
    batch, _ = _inside_sphere()
    frame = py_gpu.render(batch, (30, 40), backend=backend)
    assert bool((frame.face_index >= 0).all()), "a hole: the camera is inside a closed sphere"
    want = py_gpu.render(batch, (30, 40), backend=other)
    assert torch.equal(frame.face_index, want.face_index)
    assert torch.equal(frame.to_uint8(), want.to_uint8())


def test_torch_hard_mode_has_no_holes_and_matches_the_reference(device):
    dtype = float64_on(device)
    batch, _ = _inside_sphere(dtype)
    frame = py_gpu.render(batch.to(device), (30, 40), backend="torch")
    assert frame.face_index.device.type == device.type
    face = frame.face_index.cpu()
    assert bool((face >= 0).all()), "a hole: the camera is inside a closed sphere"
    want = py_gpu.render(batch, (30, 40), backend="reference")
    assert torch.equal(face, want.face_index)
    assert torch.equal(frame.to_uint8().cpu(), want.to_uint8())


def test_moderngl_agrees_on_clip_space(gl):
    batch, _ = _inside_sphere()
    got = py_gpu.render(batch, (30, 40), backend=gl)
    want = py_gpu.render(batch, (30, 40), backend="numpy")
    mismatch = int((got.face_index != want.face_index).sum())
    print(f"moderngl vs numpy, clip space: {mismatch} of {want.face_index.numel()} pixels differ")
    assert mismatch <= max(1, want.face_index.numel() // 10000)
    assert bool((got.face_index >= 0).all())
    assert int((got.to_uint8().int() - want.to_uint8().int()).abs().max()) <= 1


def test_soft_mode_clips_clip_space_input_and_has_gradients(device):
    batch, clip = _inside_sphere(float64_on(device), requires_grad=True, device=device)
    frame = py_gpu.render(batch, (30, 40), mode="soft", sigma=0.5)
    assert frame.image.device.type == device.type
    hard = py_gpu.render(batch.to("cpu"), (30, 40), backend="numpy")
    assert frame.face_index.max() < batch.num_faces  # ids refer to the input faces
    agree = (frame.face_index.cpu() == hard.face_index).float().mean()
    assert agree > 0.99
    assert float(frame.alpha.detach().min()) > 0.5  # no hole in the soft silhouette either
    frame.image.sum().backward()
    assert clip.grad.device.type == device.type
    assert bool(torch.isfinite(clip.grad).all()) and float(clip.grad.abs().sum()) > 0
    frags = py_gpu.rasterize(batch, (30, 40), mode="soft", sigma=0.5)
    assert frags.face_index.max() < batch.num_faces


def test_interpolate_kind_passes_through(device):
    v = torch.tensor([[[0.0, 0.0, 0.5], [8.0, 0.0, 0.5], [0.0, 8.0, 0.5]]], device=device)
    batch = py_gpu.TriangleBatch(v, torch.tensor([[0, 1, 2], [0, 2, 1], [1, 2, 0]], device=device))
    frags = py_gpu.rasterize(batch, (8, 8))
    attr = torch.arange(9, dtype=torch.float32, device=device).reshape(1, 3, 3)  # V == F == 3: ambiguous by shape
    per_face = py_gpu.interpolate(attr, frags, batch.faces, kind="face")
    per_vertex = py_gpu.interpolate(attr, frags, batch.faces, kind="vertex")
    covered = frags.face_index[0, :, :, 0] >= 0
    assert torch.equal(per_face[0, covered, 0], attr[0, 0].expand(int(covered.sum()), 3))
    assert not torch.allclose(per_vertex[0, covered, 0], per_face[0, covered, 0])
