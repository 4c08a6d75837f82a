"""Soft mode skips the faces that cannot change a pixel: behind its K kept faces where its alpha
is exactly 1. The results are those of evaluating every candidate, bit for bit forward, and the
gradients agree to far below rounding (alpha has no gradient where it is exactly 1)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, strategies as st

import py_gpu
from py_gpu import TriangleBatch
from py_gpu.raster import torch_soft
from py_gpu.raster.soft_oracle import rasterize_soft_oracle
from py_gpu.raster.torch_soft import rasterize_soft
from helpers import float64_on, on_cpu
from strategies import fixture_safe_settings
from test_soft import assert_fragments_match, soft

SIZE = (24, 32)


def stacked_scene(faces: int = 80, seed: int = 3, device=torch.device("cpu"), dtype=torch.float64) -> TriangleBatch:
    """Large slanted triangles over the frame at random depths: most of its pixels lie deep
    inside several of them (alpha exactly 1), under many more faces than K; near the right edge
    fewer reach, and alpha stays below 1."""
    g = torch.Generator().manual_seed(seed)
    center = torch.tensor([11.0, 12.0]) + (torch.rand(faces, 1, 2, generator=g, dtype=torch.float64) * 2 - 1) * 3.0
    corners = center + (torch.rand(faces, 3, 2, generator=g, dtype=torch.float64) * 2 - 1) * 24.0
    depth = torch.rand(faces, 1, 1, generator=g, dtype=torch.float64) + 0.3 * torch.rand(faces, 3, 1, generator=g,
                                                                                         dtype=torch.float64)
    verts = torch.cat([corners, depth], -1).reshape(1, 3 * faces, 3)
    colors = torch.rand(1, 3 * faces, 3, generator=g, dtype=torch.float64)
    return TriangleBatch(verts.to(device, dtype), torch.arange(3 * faces, device=device).reshape(faces, 3),
                         vertex_colors=colors.to(device, dtype))


def covered_scene(device=torch.device("cpu"), dtype=torch.float64) -> TriangleBatch:
    """Four triangles far larger than the frame near the camera, whose right edges run near x = 20
    (the frame's pixels left of about x = 15 lie deep inside all of them, alpha exactly 1), and
    behind them sixty small ones scattered over the frame."""
    g = torch.Generator().manual_seed(4)
    big = torch.tensor([[-300.0, -300.0], [20.0, -300.0], [20.0, 300.0]], dtype=torch.float64)
    big = torch.cat([torch.cat([big + torch.tensor([0.3 * i, 0.0], dtype=torch.float64),
                                torch.full((3, 1), 0.1 + 0.02 * i, dtype=torch.float64)], -1) for i in range(4)])
    center = torch.rand(60, 1, 2, generator=g, dtype=torch.float64) * torch.tensor([32.0, 24.0], dtype=torch.float64)
    small = center + (torch.rand(60, 3, 2, generator=g, dtype=torch.float64) * 2 - 1) * 3.0
    depth = 0.8 + 0.2 * torch.rand(60, 3, 1, generator=g, dtype=torch.float64)
    verts = torch.cat([big, torch.cat([small, depth], -1).reshape(-1, 3)])[None]
    colors = torch.rand(1, verts.shape[1], 3, generator=g, dtype=torch.float64)
    return TriangleBatch(verts.to(device, dtype), torch.arange(verts.shape[1], device=device).reshape(-1, 3),
                         vertex_colors=colors.to(device, dtype))


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of a few faces each, so that later chunks meet pixels that are done."""
    monkeypatch.setattr(torch_soft, "_CHUNK_CANDIDATES", 2048)
    monkeypatch.setattr(torch_soft, "_SATURATION_CHECK", 1)


def _counting(monkeypatch) -> dict:
    """Count the candidates whose distance is evaluated (forward selection and silhouette)."""
    seen = {"evaluated": 0}
    real = torch_soft._miss_terms

    real_runs = torch_soft._run_geometry

    def spy(table, face, *args, **kw):
        seen["evaluated"] += face.numel()
        return real(table, face, *args, **kw)

    def spy_runs(table, face, row, col, left, lanes, *args):  # runs of candidates: those in their span
        seen["evaluated"] += int(left.clamp(max=lanes).sum())
        return real_runs(table, face, row, col, left, lanes, *args)

    monkeypatch.setattr(torch_soft, "_miss_terms", spy)
    monkeypatch.setattr(torch_soft, "_run_geometry", spy_runs)
    return seen


def _unpruned(monkeypatch):
    """No pixel ever counts as done: every candidate is evaluated."""
    monkeypatch.setattr(torch_soft, "_saturated", lambda dtype: math.inf)


def test_the_scene_is_saturated():
    alpha = rasterize_soft_oracle(stacked_scene(), SIZE, soft(sigma=1.0, faces_per_pixel=4)).alpha
    done = float((alpha == 1.0).double().mean())
    assert 0.3 < done < 0.95, done


def test_selection_skips_hidden_faces_and_keeps_the_same_fragments(monkeypatch, device, small_chunks):
    dtype = float64_on(device)
    batch = stacked_scene(device=device, dtype=dtype)
    s = soft(sigma=1.0, faces_per_pixel=4)
    seen = _counting(monkeypatch)
    fast = on_cpu(rasterize_soft(batch, SIZE, s))
    pruned = seen["evaluated"]
    with monkeypatch.context() as m:
        _unpruned(m)
        seen["evaluated"] = 0
        full = on_cpu(rasterize_soft(batch, SIZE, s))
    assert pruned < 0.6 * seen["evaluated"]  # most candidates lie behind pixels that are done
    assert torch.equal(fast.face_index, full.face_index)
    for name in ("dist", "bary", "depth", "alpha"):
        assert torch.equal(getattr(fast, name), getattr(full, name)), name
    if dtype == torch.float64:
        assert_fragments_match(fast, rasterize_soft_oracle(stacked_scene(), SIZE, s), 1e-5)
        assert torch.allclose(fast.alpha, rasterize_soft_oracle(stacked_scene(), SIZE, s).alpha, atol=1e-12, rtol=0)


def test_the_forward_pass_does_not_depend_on_the_budget(device, small_chunks):
    """Tiles and chunks cut elsewhere skip other candidates; the frame is the same, bit for bit."""
    batch = stacked_scene(device=device, dtype=float64_on(device))
    one = on_cpu(rasterize_soft(batch, SIZE, soft(sigma=1.0, faces_per_pixel=4)))
    tiled = on_cpu(rasterize_soft(batch, SIZE, soft(sigma=1.0, faces_per_pixel=4, memory_budget=60_000)))
    assert torch.equal(one.face_index, tiled.face_index)
    for name in ("dist", "bary", "depth", "alpha"):
        assert torch.equal(getattr(one, name), getattr(tiled, name)), name


@pytest.mark.parametrize("loss", ["alpha", "image"])
def test_gradients_match_evaluating_every_candidate(monkeypatch, device, small_chunks, loss):
    dtype = float64_on(device)
    scene = stacked_scene(device=device, dtype=dtype)
    s = soft(sigma=1.0, faces_per_pixel=4)
    up = torch.rand(1, *SIZE, 3, generator=torch.Generator().manual_seed(4), dtype=torch.float64).to(device, dtype)

    def grads():
        v = scene.vertices.detach().clone().requires_grad_(True)
        c = scene.vertex_colors.detach().clone().requires_grad_(True)
        frame = py_gpu.render(TriangleBatch(v, scene.faces, vertex_colors=c), SIZE, settings=s)
        out = frame.alpha.expand(-1, -1, -1, 3) if loss == "alpha" else frame.image
        (out * up).sum().backward()
        return frame, v.grad, c.grad

    frame, gv, gc = grads()
    with monkeypatch.context() as m:
        _unpruned(m)
        want_frame, want_gv, want_gc = grads()
    assert torch.equal(frame.image, want_frame.image) and torch.equal(frame.alpha, want_frame.alpha)
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-6)
    assert torch.allclose(gv, want_gv, **tol)
    assert gv.abs().max() > 1e-3  # the pixels whose alpha is below 1 still pass gradients
    if loss == "image":
        assert torch.allclose(gc, want_gc, **tol)


