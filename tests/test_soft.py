"""Soft mode: the binned/chunked torch rasterizer against the brute-force oracle, the blend
formulas, gradients, the sigma -> 0 limit against hard mode, fitting, and input errors."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch
from hypothesis import given, strategies as st

import py_gpu
from py_gpu import BlendSettings, Fragments, MemoryBudgetError, PyGpuTypeError, PyGpuValueError, RasterSettings, TriangleBatch
from py_gpu.fixtures import grid_fixture, mesh_fixture
from py_gpu.raster.soft_oracle import rasterize_soft_oracle
from py_gpu.raster.torch_soft import rasterize_soft, soft_geometry
from py_gpu.shading.blend import blend_weights, coverage, silhouette
from py_gpu.shading.composite import render_soft
from helpers import compare_impls, float64_on, on_cpu
from strategies import fixture_safe_settings

ROOT = Path(__file__).resolve().parents[1]
TOL = 1e-5  # float64 agreement of fragments with the oracle
CPU = torch.device("cpu")


# ---- scenes ---------------------------------------------------------------------------------
def random_scene(seed: int, faces: int = 6, size=(12, 16), *, clip: bool = False, colors: str = "vertex",
                 batch: int = 1, requires_grad: bool = False, device=CPU) -> TriangleBatch:
    """Independent random triangles (float64, drawn on the CPU, then put on ``device``), partly
    off screen, at distinct random depths."""
    float64_on(torch.device(device))
    g = torch.Generator().manual_seed(seed)
    H, W = size
    V = 3 * faces
    if clip:
        w = 1.0 + torch.rand(batch, V, 1, generator=g, dtype=torch.float64)
        ndc = torch.rand(batch, V, 2, generator=g, dtype=torch.float64) * 2.4 - 1.2
        z = torch.rand(batch, V, 1, generator=g, dtype=torch.float64)
        verts = torch.cat((ndc * w, z * w, w), dim=-1)
    else:
        xy = torch.rand(batch, V, 2, generator=g, dtype=torch.float64) * torch.tensor([W + 4.0, H + 4.0]) - 2.0
        z = 0.1 + 0.8 * torch.rand(batch, V, 1, generator=g, dtype=torch.float64)
        verts = torch.cat((xy, z), dim=-1)
    verts = verts.to(device).requires_grad_(requires_grad)
    fcs = torch.arange(V, device=device).reshape(faces, 3)
    if colors == "vertex":
        col = torch.rand(batch, V, 3, generator=g, dtype=torch.float64).to(device).requires_grad_(requires_grad)
        return TriangleBatch(verts, fcs, vertex_colors=col)
    if colors == "face":
        col = torch.rand(batch, faces, 3, generator=g, dtype=torch.float64).to(device).requires_grad_(requires_grad)
        return TriangleBatch(verts, fcs, face_colors=col)
    return TriangleBatch(verts, fcs)


def soft(**kw) -> RasterSettings:
    base = dict(mode="soft", sigma=2.0, faces_per_pixel=6)
    base.update(kw)
    return RasterSettings(**base)


def blending(gamma: float = 0.1, composite: str = "over") -> BlendSettings:
    """Blend settings with the fixed depth range [0, 1] (the random scenes' depths lie in it), so
    that finite differences of depth do not move the (detached) automatic range."""
    return BlendSettings(gamma=gamma, znear=0.0, zfar=1.0, composite=composite)


def assert_fragments_match(a, b, tol=TOL) -> None:
    """Equal fragments (compared on the CPU): the same faces, distances, barycentrics and depths."""
    a, b = on_cpu(a), on_cpu(b)
    assert torch.equal(a.face_index, b.face_index)
    m = a.mask
    assert torch.allclose(a.dist, b.dist, atol=tol, rtol=0)
    assert torch.allclose(a.bary, b.bary, atol=tol, rtol=0)
    assert torch.allclose(a.depth[m], b.depth[m], atol=tol, rtol=0)
    assert bool(torch.isinf(a.depth[~m]).all()) and bool(torch.isinf(b.depth[~m]).all())


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---- geometry ---------------------------------------------------------------------------------
def test_geometry_known_values(device):
    f64 = dict(dtype=float64_on(device), device=device)
    tri = torch.tensor([[0.0, 0.0, 0.2], [4.0, 0.0, 0.4], [0.0, 4.0, 0.6]], **f64)
    px = torch.tensor([1.0, 6.0, -3.0, 1.0], **f64)
    py = torch.tensor([1.0, 0.0, -4.0, 1.5], **f64)
    dist, lam, depth = soft_geometry(tri, px, py)
    assert dist.device.type == lam.device.type == depth.device.type == device.type
    dist, lam, depth = dist.cpu(), lam.cpu(), depth.cpu()
    # inside (1,1): nearest edges are the axes, 1 px away -> +1; (1, 1.5): 1 px from x=0
    # outside (6,0): 2 px past vertex 1 -> -4; (-3,-4): 5 px from vertex 0 -> -25
    assert torch.allclose(dist, torch.tensor([1.0, -4.0, -25.0, 1.0], dtype=torch.float64))
    assert torch.allclose(lam[0], torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64))
    # outside: clamped barycentrics -> (6,0) takes vertex 1's weights, (-3,-4) vertex 0's
    assert torch.allclose(lam[1], torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64))
    assert torch.allclose(lam[2], torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64))
    assert torch.allclose(depth[:3], torch.tensor([0.35, 0.4, 0.2], dtype=torch.float64))
    assert torch.allclose(lam.sum(-1), torch.ones(4, dtype=torch.float64))


def test_closed_form_geometry_gradient_matches_autograd(device):
    """The fast path's step 4 backward (closed form, summed into the shared vertices) against
    autograd through the expressions of soft_geometry, at points inside, outside and near the
    corners of random triangles whose vertices are shared by several of them (float64)."""
    from py_gpu.raster.torch_soft import _Geometry

    dtype = float64_on(device)
    g = torch.Generator().manual_seed(3)
    n, m = 4000, 1000  # corner i of each triangle is one of the vertices i * m .. i * m + m - 1
    scale = torch.tensor([20.0, 20.0, 1.0], dtype=torch.float64)
    screen = (torch.rand(3 * m, 3, generator=g, dtype=torch.float64) * scale).to(device, dtype)
    corner = (torch.randint(0, m, (3, n), generator=g) + torch.arange(3)[:, None] * m).to(device)
    tri = screen.index_select(0, corner.t().reshape(-1)).view(n, 3, 3)
    w = torch.rand(n, 3, generator=g, dtype=torch.float64) * 1.4 - 0.2  # affine weights, some < 0: outside
    px, py = ((w / w.sum(-1, keepdim=True))[..., None] * tri[..., :2].cpu()).sum(1).to(device, dtype).unbind(-1)
    ups = [torch.randn(shape, generator=g, dtype=torch.float64).to(device, dtype) for shape in ((n,), (n, 3), (n,))]
    inside = soft_geometry(tri, px, py, dist_only=True) >= 0
    assert 0.1 < float(inside.double().mean()) < 0.9

    def through_autograd(v, corner, px, py):
        return soft_geometry(v.index_select(0, corner.t().reshape(-1)).view(-1, 3, 3), px, py)

    def grad(fn, which):  # d (sum of the chosen outputs times their upstream) / d screen
        v = screen.clone().requires_grad_(True)
        outs = fn(v, corner, px, py)
        return outs, torch.autograd.grad(sum((outs[i] * ups[i]).sum() for i in which), v)[0]

    def closed_form(v, corner, px, py):  # its barycentrics come as rows, [3, n]
        dist, lam, depth = _Geometry.apply(v, corner, px, py)
        return dist, lam.t(), depth

    for which in ((0, 1, 2), (0,), (1,), (2,)):  # all outputs, then dist, barycentrics, depth alone
        (ref_out, ref), (fast_out, fast) = grad(through_autograd, which), grad(closed_form, which)
        assert all(torch.equal(a, b) for a, b in zip(fast_out, ref_out))
        assert torch.allclose(fast, ref, rtol=1e-9, atol=1e-9), which
    assert ref.abs().max() > 1.0


def test_blur_radius_keeps_exactly_the_cutoff_footprint(device):
    s = soft(sigma=1.5, faces_per_pixel=1)
    r2 = s.blur_radius ** 2
    assert math.isclose(1 / (1 + math.exp(r2 / s.sigma)), s.cutoff, rel_tol=1e-9)
    frags = rasterize_soft(random_scene(3, faces=1, size=(20, 20), device=device), (20, 20), s)
    assert frags.dist.device.type == device.type
    m = frags.mask
    assert bool((frags.dist[m] >= -r2).all())
    D = coverage(frags, s.sigma)
    assert bool((D[m] >= s.cutoff * (1 - 1e-9)).all()) and bool((D[~m] == 0).all())
    oracle = rasterize_soft_oracle(random_scene(3, faces=1, size=(20, 20)), (20, 20), s)
    assert int(m.sum()) == int(oracle.mask.sum()) > 0


# ---- the oracle: forward ---------------------------------------------------------------------
@pytest.mark.parametrize("clip", [False, True], ids=["screen", "clip"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_forward_matches_oracle_when_k_covers_every_face(seed, clip, device):
    batch = random_scene(seed, clip=clip, batch=2, device=device)
    s = soft()
    fast, ref = rasterize_soft(batch, (12, 16), s), rasterize_soft_oracle(batch.to(CPU), (12, 16), s)
    assert fast.face_index.device.type == device.type
    fast = on_cpu(fast)
    assert fast.mask.any(-1).float().mean() > 0.3  # the scene is not trivially empty
    assert fast.mask.sum(-1).max() >= 3  # overlaps exist, so order matters
    assert_fragments_match(fast, ref)
    if clip:
        assert torch.allclose(fast.screen_bary, ref.screen_bary, atol=TOL, rtol=0)
        assert not torch.allclose(fast.bary, fast.screen_bary)  # perspective correction happened
    # slots are sorted nearest first
    d = torch.where(fast.mask, fast.depth, torch.full_like(fast.depth, math.inf))
    assert bool((d[..., 1:] >= d[..., :-1]).all())


@fixture_safe_settings(max_examples=25)
@given(seed=st.integers(0, 2**31 - 1), faces=st.integers(1, 8), k=st.integers(1, 5),
       budget=st.sampled_from([12_000, 40_000, 2**29]), sigma=st.floats(0.05, 6.0), cull=st.booleans())
def test_top_k_and_chunks_match_oracle(device, seed, faces, k, budget, sigma, cull):
    """Any K (also fewer than the faces reaching a pixel), any chunking: the same K nearest."""
    batch = random_scene(seed, faces=faces, size=(9, 11))
    s = soft(sigma=sigma, faces_per_pixel=k, memory_budget=budget, cull_backfaces=cull)
    assert_fragments_match(rasterize_soft(batch.to(device), (9, 11), s), rasterize_soft_oracle(batch, (9, 11), s))


def test_equal_depth_ties_go_to_the_lower_face_index(device):
    batch = grid_fixture(n=4, width=24, height=24)  # coplanar: every depth is 0.5
    s = soft(faces_per_pixel=3, sigma=4.0, memory_budget=100_000)  # several chunks, K < faces reaching
    fast = on_cpu(rasterize_soft(batch.to(device, float64_on(device)), (24, 24), s))
    ref = rasterize_soft_oracle(batch, (24, 24), s)
    assert_fragments_match(fast, ref)
    f, d = fast.face_index, fast.depth
    tie = (f[..., 1:] >= 0) & (f[..., :-1] >= 0) & (d[..., 1:] == d[..., :-1])
    assert int(tie.sum()) > 20
    assert bool((f[..., 1:][tie] > f[..., :-1][tie]).all())


@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 400), pixels=st.sampled_from([1, 7, 300, 2**16, 2**20]),
       spread=st.sampled_from([0.0, 1e-7, 1e-3, 10.0]), dtype=st.sampled_from([torch.float32, torch.float64]))
def test_fragment_order_is_pixel_depth_face(seed, n, pixels, spread, dtype):
    """The selection's order of a chunk's fragments is lexicographic in (pixel, depth, face),
    also where depths collide when quantized into an int32 sort key (nearly equal depths), are
    exactly equal, or -0.0 meets +0.0, and when the tile has too many pixels for that key."""
    from py_gpu.raster.torch_soft import _rank_order

    g = torch.Generator().manual_seed(seed)
    pix = torch.randint(0, min(pixels, 6), (n,), generator=g) * max(1, pixels // 6)
    base = torch.tensor([0.25, 0.5, -0.0, 0.0, 3.0], dtype=dtype)
    z = base[torch.randint(0, 5, (n,), generator=g)] + spread * torch.randint(0, 3, (n,), generator=g).to(dtype)
    fid = torch.randperm(4 * n, generator=g)[:n]  # one fragment per (pixel, face)
    order = _rank_order(pix, z, fid, pixels).tolist()
    key = lambda i: (int(pix[i]), float(z[i]) + 0.0, int(fid[i]))  # noqa: E731 (-0.0 == 0.0)
    assert [key(i) for i in order] == sorted(key(i) for i in range(n))
    assert sorted(order) == list(range(n))


def test_chunked_mesh_matches_one_chunk(device):
    batch = mesh_fixture("icosphere", 1280, 48, 48, dtype=torch.float32, device=device)
    one = rasterize_soft(batch, (48, 48), soft(faces_per_pixel=4, sigma=1.0))
    many = rasterize_soft(batch, (48, 48), soft(faces_per_pixel=4, sigma=1.0, memory_budget=600_000))
    assert torch.equal(one.face_index, many.face_index)
    assert torch.equal(one.dist, many.dist)
    assert one.mask.sum(-1).max() == 4  # K is saturated somewhere: the merge across chunks mattered


@pytest.mark.parametrize("flat", [False, True], ids=["slanted", "coplanar"])
def test_fragments_beaten_by_the_kth_slot_are_dropped_without_changing_the_selection(monkeypatch, device, flat):
    """Chunks after the first drop the fragments no nearer than their pixel's K-th kept slot
    before sorting (ties included: the kept face has the lower index). Many are dropped, and
    the fragments equal the one-chunk selection's and the oracle's."""
    import py_gpu.raster.torch_soft as soft_mod

    seen = {"in": 0, "live": 0}
    real = soft_mod._not_beaten

    def spy(pix, z, fid, K, best_depth, best_face):
        live = real(pix, z, fid, K, best_depth, best_face)
        seen["in"] += pix.numel()
        seen["live"] += live.numel()
        return live

    monkeypatch.setattr(soft_mod, "_not_beaten", spy)
    if flat:
        batch, size = grid_fixture(n=4, width=24, height=24), (24, 24)  # coplanar: every depth is 0.5
        s = soft(faces_per_pixel=3, sigma=4.0, memory_budget=100_000)
    else:
        batch, size = mesh_fixture("icosphere", 320, 32, 32, dtype=torch.float64, tilt=1.1), (32, 32)
        s = soft(sigma=0.8, faces_per_pixel=3, memory_budget=150_000)
    batch_on = batch.to(device, float64_on(device))
    fast = on_cpu(rasterize_soft(batch_on, size, s))
    assert seen["in"] > 0 and seen["live"] < 0.8 * seen["in"]  # several chunks, and the filter bites
    filtered = seen["in"]
    one = on_cpu(rasterize_soft(batch_on, size, soft(sigma=s.sigma, faces_per_pixel=s.faces_per_pixel)))
    assert seen["in"] == filtered  # the default budget holds one chunk: no filter there
    assert torch.equal(fast.face_index, one.face_index)
    assert torch.equal(fast.dist, one.dist) and torch.equal(fast.alpha, one.alpha)
    assert_fragments_match(fast, rasterize_soft_oracle(batch, size, s), 1e-5)


def test_mesh_top_k_matches_oracle(device, dtype):
    """A closed mesh (front and back faces overlap everywhere), K smaller than the faces reaching a
    pixel, several chunks; float32 ranks with the packed int64 key, float64 with two sorts."""
    batch = mesh_fixture("icosphere", 320, 32, 32, dtype=dtype, tilt=1.1)
    s = soft(sigma=0.8, faces_per_pixel=3, memory_budget=150_000)
    fast = rasterize_soft(batch.to(device), (32, 32), s)
    assert fast.bary.dtype == dtype and fast.bary.device.type == device.type
    fast, ref = on_cpu(fast), rasterize_soft_oracle(batch, (32, 32), s)
    assert fast.mask.all(-1).float().mean() > 0.3
    tol = 1e-5 if dtype == torch.float64 else 1e-4
    assert_fragments_match(fast, ref, tol)


def test_work_is_bounded_by_footprints_and_budget(monkeypatch, device):
    """Each chunk fits the budget, and the total work is the faces' blurred footprints, not F*H*W."""
    from py_gpu.raster import torch_soft

    seen = []
    original = torch_soft._chunk

    def spy(tri, face, row, col0, span_w, n, *rest, **kw):
        seen.append((n, int(span_w.sum())))
        return original(tri, face, row, col0, span_w, n, *rest, **kw)

    monkeypatch.setattr(torch_soft, "_chunk", spy)
    batch = mesh_fixture("icosphere", 1280, 64, 64, dtype=torch.float32, device=device)
    s = soft(sigma=1.0, faces_per_pixel=8, memory_budget=460_000)
    rasterize_soft(batch, (64, 64), s)
    limit = s.memory_budget // torch_soft._bytes_per_fragment(torch.float32)
    assert len(seen) > 3
    assert all(n <= limit and n == real for n, real in seen)
    total = sum(real for _, real in seen)
    assert total < 0.05 * batch.num_faces * 64 * 64
    # and the footprint estimate: less than every face's grown bounding box (spans follow the
    # face's edges), and at least the fragments the blur radius reaches
    r = s.blur_radius
    tri = batch.vertices[0][batch.faces]
    extent = (tri[..., :2].amax(1) - tri[..., :2].amin(1) + 2 * r + 1).prod(-1)
    assert total < 0.8 * float(extent.sum())
    rows, cols = torch.meshgrid(torch.arange(64.0) + 0.5, torch.arange(64.0) + 0.5, indexing="ij")
    reached = sum(int((torch_soft.soft_geometry(part[:, None, None].cpu(), cols, rows, dist_only=True) >= -r * r).sum())
                  for part in tri.split(160))
    assert total >= reached > 0


@pytest.mark.parametrize("seed", range(4))
def test_slanted_slivers_lose_no_fragment(device, seed):
    """Long thin triangles at every angle, whose boxes are mostly empty: the spans cut to the
    faces' reach keep every fragment the blur radius reaches (alpha over all faces, and the K kept)."""
    g = torch.Generator().manual_seed(seed)
    n, side = 12, 40
    center = torch.rand(n, 1, 2, generator=g, dtype=torch.float64) * side
    angle = torch.rand(n, 1, generator=g, dtype=torch.float64) * math.pi
    along = torch.cat((angle.cos(), angle.sin()), -1)[:, None] * torch.tensor([-25.0, 25.0, 22.0])[None, :, None]
    across = torch.cat((-angle.sin(), angle.cos()), -1)[:, None] * torch.tensor([0.0, 0.0, 1.5])[None, :, None]
    xy = center + along + across  # [n, 3, 2]
    z = torch.rand(n, 1, 1, generator=g, dtype=torch.float64).expand(n, 3, 1)
    verts = torch.cat((xy, z), -1).reshape(1, 3 * n, 3)
    batch = TriangleBatch(verts, torch.arange(3 * n).reshape(n, 3))
    s = soft(sigma=3.0, faces_per_pixel=4)
    fast, ref = on_cpu(rasterize_soft(batch.to(device, float64_on(device)), (side, side), s)), \
        rasterize_soft_oracle(batch, (side, side), s)
    assert_fragments_match(fast, ref)
    assert torch.allclose(fast.alpha, ref.alpha, atol=1e-12, rtol=0)
    assert fast.mask.sum(-1).max() >= 3


@pytest.mark.parametrize("composite", ["over", "softras"])
@pytest.mark.parametrize("budget", [None, 300_000], ids=["one-tile", "tiled"])
def test_shading_only_reached_pixels_changes_nothing(monkeypatch, device, composite, budget):
    """A sparse frame is shaded only at the pixels some face reaches (the others show the
    background): image, alpha, depth and faces are those of shading every pixel, bit for bit, and
    the gradients agree to rounding."""
    from py_gpu.shading import composite as comp

    g = torch.Generator().manual_seed(5)
    n, side = 8, 48
    center = 8 + torch.rand(n, 1, 2, generator=g, dtype=torch.float64) * (side - 16)
    xy = center + (torch.rand(n, 3, 2, generator=g, dtype=torch.float64) * 2 - 1) * 10
    z = torch.rand(n, 3, 1, generator=g, dtype=torch.float64)
    verts = torch.cat((xy, z), -1).reshape(1, 3 * n, 3).to(device, float64_on(device))
    cols = torch.rand(1, 3 * n, 3, generator=g, dtype=torch.float64).to(verts)
    up = torch.rand(1, side, side, 3, generator=g, dtype=torch.float64).to(verts)
    s = soft(sigma=1.0, **({} if budget is None else {"memory_budget": budget}))
    runs = []
    for share in (-1.0, comp._COMPACT_SHARE):  # shade every pixel; then the default
        monkeypatch.setattr(comp, "_COMPACT_SHARE", share)
        v, c = verts.clone().requires_grad_(True), cols.clone().requires_grad_(True)
        batch = TriangleBatch(v, torch.arange(3 * n).reshape(n, 3).to(device), vertex_colors=c)
        frame = render_soft(batch, (side, side), background=(0.2, 0.3, 0.4), settings=s,
                            blend_settings=blending(0.1, composite))
        ((frame.image * up).sum() + frame.alpha.sum()).backward()
        runs.append((frame.image, frame.alpha, frame.depth, frame.face_index, v.grad, c.grad))
    dense, compact = runs
    covered = float((dense[3] >= 0).double().mean())
    assert 0.02 < covered < 0.6  # sparse: most pixels are background
    for a, b in zip(dense[:4], compact[:4]):
        assert torch.equal(a, b)
    for a, b in zip(dense[4:], compact[4:]):  # the same terms, summed in another order
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-13)
    assert dense[4].abs().max() > 1e-3 and dense[5].abs().max() > 1e-3


