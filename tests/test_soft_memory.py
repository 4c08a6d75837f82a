"""Soft mode within ``memory_budget``: tiles give the same results as one tile (bit for bit forward,
gradients to 1e-12 in float64), each tile's estimated working set fits the budget, requests that
cannot fit raise ``MemoryBudgetError`` before any work, and gradients do not change from run to
run with several threads."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import py_gpu
from py_gpu import BlendSettings, MemoryBudgetError, RasterSettings, TriangleBatch
from py_gpu.fixtures import mesh_fixture
from py_gpu.raster import torch_soft
from py_gpu.raster.torch_soft import rasterize_soft
from py_gpu.shading import composite
from py_gpu.shading.composite import composite_soft, render_soft, shade_soft, slot_colors

BIG = 2**34  # one tile per batch element
GRAD_TOL = 1e-12


def scene(seed: int, *, faces: int = 10, size=(20, 24), batch: int = 2, clip: bool = False,
          colors: str = "vertex", dtype=torch.float64) -> TriangleBatch:
    """Random overlapping triangles, partly off screen, at distinct random depths."""
    g = torch.Generator().manual_seed(seed)
    H, W = size
    V = 3 * faces
    if clip:
        w = 1.0 + torch.rand(batch, V, 1, generator=g, dtype=torch.float64)
        ndc = torch.rand(batch, V, 2, generator=g, dtype=torch.float64) * 2.4 - 1.2
        z = torch.rand(batch, V, 1, generator=g, dtype=torch.float64)
        verts = torch.cat((ndc * w, z * w, w), dim=-1)
    else:
        xy = torch.rand(batch, V, 2, generator=g, dtype=torch.float64) * torch.tensor([W + 6.0, H + 6.0]) - 3.0
        z = 0.1 + 0.8 * torch.rand(batch, V, 1, generator=g, dtype=torch.float64)
        verts = torch.cat((xy, z), dim=-1)
    fcs = torch.arange(V).reshape(faces, 3)
    if colors == "face":
        return TriangleBatch(verts.to(dtype), fcs, face_colors=torch.rand(batch, faces, 3, generator=g).to(dtype))
    return TriangleBatch(verts.to(dtype), fcs, vertex_colors=torch.rand(batch, V, 3, generator=g).to(dtype))


def leaves(batch: TriangleBatch) -> tuple[TriangleBatch, list[torch.Tensor]]:
    """A copy of ``batch`` whose vertices and colors are fresh leaves that require grad."""
    v = batch.vertices.detach().clone().requires_grad_(True)
    if batch.face_colors is not None:
        c = batch.face_colors.detach().clone().requires_grad_(True)
        return TriangleBatch(v, batch.faces, face_colors=c), [v, c]
    c = batch.vertex_colors.detach().clone().requires_grad_(True)
    return TriangleBatch(v, batch.faces, vertex_colors=c), [v, c]


def upstream(tensors, seed: int = 3) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(t.shape, generator=g, dtype=torch.float64).to(t.dtype) for t in tensors]


def soft(budget: int, **kw) -> RasterSettings:
    base = dict(mode="soft", sigma=2.0, faces_per_pixel=5, memory_budget=budget)
    base.update(kw)
    return RasterSettings(**base)


@pytest.fixture(autouse=True)
def one_thread():
    """Run on one intra-op thread: results do not depend on the thread count (the last test
    checks two), and the many small tiles here stay quick on a busy machine."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def tiles_seen(monkeypatch):
    """Every tile the selection runs, with its plan: ``[(plan, tile)]``."""
    seen = []
    original = torch_soft.FaceSelector.__call__

    def spy(self, tile):
        seen.append((self.plan, tile))
        return original(self, tile)

    monkeypatch.setattr(torch_soft.FaceSelector, "__call__", spy)
    return seen


def forward_tiles(seen) -> list[tuple]:
    """The tiles of the first pass over the image (the backward pass may select again)."""
    plan = seen[0][0]
    return [tile for _, tile in seen[: len(plan.tiles)]]


def assert_covers_once(tiles, B: int, H: int, W: int) -> None:
    count = torch.zeros(B, H, W, dtype=torch.int64)
    for b, r0, r1, c0, c1 in tiles:
        count[b, r0:r1, c0:c1] += 1
    assert bool((count == 1).all())