def test_silhouette_skips_done_pixels_and_equals_render_alpha(monkeypatch, device, small_chunks):
    dtype = float64_on(device)
    scene = stacked_scene(device=device, dtype=dtype)
    s = soft(sigma=1.0, faces_per_pixel=4)
    up = torch.rand(1, *SIZE, 1, generator=torch.Generator().manual_seed(5), dtype=torch.float64).to(device, dtype)
    seen = _counting(monkeypatch)

    def run(fn):
        v = scene.vertices.detach().clone().requires_grad_(True)
        alpha = fn(TriangleBatch(v, scene.faces))
        (alpha * up).sum().backward()
        return alpha.detach(), v.grad

    alpha, grad = run(lambda b: py_gpu.silhouette(b, SIZE, settings=s))
    pruned = seen["evaluated"]
    render_alpha, render_grad = run(lambda b: py_gpu.render(b, SIZE, settings=s).alpha)
    assert torch.equal(alpha, render_alpha)
    assert torch.allclose(grad, render_grad, rtol=1e-10, atol=1e-12)
    with monkeypatch.context() as m:
        _unpruned(m)
        seen["evaluated"] = 0
        full_alpha, full_grad = run(lambda b: py_gpu.silhouette(b, SIZE, settings=s))
    assert pruned < 0.6 * seen["evaluated"]
    assert torch.equal(alpha, full_alpha)
    assert torch.allclose(grad, full_grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("deferred", [True, False], ids=["deferred", "eager"])
@pytest.mark.parametrize("budget", [400_000, 2**29], ids=["evaluated-again", "kept"])
@pytest.mark.parametrize("path", ["silhouette", "render"])
def test_gradient_terms_are_evaluated_only_where_alpha_is_below_one(monkeypatch, device, small_chunks, path, budget,
                                                                    deferred):
    """Deferred, the silhouette gradient terms, whether the forward pass keeps them (room enough)
    or the backward pass evaluates them again (little room), are evaluated only for the
    candidates at pixels whose alpha is below 1, far fewer than all. Deferred or eager, the
    gradients are those of evaluating every candidate everywhere."""
    dtype = float64_on(device)
    monkeypatch.setattr(torch_soft, "_DEFER_SHARE", 0.0 if deferred else math.inf)
    monkeypatch.setattr(torch_soft, "_BLOCK", 64)  # many blocks and chunks, so that the room runs out between them
    scene = stacked_scene(device=device, dtype=dtype)
    s = soft(sigma=1.0, faces_per_pixel=4, memory_budget=budget)
    up = torch.rand(1, *SIZE, 1, generator=torch.Generator().manual_seed(6), dtype=torch.float64).to(device, dtype)
    seen = {"terms": 0, "reached": 0, "again": 0}
    real_terms, real_backward = torch_soft._miss_terms, torch_soft._LogMiss.backward

    real_close = torch_soft._Terms.close

    def terms(table, face, col, row, sigma, reach, dist_only=False, depth=False):
        if not dist_only:
            seen["terms"] += face.numel()
        return real_terms(table, face, col, row, sigma, reach, dist_only=dist_only, depth=depth)

    def close(self, face=None, pix=None):  # a chunk's reached fragments, for the deferred terms
        seen["reached"] += 0 if face is None else face.numel()
        return real_close(self, face, pix)

    def backward(ctx, grad):
        seen["again"] += None in (ctx.selector.kept_terms.get(ctx.tile) or [None])
        return real_backward(ctx, grad)

    def grad():
        v = scene.vertices.detach().clone().requires_grad_(True)
        b = TriangleBatch(v, scene.faces, vertex_colors=scene.vertex_colors)
        if path == "silhouette":
            alpha = py_gpu.silhouette(b, SIZE, settings=s)
        else:
            alpha = py_gpu.render(b, SIZE, settings=s).alpha
        (alpha * up).sum().backward()
        return alpha.detach(), v.grad

    monkeypatch.setattr(torch_soft, "_miss_terms", terms)
    monkeypatch.setattr(torch_soft._Terms, "close", close)
    monkeypatch.setattr(torch_soft._LogMiss, "backward", staticmethod(backward))
    alpha, g = grad()
    assert (seen["again"] > 0) == (budget == 400_000)
    if deferred:
        assert 0 < seen["terms"] < 0.5 * seen["reached"], seen
    with monkeypatch.context() as m:
        _unpruned(m)
        want_alpha, want_g = grad()
    assert torch.equal(alpha, want_alpha)
    assert torch.allclose(g, want_g, rtol=1e-10, atol=1e-12)


@fixture_safe_settings(max_examples=20)
@given(seed=st.integers(0, 2**31 - 1), faces=st.integers(4, 60), k=st.integers(1, 6), sigma=st.floats(0.05, 4.0),
       budget=st.sampled_from([60_000, 400_000, 2**29]), cull=st.booleans(), chunk=st.sampled_from([256, 2048, 1 << 20]),
       check=st.sampled_from([1, 4]))
def test_skipping_never_changes_fragments_or_silhouette(device, seed, faces, k, sigma, budget, cull, chunk, check):
    """Any scene, K, blur, tiling, chunking and saturation-check interval: the fragments and the
    silhouette are those of evaluating every candidate, bit for bit."""
    batch = stacked_scene(faces, seed % 10_000, device=device, dtype=float64_on(device))
    s = soft(sigma=sigma, faces_per_pixel=k, memory_budget=budget, cull_backfaces=cull)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(torch_soft, "_CHUNK_CANDIDATES", chunk)
        m.setattr(torch_soft, "_SATURATION_CHECK", check)
        fast = on_cpu(rasterize_soft(batch, SIZE, s))
        fast_sil = py_gpu.silhouette(batch, SIZE, settings=s).cpu()
        _unpruned(m)
        full = on_cpu(rasterize_soft(batch, SIZE, s))
        full_sil = py_gpu.silhouette(batch, SIZE, settings=s).cpu()
    assert torch.equal(fast.face_index, full.face_index)
    for name in ("dist", "bary", "depth", "alpha"):
        assert torch.equal(getattr(fast, name), getattr(full, name)), name
    assert torch.equal(fast_sil, full_sil)
    assert torch.equal(fast_sil, fast.alpha)  # the same alpha as the fragments'


@fixture_safe_settings(max_examples=40)
@given(seed=st.integers(0, 2**31 - 1), radius=st.floats(0.0, 6.0), flat=st.sampled_from([None, "row", "column"]),
       scale=st.sampled_from([4.0, 40.0, 400.0]))
def test_reach_spans_hold_every_pixel_within_the_radius(seed, radius, flat, scale):
    """The columns a face's reach gives each row hold every pixel center within ``radius`` of the
    face (the spans are a superset of the candidates; the distance test decides), and most of the
    ones beyond lie outside: the spans follow slanted edges, not the box."""
    g = torch.Generator().manual_seed(seed)
    n, side = 64, 48
    tri = torch.rand(n, 3, 3, generator=g, dtype=torch.float64) * scale - scale / 2 + side / 2
    if flat == "row":
        tri[:, 1, 1] = tri[:, 0, 1]  # a horizontal edge
    elif flat == "column":
        tri[:, 2, 0] = tri[:, 1, 0]  # a vertical edge
    tri = tri.float()
    xy = tri[..., :2].double()
    area = (xy[:, 1, 0] - xy[:, 0, 0]) * (xy[:, 2, 1] - xy[:, 0, 1]) - (xy[:, 1, 1] - xy[:, 0, 1]) * (xy[:, 2, 0] - xy[:, 0, 0])
    keep = area.abs() > 1e-3
    tri, xy = tri[keep], xy[keep]
    reach = torch_soft._reach_table(torch_soft._reach_lines(tri, radius))  # [10, n]
    rows = torch.arange(side)
    F = tri.shape[0]
    face = torch.arange(F).repeat_interleave(side)
    row = rows.repeat(F)
    s0, s1 = torch_soft._reach_columns(reach.index_select(1, face), row,
                                       torch.zeros_like(row), torch.full_like(row, side - 1))
    # distance of every pixel center to every face (0 inside), by brute force
    cx = torch.arange(side, dtype=torch.float64) + 0.5
    px, py = cx[None, None, :], (row.double() + 0.5)[:, None, None]  # [S, 1, W] and [S, 1, 1]
    a, b = xy[face], xy.roll(-1, dims=1)[face]  # [S, 3, 2] edge ends
    e = b - a
    t = (((px - a[..., :1]) * e[..., :1] + (py - a[..., 1:]) * e[..., 1:]) / (e ** 2).sum(-1, keepdim=True)).clamp(0, 1)
    d2 = ((px - a[..., :1] - t * e[..., :1]) ** 2 + (py - a[..., 1:] - t * e[..., 1:]) ** 2).amin(dim=1)  # [S, W]
    cross = e[..., :1] * (py - a[..., 1:]) - e[..., 1:] * (px - a[..., :1])  # [S, 3, W]
    inside = (cross >= 0).all(dim=1) | (cross <= 0).all(dim=1)
    within = inside | (d2 <= radius ** 2)
    col = torch.arange(side)[None, :]
    in_span = (col >= s0[:, None]) & (col <= s1[:, None])
    assert not (within & ~in_span).any()  # nothing the radius reaches is left out
    box_x0 = (xy[..., 0].amin(1) - radius)[face][:, None]
    box_x1 = (xy[..., 0].amax(1) + radius)[face][:, None]
    in_box = (cx[None, :] >= box_x0) & (cx[None, :] <= box_x1)
    if int(in_box.sum()) > 200:
        assert int((in_span & ~within).sum()) < 0.5 * int((in_box & ~within).sum()) + 10


def test_an_edge_whose_normal_underflows_loosens_the_reach_and_drops_nothing():
    """An edge whose x normal is subnormal (its bounds overflow to inf) bounds no column."""
    tri = torch.tensor([[[0.0, 1e-311, 0.5], [10.0, 0.0, 0.5], [5.0, -8.0, 0.5]]], dtype=torch.float64)
    reach = torch_soft._reach_table(torch_soft._reach_lines(tri, 1.0))
    assert not torch.isnan(reach).any()
    s0, s1 = torch_soft._reach_columns(reach, torch.tensor([0]), torch.tensor([0]),
                                       torch.tensor([15]))
    assert int(s0) <= 5 <= int(s1)  # the center (5.5, 0.5) lies within 1 px of the face


def test_terms_are_deferred_where_faces_alone_saturate_pixels():
    """The selection defers the gradient terms when the faces' cores (the points deep enough that
    one face makes alpha exactly 1) cover half the frame: large overlapping triangles do, a fine
    mesh whose faces are a few pixels wide does not."""
    s = soft(sigma=1.0, faces_per_pixel=4)

    def chosen(batch, size):
        plan = torch_soft.plan_tiles("t", batch=1, size=size, faces=batch.num_faces, faces_per_pixel=4,
                                     dtype=batch.dtype, budget=2**26, slot_bytes=100, returned=0)
        select = torch_soft.FaceSelector(batch.vertices.detach(), batch.faces, size, s, plan)
        select((0, 0, size[0], 0, size[1]))
        return select.defer

    corners = torch.tensor([[-40.0, -40.0, 0.5], [120.0, -30.0, 0.5], [-30.0, 120.0, 0.5]])
    big = torch.cat([corners + torch.tensor([3.0 * i, -2.0 * i, 0.1 * i]) for i in range(4)])[None]
    assert chosen(TriangleBatch(big, torch.arange(12).reshape(4, 3)), SIZE)
    fine = py_gpu.fixtures.mesh_fixture("icosphere", 1280, 64, 64, dtype=torch.float32)
    assert not chosen(fine, (64, 64))
    core = torch_soft._core_area(torch.tensor([[[0.0, 0.0, 0.0], [40.0, 0.0, 0.0], [0.0, 40.0, 0.0]]]), 1.0,
                                 torch.float32)
    inradius = 2 * 800.0 / (80.0 + 40.0 * math.sqrt(2.0))  # twice the area over the perimeter
    depth = math.sqrt(torch_soft._saturated(torch.float32))
    assert float(core) == pytest.approx(800.0 * (1 - depth / inradius) ** 2, rel=1e-9)


def test_box_limit_keeps_the_faces_some_block_of_their_box_can_hold():
    """_box_limit's range maxima over the blocks a face's box touches, against brute force: a face
    is kept when its nearest depth is not beyond the largest limit of those blocks."""
    g = torch.Generator().manual_seed(11)
    rows, width, origin = 37, 70, (5, 9)
    hidden = torch.rand(rows * width, generator=g, dtype=torch.float64)
    hidden[torch.rand(rows * width, generator=g) < 0.02] = math.inf  # a few pixels not done
    n = 3000
    top = torch.randint(0, rows, (n,), generator=g)
    left = torch.randint(0, width, (n,), generator=g)
    n_rows = (torch.randint(1, rows + 1, (n,), generator=g)).minimum(rows - top)
    n_cols = (torch.randint(1, width + 1, (n,), generator=g)).minimum(width - left)
    zmin = torch.rand(n, generator=g, dtype=torch.float64) * 1.2
    face = torch.arange(n)
    keep = torch_soft._box_limit(hidden, zmin, rows, width, origin)(face, top + origin[0], n_rows, left + origin[1],
                                                                     n_cols)
    kept = torch.zeros(n, dtype=torch.bool)
    kept[torch.arange(n) if keep is None else keep] = True
    bs = torch_soft._LIMIT_BLOCK
    grid = hidden.view(rows, width)
    for f in range(n):
        r0, r1 = int(top[f]) // bs * bs, (int(top[f] + n_rows[f]) - 1) // bs * bs + bs
        c0, c1 = int(left[f]) // bs * bs, (int(left[f] + n_cols[f]) - 1) // bs * bs + bs
        most = grid[r0:r1, c0:c1].max()
        assert bool(kept[f]) == bool(zmin[f] <= most), f
    assert 0 < int(kept.sum()) < n


@pytest.mark.parametrize("path", ["render", "silhouette"])
def test_faces_behind_done_pixels_are_not_expanded(monkeypatch, device, small_chunks, path):
    """Faces behind every done pixel their box holds are dropped before their spans are made (where
    the gradient terms are deferred, or not needed): far fewer faces are expanded, and alpha and
    its gradients are those of expanding every face."""
    dtype = float64_on(device)
    monkeypatch.setattr(torch_soft, "_GROUP_CAP", 1)  # small groups, so that the limit is asked often
    monkeypatch.setattr(torch_soft, "_DEFER_SHARE", 0.0)  # deferred gradient terms: faces may be dropped
    monkeypatch.setattr(torch_soft, "_LIMIT_BLOCK", 4)  # blocks small beside the 24 x 32 frame
    scene = covered_scene(device=device, dtype=dtype)
    s = soft(sigma=1.0, faces_per_pixel=4)
    up = torch.rand(1, *SIZE, 1, generator=torch.Generator().manual_seed(8), dtype=torch.float64).to(device, dtype)
    seen = {"expanded": 0}
    real_group = torch_soft.FaceSelector._group

    def group(self, tri, face, *rest):
        seen["expanded"] += face.numel()
        yield from real_group(self, tri, face, *rest)

    def run():
        seen["expanded"] = 0
        v = scene.vertices.detach().clone().requires_grad_(True)
        b = TriangleBatch(v, scene.faces, vertex_colors=scene.vertex_colors)
        alpha = py_gpu.silhouette(b, SIZE, settings=s) if path == "silhouette" else py_gpu.render(b, SIZE, settings=s).alpha
        (alpha * up).sum().backward()
        return alpha.detach(), v.grad, seen["expanded"]

    monkeypatch.setattr(torch_soft.FaceSelector, "_group", group)
    alpha, g, expanded = run()
    with monkeypatch.context() as m:
        m.setattr(torch_soft, "_box_limit", lambda *a: (lambda *group: None))
        want_alpha, want_g, all_faces = run()
    assert expanded < 0.8 * all_faces, (expanded, all_faces)
    assert torch.equal(alpha, want_alpha)
    assert torch.allclose(g, want_g, rtol=1e-10, atol=1e-12)
    assert want_g.abs().max() > 1e-3 and 0.3 < float((want_alpha == 1).double().mean()) < 0.9


# ---- the render path keeps only what the blended frame needs ------------------------------------------
def _frame_and_grads(batch: TriangleBatch, size, **kw):
    """A soft render's frame and the gradients of a random loss on its image, and on all its outputs."""
    v = batch.vertices.detach().clone().requires_grad_(True)
    c = batch.vertex_colors.detach().clone().requires_grad_(True)
    frame = py_gpu.render(TriangleBatch(v, batch.faces, vertex_colors=c), size, mode="soft", **kw)
    outs = [frame.image, frame.alpha, frame.depth.nan_to_num(posinf=0.0)]
    g = torch.Generator().manual_seed(9)
    ups = [torch.rand(o.shape, generator=g, dtype=o.dtype) for o in outs]
    image_only = torch.autograd.grad(outs[:1], [v, c], ups[:1], retain_graph=True)  # the weighted slots' path
    every = torch.autograd.grad(outs, [v, c], ups)  # depth too: every slot's
    return [frame.image, frame.alpha, frame.depth, frame.face_index], [image_only, every]


@pytest.mark.parametrize("composite", ["over", "softras"])
@fixture_safe_settings(max_examples=12)
@given(seed=st.integers(0, 2**31 - 1), gamma=st.sampled_from([1e-4, 1e-3, 0.05]),
       flat=st.booleans(), budget=st.sampled_from([60_000, 2**30]), k=st.sampled_from([2, 8]))
def test_dropping_what_the_frame_cannot_use_changes_nothing(composite, seed, gamma, flat, budget, k):
    """Fragments behind their pixel's blend window and behind a covering fragment are dropped
    before the K nearest are taken: the frame is that of the K nearest, bit for bit, and so are
    the gradients of the image alone (the weighted slots' path). With every output's loss, the
    depth's and the image's terms of a vertex add up in shading blocks that the dropped slots can
    change (which pixels are shaded apart as deep ones), so those agree to rounding: one seed
    gave a last-bit difference on a component of size 4e-25."""
    from py_gpu.shading import composite as comp

    batch = stacked_scene(faces=30, seed=seed % 1000, dtype=torch.float32)
    if flat:  # coplanar faces: depths tie
        v = batch.vertices.clone()
        v[..., 2] = 0.5
        batch = TriangleBatch(v, batch.faces, vertex_colors=batch.vertex_colors)
    kw = dict(composite=composite, gamma=gamma, faces_per_pixel=k, memory_budget=budget)
    dropped = []
    real_filter = torch_soft._front_filter

    def spy(front, pix, z, d, runs=None):
        keep = real_filter(front, pix, z, d, runs)
        candidates = int((z < math.inf).sum())  # the reached ones (a run's other lanes have depth +inf)
        dropped.append(0 if keep is None else candidates - keep.numel())
        return keep

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch_soft, "_front_filter", spy)
        with_window = _frame_and_grads(batch, SIZE, **kw)
        patch.setattr(comp, "blend_window", lambda *args: None)
        without = _frame_and_grads(batch, SIZE, **kw)
    for a, b in zip(with_window[0], without[0]):
        assert torch.equal(a, b)
    (image_w, every_w), (image_wo, every_wo) = with_window[1], without[1]
    for a, b in zip(image_w, image_wo):
        assert torch.equal(a, b)
    for a, b in zip(every_w, every_wo):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6 * float(b.abs().max()))
    if gamma == 1e-4 and not flat and k == 8:
        assert sum(dropped) > 0  # the window bites in this deep scene