@pytest.mark.parametrize("share", [-1.0, 1.0], ids=["rows", "reached-pixels"])
@pytest.mark.parametrize("composite", ["over", "softras"])
def test_shading_a_tile_in_blocks_changes_nothing(monkeypatch, device, share, composite):
    """A tile shaded in blocks of a few slots (whole rows, or runs of the reached pixels) gives the
    frame of shading it at once, bit for bit, and the same gradients to rounding."""
    from py_gpu.shading import composite as comp

    batch = random_scene(11, faces=12, size=(20, 28))
    g = torch.Generator().manual_seed(12)
    verts = batch.vertices.to(device, float64_on(device))
    cols = torch.rand(1, verts.shape[1], 3, generator=g, dtype=torch.float64).to(verts)
    up = torch.rand(1, 20, 28, 3, generator=g, dtype=torch.float64).to(verts)
    monkeypatch.setattr(comp, "_COMPACT_SHARE", share)
    runs = []
    for slots in (1 << 20, 37):  # one block; then blocks of a row or of nine pixels at K = 4
        monkeypatch.setattr(comp, "_SHADE_SLOTS", slots)
        v, c = verts.clone().requires_grad_(True), cols.clone().requires_grad_(True)
        frame = render_soft(TriangleBatch(v, batch.faces.to(device), vertex_colors=c), (20, 28),
                            background=(0.2, 0.3, 0.4), settings=soft(sigma=1.5, faces_per_pixel=4),
                            blend_settings=blending(0.1, composite))
        ((frame.image * up).sum() + frame.alpha.sum()).backward()
        runs.append((frame.image, frame.alpha, frame.depth, frame.face_index, v.grad, c.grad))
    whole, blocks = runs
    assert float((whole[3] >= 0).double().mean()) > 0.2
    for a, b in zip(whole[:4], blocks[:4]):
        assert torch.equal(a, b)
    for a, b in zip(whole[4:], blocks[4:]):  # the same terms, summed in another order
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-13)
    assert whole[4].abs().max() > 1e-3 and whole[5].abs().max() > 1e-3