# ---- tiles == one tile ---------------------------------------------------------------------------
@pytest.mark.parametrize("clip", [False, True], ids=["screen", "clip"])
@pytest.mark.parametrize("budget", [100_000, 400_000], ids=["row-pieces", "bands"])
def test_rasterize_tiles_match_one_tile(clip, budget, tiles_seen):
    base = scene(1, clip=clip)
    size = (20, 24)
    results = []
    for b in (BIG, budget):
        tiles_seen.clear()
        batch, params = leaves(base)
        frags = rasterize_soft(batch, size, soft(b))
        outs = [frags.bary, frags.depth.nan_to_num(posinf=0.0), frags.dist] + ([frags.screen_bary] if clip else [])
        grads = torch.autograd.grad(outs, params[:1], upstream(outs))
        results.append((frags, grads, forward_tiles(tiles_seen)))
    (one, g_one, t_one), (many, g_many, t_many) = results
    assert len(t_one) == 2 and len(t_many) > 8
    assert_covers_once(t_many, 2, *size)
    if budget == 100_000:
        assert any(c1 - c0 < size[1] for _, _, _, c0, c1 in t_many)  # pieces of rows
    assert one.mask.sum(-1).max() >= 3  # overlaps: the order of K matters
    for name in ("face_index", "bary", "depth", "dist") + (("screen_bary",) if clip else ()):
        assert torch.equal(getattr(one, name), getattr(many, name)), name
    assert g_one[0].abs().max() > 1e-3
    assert torch.allclose(g_one[0], g_many[0], rtol=GRAD_TOL, atol=GRAD_TOL)


@pytest.mark.parametrize("clip,colors", [(False, "vertex"), (False, "face"), (True, "vertex")])
def test_render_tiles_match_one_tile(clip, colors, tiles_seen, monkeypatch):
    """``py_gpu.render``: one tile per element, many tiles keeping the selected faces for the
    backward pass, and many tiles that select them again there: the same frame and gradients."""
    size = (14, 18)
    base = scene(2, clip=clip, colors=colors, size=size)
    results = []
    for budget, share in ((BIG, 4), (400_000, 4), (400_000, 10**9)):
        monkeypatch.setattr(torch_soft, "KEEP_SHARE", share)
        tiles_seen.clear()
        batch, params = leaves(base)
        frame = py_gpu.render(batch, size, mode="soft", sigma=2.0, gamma=0.05, faces_per_pixel=5,
                              memory_budget=budget, background=(0.2, 0.3, 0.4))
        outs = [frame.image, frame.alpha, frame.depth.nan_to_num(posinf=0.0)]
        grads = torch.autograd.grad(outs, params, upstream(outs))
        plan = tiles_seen[0][0]
        results.append((frame, grads, plan, len(tiles_seen)))
    (one, g_one, p_one, _), (kept, g_kept, p_kept, n_kept), (again, g_again, p_again, n_again) = results
    assert len(p_one.tiles) == 2 and len(p_kept.tiles) > 8 and p_again.tiles == p_kept.tiles
    assert p_kept.keep_index and n_kept == len(p_kept.tiles)  # backward reused the kept face indices
    assert not p_again.keep_index and n_again == 2 * len(p_again.tiles)  # backward selected again
    for frame in (kept, again):
        for name in ("image", "alpha", "depth", "face_index"):
            assert torch.equal(getattr(one, name), getattr(frame, name)), name
    assert float(one.alpha.detach().mean()) > 0.3
    for grads in (g_kept, g_again):
        for a, b in zip(g_one, grads):
            assert a.abs().max() > 1e-3
            assert torch.allclose(a, b, rtol=GRAD_TOL, atol=GRAD_TOL)


