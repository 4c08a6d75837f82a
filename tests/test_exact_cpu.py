"""The NumPy rasterizer against the pure-Python reference, and the raster rule itself."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given

import py_gpu
from py_gpu import TriangleBatch
from py_gpu.fixtures import SEED_BACKGROUND, grid_fixture, mesh_fixture, seed_fixture
from py_gpu.raster.numpy_raster import rasterize_numpy
from py_gpu.raster.reference import rasterize_reference
from strategies import small_batches


def assert_same_fragments(a, b):
    mismatch = int((a.face_index != b.face_index).sum())
    assert mismatch == 0, f"{mismatch} pixels differ in face index"
    assert torch.equal(a.bary, b.bary)
    assert torch.equal(a.depth, b.depth)


@pytest.mark.slow
def test_seed_fixture_1000_identical():
    batch = seed_fixture(1000).to_triangle_batch()
    ref = rasterize_reference(batch, (360, 640))
    fast = rasterize_numpy(batch, (360, 640))
    assert_same_fragments(ref, fast)
    assert (ref.face_index >= 0).float().mean() > 0.9  # the fixture covers the frame
    fb_ref = py_gpu.select_backend("reference").render(seed_fixture(1000), 640, 360, background=SEED_BACKGROUND)
    fb_np = py_gpu.select_backend("numpy").render(seed_fixture(1000), 640, 360, background=SEED_BACKGROUND)
    assert fb_ref.pixels == fb_np.pixels


@pytest.mark.parametrize("kind", ["icosphere", "torus"])
def test_mesh_fixture_identical_with_vertex_colors(kind):
    batch = mesh_fixture(kind, 1280, 96, 80)
    ref = py_gpu.select_backend("reference").render_frame(batch, (80, 96), background=(0.1, 0.2, 0.3))
    fast = py_gpu.select_backend("numpy").render_frame(batch, (80, 96), background=(0.1, 0.2, 0.3))
    assert torch.equal(ref.face_index, fast.face_index)
    assert torch.equal(ref.to_uint8(), fast.to_uint8())
    assert torch.equal(ref.image, fast.image)  # bit-identical float64 shading
    covered = ref.face_index >= 0
    assert 0.2 < covered.float().mean() < 0.8


@given(small_batches(with_colors="vertex"))
def test_property_numpy_matches_reference(case):
    batch, size = case
    assert_same_fragments(rasterize_reference(batch, size), rasterize_numpy(batch, size))
    a = py_gpu.select_backend("reference").render_frame(batch, size)
    b = py_gpu.select_backend("numpy").render_frame(batch, size)
    assert torch.equal(a.to_uint8(), b.to_uint8())


@given(small_batches(clip_space=True, with_colors="face"))
def test_property_clip_space_matches_reference(case):
    batch, size = case
    assert_same_fragments(rasterize_reference(batch, size), rasterize_numpy(batch, size))


@given(small_batches(max_faces=5))
def test_property_tiny_memory_budget_is_identical(case):
    from py_gpu.raster import numpy_raster as nr

    batch, size = case
    fixed = size[0] * size[1] * (nr._BYTES_PER_PIXEL_OUT + nr._BYTES_PER_PIXEL_RESOLVE)
    tiny = fixed + max(size[1] * nr._BYTES_PER_FRAGMENT, size[0] * nr._BYTES_PER_SPAN)  # one row of work
    assert_same_fragments(rasterize_numpy(batch, size), rasterize_numpy(batch, size, memory_budget=tiny))


@pytest.mark.parametrize("n,seed", [(4, 0), (16, 1), (33, 2)])
@pytest.mark.parametrize("impl", [rasterize_reference, rasterize_numpy], ids=["reference", "numpy"])
def test_watertight_grid(impl, n, seed):
    """A tessellated square: every pixel inside is covered exactly once, no cracks, no overlaps."""
    batch = grid_fixture(n, 96, 96, seed=seed)
    frags = impl(batch, (96, 96))
    # count coverage per face independently: rasterize each face alone
    counts = torch.zeros(96, 96, dtype=torch.int64)
    verts = batch.vertices
    for f in range(batch.num_faces):
        single = TriangleBatch(verts, batch.faces[f : f + 1])
        counts += (rasterize_numpy(single, (96, 96)).face_index[0, :, :, 0] >= 0).long()
    assert int(counts.max()) == 1, "some pixel is covered twice"
    # the square [0.1, 0.9] * 96 = [9.6, 86.4]: samples at 10.5 .. 85.5 are inside, every one covered
    inner = counts[10:86, 10:86]
    assert int(inner.min()) == 1, "a crack: some inner pixel is not covered"
    assert int(counts.sum()) == int((frags.face_index >= 0).sum())


def test_tie_rule_left_and_bottom_edges_owned():
    """The square [1.5, 5.5]^2 split on its diagonal: column 1 and row 5 in, column 5 and row 1 out;
    samples on the diagonal go to the upper-right triangle."""
    v = torch.tensor([[1.5, 1.5, 0.5], [5.5, 1.5, 0.5], [5.5, 5.5, 0.5], [1.5, 5.5, 0.5]], dtype=torch.float64)
    faces = torch.tensor([[0, 1, 2], [0, 2, 3]])  # upper-right, lower-left
    for impl in (rasterize_reference, rasterize_numpy):
        face = impl(TriangleBatch(v, faces), (8, 8)).face_index[0, :, :, 0]
        covered = face >= 0
        assert covered[:, 1].sum() == 4 and covered[:, 5].sum() == 0  # columns 1..4 in, 5 out
        assert covered[5, :].sum() == 4 and covered[1, :].sum() == 0  # rows 2..5 in, row 1 out
        assert covered.sum() == 16
        for k in range(2, 5):  # the diagonal samples (k + 0.5, k + 0.5)
            assert int(face[k, k]) == 0
        assert int(face[4, 2]) == 1 and int(face[2, 4]) == 0


def test_snapping_half_step():
    """An edge moved by less than half a 1/256 step keeps its sample; past half a step it loses it."""
    def covered(x_left):
        v = torch.tensor([[x_left, 0.0, 0.5], [4.0, 0.0, 0.5], [4.0, 4.0, 0.5], [x_left, 4.0, 0.5]], dtype=torch.float64)
        f = rasterize_numpy(TriangleBatch(v, torch.tensor([[0, 1, 2], [0, 2, 3]])), (4, 4)).face_index
        return bool(f[0, 1, 1, 0] >= 0)  # sample (1.5, 1.5)

    assert covered(1.5)  # on a left edge: owned
    assert covered(1.5 + 0.4 / 256)  # snaps back onto the sample
    assert not covered(1.5 + 0.6 / 256)  # snaps past it


def test_depth_ties_lower_face_wins_and_strictly_less():
    v = torch.tensor([[0.0, 0.0, 0.5], [8.0, 0.0, 0.5], [0.0, 8.0, 0.5]], dtype=torch.float64)
    faces = torch.tensor([[0, 1, 2], [0, 2, 1], [0, 1, 2]])  # same triangle three times, both windings
    for impl in (rasterize_reference, rasterize_numpy):
        face = impl(TriangleBatch(v, faces), (8, 8)).face_index
        assert set(face[face >= 0].unique().tolist()) == {0}
    nearer = torch.cat([v, v * torch.tensor([1.0, 1.0, 0.5], dtype=torch.float64)])
    faces = torch.tensor([[0, 1, 2], [3, 4, 5]])
    for impl in (rasterize_reference, rasterize_numpy):
        face = impl(TriangleBatch(nearer, faces), (8, 8)).face_index
        assert set(face[face >= 0].unique().tolist()) == {1}


def test_degenerate_and_offscreen_draw_nothing():
    v = torch.tensor([[1.0, 1.0, 0.5], [5.0, 5.0, 0.5], [3.0, 3.0, 0.5], [-50, -50, 0.5], [-40, -50, 0.5], [-45, -40, 0.5]], dtype=torch.float64)
    faces = torch.tensor([[0, 1, 2], [0, 0, 1], [3, 4, 5]])
    for impl in (rasterize_reference, rasterize_numpy):
        assert int((impl(TriangleBatch(v, faces), (8, 8)).face_index >= 0).sum()) == 0


def test_backface_culling_matches_between_cpu_backends():
    batch = mesh_fixture("icosphere", 320, 64, 64)
    s = py_gpu.RasterSettings(cull_backfaces=True)
    a = py_gpu.select_backend("reference").rasterize(batch, (64, 64), settings=s)
    b = py_gpu.select_backend("numpy").rasterize(batch, (64, 64), settings=s)
    full = py_gpu.select_backend("numpy").rasterize(batch, (64, 64))
    assert torch.equal(a.face_index, b.face_index)
    # a closed sphere: culling back faces changes no visible pixel's coverage
    assert torch.equal(a.face_index >= 0, full.face_index >= 0)
    assert len(a.face_index.unique()) < len(full.face_index.unique()) + 1


def test_batch_elements_are_independent():
    one = mesh_fixture("torus", 800, 48, 40, colors="face")
    two = TriangleBatch(torch.cat([one.vertices, one.vertices.flip(1) * 0 + one.vertices]), one.faces,
                        face_colors=torch.cat([one.face_colors, 1 - one.face_colors]))
    f = py_gpu.select_backend("numpy").render_frame(two, (40, 48))
    single = py_gpu.select_backend("numpy").render_frame(one, (40, 48))
    assert torch.equal(f.face_index[0], single.face_index[0])
    assert torch.equal(f.face_index[1], single.face_index[0])
    assert not torch.equal(f.image[0], f.image[1])


def test_empty_batch_renders_background():
    batch = TriangleBatch(torch.zeros(1, 0, 3), torch.zeros(0, 3, dtype=torch.int64))
    for name in ("reference", "numpy"):
        frame = py_gpu.select_backend(name).render_frame(batch, (5, 7), background=(0.2, 0.4, 0.6))
        assert frame.image.shape == (1, 5, 7, 3)
        assert int((frame.face_index >= 0).sum()) == 0
        assert torch.allclose(frame.image[0, 0, 0], torch.tensor([0.2, 0.4, 0.6], dtype=frame.image.dtype))


def test_requests_that_cannot_fit_say_what_to_change():
    batch = seed_fixture(10, 64, 48).to_triangle_batch()
    with pytest.raises(py_gpu.MemoryBudgetError, match="raise memory_budget"):
        rasterize_numpy(batch, (2048, 2048), memory_budget=64 * 2**20)
    with pytest.raises(py_gpu.MemoryBudgetError, match="numpy or torch backend"):
        rasterize_reference(batch, (8192, 8192))
    # the same request with room to spare renders
    small = rasterize_numpy(batch, (48, 64), memory_budget=2**20)
    assert torch.equal(small.face_index, rasterize_reference(batch, (48, 64)).face_index)