def test_memory_budget_too_small_says_what_to_change(device):
    with pytest.raises(MemoryBudgetError, match="raise memory_budget"):
        rasterize_soft(random_scene(0, device=device), (12, 16), soft(memory_budget=100))


def test_empty_scene_and_culling(device):
    f64 = dict(dtype=float64_on(device), device=device)
    empty = TriangleBatch(torch.zeros(1, 0, 3, **f64), torch.zeros(0, 3, dtype=torch.int64, device=device))
    frags = rasterize_soft(empty, (5, 6), soft())
    assert frags.face_index.shape == (1, 5, 6, 6) and not frags.mask.any()
    assert frags.face_index.device.type == device.type
    frame = render_soft(empty, (5, 6), background=(0.2, 0.4, 0.6), settings=soft())
    assert frame.image.device.type == device.type
    assert torch.allclose(frame.image.cpu(), torch.tensor([0.2, 0.4, 0.6], dtype=torch.float64).expand(1, 5, 6, 3))
    assert not frame.alpha.any()
    # one clockwise-on-screen face (positive edge-function area) and one counter-clockwise
    v = torch.tensor([[[1.0, 1.0, 0.5], [9.0, 1.0, 0.5], [1.0, 9.0, 0.5]]], **f64)
    two = TriangleBatch(v, torch.tensor([[0, 1, 2], [0, 2, 1]], device=device))
    kept = rasterize_soft(two, (10, 10), soft(cull_backfaces=True)).face_index.cpu()
    assert set(kept[kept >= 0].unique().tolist()) == {1}