@pytest.mark.parametrize("clip,colors", [(False, "vertex"), (False, "face"), (True, "vertex")])
@pytest.mark.parametrize("loss", ["image", "image+alpha"])
def test_image_backward_skips_weightless_slots_with_the_same_gradients(clip, colors, loss, tiles_seen, monkeypatch):
    """A backward pass for the image (and alpha) alone evaluates again only the slots whose blend
    weight is not exactly 0 (at the default gamma most faces behind the nearest one): the
    gradients equal those of one tile with autograd through every slot."""
    size = (14, 18)
    base = scene(4, faces=14, clip=clip, colors=colors, size=size)
    dropped = []
    original = composite._weighted_slots

    def spy(face_index, known, *args):
        out = original(face_index, known, *args)
        dropped.append(int((face_index >= 0).sum() - (out[0] >= 0).sum()))
        return out

    monkeypatch.setattr(composite, "_weighted_slots", spy)
    recomputed = []  # the slots with weight are taken from the forward pass's shading, not recomputed
    real_weighted = composite.weighted
    monkeypatch.setattr(composite, "weighted", lambda *args: recomputed.append(1) or real_weighted(*args))
    results = []
    for budget in (BIG, 400_000):
        tiles_seen.clear()
        batch, params = leaves(base)
        frame = py_gpu.render(batch, size, mode="soft", sigma=2.0, faces_per_pixel=5, memory_budget=budget,
                              background=(0.2, 0.3, 0.4))
        outs = [frame.image] + ([frame.alpha] if loss == "image+alpha" else [])
        results.append(torch.autograd.grad(outs, params, upstream(outs)))
        if budget == BIG:
            assert not dropped  # autograd through every slot, in one tile
    plan = tiles_seen[0][0]
    assert plan.keep_index and not plan.direct and len(plan.tiles) > 8
    assert sum(dropped) > 0  # some slots had no weight and were skipped
    assert not recomputed
    for a, b in zip(*results):
        assert a.abs().max() > 1e-3
        assert torch.allclose(a, b, rtol=GRAD_TOL, atol=GRAD_TOL)


@pytest.mark.parametrize("spread", [False, True], ids=["corner", "whole-frame"])
def test_render_runs_tiles_with_autograd_when_the_filled_slots_fit(spread, tiles_seen, monkeypatch):
    """A plan that keeps the face indices but is not ``direct`` (it counts every slot of every
    pixel) selects every tile first; when the slots the tiles fill fit, the tiles then run with
    autograd on, once (faces in a corner of the frame), and otherwise through the tile-by-tile
    backward pass (faces everywhere). Either way: the frame and gradients of one tile."""
    size = (40, 48)
    base = scene(4, size=size if spread else (10, 12))  # the corner scene reaches about 16 x 18 px
    ran = []
    original = torch_soft.TileLoop.forward_direct

    def spy(self, inputs, chosen=None):
        ran.append(chosen is not None)
        return original(self, inputs, chosen)

    monkeypatch.setattr(torch_soft.TileLoop, "forward_direct", spy)
    results = []
    for budget in (BIG, 16_000_000):
        tiles_seen.clear()
        ran.clear()
        batch, params = leaves(base)
        frame = py_gpu.render(batch, size, mode="soft", sigma=2.0, faces_per_pixel=5, memory_budget=budget)
        outs = [frame.image, frame.alpha]
        results.append((frame, torch.autograd.grad(outs, params, upstream(outs)), tiles_seen[0][0], list(ran),
                        len(tiles_seen)))
    (one, g_one, p_one, ran_one, _), (tiled, g_tiled, plan, ran_tiled, selected) = results
    assert p_one.direct and ran_one == [False]
    assert not plan.direct and plan.keep_index and len(plan.tiles) > 2
    assert selected == len(plan.tiles)  # each tile selected once, before any tile ran
    assert ran_tiled == ([] if spread else [True])
    for name in ("image", "alpha", "depth", "face_index"):
        assert torch.equal(getattr(one, name), getattr(tiled, name)), name
    assert float(one.alpha.detach().mean()) > (0.3 if spread else 0.02)
    for a, b in zip(g_one, g_tiled):
        assert a.abs().max() > 1e-3
        assert torch.allclose(a, b, rtol=GRAD_TOL, atol=GRAD_TOL)


def test_shade_soft_tiles_match_whole_frame_composite():
    """Blending given fragments tile by tile (the front end's path after near-plane clipping)
    gives the whole-frame composite's values and gradients."""
    base = scene(3, clip=True)
    size = (20, 24)
    s, bs = soft(BIG), BlendSettings(gamma=0.05)
    frags = rasterize_soft(base, size, s)
    results = []
    for shade in ("whole", "tiles"):
        bary = frags.bary.detach().clone().requires_grad_(True)
        dist = frags.dist.detach().clone().requires_grad_(True)
        part = type(frags)(frags.face_index, bary, frags.depth, dist, frags.screen_bary)
        batch, params = leaves(base)
        if shade == "whole":
            frame, _ = composite_soft(slot_colors(batch, part), part, (0.1, 0.2, 0.3), s, bs)
        else:
            frame = shade_soft(batch, part, (0.1, 0.2, 0.3), soft(20_000), bs)
        outs = [frame.image, frame.alpha]
        results.append((frame, torch.autograd.grad(outs, [bary, dist, params[1]], upstream(outs))))
    (whole, g_whole), (tiled, g_tiled) = results
    for name in ("image", "alpha", "depth", "face_index"):
        assert torch.equal(getattr(whole, name), getattr(tiled, name)), name
    for a, b in zip(g_whole, g_tiled):
        assert a.abs().max() > 1e-3
        assert torch.allclose(a, b, rtol=GRAD_TOL, atol=GRAD_TOL)


