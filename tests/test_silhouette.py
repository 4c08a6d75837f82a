"""``py_gpu.silhouette``: soft mode's silhouette without the K nearest faces, colors or blend."""

from __future__ import annotations

import pytest
import torch

import py_gpu
from py_gpu import MemoryBudgetError, PyGpuTypeError, PyGpuValueError, TriangleBatch
from py_gpu.fixtures import mesh_fixture
from py_gpu.raster.soft_oracle import rasterize_soft_oracle
from helpers import float64_on, on_cpu
from test_soft import random_scene, soft


def _grad(alpha_fn, verts: torch.Tensor, up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    v = verts.detach().clone().requires_grad_(True)
    alpha = alpha_fn(v)
    return alpha.detach(), torch.autograd.grad((alpha * up).sum(), v)[0]


@pytest.mark.parametrize("clip", [False, True], ids=["screen", "clip"])
@pytest.mark.parametrize("budget", [None, 200_000], ids=["one-tile", "tiled"])
def test_equals_render_alpha(device, clip, budget):
    """Bit for bit the ``alpha`` of a soft ``render`` with the same settings, and the same gradients."""
    scene = random_scene(8, faces=9, size=(20, 24), clip=clip, batch=2, device=device)
    s = soft(sigma=1.5, **({} if budget is None else {"memory_budget": budget}))
    up = torch.rand(2, 20, 24, 1, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(device)
    fast = _grad(lambda v: py_gpu.silhouette(TriangleBatch(v, scene.faces), (20, 24), settings=s), scene.vertices, up)
    full = _grad(lambda v: py_gpu.render(TriangleBatch(v, scene.faces), (20, 24), settings=s).alpha,
                 scene.vertices, up)
    assert fast[0].shape == (2, 20, 24, 1) and fast[0].device.type == device.type
    assert torch.equal(fast[0], full[0])
    assert 0.05 < float(fast[0].mean()) < 0.95
    assert torch.allclose(fast[1], full[1], rtol=1e-12, atol=1e-13)
    assert fast[1].abs().max() > 1e-3


def test_matches_the_oracle_on_a_mesh(device):
    """Against the brute-force oracle (every face at every pixel), float64."""
    dtype = float64_on(device)
    batch = mesh_fixture("torus", 200, 32, 32, dtype=torch.float64)
    s = soft(sigma=1.0, faces_per_pixel=2)
    got = on_cpu(py_gpu.silhouette(batch.to(device, dtype), (32, 32), settings=s))
    want = rasterize_soft_oracle(batch, (32, 32), s).alpha
    assert torch.allclose(got, want, atol=1e-12, rtol=0)
    assert float(got.max()) > 0.999 and float(got.min()) < 1e-6


def test_gradcheck(device):
    """float64 gradcheck wrt every vertex coordinate (the cutoff is tiny: no footprint boundary moves)."""
    batch = random_scene(4, faces=3, size=(5, 6), device=device)
    s = soft(sigma=3.0, cutoff=1e-30)
    fn = lambda v: py_gpu.silhouette(TriangleBatch(v, batch.faces), (5, 6), settings=s)  # noqa: E731
    torch.autograd.gradcheck(fn, (batch.vertices.detach().clone().requires_grad_(True),), eps=1e-6, atol=1e-6,
                             rtol=1e-4)


def test_near_plane_cut_goes_through_clipping(device):
    """Clip-space faces behind the camera: the silhouette is render's, through its near-plane clipping."""
    dtype = float64_on(device)
    verts = torch.tensor([[[-0.5, -0.5, 0.5, 1.0], [0.6, -0.4, 0.5, 1.0], [0.0, 0.7, -2.0, -0.5],
                           [-0.9, 0.2, 0.3, 1.0], [-0.2, 0.9, 0.3, 1.0], [-0.8, 0.8, 0.3, 1.0]]], dtype=dtype)
    batch = TriangleBatch(verts.to(device), torch.tensor([[0, 1, 2], [3, 4, 5]]).to(device))
    assert py_gpu.frontend.near_clip(batch, (16, 16)).num_clipped == 1
    got = py_gpu.silhouette(batch, (16, 16), sigma=1.0)
    assert torch.equal(got, py_gpu.render(batch, (16, 16), mode="soft", sigma=1.0).alpha)
    assert float(got.max()) > 0.5


def test_bad_input_says_what_is_wrong(device):
    batch = random_scene(2, device=device)
    with pytest.raises(PyGpuTypeError, match="silhouette: `batch` must be a py_gpu.TriangleBatch"):
        py_gpu.silhouette(batch.vertices, (8, 8))
    with pytest.raises(PyGpuValueError, match="silhouette"):
        py_gpu.silhouette(batch, (0, 8))
    with pytest.raises(PyGpuValueError, match="sigma"):
        py_gpu.silhouette(batch, (8, 8), sigma=-1.0)
    with pytest.raises(MemoryBudgetError, match="raise memory_budget"):
        py_gpu.silhouette(batch, (8, 8), memory_budget=64)
    leaf = TriangleBatch(batch.vertices.detach().clone().requires_grad_(True), batch.faces)
    with pytest.raises(MemoryBudgetError, match="memory_budget=64 bytes"):  # the budget given, not a part of it
        py_gpu.silhouette(leaf, (8, 8), memory_budget=64)


@pytest.mark.parametrize("budget", [120_000, 4_000_000], ids=["partly-kept", "all-kept"])
def test_kept_and_recomputed_terms_give_the_same_gradients(monkeypatch, device, budget):
    """The forward pass keeps the candidates' gradient terms chunk by chunk while they fit a
    quarter of the budget; the backward pass evaluates the other chunks again. Either way the
    gradients are render's."""
    from py_gpu.raster import torch_soft

    monkeypatch.setattr(torch_soft, "_BLOCK", 64)
    monkeypatch.setattr(torch_soft, "_CHUNK_CANDIDATES", 64)  # many chunks, so that the budget cuts between them
    seen = []
    original = torch_soft.FaceSelector.miss

    def spy(self, tile, room=0):
        used = original(self, tile, room)
        seen.append([entry is None for entry in self.kept_terms.get(tile, [None])])
        return used

    monkeypatch.setattr(torch_soft.FaceSelector, "miss", spy)
    scene = random_scene(12, faces=10, size=(24, 24), batch=1, device=device)
    s = soft(sigma=1.5, memory_budget=budget)
    up = torch.rand(1, 24, 24, 1, generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(device)
    fast = _grad(lambda v: py_gpu.silhouette(TriangleBatch(v, scene.faces), (24, 24), settings=s), scene.vertices, up)
    full = _grad(lambda v: py_gpu.render(TriangleBatch(v, scene.faces), (24, 24), settings=s).alpha,
                 scene.vertices, up)
    assert torch.equal(fast[0], full[0])
    assert torch.allclose(fast[1], full[1], rtol=1e-12, atol=1e-13)
    recomputed = [flag for tile in seen for flag in tile]
    assert not all(recomputed)
    assert any(recomputed) == (budget == 120_000)


@pytest.mark.parametrize("share", [4, 500], ids=["all-kept", "partly-kept"])
def test_render_keeps_the_silhouette_terms_it_can(monkeypatch, device, share):
    """A soft ``render`` whose vertices need gradients keeps its candidates' silhouette gradient
    terms while they fit ``1 / TERMS_SHARE`` of the budget; the gradients of image and alpha are
    those of a render that keeps none and evaluates them all again in the backward pass."""
    from py_gpu.raster import torch_soft

    monkeypatch.setattr(torch_soft, "_BLOCK", 64)
    monkeypatch.setattr(torch_soft, "_CHUNK_CANDIDATES", 64)  # many chunks, so that the room cuts between them
    seen = []
    original = torch_soft.FaceSelector.__call__

    def spy(self, tile):
        result = original(self, tile)
        seen.append([entry is None for entry in self.kept_terms.get(tile, [None])])
        return result

    monkeypatch.setattr(torch_soft.FaceSelector, "__call__", spy)
    scene = random_scene(13, faces=10, size=(24, 24), batch=1, device=device)
    s = soft(sigma=1.5, memory_budget=4_000_000)
    g = torch.Generator().manual_seed(3)
    up_rgb = torch.rand(1, 24, 24, 3, generator=g, dtype=torch.float64).to(device)
    up_alpha = torch.rand(1, 24, 24, 1, generator=g, dtype=torch.float64).to(device)

    def gradient(terms_share):
        monkeypatch.setattr(torch_soft, "TERMS_SHARE", terms_share)
        v = scene.vertices.detach().clone().requires_grad_(True)
        frame = py_gpu.render(TriangleBatch(v, scene.faces, vertex_colors=scene.vertex_colors), (24, 24), settings=s)
        loss = (frame.image * up_rgb).sum() + (frame.alpha * up_alpha).sum()
        return frame.image.detach(), torch.autograd.grad(loss, v)[0]

    seen.clear()
    kept = gradient(share)
    recomputed = [flag for tile in seen for flag in tile]
    seen.clear()
    none = gradient(10**12)  # no room: every chunk is evaluated again
    assert all(flag for tile in seen for flag in tile)
    assert not all(recomputed) and any(recomputed) == (share == 500)
    assert torch.equal(kept[0], none[0])
    assert torch.allclose(kept[1], none[1], rtol=1e-12, atol=1e-13)
    assert kept[1].abs().max() > 1e-3