# ---- blending formulas -------------------------------------------------------------------------
def test_blend_formulas_written_out(device):
    batch = random_scene(5, colors="face", device=device)
    F = batch.num_faces
    s, bg_rgb = soft(faces_per_pixel=F), (0.1, 0.2, 0.3)  # K = F: every reaching face is kept
    frags = rasterize_soft(batch, (12, 16), s)
    m = frags.mask
    D = torch.where(m, torch.sigmoid(frags.dist / s.sigma), torch.zeros_like(frags.dist))
    alpha = 1 - torch.prod(1 - D, dim=-1)
    assert torch.allclose(silhouette(frags, s)[..., 0], alpha, atol=1e-12)
    col = batch.face_colors[0][frags.face_index.clamp(min=0)] * m[..., None]
    bg = torch.tensor(bg_rgb, dtype=torch.float64, device=device)
    # the default "over" form: the faces' softmax color, composited with alpha over the background
    bs = blending(0.05)
    frame = render_soft(batch, (12, 16), background=bg_rgb, settings=s, blend_settings=bs)
    assert torch.allclose(frame.alpha[..., 0], alpha, atol=1e-12)
    z = torch.where(m, (bs.zfar - frags.depth) / (bs.zfar - bs.znear), torch.zeros_like(D))
    e = D * torch.exp(z / bs.gamma)
    surface = (e[..., None] * col).sum(-2) / e.sum(-1, keepdim=True).clamp(min=1e-300)
    image = alpha[..., None] * surface + (1 - alpha[..., None]) * bg
    assert torch.allclose(frame.image, image, atol=1e-12)
    # PyTorch3D's softmax_rgb_blend ("softras"), spelled out with exp
    bs = blending(0.05, composite="softras")
    frame = render_soft(batch, (12, 16), background=bg_rgb, settings=s, blend_settings=bs)
    eps = bs.background_epsilon
    z_max = z.amax(-1, keepdim=True).clamp(min=eps)
    w = D * torch.exp((z - z_max) / bs.gamma)
    delta = torch.clamp(torch.exp((eps - z_max) / bs.gamma), min=eps)
    image = ((w[..., None] * col).sum(-2) + delta * bg) / (w.sum(-1, keepdim=True) + delta)
    assert torch.allclose(frame.image, image, atol=1e-12)
    weights, w_bg = blend_weights(frags, s, bs)
    assert torch.allclose(weights.sum(-1) + w_bg, torch.ones_like(w_bg))
    assert frame.image.device.type == weights.device.type == device.type
    # alpha does not depend on K: with one slot it is still the product over every face
    one = render_soft(batch, (12, 16), settings=soft(faces_per_pixel=1), blend_settings=bs)
    assert torch.allclose(one.alpha[..., 0], alpha, atol=1e-12)