def test_mesh_render_in_tiles_matches_one_tile(tiles_seen, monkeypatch):
    """A closed float32 mesh, K smaller than the faces reaching a pixel, each tile's faces in
    several groups of spans and chunks of candidates: the same frame, bit for bit."""
    batch = mesh_fixture("icosphere", 1280, 48, 48, dtype=torch.float32)
    groups = []
    original = torch_soft.FaceSelector._group

    def spy(self, tri, face, *rest):
        groups.append(face.numel())
        return original(self, tri, face, *rest)

    monkeypatch.setattr(torch_soft.FaceSelector, "_group", spy)
    frames = []
    for budget in (BIG, 2_000_000):
        tiles_seen.clear()
        groups.clear()
        if budget != BIG:  # costlier spans: a few dozen per group
            monkeypatch.setattr(torch_soft, "_SPAN_BYTES", 16_000)
        frames.append(py_gpu.render(batch, (48, 48), mode="soft", faces_per_pixel=4, sigma=0.3, memory_budget=budget))
    plan = tiles_seen[0][0]
    assert len(plan.tiles) > 4 and plan.max_spans < 40
    assert len(groups) > 2 * len(plan.tiles)
    assert float(frames[0].alpha.mean()) > 0.2 and bool((frames[0].face_index >= 0).any())
    for name in ("image", "alpha", "depth", "face_index"):
        assert torch.equal(getattr(frames[0], name), getattr(frames[1], name)), name


# ---- every tile fits the budget ----------------------------------------------------------------------
@pytest.mark.parametrize("budget", [1_000_000, 4_000_000, 16_000_000])
@pytest.mark.parametrize("entry", ["rasterize", "render"])
def test_each_tile_working_set_fits_the_budget(budget, entry, tiles_seen):
    batch = mesh_fixture("icosphere", 1280, 64, 64, dtype=torch.float32)
    size, K = (64, 64), 8
    if entry == "rasterize":
        py_gpu.rasterize(batch, size, mode="soft", faces_per_pixel=K, memory_budget=budget)
    else:
        py_gpu.render(batch, size, mode="soft", faces_per_pixel=K, memory_budget=budget)
    plan = tiles_seen[0][0]
    tiles = forward_tiles(tiles_seen)
    assert tiles == list(plan.tiles)
    assert_covers_once(tiles, 1, *size)
    assert plan.budget == budget and plan.faces_per_pixel == K
    for tile in tiles:
        assert plan.working_set(tile) <= budget
    assert len(tiles) > 1
    # a bigger budget never needs more tiles
    bigger = torch_soft.plan_tiles("test", batch=1, size=size, faces=1280, faces_per_pixel=K, dtype=torch.float32,
                                   budget=2 * budget, slot_bytes=plan.slot_bytes, returned=plan.returned)
    assert len(bigger.tiles) <= len(tiles)


def test_span_chunks_fit_the_plan(monkeypatch):
    """Within a tile, each chunk of candidates stays within ``plan.max_frags``."""
    seen = []
    original = torch_soft._chunk

    def spy(tri, face, row, col0, span_w, n, *rest, **kw):
        assert n == int(span_w.sum())
        seen.append(n)
        return original(tri, face, row, col0, span_w, n, *rest, **kw)

    monkeypatch.setattr(torch_soft, "_chunk", spy)
    batch = mesh_fixture("icosphere", 1280, 64, 64, dtype=torch.float32)
    s = RasterSettings(mode="soft", faces_per_pixel=8, memory_budget=1_000_000)
    plan = torch_soft.plan_tiles("test", batch=1, size=(64, 64), faces=1280, faces_per_pixel=8, dtype=torch.float32,
                                 budget=s.memory_budget, returned=0,
                                 slot_bytes=torch_soft.gather_bytes_per_slot(torch.float32, False))
    with torch.no_grad():
        rasterize_soft(batch, (64, 64), s)
    assert len(seen) > 3
    assert all(dense <= plan.max_frags for dense in seen)


