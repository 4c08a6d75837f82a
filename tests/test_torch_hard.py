"""The torch hard-mode rasterizer against the pure-Python reference: pixel for pixel."""

from __future__ import annotations

import functools

import math

import pytest
import torch
from hypothesis import given

import py_gpu
from py_gpu import MemoryBudgetError, PyGpuTypeError, PyGpuValueError, RasterSettings, TriangleBatch
from py_gpu.backends.torch_backend import TorchBackend
from py_gpu.compat import TorchRasterBackend
from py_gpu.fixtures import SEED_BACKGROUND, grid_fixture, mesh_fixture, seed_fixture
from py_gpu.raster.reference import rasterize_reference
from py_gpu.raster.torch_hard import rasterize_hard
from strategies import fixture_safe_settings, hard_batches

SEED_SIZE = (360, 640)  # (H, W)


@functools.lru_cache(maxsize=None)
def _seed_reference():
    """Reference fragments and FrameBuffer of the 1,000-triangle seed fixture (computed once)."""
    rb = seed_fixture(1000)
    frags = rasterize_reference(rb.to_triangle_batch(), SEED_SIZE)
    fb = py_gpu.select_backend("reference").render(rb, SEED_SIZE[1], SEED_SIZE[0], background=SEED_BACKGROUND)
    return frags, fb


def _assert_same_fragments(got, want, *, exact_floats: bool = True) -> None:
    got_face = got.face_index.cpu()
    mismatch = int((got_face != want.face_index).sum())
    assert mismatch == 0, f"{mismatch} pixels have a different face index"
    if exact_floats:  # float64 batches: bit-identical barycentrics and depth
        assert torch.equal(got.bary.detach().cpu().double(), want.bary)
        assert torch.equal(got.depth.detach().cpu().double(), want.depth)


def _reference_frame_uint8(batch: TriangleBatch, size, background=(0.0, 0.0, 0.0)) -> torch.Tensor:
    return py_gpu.render(batch, size, backend="reference", background=background).to_uint8()


# ---- parity on the fixtures -------------------------------------------------------------------


@pytest.mark.slow
def test_seed_fixture_parity(device):
    want, want_fb = _seed_reference()
    batch = seed_fixture(1000).to_triangle_batch(device=device)
    got = rasterize_hard(batch, SEED_SIZE, RasterSettings())
    assert got.face_index.device.type == device.type
    _assert_same_fragments(got, want, exact_floats=device.type != "mps")
    # the seed protocol: identical 8-bit frame
    fb = TorchRasterBackend(device=device).render(seed_fixture(1000), SEED_SIZE[1], SEED_SIZE[0], background=SEED_BACKGROUND)
    assert bytes(fb.pixels) == bytes(want_fb.pixels)


_SLOW = pytest.mark.slow  # the 512 x 512 frames take seconds on the CPU


@pytest.mark.parametrize("kind,faces,size", [pytest.param("icosphere", 1000, (512, 512), marks=_SLOW),
                                             pytest.param("torus", 1000, (512, 512), marks=_SLOW),
                                             ("icosphere", 10000, (256, 256)), ("torus", 4000, (200, 320))])
@pytest.mark.parametrize("colors", ["vertex", "face"])
def test_mesh_fixture_parity(device, kind, faces, size, colors):
    batch = mesh_fixture(kind, faces, size[1], size[0], colors=colors)
    want = rasterize_reference(batch, size)
    moved = batch.to(device)
    _assert_same_fragments(rasterize_hard(moved, size, RasterSettings()), want, exact_floats=device.type != "mps")
    if device.type != "mps":
        image = py_gpu.render(moved, size, backend="torch").to_uint8().cpu()
        assert torch.equal(image, _reference_frame_uint8(batch, size))