def test_nearest_covering_face_and_depth(device):
    batch = random_scene(7, device=device)
    s = soft()
    frags = on_cpu(rasterize_soft(batch, (12, 16), s))
    frame = on_cpu(render_soft(batch, (12, 16), settings=s))
    cov = frags.mask & (frags.dist >= 0)
    for b, y, x in [(0, y, x) for y in range(12) for x in range(16)]:
        ks = torch.nonzero(cov[b, y, x]).flatten()
        if ks.numel() == 0:
            assert frame.face_index[b, y, x] == -1 and math.isinf(frame.depth[b, y, x])
        else:
            assert frame.face_index[b, y, x] == frags.face_index[b, y, x, ks[0]]
            assert frame.depth[b, y, x] == frags.depth[b, y, x, ks[0]]


# ---- the oracle: backward ----------------------------------------------------------------------
@pytest.mark.parametrize("clip,colors", [(False, "vertex"), (False, "face"), (True, "vertex")])
def test_gradients_match_oracle(clip, colors, device):
    """The fast path on ``device`` and the oracle on the CPU, forward and backward: image, alpha,
    distances, barycentrics and depth under the same random upstream gradient."""
    s, bs = soft(), blending(0.05)
    scene = random_scene(4, clip=clip, colors=colors, batch=2, device=device)
    color_kind = "vertex_colors" if colors == "vertex" else "face_colors"

    def pipeline(rasterizer, where):
        def run(verts, cols):
            batch = TriangleBatch(verts.to(where), scene.faces.to(where), **{color_kind: cols.to(where)})
            frame = render_soft(batch, (12, 16), background=(0.3, 0.1, 0.2), settings=s, blend_settings=bs,
                                rasterizer=rasterizer)
            frags = rasterizer(batch, (12, 16), s)
            depth = torch.where(frags.mask, frags.depth, torch.zeros_like(frags.depth))
            return frame.image, frame.alpha, frags.dist, frags.bary, depth, frags.face_index
        return run

    inputs = (scene.vertices.detach().requires_grad_(True), scene.colors.detach().requires_grad_(True))
    fast = compare_impls(pipeline(rasterize_soft, device), pipeline(rasterize_soft_oracle, CPU), inputs, seed=11,
                         label=f"soft fast path on {device} vs oracle")
    gv, gc = fast.grads
    assert gv.device.type == gc.device.type == device.type
    assert gv.abs().max() > 1e-3 and gc.abs().max() > 1e-3


@pytest.mark.parametrize("clip", [False, True], ids=["screen", "clip"])
def test_gradcheck_render_soft(clip, device):
    """float64 gradcheck wrt vertex x, y, depth (and w) and colors. The cutoff is tiny so that
    every face reaches every pixel: no footprint boundary moves under the finite differences."""
    s, bs = soft(sigma=3.0, faces_per_pixel=3, cutoff=1e-30), blending(0.2)
    batch = random_scene(21, faces=3, size=(5, 6), clip=clip, device=device)
    verts, cols, faces = batch.vertices.clone(), batch.vertex_colors.clone(), batch.faces

    def fn(v, c):
        frame = render_soft(TriangleBatch(v, faces, vertex_colors=c), (5, 6), background=(0.2, 0.5, 0.1), settings=s,
                            blend_settings=bs)
        return frame.image, frame.alpha

    torch.autograd.gradcheck(fn, (verts.requires_grad_(True), cols.requires_grad_(True)), eps=1e-6, atol=1e-6, rtol=1e-4)
    # the gradient reaches depth: moving one face's depth changes the image
    v = verts.detach().clone().requires_grad_(True)
    gv = torch.autograd.grad(fn(v, cols.detach())[0].square().sum(), v)[0]
    assert gv[..., 2].abs().max() > 1e-4