# ---- requests that cannot fit: refused before any work -------------------------------------------------
@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if any tile, span chunk or tile loop starts."""

    def forbidden(*args, **kwargs):
        raise AssertionError("soft mode started working on a request it should have refused")

    monkeypatch.setattr(torch_soft.FaceSelector, "__init__", forbidden)
    monkeypatch.setattr(torch_soft.TileLoop, "__init__", forbidden)
    monkeypatch.setattr(torch_soft, "_chunk", forbidden)
    monkeypatch.setattr(torch_soft, "gather_tile", forbidden)


@pytest.mark.parametrize("entry", ["rasterize", "render"])
def test_huge_faces_per_pixel_is_refused_before_allocating(entry, no_work):
    batch = mesh_fixture("icosphere", 1280, 32, 32, dtype=torch.float32)
    fn = py_gpu.rasterize if entry == "rasterize" else py_gpu.render
    with pytest.raises(MemoryBudgetError, match="faces_per_pixel") as err:
        fn(batch, (32, 32), mode="soft", faces_per_pixel=10**6)
    assert "memory_budget" in str(err.value)


@pytest.mark.parametrize("entry", ["rasterize", "render"])
def test_huge_frame_is_refused_before_allocating(entry, no_work):
    batch = mesh_fixture("icosphere", 1280, 512, 512, dtype=torch.float32)
    fn = py_gpu.rasterize if entry == "rasterize" else py_gpu.render
    with pytest.raises(MemoryBudgetError, match="memory_budget") as err:
        fn(batch, (16384, 16384), mode="soft")
    message = str(err.value)
    assert "16384" in message and "smaller" in message


def test_refusal_names_the_budget_that_would_do():
    size = (6, 8)
    batch = scene(4, batch=1, size=size)
    with pytest.raises(MemoryBudgetError, match="raise memory_budget to at least") as err:
        rasterize_soft(batch, size, soft(20_000, faces_per_pixel=60))
    assert "one pixel" in str(err.value)
    need = int(str(err.value).split("at least ")[-1].split(" ")[0])
    assert rasterize_soft(batch, size, soft(need, faces_per_pixel=60)).face_index.shape == (1, *size, 60)
    with pytest.raises(MemoryBudgetError, match="returned tensors") as err:
        rasterize_soft(batch, size, soft(1_000))
    need = int(str(err.value).split("at least ")[-1].split(" ")[0])
    assert rasterize_soft(batch, size, soft(need)).face_index.shape == (1, *size, 5)


# ---- deterministic gradients with threads ----------------------------------------------------------------
def big_triangles(dtype, clip: bool) -> tuple[TriangleBatch, list[torch.Tensor]]:
    """A few large overlapping triangles: every vertex is shared by thousands of K slots, so any
    accumulation whose order depends on threads would show in its gradient."""
    g = torch.Generator().manual_seed(1)
    H = W = 96
    v = torch.rand(1, 12, 3, generator=g, dtype=torch.float64) * torch.tensor([W * 1.6, H * 1.6, 0.8])
    v = v - torch.tensor([W * 0.3, H * 0.3, -0.1])
    if clip:  # the same screen positions in clip space, at w in [1, 2]
        w = 1.0 + torch.rand(1, 12, 1, generator=g, dtype=torch.float64)
        ndc = torch.stack((v[..., 0] / W * 2 - 1, 1 - v[..., 1] / H * 2), -1)
        v = torch.cat((ndc * w, v[..., 2:] * w, w), -1)
    c = torch.rand(1, 12, 3, generator=g, dtype=torch.float64)
    return leaves(TriangleBatch(v.to(dtype), torch.arange(12).reshape(4, 3), vertex_colors=c.to(dtype)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("entry,clip", [("render", False), ("render", True), ("rasterize", False)])
def test_gradients_are_identical_run_to_run_with_threads(dtype, entry, clip):
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        runs = []
        for _ in range(4):
            batch, params = big_triangles(dtype, clip)
            if entry == "render":
                frame = py_gpu.render(batch, (96, 96), mode="soft", faces_per_pixel=4, sigma=2.0, gamma=0.05)
                outs = [frame.image, frame.alpha]
            else:
                frags = py_gpu.rasterize(batch, (96, 96), mode="soft", faces_per_pixel=4, sigma=2.0)
                outs, params = [frags.bary, frags.dist], params[:1]
            runs.append(torch.autograd.grad(outs, params, upstream(outs)))
    finally:
        torch.set_num_threads(previous)
    assert runs[0][0].abs().max() > 1e-3
    for run in runs[1:]:
        for a, b in zip(runs[0], run):
            assert torch.equal(a, b)


@pytest.mark.parametrize("budget", [BIG, 200_000], ids=["one-tile", "tiled"])
@pytest.mark.parametrize("clip", [False, True], ids=["screen", "clip"])
def test_render_without_gradients_reuses_the_selections_values(budget, clip, monkeypatch):
    """Without autograd the tiles take the selected slots' distance and depth from the selection
    and evaluate only their colors (no slot's geometry, nothing gathered to the filled slots),
    and those only at the slots with a blend weight; the frame is, bit for bit, the one
    shade_soft gives on rasterize_soft's fragments (which evaluate every slot's geometry and
    color), with compacted tiles too."""
    calls, skipped = [], []
    original_gather, original_colors = composite.gather_tile_planes, composite._slot_colors_at

    def gather(*args, **kwargs):
        calls.append("gather_tile_planes")
        return original_gather(*args, **kwargs)

    def colors(*args, **kwargs):
        calls.append("colors")
        face_index, live = args[5], args[8]
        skipped.append(int((face_index >= 0).sum() - live.sum()))
        return original_colors(*args, **kwargs)

    monkeypatch.setattr(composite, "gather_tile_planes", gather)
    monkeypatch.setattr(composite, "_slot_colors_at", colors)
    base = scene(5, clip=clip, faces=14, size=(20, 24))
    s = soft(budget, sigma=2.0, faces_per_pixel=4)
    bg = (0.2, 0.3, 0.4)
    with torch.no_grad():
        plain = render_soft(base, (20, 24), background=bg, settings=s)
        reused = list(calls)
        reference = shade_soft(base, rasterize_soft(base, (20, 24), s), bg, s, BlendSettings())
    assert reused and set(reused) == {"colors"}
    assert sum(skipped[:len(reused)]) > 0  # filled slots without weight got no color
    for name in ("image", "alpha", "depth", "face_index"):
        assert torch.equal(getattr(plain, name), getattr(reference, name)), name
    assert float(plain.alpha.mean()) > 0.05


def _deep_scene(dtype=torch.float32) -> TriangleBatch:
    """Small triangles over a 40 x 48 frame, eight more stacked over one corner (its pixels fill
    eight slots) and one behind all over the whole frame."""
    g = torch.Generator().manual_seed(11)
    faces = 24  # small triangles scattered over the frame
    center = torch.rand(faces, 1, 2, generator=g, dtype=torch.float64) * torch.tensor([48.0, 40.0])
    xy = (center + (torch.rand(faces, 3, 2, generator=g, dtype=torch.float64) * 2 - 1) * 3.0).reshape(1, -1, 2)
    stack = torch.tensor([[[4.0, 4.0], [7.0, 4.0], [4.0, 7.0]]], dtype=torch.float64).expand(8, 3, 2).reshape(1, 24, 2)
    # eight small triangles stacked over one corner (deep pixels there), and one behind all, over
    # the whole frame (every pixel is reached: the tile is shaded in rows)
    back = torch.tensor([[[-10.0, -10.0], [150.0, -10.0], [-10.0, 150.0]]], dtype=torch.float64)
    xy = torch.cat([xy, stack, back], 1)
    z = 0.1 + 0.8 * torch.rand(1, xy.shape[1], 1, generator=g, dtype=torch.float64)
    z[:, -3:] = 0.95
    verts = torch.cat([xy, z], -1).to(dtype)
    return TriangleBatch(verts, torch.arange(verts.shape[1]).reshape(-1, 3),
                         vertex_colors=torch.rand(1, verts.shape[1], 3, generator=g).to(dtype))


@pytest.mark.parametrize("K", [1, 4, 8])
def test_slot_counts_read_from_single_slots_match_the_counts(K):
    """The deepest pixel's slot count (_occupied) and the pixels filling more than half the K
    slots (_shallow), read from single slots of packed slots (kept faces fill the first ones),
    are what counting the filled slots of every pixel gives: tiles with no face, with the last
    slot filled somewhere and with it empty everywhere."""
    g = torch.Generator().manual_seed(K)
    for top in (0, 1, K // 2, K // 2 + 1, K):
        count = torch.randint(0, top + 1, (33, 17), generator=g)
        if top:
            count[5, 3] = top  # the deepest pixel has exactly `top`
        fi = torch.where(torch.arange(K) < count[..., None], torch.randint(0, 99, (33, 17, K), generator=g), -1)
        used = int((fi >= 0).sum(-1).max())
        assert composite._occupied(fi).shape[-1] == max(1, used)
        known = [torch.rand(33, 17, K, generator=g), torch.rand(33, 17, K, generator=g)]
        with pytest.MonkeyPatch.context() as m:
            m.setattr(composite, "_DEEP_SHARE", 1.0)  # split whenever a pixel is deep
            out_fi, out_known, deep = composite._shallow(fi, known)
        over = torch.nonzero((fi >= 0).sum(-1).view(-1) > K // 2).squeeze(1)
        if K < 4 or over.numel() == 0:
            assert deep is None and out_fi is fi
        else:
            at, deep_fi, deep_known = deep
            assert torch.equal(at, over) and torch.equal(deep_fi, fi.view(-1, 1, K)[over])
            assert torch.equal(out_fi, fi[..., :K // 2]) and torch.equal(deep_known[0], known[0].view(-1, 1, K)[over])


def _spy_shallow(monkeypatch) -> list:
    """Whether each call of composite._shallow split the tile's deep pixels off."""
    split = []
    original = composite._shallow

    def spy(face_index, known):
        out = original(face_index, known)
        split.append(out[2] is not None)
        return out

    monkeypatch.setattr(composite, "_shallow", spy)
    return split