def test_grid_fixture_is_watertight(device):
    size = (96, 96)
    batch = grid_fixture()
    want = rasterize_reference(batch, size)
    got = rasterize_hard(batch.to(device), size, RasterSettings())
    _assert_same_fragments(got, want, exact_floats=device.type != "mps")
    # every sample inside the square [0.1, 0.9]^2 belongs to exactly one face: no holes
    inner = got.face_index[0, 12:84, 12:84, 0]
    assert bool((inner >= 0).all())


def test_float32_batch_parity(device):
    batch = mesh_fixture("icosphere", 1000, 128, 96, dtype=torch.float32)
    size = (96, 128)
    want = rasterize_reference(batch, size)
    got = rasterize_hard(batch.to(device), size, RasterSettings())
    assert got.bary.dtype == torch.float32
    _assert_same_fragments(got, want, exact_floats=False)
    if device.type != "mps":
        assert torch.equal(py_gpu.render(batch.to(device), size).to_uint8().cpu(), _reference_frame_uint8(batch, size))


def test_clip_space_parity(device):
    g = torch.Generator().manual_seed(3)
    B, V, F = 2, 30, 40
    xy = (torch.rand(B, V, 2, generator=g, dtype=torch.float64) - 0.5) * 2.4
    w = 0.5 + 2 * torch.rand(B, V, 1, generator=g, dtype=torch.float64)
    z = torch.rand(B, V, 1, generator=g, dtype=torch.float64)
    verts = torch.cat([xy * w, z * w, w], -1)
    faces = torch.randint(0, V, (F, 3), generator=g)
    colors = torch.rand(B, V, 3, generator=g, dtype=torch.float64)
    batch = TriangleBatch(verts, faces, vertex_colors=colors)
    size = (40, 56)
    want = rasterize_reference(batch, size)
    got = rasterize_hard(batch.to(device), size, RasterSettings())
    _assert_same_fragments(got, want, exact_floats=device.type != "mps")
    assert got.screen_bary is not None
    if device.type != "mps":
        assert torch.equal(py_gpu.render(batch.to(device), size).to_uint8().cpu(), _reference_frame_uint8(batch, size))


def test_near_plane_clipping_matches_the_reference_backend(device):
    g = torch.Generator().manual_seed(3)
    B, V, F = 2, 40, 60
    xy = (torch.rand(B, V, 2, generator=g, dtype=torch.float64) - 0.5) * 2.4
    w = -0.5 + 2.5 * torch.rand(B, V, 1, generator=g, dtype=torch.float64)  # some behind the camera
    verts = torch.cat([xy * w.abs(), w - 0.1, w], -1)  # z >= 0 (in front of the near plane) => w > 0
    faces = torch.randint(0, V, (F, 3), generator=g)
    colors = torch.rand(B, V, 3, generator=g, dtype=torch.float64)
    batch = TriangleBatch(verts, faces, vertex_colors=colors)
    assert bool((w <= 0).any())
    size = (40, 56)
    want = py_gpu.rasterize(batch, size, backend="reference")
    got = py_gpu.rasterize(batch.to(device), size, backend=TorchBackend())
    assert torch.equal(got.face_index.cpu(), want.face_index)
    assert int((want.face_index >= 0).sum()) > 0
    if device.type != "mps":
        image = py_gpu.render(batch.to(device), size, backend=TorchBackend()).to_uint8().cpu()
        assert torch.equal(image, py_gpu.render(batch, size, backend="reference").to_uint8())


def test_cull_backfaces_parity(device):
    batch = mesh_fixture("torus", 2000, 160, 120)
    size = (120, 160)
    want = rasterize_reference(batch, size, cull_backfaces=True)
    got = rasterize_hard(batch.to(device), size, RasterSettings(cull_backfaces=True))
    _assert_same_fragments(got, want, exact_floats=device.type != "mps")
    assert int((got.face_index >= 0).sum()) > 0


