"""Soft mode with default settings cannot go black, hollow or edgeless.

- black: screen-space depth in any unit (here 2..4) is normalized per batch element, so the
  faces show and gradients flow; explicit ``znear``/``zfar`` that miss the depths warn once.
- hollow: ``Frame.alpha`` is the silhouette over every face reaching a pixel, so a dense closed
  mesh is opaque inside at the default K = 8.
- edge: the default soft ``image`` is composited with ``alpha`` over the background, so it falls
  from the face color to the background across an edge exactly as alpha does.
"""

from __future__ import annotations

import importlib
import math
import warnings

import pytest
import torch

import py_gpu
from py_gpu import BlendSettings, PyGpuValueError, PyGpuWarning, RasterSettings, TriangleBatch, shapes
from py_gpu.raster.torch_soft import rasterize_soft
from py_gpu.shading.blend import silhouette

blend_module = importlib.import_module("py_gpu.shading.blend")


def quad(depth_lo: float, depth_hi: float, device, dtype=torch.float64) -> TriangleBatch:
    """Two triangles covering the middle of a 32 x 32 frame, depths between depth_lo and depth_hi."""
    v = torch.tensor([[[6.0, 6.0, depth_lo], [26.0, 7.0, depth_hi], [25.0, 26.0, depth_hi], [7.0, 25.0, depth_lo]]],
                     dtype=dtype, device=device)
    faces = torch.tensor([[0, 1, 2], [0, 2, 3]], device=device)
    colors = torch.tensor([[[0.9, 0.2, 0.1]] * 4], dtype=dtype, device=device)
    return TriangleBatch(v, faces, vertex_colors=colors)


@pytest.mark.parametrize("composite", ["over", "softras"])
def test_depth_outside_unit_range_is_not_black(composite, device):
    batch = quad(2.0, 4.0, device)
    v = batch.vertices.clone().requires_grad_(True)
    frame = py_gpu.render(TriangleBatch(v, batch.faces, vertex_colors=batch.vertex_colors), (32, 32), mode="soft",
                          composite=composite)
    inner = frame.image[0, 10, 20]  # 7 px from the shared diagonal, 4 px inside the top edge
    assert torch.allclose(inner, torch.tensor([0.9, 0.2, 0.1], dtype=inner.dtype, device=device), atol=1e-3)
    # silhouette gradients reach x, y: through the image in the "over" form, through alpha in both
    loss = frame.image.sum() if composite == "over" else frame.alpha.sum()
    grad = torch.autograd.grad(loss, v)[0]
    assert grad[..., :2].abs().max() > 1.0
    # with an explicit range that misses the depths, the old failure is reproduced, with a warning
    blend_module._WARNED.clear()
    with pytest.warns(PyGpuWarning, match="znear=0.0, zfar=1.0"):
        dark = py_gpu.render(batch, (32, 32), mode="soft", composite="softras", znear=0.0, zfar=1.0)
    assert dark.image[0, 16, 16].max() < 1e-3
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per range
        py_gpu.render(batch, (32, 32), mode="soft", composite="softras", znear=0.0, zfar=1.0)


def test_auto_range_is_per_element_and_detached(device):
    near = quad(0.1, 0.2, device).vertices
    far = quad(200.0, 400.0, device).vertices
    v = torch.cat([near, far]).requires_grad_(True)
    colors = torch.rand(2, 4, 3, dtype=v.dtype, device=device, generator=torch.Generator(device="cpu").manual_seed(3)
                        ) if device.type == "cpu" else torch.rand(2, 4, 3, dtype=v.dtype).to(device)
    frame = py_gpu.render(TriangleBatch(v, quad(0, 1, device).faces, vertex_colors=colors), (32, 32), mode="soft")
    # each element alone gives the same image: its range is its own
    for b in range(2):
        alone = py_gpu.render(TriangleBatch(v[b:b + 1].detach(), quad(0, 1, device).faces,
                                            vertex_colors=colors[b:b + 1]), (32, 32), mode="soft")
        assert torch.allclose(frame.image[b], alone.image[0], atol=1e-12)
    zr = blend_module.depth_range(v[..., 2], BlendSettings(), clip_space=False)
    assert not zr.requires_grad
    assert torch.allclose(zr, torch.tensor([[0.1, 0.3], [200.0, 600.0]], dtype=v.dtype, device=device))
    # clip space keeps z/w in [0, 1]
    assert torch.equal(blend_module.depth_range(v[..., 2], BlendSettings(), clip_space=True),
                       torch.tensor([[0.0, 1.0]] * 2, dtype=v.dtype, device=device))