@fixture_safe_settings(max_examples=25)
@given(seed=st.integers(0, 2**31 - 1), gamma=st.sampled_from([1e-5, 1e-4, 1e-2]),
       cutoff=st.sampled_from([1e-6, 1e-4, 0.1]), lift=st.sampled_from([0.0, 1e3]),
       dtype=st.sampled_from([torch.float32, torch.float64]))
def test_no_fragment_beyond_the_blend_window_has_weight(seed, gamma, cutoff, lift, dtype):
    """The window bound itself, on the K nearest of a deep scene (K large enough for all): every
    slot deeper than its pixel's nearest fragment by more than the window has weight exactly 0 in
    both composites, also for depths far from 0 (float rounding of the logits)."""
    from py_gpu import BlendSettings, RasterSettings
    from py_gpu.shading.blend import blend_weights, depth_range, face_weights

    batch = stacked_scene(faces=30, seed=seed % 1000, dtype=dtype)
    v = batch.vertices.clone()
    v[..., 2] = v[..., 2] * 0.01 + lift  # depths within ~0.013 of each other: near the window's width
    batch = TriangleBatch(v, batch.faces, vertex_colors=batch.vertex_colors)
    s = RasterSettings(mode="soft", sigma=1.0, cutoff=cutoff, faces_per_pixel=30)
    frags = rasterize_soft(batch, SIZE, s)
    for b in (BlendSettings(gamma=gamma), BlendSettings(gamma=gamma, composite="softras")):
        zrange = depth_range(v[..., 2], b, clip_space=False)
        window = torch_soft.blend_window(zrange, gamma, cutoff, v[..., 2])[0]
        w = face_weights(frags, s, b, zrange) if b.composite == "over" else blend_weights(frags, s, b, zrange)[0]
        nearest = frags.depth[..., :1]
        beyond = frags.mask & (frags.depth > nearest + window)
        assert bool((w[beyond] == 0).all())
        if gamma < 1e-3:
            assert int(beyond.sum()) > 0  # the test meets such slots (most of the zero-weight ones)