@pytest.mark.slow
def test_tiny_memory_budget_renders_the_same(device):
    size = (200, 64)
    seed = seed_fixture(300, size[1], size[0]).to_triangle_batch()
    # plus one face taller than the image, behind everything: its rows must be split up
    big = torch.tensor([[[-10.0, -10.0, 9.0], [300.0, 100.0, 9.0], [-10.0, 500.0, 9.0]]], dtype=torch.float64)
    batch = TriangleBatch(torch.cat([seed.vertices, big], 1), torch.cat([seed.faces, torch.tensor([[900, 901, 902]])]),
                          face_colors=torch.cat([seed.face_colors, torch.ones(1, 1, 3, dtype=torch.float64)], 1))
    want = rasterize_reference(batch, size)
    with pytest.raises(MemoryBudgetError, match="raise memory_budget|Raise memory_budget") as info:
        rasterize_hard(batch.to(device), size, RasterSettings(memory_budget=1000))
    minimum = int(str(info.value).split("needs at least ")[1].split(" ")[0])
    tiny = RasterSettings(memory_budget=minimum + 12_000)  # a few dozen rows and runs per piece
    _assert_same_fragments(rasterize_hard(batch.to(device), size, tiny), want, exact_floats=device.type != "mps")
    assert torch.equal(py_gpu.render(batch.to(device), size, settings=tiny).to_uint8().cpu(),
                       _reference_frame_uint8(batch, size))


def test_sorted_chunks_reject_hidden_bands_exactly(device, monkeypatch):
    """High overdraw takes the front-to-back path, whose later chunks skip the bands of rows (rows
    within one row of 8x8 tiles) hidden behind what is drawn: two images of 400 overlapping faces
    each, at a size that is no multiple of 8, against the reference."""
    from py_gpu.raster import torch_hard

    size = (50, 74)
    one, two = (seed_fixture(400, size[1], size[0], seed=s).to_triangle_batch() for s in (3, 4))
    batch = TriangleBatch(torch.cat([one.vertices, two.vertices]), one.faces)
    kept = []
    original = torch_hard._Buffers.visible_bands

    def spy(self, *args):
        out = original(self, *args)
        kept.append(out[3])
        return out

    monkeypatch.setattr(torch_hard._Buffers, "visible_bands", spy)
    monkeypatch.setattr(torch_hard, "_CHUNK_FRAGMENTS", 4096)  # several chunks at this small size
    got = rasterize_hard(batch.to(device), size, RasterSettings())
    _assert_same_fragments(got, rasterize_reference(batch, size), exact_floats=device.type != "mps")
    assert len(kept) >= 3 and min(kept) < 0.5  # later chunks ran, and most of their bands were hidden


def test_forward_is_deterministic(device):
    batch = seed_fixture(2000).to_triangle_batch(device=device)
    a = rasterize_hard(batch, SEED_SIZE, RasterSettings())
    b = rasterize_hard(batch, SEED_SIZE, RasterSettings())
    assert torch.equal(a.face_index, b.face_index)
    assert torch.equal(a.bary, b.bary) and torch.equal(a.depth, b.depth)


def test_batch_elements_are_independent(device):
    one = mesh_fixture("icosphere", 1000, 64, 64)
    two = mesh_fixture("torus", 1000, 64, 64)
    v = torch.cat([one.vertices[:, : two.vertices.shape[1]], two.vertices], 0)
    batch = TriangleBatch(v, two.faces)
    size = (64, 64)
    want = rasterize_reference(batch, size)
    _assert_same_fragments(rasterize_hard(batch.to(device), size, RasterSettings()), want,
                           exact_floats=device.type != "mps")


# ---- random small batches (hypothesis) ----------------------------------------------------------

_SIZE = (12, 16)
@fixture_safe_settings()
@given(case=hard_batches())
def test_random_small_batches_match_reference(device, case):
    batch, cull = case
    want = rasterize_reference(batch, _SIZE, cull_backfaces=cull)
    moved = batch.to(device)
    got = rasterize_hard(moved, _SIZE, RasterSettings(cull_backfaces=cull, memory_budget=50_000))
    _assert_same_fragments(got, want, exact_floats=device.type != "mps")
    if device.type != "mps":
        image = py_gpu.render(moved, _SIZE, cull_backfaces=cull).to_uint8().cpu()
        want_image = py_gpu.render(batch, _SIZE, backend="reference", cull_backfaces=cull).to_uint8()
        assert torch.equal(image, want_image)