# ---- sigma -> 0 against hard mode ------------------------------------------------------------------
@pytest.mark.parametrize("snap", [True, False], ids=["snapped", "raw"])
def test_small_sigma_matches_hard_mode(snap, device):
    """At sigma = 1e-6 px^2 the soft edge is ~0.001 px wide. The raster rule snaps vertices to
    1/256 px, which moves edges by up to ~0.002 px; so the exact comparison feeds both paths
    vertices already on that grid, and raw vertices get a slightly looser bound."""
    size = (128, 128)
    batch = mesh_fixture("icosphere", 5120, 128, 128, colors="face")
    if snap:
        v = batch.vertices.clone()
        v[..., :2] = torch.round(v[..., :2] * 256) / 256
        batch = TriangleBatch(v, batch.faces, face_colors=batch.face_colors)
    bound = 0.999 if snap else 0.998
    hard = py_gpu.select_backend("numpy").rasterize(batch, size).face_index[..., 0]
    s = RasterSettings(mode="soft", sigma=1e-6)
    on_device = batch.to(device, float64_on(device))
    frags = rasterize_soft(on_device, size, s)
    weights, w_bg = blend_weights(frags, s, BlendSettings())
    best = weights.argmax(-1, keepdim=True)
    argmax_face = torch.where(weights.gather(-1, best)[..., 0] > w_bg, frags.face_index.gather(-1, best)[..., 0], -1)
    argmax_face = argmax_face.cpu()
    frame = on_cpu(render_soft(on_device, size, settings=s))
    covered = hard >= 0
    assert int(covered.sum()) > 0.3 * 128 * 128
    for soft_face in (argmax_face, frame.face_index):
        agree = (soft_face == hard)[covered].double().mean()
        assert agree >= bound, float(agree)
        assert (soft_face[~covered] >= 0).double().mean() < 0.001
    assert ((frame.alpha[..., 0] > 0.5) == covered).double().mean() >= bound


# ---- public API routing -------------------------------------------------------------------------------
def test_public_render_and_rasterize_route_to_soft_mode(device):
    batch = random_scene(8, colors="vertex", device=device)
    kw = dict(sigma=1.5, faces_per_pixel=4)
    s = soft(**kw)
    frame = py_gpu.render(batch, (12, 16), mode="soft", background=(0.1, 0.2, 0.3), gamma=0.05, znear=0.0, zfar=1.0,
                          **kw)
    ref = render_soft(batch, (12, 16), background=(0.1, 0.2, 0.3), settings=s, blend_settings=blending(0.05))
    assert frame.image.device.type == device.type
    for a, b in [(frame.image, ref.image), (frame.alpha, ref.alpha)]:
        assert torch.allclose(a, b, atol=1e-12)
    assert torch.equal(frame.face_index, ref.face_index)
    frags = py_gpu.rasterize(batch, (12, 16), mode="soft", sigma=1.5, faces_per_pixel=4)
    assert_fragments_match(frags, rasterize_soft(batch, (12, 16), s))


def test_public_render_soft_gradcheck(device):
    batch = random_scene(22, faces=2, size=(4, 5), device=device)
    faces = batch.faces

    def fn(v, c):
        fr = py_gpu.render(TriangleBatch(v, faces, vertex_colors=c), (4, 5), mode="soft", sigma=3.0, gamma=0.2,
                           znear=0.0, zfar=1.0, faces_per_pixel=2, settings=RasterSettings(cutoff=1e-30))
        return fr.image, fr.alpha

    torch.autograd.gradcheck(fn, (batch.vertices.clone().requires_grad_(True), batch.vertex_colors.clone().requires_grad_(True)),
                             eps=1e-6, atol=1e-6, rtol=1e-4)


# ---- bad parameters ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kw,match", [(dict(sigma=0.0), "sigma"), (dict(sigma=-1.0), "sigma"),
                                      (dict(gamma=0.0), "gamma"), (dict(gamma=-0.5), "gamma"),
                                      (dict(faces_per_pixel=0), "faces_per_pixel")])
def test_bad_parameters_raise(kw, match):
    with pytest.raises(PyGpuValueError, match=match):
        (BlendSettings if "gamma" in kw else RasterSettings)(**kw)
    with pytest.raises(PyGpuValueError, match=match):
        py_gpu.render(random_scene(0), (12, 16), mode="soft", **kw)


def test_wrong_types_raise():
    with pytest.raises(PyGpuTypeError, match="TriangleBatch"):
        rasterize_soft("not a batch", (4, 4), soft())
    with pytest.raises(PyGpuTypeError, match="RasterSettings"):
        render_soft(random_scene(0), (12, 16), settings={"sigma": 1.0})
    with pytest.raises(PyGpuTypeError, match="size"):
        rasterize_soft(random_scene(0), "big", soft())


# ---- fitting --------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_fit_silhouette_recovers_vertices():
    ex = load_example("fit_silhouette")
    start_err = float((ex.START - ex.TARGET).norm(dim=1).mean())
    assert start_err > 15.0  # far away: no overlap between start and target
    _, err, _ = ex.fit(steps=150)
    assert err < 0.5, err


@pytest.mark.slow
def test_fit_cube_pose_recovers_rotation():
    ex = load_example("fit_cube_pose")
    omega, start_err, end_err, _ = ex.fit(steps=90, offset_deg=35.0)
    assert start_err >= 30.0
    assert end_err < 2.0, end_err


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_exp_normal_is_exp_except_where_the_result_is_not_normal(dtype):
    """exp_normal agrees with exp, value and gradient, wherever the result is at least e times the
    smallest normal number; below that (where torch's CPU exp takes its slow path) it is 0, and
    ``1 - exp_normal(x)`` is exactly 1 there, as ``1 - exp(x)`` is."""
    from py_gpu.raster.torch_soft import exp_normal

    floor = math.log(torch.finfo(dtype).tiny) + 1.0
    x = torch.cat([torch.linspace(floor, 5.0, 2001, dtype=dtype),
                   torch.tensor([floor - 1e-3, floor - 5.0, -1e4, -math.inf], dtype=dtype)]).requires_grad_(True)
    got = exp_normal(x)
    (grad,) = torch.autograd.grad(got.sum(), x)
    normal = x.detach() >= floor
    want = torch.exp(x.detach())
    assert torch.equal(got.detach()[normal], want[normal])
    assert torch.equal(grad[normal], want[normal])
    assert torch.equal(got.detach()[~normal], torch.zeros(int((~normal).sum()), dtype=dtype))
    assert torch.equal(grad[~normal], torch.zeros(int((~normal).sum()), dtype=dtype))
    assert torch.equal(1.0 - got.detach()[~normal], 1.0 - want[~normal])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lanes", [8, 16])