def _merge_compacted(dist, depth, run_f, run_pix, shift, K, best_depth, best_face, log_miss, sigma, fresh, best_dist,
                     front):
    """The reference for ``_merge_lanes``: gather the reached lanes first (the run geometry gives
    the others distance -inf), then merge them as the per-candidate path does."""
    hit = torch.nonzero(dist > -math.inf).squeeze(1)
    run = torch.bitwise_right_shift(hit, shift)
    pix = run_pix.index_select(0, run) + (hit & ((1 << shift) - 1))
    torch_soft._merge_reached(pix, depth.index_select(0, hit), (run_f, run), dist.index_select(0, hit), K, best_depth,
                              best_face, log_miss, sigma, fresh, None, best_dist, front)


def _edge_crossing_scene(dtype) -> TriangleBatch:
    """Wide triangles over a 40 x 64 frame, many across its left and right edges, so that runs
    end past the rows they start in."""
    g = torch.Generator().manual_seed(11)
    n = 40
    center = torch.rand(n, 1, 2, generator=g, dtype=torch.float64) * torch.tensor([64.0, 40.0], dtype=torch.float64)
    corners = center + (torch.rand(n, 3, 2, generator=g, dtype=torch.float64) * 2 - 1) * 24.0
    depth = torch.rand(n, 1, 1, generator=g, dtype=torch.float64).expand(n, 3, 1)
    verts = torch.cat([corners, depth], -1).reshape(1, 3 * n, 3)
    colors = torch.rand(1, 3 * n, 3, generator=g, dtype=torch.float64)
    return TriangleBatch(verts.to(dtype), torch.arange(3 * n).reshape(n, 3), vertex_colors=colors.to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("scene", ["stacked", "edges"])
def test_lanes_merged_before_compaction_give_the_same_frame_bit_for_bit(monkeypatch, scene, dtype):
    """The run path merges every lane (the silhouette sum, the window filter) before compacting
    them; frames, and the gradients of a backward pass that selects the faces again (a budget too
    small to keep them), equal those of gathering the reached lanes first, bit for bit. Small
    chunks, with no pixel counted as done, make later chunks merge into filled slots in runs."""
    monkeypatch.setattr(torch_soft, "_CHUNK_CANDIDATES", 160)
    monkeypatch.setattr(torch_soft, "_HIDDEN_SHARE", 0)  # no tile has enough done pixels to look them up
    batch = stacked_scene(dtype=dtype) if scene == "stacked" else _edge_crossing_scene(dtype)
    size = (48, 64) if scene == "stacked" else (40, 64)
    calls = {"forward": 0, "backward": 0, "merged": 0}
    real = torch_soft._merge_lanes
    phase = ["forward"]

    def counted(*args):
        calls[phase[0]] += 1
        calls["merged"] += not args[10]  # fresh=False: into slots earlier chunks filled
        return real(*args)

    def frames(merge):
        monkeypatch.setattr(torch_soft, "_merge_lanes", merge)
        verts = batch.vertices.clone().requires_grad_(True)

        def render():
            return py_gpu.render(TriangleBatch(verts, batch.faces, vertex_colors=batch.vertex_colors), size,
                                 mode="soft", sigma=1.0, faces_per_pixel=4, gamma=0.05, memory_budget=400_000)

        phase[0] = "forward"
        with torch.no_grad():
            plain = render()
        out = render()
        up = torch.rand(out.image.shape, generator=torch.Generator().manual_seed(2), dtype=dtype)
        phase[0] = "backward"
        ((out.image * up).sum() + out.alpha.sum()).backward()
        return plain, verts.grad

    lanes, g_lanes = frames(counted)
    seen = dict(calls)
    compacted, g_compacted = frames(_merge_compacted)
    assert seen["forward"] > 0 and seen["backward"] > 0 and seen["merged"] > 0, seen  # every path is taken
    for name in ("image", "alpha", "depth", "face_index"):
        assert torch.equal(getattr(lanes, name), getattr(compacted, name)), name
    assert torch.equal(g_lanes, g_compacted)
    assert float(lanes.alpha.amax()) > 0.5 and int((lanes.face_index >= 0).sum()) > 500


def _reach_table_by_face(lines: torch.Tensor) -> torch.Tensor:
    """``_reach_table``'s definition, face by face in Python: the first and the last left bound
    (``nx > 0``), the first and the last right bound (``nx < 0``), the first horizontal edge."""
    rows = []
    for face in lines.tolist():
        left, right, flat = [], [], []
        for nx, ny, c in face:
            a, b = c / (nx if nx != 0 else 1.0), ny / (nx if nx != 0 else 1.0)
            usable = math.isfinite(a) and math.isfinite(b)
            if usable and nx > 0:
                left.append((a, b))
            elif usable and nx < 0:
                right.append((a, b))
            if nx == 0:
                flat.append((c, ny))
        row = []
        for side, bound in ((left, -math.inf), (right, math.inf)):
            for a, b in ((side[0], side[-1]) if side else ((bound, 0.0), (bound, 0.0))):
                row += [a, b]
        row += list(flat[0]) if flat else [-math.inf, 0.0]
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64).t()


def test_reach_table_takes_each_faces_first_and_last_bound_per_side():
    g = torch.Generator().manual_seed(8)
    tri = torch.rand(300, 3, 3, generator=g, dtype=torch.float64) * 60.0
    tri[:40, 1, 1] = tri[:40, 0, 1]  # a horizontal edge
    tri[40:80, 2, 0] = tri[40:80, 1, 0]  # a vertical edge
    tri[80:100, 1] = tri[80:100, 0]  # degenerate: two corners equal
    tri[100:110, 0, 1] = 1e-311  # a subnormal normal component
    tri[100:110, 1, 1] = 0.0
    lines = torch_soft._reach_lines(tri, 1.5)
    got = torch_soft._reach_table(lines)
    want = _reach_table_by_face(lines)
    assert got.shape == (10, 300) and got.is_contiguous()
    assert torch.equal(got, want)