# ---- the backend and bad input ----------------------------------------------------------------


def test_backend_is_registered_and_differentiable():
    backend = py_gpu.select_backend("torch")
    assert isinstance(backend, TorchBackend)
    caps = backend.capabilities
    assert caps.differentiable and caps.exact and "soft" in caps.modes and "cpu" in caps.devices


def test_frame_on_requested_device(device):
    batch = mesh_fixture("icosphere", 1000, 32, 32)
    frame = TorchBackend(device=device).render_frame(batch, (32, 32))
    assert frame.image.device.type == device.type and frame.face_index.device.type == device.type
    assert frame.image.shape == (1, 32, 32, 3) and frame.alpha.shape == (1, 32, 32, 1)


def test_render_is_differentiable_wrt_positions_and_colors(device):
    batch = mesh_fixture("icosphere", 1000, 48, 48, dtype=torch.float32, device=device)
    verts = batch.vertices.clone().requires_grad_(True)
    colors = batch.vertex_colors.clone().requires_grad_(True)
    frame = py_gpu.render(TriangleBatch(verts, batch.faces, vertex_colors=colors), (48, 48))
    assert frame.image.device.type == device.type
    frame.image.square().sum().backward()
    assert verts.grad is not None and verts.grad.device.type == device.type and bool(verts.grad[..., :2].abs().sum() > 0)
    assert colors.grad is not None and bool(colors.grad.abs().sum() > 0)


def test_empty_batch_returns_an_empty_frame(device):
    batch = TriangleBatch(torch.zeros(2, 0, 3, device=device), torch.zeros(0, 3, dtype=torch.int64, device=device))
    frame = py_gpu.render(batch, (5, 7), background=(0.25, 0.5, 1.0))
    assert frame.image.shape == (2, 5, 7, 3)
    assert bool((frame.face_index == -1).all()) and bool(torch.isinf(frame.depth).all())
    assert torch.equal(frame.image[0, 0, 0].cpu(), torch.tensor([0.25, 0.5, 1.0], dtype=frame.image.dtype))


def test_bad_input_errors():
    with pytest.raises(PyGpuTypeError, match="floating-point"):
        TriangleBatch(torch.zeros(1, 3, 3, dtype=torch.int64), torch.tensor([[0, 1, 2]]))
    with pytest.raises(PyGpuValueError, match="device"):
        TriangleBatch(torch.zeros(1, 3, 3), torch.tensor([[0, 1, 2]], device="meta"))
    with pytest.raises(PyGpuTypeError, match="size"):
        py_gpu.rasterize(mesh_fixture("icosphere", 20, 8, 8), size="big")
    with pytest.raises(PyGpuValueError, match="positive"):
        py_gpu.rasterize(mesh_fixture("icosphere", 20, 8, 8), size=(0, 8))
    with pytest.raises(PyGpuTypeError, match="TriangleBatch"):
        py_gpu.rasterize([1, 2, 3], size=(8, 8))
    with pytest.raises(PyGpuValueError, match="device"):
        TorchBackend(device="not-a-device")


def _contest_mode(monkeypatch, mode: str):
    """How high-overdraw face ids are resolved: as the frame's predicted contention says, always by
    depth bounds, or by depth bounds flushed after every piece (the memory cap at its smallest)."""
    from py_gpu.raster import torch_hard as th

    calls = {"finish": 0, "flush": 0}
    finish, flush = th._Contest.finish, th._Contest.flush

    def counted_finish(self, *args):
        calls["finish"] += 1
        return finish(self, *args)

    def counted_flush(self, *args):
        calls["flush"] += 1
        return flush(self, *args)

    monkeypatch.setattr(th._Contest, "finish", counted_finish)
    monkeypatch.setattr(th._Contest, "flush", counted_flush)
    if mode != "predicted":
        monkeypatch.setattr(th, "_CONTEST_SHARE", math.inf)
    if mode == "flushed":
        monkeypatch.setattr(th, "_BYTES_PER_CONTESTED", 1 << 40)  # cap = 1 fragment
    return calls