def test_runs_of_candidates_give_the_per_candidate_values_bit_for_bit(lanes, dtype):
    """The selection's runs (one face, one row, ``lanes`` columns) give each candidate that reaches
    its pixel the distance and depth that the per-candidate path computes, bit for bit, and the
    others (past the run's end, or beyond the reach) distance -inf and depth +inf; on triangles
    of every shape, degenerate ones among them, with pixels inside, outside and on edges."""
    from py_gpu.raster import torch_soft

    g = torch.Generator().manual_seed(lanes)
    n = 300
    corners = torch.rand(n, 3, 2, generator=g, dtype=dtype) * 40 - 5
    corners[:10, 2] = corners[:10, 0]  # degenerate: two corners equal
    corners[10:20, 2] = (corners[10:20, 0] + corners[10:20, 1]) / 2  # degenerate: collinear
    corners[20:30] = corners[20:30].round()  # pixel centres exactly on edges
    tri = torch.cat([corners, torch.rand(n, 3, 1, generator=g, dtype=dtype) * 3 + 1], -1)
    table = torch_soft._edge_table(tri)
    R = 4000
    face = torch.randint(0, n, (R,), generator=g)
    row = torch.randint(-3, 40, (R,), generator=g)
    col = torch.randint(-3, 40, (R,), generator=g)
    left = torch.randint(1, 2 * lanes, (R,), generator=g)
    dist = torch.empty(R, lanes, dtype=dtype)
    depth = torch.empty(R, lanes, dtype=dtype)
    reach = -9.0
    torch_soft._run_geometry(table, face, row, col, left, lanes, reach, dist, depth)
    lane = torch.arange(lanes)
    f, r, c = face[:, None].expand(R, lanes), row[:, None].expand(R, lanes), col[:, None] + lane
    d, z = torch_soft._miss_terms(table, f.reshape(-1), c.reshape(-1), r.reshape(-1), 1.0, reach, dist_only=True,
                                  depth=True)
    d, z = d.view(R, lanes), z.view(R, lanes)
    reached = (lane < left[:, None]) & (d >= reach)
    assert torch.equal(dist[reached], d[reached])
    assert torch.equal(depth[reached], z[reached])
    assert bool((dist[~reached] == -math.inf).all()) and bool((depth[~reached] == math.inf).all())
    assert bool((d > 0).any()) and bool(((d < reach) & (lane < left[:, None])).any())  # both kinds of lanes


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("K", [1, 2, 3, 4, 5, 8])
def test_slot_reductions_match_torch_bit_for_bit(K, dtype):
    """The blend's sums and maxima over the K slots (added slice by slice for short K) equal
    torch's reductions bit for bit, with gradients, on contiguous and strided slots, -inf, 0 and
    values of very different sizes among them."""
    from py_gpu.shading.blend import slot_max, slot_sum

    g = torch.Generator().manual_seed(10 * K + (dtype == torch.float64))
    x = torch.randn(3, 65, 2 * K, generator=g, dtype=dtype) * torch.logspace(-8, 8, 2 * K, dtype=dtype)
    x[0, :5, 0] = -math.inf
    x[1, :5] = 0.0
    for v in (x[..., :K].contiguous(), x[..., :K], x[..., ::2]):
        for keepdim in (False, True):
            assert torch.equal(slot_sum(v, keepdim), v.sum(-1, keepdim=keepdim))
            assert torch.equal(slot_max(v, keepdim), v.amax(-1, keepdim=keepdim))
        leaf = v.detach().clone().requires_grad_(True)
        up = torch.randn(leaf.shape[:-1], generator=g, dtype=dtype)
        assert torch.equal(torch.autograd.grad((slot_sum(leaf) * up).sum(), leaf)[0], up[..., None].expand_as(leaf))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("threads", [1, 2])