def test_deep_pixels_shaded_apart_give_the_same_frame(monkeypatch):
    """Without autograd, a tile whose few deep pixels fill more than half of the K slots shades
    them on their own, K wide, and the rest only half as wide: the frame is bit for bit the one
    shade_soft gives on rasterize_soft's fragments."""
    base = _deep_scene()
    s = soft(BIG, sigma=1.0, faces_per_pixel=8)
    blend = BlendSettings(gamma=0.05)  # the stacked faces all keep weight
    split = _spy_shallow(monkeypatch)
    with torch.no_grad():
        frame = render_soft(base, (40, 48), background=(0.2, 0.3, 0.4), settings=s, blend_settings=blend)
        reference = shade_soft(base, rasterize_soft(base, (40, 48), s), (0.2, 0.3, 0.4), s, blend)
    assert split == [True]
    for name in ("image", "alpha", "depth", "face_index"):
        assert torch.equal(getattr(frame, name), getattr(reference, name)), name


def test_deep_pixels_shaded_apart_in_the_image_backward_give_the_same_gradients(monkeypatch):
    """The image backward pass splits the deep pixels off the same way (after dropping the slots
    without weight): the gradients equal those of the pass that shades every pixel K wide."""
    base = _deep_scene(torch.float64)
    call = torch_soft.TileLoop.__call__

    def recompute(loop, *inputs):  # one tile, evaluated again in the backward pass from the kept faces
        loop.plan = dataclasses.replace(loop.plan, direct=False, keep_index=True)
        return call(loop, *inputs)

    monkeypatch.setattr(torch_soft.TileLoop, "__call__", recompute)
    monkeypatch.setattr(torch_soft.TileLoop, "_fits_direct", lambda loop, chosen: False)
    results = []
    for splitting in (True, False):
        split = _spy_shallow(monkeypatch)
        if not splitting:
            monkeypatch.setattr(composite, "_shallow", lambda face_index, known: (face_index, known, None))
        batch, params = leaves(base)
        frame = py_gpu.render(batch, (40, 48), mode="soft", sigma=1.0, gamma=0.05, faces_per_pixel=8)
        results.append(torch.autograd.grad([frame.image], params, upstream([frame.image])))
        if splitting:
            assert split[-1]  # the backward pass's tile was split
    for a, b in zip(*results):
        assert a.abs().max() > 1e-3
        assert torch.allclose(a, b, rtol=GRAD_TOL, atol=GRAD_TOL)