@pytest.mark.parametrize("mode", ["predicted", "bounds", "flushed"])
@pytest.mark.parametrize("triangles,seed,size", [(400, 3, (96, 160)), (1000, 7, (93, 157)), (2500, 11, (96, 160))])
def test_face_ids_by_depth_bounds_match_the_exact_resolve(monkeypatch, triangles, seed, size, mode):
    """High-overdraw scenes take the depth-bound resolve of face ids (sorted chunks, exact depths
    only where bounds overlap, rejection in ranks; 93x157 pads the buffers) when few fragments
    are predicted to be contested, else exact depths throughout; either way, and with the
    contested fragments flushed after every piece, the face ids equal the resolve that stores
    barycentrics, which compares exact depths everywhere, and the reference's."""
    from py_gpu.fixtures import seed_fixture
    from py_gpu.raster import torch_hard as th

    calls = _contest_mode(monkeypatch, mode)
    batch = seed_fixture(triangles, size[1], size[0], seed=seed).to_triangle_batch()
    settings = RasterSettings()
    ids = th.global_face_ids(batch, size, settings)
    full = th.resolve_faces(batch, size, settings, with_bary=True)
    assert torch.equal(ids, full.crop(full.winner))
    ref = rasterize_reference(batch, size).face_index[..., 0]
    assert torch.equal(torch.where(ids == batch.num_faces, -1, ids), ref)
    assert calls["finish"] == (1 if mode != "predicted" else int(triangles == 400))  # 400: little contention
    if mode == "flushed":
        assert calls["flush"] > 2


@pytest.mark.parametrize("mode", ["bounds", "flushed"])
def test_face_ids_with_unbounded_depths_match_the_reference(monkeypatch, mode):
    """Faces with depths at the largest float have no finite depth bounds (the rounding margin
    overflows), and some of their samples' depths round to +-inf: the depth-bound resolve must
    then compare exact depths (+inf does not cover a sample, -inf is nearer than everything), and
    its face ids still equal the exact resolve's and the reference's."""
    from py_gpu.fixtures import seed_fixture
    from py_gpu.raster import torch_hard as th

    calls = _contest_mode(monkeypatch, mode)
    batch = seed_fixture(1000, 160, 96, seed=5).to_triangle_batch()
    v = batch.vertices.clone()
    big = torch.finfo(torch.float64).max
    faces = torch.randperm(batch.num_faces, generator=torch.Generator().manual_seed(2))[:120]
    corners = batch.faces[faces]  # [120, 3]
    v[0, corners[:40].reshape(-1), 2] = big  # samples at the largest float or +inf ...
    v[0, corners[:40].reshape(-1), 0] += 64.0  # ... shown where they are alone (x >= 160)
    v[0, corners[40:80].reshape(-1), 2] = -big  # at minus the largest float or -inf
    v[0, corners[80:, 0], 2] = big  # one corner: large finite depths near it
    batch = TriangleBatch(v, batch.faces, face_colors=batch.face_colors)
    settings = RasterSettings()
    ids = th.global_face_ids(batch, (96, 224), settings)
    full = th.resolve_faces(batch, (96, 224), settings, with_bary=True)
    assert torch.equal(ids, full.crop(full.winner))
    ref = rasterize_reference(batch, (96, 224)).face_index[..., 0]
    assert torch.equal(torch.where(ids == batch.num_faces, -1, ids), ref)
    assert torch.isin(ref, faces[:40]).any() and torch.isin(ref, faces[40:80]).any()
    assert calls["finish"] == 1