def test_znear_zfar_must_come_together():
    with pytest.raises(PyGpuValueError, match="both"):
        BlendSettings(znear=0.5)
    with pytest.raises(PyGpuValueError, match="composite"):
        BlendSettings(composite="mix")


def sphere_batch(device, dtype=torch.float32) -> TriangleBatch:
    """A 5,120-face icosphere filling a 64 x 64 frame (radius 31 px), orthographic, depth in [1, 3]."""
    s = shapes.icosphere(4, dtype=torch.float64)
    p = s.positions
    v = torch.stack((32.0 + 31.0 * p[:, 0], 32.0 - 31.0 * p[:, 1], 2.0 - p[:, 2]), dim=-1)[None]
    return TriangleBatch(v.to(device=device, dtype=dtype), s.faces.to(device))


def test_dense_mesh_is_not_hollow_at_default_k(device):
    batch = sphere_batch(device)
    assert batch.num_faces == 5120
    frame = py_gpu.render(batch, (64, 64), mode="soft", sigma=1.0)  # default K = 8
    yy, xx = torch.meshgrid(torch.arange(64, device=device) + 0.5, torch.arange(64, device=device) + 0.5,
                            indexing="ij")
    inside = (xx - 32) ** 2 + (yy - 32) ** 2 < 28 ** 2
    alpha = frame.alpha[0, ..., 0]
    assert alpha[inside].mean() >= 0.999 and alpha[inside].min() >= 0.99
    # the product over the K kept slots alone is what used to hollow it
    frags = rasterize_soft(batch, (64, 64), RasterSettings(mode="soft", sigma=1.0))
    slots_only = silhouette(type(frags)(frags.face_index, frags.bary, frags.depth, frags.dist), RasterSettings())
    assert slots_only[0, ..., 0][inside].mean() < alpha[inside].mean() - 0.05
    assert torch.equal(frags.alpha, frame.alpha)


def test_soft_image_edge_follows_alpha(device):
    """Across a white triangle's vertical edge the image falls monotonically from white to the
    black background, and equals alpha there (the "over" form)."""
    v = torch.tensor([[[10.0, 0.0, 0.5], [10.0, 64.0, 0.5], [-60.0, 32.0, 0.5]]], dtype=torch.float64, device=device)
    batch = TriangleBatch(v, torch.tensor([[0, 1, 2]], device=device),
                          vertex_colors=torch.ones(1, 3, 3, dtype=torch.float64, device=device))
    frame = py_gpu.render(batch, (64, 24), mode="soft", sigma=1.0)
    row = frame.image[0, 32, :, 0]
    alpha = frame.alpha[0, 32, :, 0]
    assert torch.allclose(row, alpha, atol=1e-12)
    assert (row[1:] <= row[:-1] + 1e-15).all()  # monotone non-increasing left to right
    assert row[5] > 0.999 and row[16] < 1e-4
    ramp = row[(row > 0.01) & (row < 0.99)]
    assert ramp.numel() >= 3  # a gradual edge, not a step
    # the PyTorch3D form has the hard step the default form removes
    hard = py_gpu.render(batch, (64, 24), mode="soft", sigma=1.0, composite="softras").image[0, 32, :, 0]
    assert ((hard > 0.01) & (hard < 0.99)).sum() == 0


def test_silhouette_gradcheck_over_all_faces(device):
    """float64 gradcheck of alpha with more faces reaching a pixel than K slots (K = 1)."""
    g = torch.Generator().manual_seed(5)
    v = (torch.rand(1, 9, 3, generator=g, dtype=torch.float64) * torch.tensor([7.0, 6.0, 1.0], dtype=torch.float64))
    faces = torch.tensor([[0, 1, 2], [3, 4, 5], [6, 7, 8]], device=device)
    s = RasterSettings(mode="soft", sigma=2.0, faces_per_pixel=1, cutoff=1e-30)

    def fn(x):
        return rasterize_soft(TriangleBatch(x, faces), (6, 7), s).alpha

    torch.autograd.gradcheck(fn, (v.to(device).requires_grad_(True),), eps=1e-6, atol=1e-6, rtol=1e-4)
    assert math.isfinite(float(fn(v.to(device)).detach().sum()))