def test_sums_and_writes_at_indices_match_index_add_and_index_copy_bit_for_bit(threads, dtype):
    """The rasterizers' 1-D sums into pixels and vertices (add_at) equal index_add_'s bit for bit,
    with many duplicate indices and values of very different sizes and of both signs, and their
    writes at distinct positions (put_at) equal index_copy_'s, at one and at two threads, with
    gradients through the written values."""
    from py_gpu.raster._scatter import add_at, put_at

    g = torch.Generator().manual_seed(threads)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for size, n in ((7, 5000), (4096, 84_000), (100_000, 3000)):
            index = torch.randint(0, size, (n,), generator=g)
            values = torch.randn(n, generator=g, dtype=dtype) * torch.logspace(-6, 6, n, dtype=dtype)[torch.randperm(n, generator=g)]
            start = torch.randn(size, generator=g, dtype=dtype)
            got = add_at(start.clone(), index, values)
            assert torch.equal(got, start.clone().index_add_(0, index, values))
            assert not torch.equal(got, start)  # something was added
            at = torch.randperm(size, generator=g)[: min(n, size) // 2]
            leaf = values[: at.numel()].clone().requires_grad_(True)
            put = put_at(start.clone(), at, leaf)
            assert torch.equal(put, start.clone().index_copy_(0, at, leaf.detach()))
            up = torch.randn(size, generator=g, dtype=dtype)
            assert torch.equal(torch.autograd.grad((put * up).sum(), leaf)[0], up.index_select(0, at))
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("K", [1, 3, 4, 8])
def test_slot_weights_match_face_weights_bit_for_bit(K, dtype):
    """The forward pass's blend weights of the rasterizer's slot buffers (empty slots: face -1,
    distance 0, depth +inf) equal face_weights' masked ones bit for bit, pixels with no face,
    with one face and with K faces among them, and faces far behind the nearest (weight 0)."""
    from py_gpu.shading.blend import face_weights, slot_weights

    g = torch.Generator().manual_seed(K)
    shape = (2, 9, 7, K)
    filled = torch.rand(shape, generator=g) < 0.6
    filled[:, 0] = False  # a row of pixels with no face
    filled[:, 1, :, 1:] = False  # one face each
    filled[:, 2] = True
    face = torch.where(filled, torch.randint(0, 50, shape, generator=g), -1)
    dist = torch.where(filled, torch.randn(shape, generator=g, dtype=dtype) * 4, 0.0).to(dtype)
    depth = torch.where(filled, 2 + 2 * torch.rand(shape, generator=g, dtype=dtype), math.inf).to(dtype)
    depth[:, 3, :, -1] = torch.where(filled[:, 3, :, -1], 400.0, math.inf)  # far behind: weight 0
    zrange = torch.tensor([[2.0, 6.0], [1.5, 4.5]], dtype=dtype)
    s, b = soft(sigma=0.7, faces_per_pixel=K), BlendSettings(gamma=0.05)
    want = face_weights(Fragments(face, None, depth, dist), s, b, zrange)
    got = slot_weights(dist, depth, s.sigma, b.gamma, zrange)
    assert torch.equal(got, want)
    assert bool((want == 0).any()) and bool((want[:, 2].sum(-1) > 0.999).all())


@pytest.mark.parametrize("K", [1, 2, 3, 4, 8, 16])
def test_first_covering_slot_matches_the_reduction(K):
    """The nearest covering slot of each pixel, read from the K flags as the bytes of one integer
    (K of 2, 4, 8), equals the plain reduction over the slots for every pattern of flags, on
    contiguous and strided flags."""
    import itertools

    from py_gpu.shading.blend import _first_set

    g = torch.Generator().manual_seed(K)
    flags = torch.rand(257, K, generator=g) > 0.7
    if K <= 8:
        flags = torch.cat([flags, torch.tensor(list(itertools.product([False, True], repeat=K)))])
    for f in (flags.reshape(-1, 1, K), flags.t().contiguous().t()):
        slots = torch.arange(K)
        want = torch.where(f, slots, K).amin(-1, keepdim=True).clamp(max=K - 1)
        first, any_set = _first_set(f)
        assert torch.equal(first, want) and torch.equal(any_set, f.any(-1))


@pytest.mark.parametrize("width", [1, 2, 3, 8, 256, 255, 1000, 1 << 20])
def test_split_index_is_floor_division_and_remainder(width):
    """The row and column of flat indices (a shift and a mask for powers of two) equal torch's
    floor division and remainder for every int64, negative ones and the extremes included."""
    from py_gpu.raster._scatter import split_index

    g = torch.Generator().manual_seed(width)
    index = torch.cat((torch.randint(-(1 << 40), 1 << 40, (5000,), generator=g), torch.arange(-3 * width, 3 * width),
                       torch.tensor([torch.iinfo(torch.int64).min, torch.iinfo(torch.int64).max, 0, -1])))
    row, col = split_index(index, width)
    assert row.dtype == col.dtype == torch.int64
    assert torch.equal(row, torch.div(index, width, rounding_mode="floor"))
    assert torch.equal(col, torch.remainder(index, width))


@pytest.mark.parametrize("mode", ["soft", "hard"])
def test_inference_mode_renders_the_no_grad_frame(mode):
    """Under ``torch.inference_mode`` (whose tensors reach NumPy in ``flat_nonzero``) a render is
    the ``no_grad`` frame, bit for bit, on a scene large enough for every path's masks to go
    through NumPy."""
    g = torch.Generator().manual_seed(3)
    n = 300
    center = torch.rand(n, 1, 2, generator=g) * 64
    corners = center + (torch.rand(n, 3, 2, generator=g) * 2 - 1) * 12
    verts = torch.cat([corners, torch.rand(n, 1, 1, generator=g).expand(n, 3, 1)], -1).reshape(1, 3 * n, 3)
    batch = TriangleBatch(verts, torch.arange(3 * n).reshape(n, 3), vertex_colors=torch.rand(1, 3 * n, 3, generator=g))
    with torch.no_grad():
        want = py_gpu.render(batch, (64, 64), mode=mode)
    with torch.inference_mode():
        got = py_gpu.render(batch, (64, 64), mode=mode)
    assert int((want.face_index >= 0).sum()) > 2048
    for name in ("image", "alpha", "depth", "face_index"):
        assert torch.equal(getattr(got, name), getattr(want, name)), name


@pytest.mark.parametrize("size", [0, 1, 5, 2047, 2048, 5000, 310_000])
def test_flat_nonzero_gives_torchs_indices(size):
    """The indices of a mask's true elements (through NumPy for large CPU masks) are torch's:
    int64, ascending, for empty, all-false, all-true, random and structured masks, and for
    strided views of any shape."""
    from py_gpu.raster._scatter import NUMPY_NONZERO_FROM, flat_nonzero

    assert 1 < NUMPY_NONZERO_FROM < 310_000  # both paths are met
    g = torch.Generator().manual_seed(size)
    masks = [torch.zeros(size, dtype=torch.bool), torch.ones(size, dtype=torch.bool),
             torch.rand(size, generator=g) < 0.8, torch.rand(size, generator=g) < 0.05,
             (torch.arange(size) % 8) < 5, torch.rand(2 * size, generator=g).view(2, size)[1] > 0.5,
             (torch.rand(size, 3, generator=g) > 0.5).t()]
    for mask in masks:
        got = flat_nonzero(mask)
        want = torch.nonzero(mask.reshape(-1)).squeeze(1)
        assert got.dtype == torch.int64 and got.shape == want.shape
        assert torch.equal(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_over_blend_closed_form_backward_matches_autograd(dtype):
    """The "over" blend's closed-form backward pass (distances, depths, silhouette and color
    planes) agrees with autograd through the same expressions; the forward values are the same
    bits; gradcheck in float64. Empty slots, and slots far behind (weight exactly 0), included."""
    import importlib

    blend_module = importlib.import_module("py_gpu.shading.blend")
    g = torch.Generator().manual_seed(11)
    shape = (2, 5, 6, 4)
    fi = torch.randint(-1, 10, shape, generator=g)
    fi[0, 0] = -1  # a row of pixels with no face
    dist = (torch.randn(shape, generator=g, dtype=dtype) * 2).requires_grad_(True)
    depth = torch.rand(shape, generator=g, dtype=dtype) * 3 + 1
    depth[1, 1, :, 3] = 400.0  # far behind: no weight
    depth.requires_grad_(True)
    alpha = torch.rand(*shape[:3], 1, generator=g, dtype=dtype).requires_grad_(True)
    planes = [torch.rand(shape, generator=g, dtype=dtype).requires_grad_(True) for _ in range(3)]
    bg = torch.tensor([0.2, 0.3, 0.4], dtype=dtype)
    settings, blend_settings = RasterSettings(mode="soft", sigma=1.0, faces_per_pixel=4), BlendSettings(gamma=0.05)
    zrange = torch.tensor([[1.0, 4.0], [0.5, 400.0]], dtype=dtype)

    def frags(d, z, a):
        return Fragments(fi, None, z, d, None, a)

    inputs = [dist, depth, alpha, *planes]
    fast = blend_module.blend_planes(planes, frags(dist, depth, alpha), bg, settings, blend_settings, zrange)
    assert fast.grad_fn is not None and "OverBlend" in type(fast.grad_fn).__name__
    slow = blend_module._over(planes, frags(dist, depth, alpha), bg, settings, blend_settings, zrange, None)
    assert torch.equal(fast, slow)
    up = torch.randn(fast.shape, generator=g, dtype=dtype)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    for a, b in zip(torch.autograd.grad(fast, inputs, up), torch.autograd.grad(slow, inputs, up)):
        assert b.abs().max() > 1e-3
        assert torch.allclose(a, b, rtol=tol, atol=tol)
    if dtype == torch.float64:
        def f(d, z, a, p0, p1, p2):
            return blend_module.blend_planes([p0, p1, p2], frags(d, z, a), bg, settings, blend_settings, zrange)
        assert torch.autograd.gradcheck(f, tuple(inputs))
