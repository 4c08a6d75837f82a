"""Reliability: no crash, no silent drop, no garbage. Each test is the regression test of one
defect found by feeding every public entry point bad or unusual input, plus two fuzzed
populations (huge clip-space extents; faces behind the camera) run against the reference."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

import py_gpu
from py_gpu import (
    BackendUnavailableError,
    Camera,
    FrameBuffer,
    MeshBatch,
    PyGpuTypeError,
    PyGpuValueError,
    RasterBatch,
    Renderer,
    ScreenTriangle,
    ScreenVertex,
    TriangleBatch,
)
from py_gpu.mesh import load_obj
from py_gpu.shading.texture import Texture, sample_texture
from py_gpu.shapes import cube, plane

EXACT = ["reference", "numpy", "torch"]
ONE = torch.tensor([[0, 1, 2]])


def _gl_or_skip(request):
    """The GL backend name after the session's GL check (skips, or fails under PY_GPU_REQUIRE_GL=1)."""
    request.getfixturevalue("gl_available")
    return "moderngl"


def _covered(frame) -> int:
    return int((frame.face_index >= 0).sum())


# ---- 1. every face behind the near plane ---------------------------------------------------------
BEHIND = torch.tensor([[[-0.5, -0.5, -0.5, 1.0], [0.5, -0.5, -0.5, 1.0], [0.0, 0.5, -0.5, 1.0]]])


@pytest.mark.parametrize("mode", ["hard", "soft"])
@pytest.mark.parametrize("backend", EXACT + ["moderngl"])
def test_all_faces_behind_the_camera_render_empty(request, backend, mode):
    if backend == "moderngl":
        _gl_or_skip(request)
    if mode == "soft" and backend != "torch":
        pytest.skip("soft mode is the torch backend's")
    batch = TriangleBatch(BEHIND, ONE, vertex_colors=torch.rand(1, 3, 3))
    frame = py_gpu.render(batch, (16, 16), backend=backend, mode=mode, background=(0.2, 0.3, 0.4))
    assert _covered(frame) == 0 and not bool(frame.alpha.any())
    assert torch.allclose(frame.image.double(), torch.tensor([0.2, 0.3, 0.4], dtype=torch.float64).expand(1, 16, 16, 3))
    frags = py_gpu.rasterize(batch, (16, 16), backend=backend, mode=mode)
    assert not bool(frags.mask.any())


@pytest.mark.parametrize("mode", ["hard", "soft"])
def test_renderer_camera_looking_away_renders_empty(mode):
    r = Renderer((12, 16), backend="torch", dtype=torch.float64)
    h = r.upload(cube(1.0))
    away = Camera.perspective((0.0, 0.0, 3.0), (0.0, 0.0, 6.0))  # the cube is behind the eye
    frame = r.render(h, away, mode=mode)
    assert _covered(frame) == 0
    toward = Camera.perspective((0.0, 0.0, 3.0), (0.0, 0.0, 0.0))
    assert _covered(r.render(h, toward, mode=mode)) > 20


# ---- 2. clip-space triangles far off screen ---------------------------------------------------------
@pytest.mark.parametrize("extent", [3e6, 1.6e7, 4.8e7, 1.6e8, 1e12])
def test_huge_clip_space_triangle_is_drawn_by_every_backend(request, extent):
    X = extent / 16  # px -> ndc at 32 px
    v = torch.tensor([[[-X, -X, 0.5, 1.0], [X, -X, 0.5, 1.0], [0.0, X, 0.5, 1.0]]], dtype=torch.float64)
    batch = TriangleBatch(v, ONE)
    for backend in EXACT + [_gl_or_skip(request)]:
        assert _covered(py_gpu.render(batch, (32, 32), backend=backend)) == 1024, backend


def test_kilometre_ground_plane_under_a_millimetre_high_camera(request):
    ground = plane(1000.0, 1, dtype=torch.float64)
    cam = Camera.perspective((0.0, 0.001, 0.0), (0.0, 0.001, -1.0), fov_y=60.0, near=1e-4, far=2000.0)
    clip = cam.to(dtype=torch.float64).world_to_clip(ground.positions[None])
    batch = TriangleBatch(clip, ground.faces)
    frames = {b: py_gpu.render(batch, (32, 48), backend=b) for b in EXACT + [_gl_or_skip(request)]}
    want = frames["reference"].face_index >= 0
    assert int(want.sum()) > 0.4 * 32 * 48  # the lower half of the image is ground
    for name, frame in frames.items():
        assert torch.equal(frame.face_index >= 0, want), name


def _clip_triangles(draw, extent: float):
    """Clip-space triangles whose projections reach ``extent`` px, with w in [0.25, 4]."""
    n = draw(st.integers(1, 4))
    coord = st.floats(-extent, extent, allow_nan=False)
    verts = []
    for _ in range(3 * n):
        w = draw(st.floats(0.25, 4.0))
        verts.append([draw(coord) * w, draw(coord) * w, draw(st.floats(0.0, 1.0)) * w, w])
    return torch.tensor([verts], dtype=torch.float64), torch.arange(3 * n).reshape(n, 3)


@st.composite
def huge_clip_batches(draw):
    H, W = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    exponent = draw(st.floats(0.0, 8.0))  # up to ~1e8 px from the image
    v, f = _clip_triangles(draw, 10.0**exponent / max(H, W))
    return TriangleBatch(v, f, face_colors=torch.rand(1, f.shape[0], 3, generator=torch.Generator().manual_seed(1),
                                                      dtype=torch.float64)), (H, W)


@settings(deadline=None, max_examples=40)
@given(case=huge_clip_batches())
def test_huge_extents_numpy_and_torch_match_the_reference_exactly(case):
    batch, size = case
    want = py_gpu.render(batch, size, backend="reference")
    for backend in ("numpy", "torch"):
        got = py_gpu.render(batch, size, backend=backend)
        assert torch.equal(got.face_index, want.face_index), backend
        assert torch.equal(got.to_uint8(), want.to_uint8()), backend


def _off_the_lattice(batch: TriangleBatch, size: tuple[int, int]) -> TriangleBatch:
    """The batch moved by a fixed irrational fraction of a pixel (about 0.03 px: several steps of
    the 1/256 px grid both rasterizers snap to, so the move survives snapping at any image size),
    so that no edge passes exactly through a pixel center: GL resolves exact ties after a cut in
    float32, the reference exactly."""
    v = batch.vertices.clone()
    H, W = size
    phase = torch.tensor([math.pi, math.e], dtype=v.dtype) * 1e-2 * 2.0 / torch.tensor([W, H], dtype=v.dtype)
    v[..., :2] += phase * v[..., 3:]  # NDC units: 2 / W per pixel
    return TriangleBatch(v, batch.faces, face_colors=batch.face_colors)


def _clip_case(verts, faces, size):
    v = torch.tensor([verts], dtype=torch.float64)
    colors = torch.rand(1, len(faces), 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    return TriangleBatch(v, torch.tensor(faces), face_colors=colors), size


@settings(deadline=None, max_examples=40)
@given(case=huge_clip_batches())
# two cases found by random runs: a 1x1 image (the move once fell below the 1/256 px grid), huge x
@example(case=_clip_case([[3.6407e6, 1, 0, 1], [0, 0, 0, 1], [0, 1, 0, 1]], [[0, 1, 2]], (1, 1)))
@example(case=_clip_case([[0, 0, 0, 1], [1, 0, 0, 1], [0, 1, 0, 1], [0, 1, 1, 1], [0, 0, 0, 1], [1, 0, 0, 1]],
                         [[0, 1, 2], [3, 4, 5]], (1, 1)))
def test_huge_extents_gl_coverage_is_exact(gl_available, case):
    """GL's promise: coverage exact away from exact ties, a face may differ only where two faces
    are equally near."""
    batch, size = case
    batch = _off_the_lattice(batch, size)
    want = py_gpu.render(batch, size, backend="reference")
    got = py_gpu.render(batch, size, backend="moderngl")
    assert torch.equal(got.face_index >= 0, want.face_index >= 0)
    differ = got.face_index != want.face_index
    torch.testing.assert_close(got.depth[differ].double(), want.depth[differ], rtol=0, atol=1e-4)


# ---- faces behind or across the camera: every backend and the Renderer ------------------------------
@st.composite
def behind_batches(draw):
    """Clip-space triangles with some or all corners behind the near plane (z < 0, some w < 0)."""
    n = draw(st.integers(1, 4))
    verts = []
    for _ in range(3 * n):
        w = draw(st.floats(-2.0, 3.0).filter(lambda x: abs(x) > 1e-3))
        z = draw(st.floats(-2.0, 1.0)) * abs(w)
        verts.append([draw(st.floats(-1.5, 1.5)) * abs(w), draw(st.floats(-1.5, 1.5)) * abs(w), z, w])
    v = torch.tensor([verts], dtype=torch.float64)
    # keep z <= w in front (py_gpu's projections never put z/w > 1 at w > 0... but allow far points)
    return TriangleBatch(v, torch.arange(3 * n).reshape(n, 3), vertex_colors=torch.rand(
        1, 3 * n, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64))


def _render_or_projection_error(batch, backend, **kw):
    """A frame, or None when the projection is one no camera makes (w <= 0 in front of z = 0)."""
    try:
        return py_gpu.render(batch, (10, 12), backend=backend, **kw)
    except PyGpuValueError as exc:
        assert "w <= 0" in str(exc)
        return None


@settings(deadline=None, max_examples=40)
@given(batch=behind_batches())
def test_faces_behind_the_camera_every_backend_agrees(batch):
    want = _render_or_projection_error(batch, "reference")
    for backend in ("numpy", "torch"):
        got = _render_or_projection_error(batch, backend)
        if want is None:
            assert got is None
            continue
        assert torch.equal(got.face_index, want.face_index), backend
        assert torch.equal(got.to_uint8(), want.to_uint8()), backend
    soft = _render_or_projection_error(batch, "torch", mode="soft")
    assert (soft is None) == (want is None)
    if soft is not None:
        assert bool(torch.isfinite(soft.image).all())


@pytest.mark.filterwarnings("error::RuntimeWarning")  # no float32 overflow casting vertices no face uses
@settings(deadline=None, max_examples=25)
@given(batch=behind_batches())
def test_faces_behind_the_camera_gl_coverage_is_exact(gl_available, batch):
    want = _render_or_projection_error(batch, "reference")
    got = _render_or_projection_error(batch, "moderngl")
    assert (got is None) == (want is None)
    if want is not None:
        assert torch.equal(got.face_index >= 0, want.face_index >= 0)


@settings(deadline=None, max_examples=20)
@given(eye=st.tuples(*[st.floats(-3.0, 3.0)] * 3), at=st.tuples(*[st.floats(-3.0, 3.0)] * 3),
       mode=st.sampled_from(["hard", "soft"]))
def test_renderer_any_camera_pose_renders(eye, at, mode):
    """Random poses (often looking away, often inside the cube): a frame, never a crash."""
    if math.dist(eye, at) < 1e-2:
        at = (at[0] + 1.0, at[1], at[2])
    d = [a - e for a, e in zip(at, eye)]
    up = (0.0, 1.0, 0.0) if math.hypot(d[0], d[2]) > 1e-3 * math.dist(eye, at) else (1.0, 0.0, 0.0)
    cam = Camera.perspective(eye, at, up)
    r = _renderer()
    frame = r.render(r._test_handle, cam, mode=mode)
    assert frame.image.shape == (1, 10, 12, 3) and bool(torch.isfinite(frame.image).all())
    ref = py_gpu.render(TriangleBatch(cam.to(dtype=torch.float64).world_to_clip(
        r._test_mesh.positions[None]), r._test_mesh.faces), (10, 12), backend="reference")
    if mode == "hard":
        assert torch.equal(frame.face_index >= 0, ref.face_index >= 0)


_RENDERERS: list = []


def _renderer():
    if not _RENDERERS:
        r = Renderer((10, 12), backend="torch", dtype=torch.float64)
        r._test_mesh = cube(1.5, dtype=torch.float64)
        r._test_handle = r.upload(r._test_mesh)
        _RENDERERS.append(r)
    return _RENDERERS[0]


# ---- 6. load_obj ---------------------------------------------------------------------------------------
def test_obj_with_a_byte_order_mark_keeps_every_vertex(tmp_path):
    path = tmp_path / "bom.obj"
    path.write_bytes("\ufeffv 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n".encode("utf-8"))
    mesh = load_obj(path)
    assert mesh.num_faces == 1
    assert torch.equal(mesh.positions, torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]]))


def test_obj_with_latin1_comments_and_names_loads(tmp_path):
    path = tmp_path / "latin1.obj"
    path.write_bytes(b"# caf\xe9 model\nv 0 0 0\nv 1 0 0\nv 0 1 0\nusemtl m\xe9tal\nf 1 2 3\n")
    assert load_obj(path).num_faces == 1


@pytest.mark.parametrize("line,what", [("v 0 1", "`v` needs 3"), ("vn 0 1", "`vn` needs 3"), ("vt", "`vt` needs 2"),
                                       ("v 0 x 1", "cannot parse")])
def test_obj_truncated_lines_name_the_line(tmp_path, line, what):
    path = tmp_path / "bad.obj"
    path.write_text(f"v 0 0 0\nv 1 0 0\n{line}\nv 0 1 0\nf 1 2 3\n")
    with pytest.raises(PyGpuValueError, match=f"bad.obj:3: .*{what}|{what}"):
        load_obj(path)


# ---- 7. textures --------------------------------------------------------------------------------------
def _textured():
    r = Renderer((16, 16), backend="torch")
    return r, r.upload(cube(1.0)), Camera.perspective((0.0, 0.0, 3.0), (0.0, 0.0, 0.0))


def test_uint8_texture_is_read_as_0_to_255():
    r, h, cam = _textured()
    tex8 = torch.full((4, 4, 3), 200, dtype=torch.uint8)
    img8 = r.render(h, cam, textures=tex8).image
    imgf = r.render(h, cam, textures=torch.full((4, 4, 3), 200 / 255)).image
    assert float(img8.max()) <= 1.0
    torch.testing.assert_close(img8, imgf)


def test_channels_first_texture_is_refused_with_the_fix():
    r, h, cam = _textured()
    with pytest.raises(PyGpuValueError, match="channels-first.*permute"):
        r.render(h, cam, textures=torch.rand(3, 8, 8))
    with pytest.raises(PyGpuValueError, match="channels-first"):
        Texture(torch.rand(3, 16, 16))


@pytest.mark.parametrize("what", ["texture", "uv", "lod"])
def test_nan_texture_uv_or_lod_is_refused(what):
    tex, uv, lod = torch.rand(8, 8, 3), torch.rand(1, 4, 4, 2), torch.zeros(1, 4, 4)
    bad = {"texture": tex, "uv": uv, "lod": lod}
    bad[what] = bad[what].clone()
    bad[what].view(-1)[0] = float("nan")
    with pytest.raises(PyGpuValueError, match=f"`{what}` contains NaN"):
        sample_texture(bad["texture"], bad["uv"], filter="trilinear", lod=bad["lod"])


# ---- 8. empty inputs -----------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", EXACT)
@pytest.mark.parametrize("mode", ["hard", "soft"])
def test_empty_mesh_renders_the_background(backend, mode):
    if mode == "soft" and backend != "torch":
        pytest.skip("soft mode is the torch backend's")
    r = Renderer((8, 10), backend=backend, background=(0.5, 0.25, 0.0))
    h = r.upload(MeshBatch(torch.zeros(0, 3), torch.zeros(0, 3, dtype=torch.int64)))
    frame = r.render(h, Camera.perspective((0.0, 0.0, 3.0)), mode=mode, attachments=("normal", "material_id"))
    assert _covered(frame) == 0
    assert torch.allclose(frame.image.double(), torch.tensor([0.5, 0.25, 0.0], dtype=torch.float64).expand(1, 8, 10, 3))


@pytest.mark.parametrize("mode", ["hard", "soft"])
@pytest.mark.parametrize("backend", EXACT + ["moderngl"])
def test_batch_of_zero_elements(request, backend, mode):
    if backend == "moderngl":
        _gl_or_skip(request)
    if mode == "soft" and backend != "torch":
        pytest.skip("soft mode is the torch backend's")
    for dims in (3, 4):
        batch = TriangleBatch(torch.zeros(0, 3, dims), ONE)
        frame = py_gpu.render(batch, (4, 5), backend=backend, mode=mode)
        assert frame.image.shape == (0, 4, 5, 3) and frame.face_index.shape == (0, 4, 5)
        frags = py_gpu.rasterize(batch, (4, 5), backend=backend, mode=mode)
        assert frags.face_index.shape[:3] == (0, 4, 5)


# ---- 10. the right error, blaming the right argument ---------------------------------------------------
def _tri():
    return TriangleBatch(torch.tensor([[[1.0, 1, 0.5], [5, 1, 0.5], [1, 5, 0.5]]]), ONE)


def test_missing_vertices_is_a_type_error():
    with pytest.raises(PyGpuTypeError, match="`vertices` must be a tensor"):
        TriangleBatch(None, ONE)
    with pytest.raises(PyGpuTypeError, match="`faces` must be a tensor"):
        TriangleBatch(torch.zeros(1, 3, 3), None)
    with pytest.raises(PyGpuTypeError, match="positions"):
        MeshBatch(None, ONE)


@pytest.mark.parametrize("backend", [123, None, object()])
def test_backend_of_the_wrong_type(backend):
    with pytest.raises(PyGpuTypeError, match="`backend` must be a backend name"):
        py_gpu.render(_tri(), (8, 8), backend=backend)


def test_interpolate_negative_face_ids():
    frags = py_gpu.rasterize(_tri(), (8, 8))
    with pytest.raises(PyGpuValueError, match="negative vertex id"):
        py_gpu.interpolate(torch.rand(1, 3, 2), frags, torch.tensor([[0, -1, 2]]))


def test_transforms_and_camera_batches_must_match_the_mesh():
    r, h, cam = _textured()
    with pytest.raises(PyGpuValueError, match="`transforms` has batch size 3 but the camera has 1"):
        r.render(h, cam, transforms=torch.eye(4).expand(3, 4, 4))
    with pytest.raises(PyGpuValueError, match="`instances` has batch size 2"):
        r.render(h, cam, instances=torch.eye(4).expand(2, 3, 4, 4))
    three = Camera.perspective(torch.tensor([[0.0, 0.0, 3.0], [0, 0, 4], [0, 0, 5]]))
    posed = r.upload(MeshBatch(cube(1.0).positions.expand(2, -1, -1), cube(1.0).faces))
    with pytest.raises(PyGpuValueError, match="2 poses but the camera has 3 views"):
        r.render(posed, three)


def test_meshbatch_attribute_batch_must_match_positions():
    with pytest.raises(PyGpuValueError, match="`normals` has batch size 2 but `positions` 3"):
        MeshBatch(torch.rand(3, 4, 3), ONE, normals=torch.rand(2, 4, 3))


def test_nan_camera_and_transforms_are_blamed():
    r, h, cam = _textured()
    view = cam.view.clone()
    view[0, 0, 0] = float("nan")
    with pytest.raises(PyGpuValueError, match="Camera: `view` contains NaN"):
        Camera(view, cam.projection)
    with pytest.raises(PyGpuValueError, match="`transforms` contains NaN"):
        r.render(h, cam, transforms=torch.full((1, 4, 4), float("nan")))


@pytest.mark.parametrize("value", ["no", 1, None])
def test_cull_backfaces_must_be_a_bool(value):
    with pytest.raises(PyGpuTypeError, match="cull_backfaces"):
        py_gpu.RasterSettings(cull_backfaces=value)
    if value is not None:  # None means "unset" in render's keywords
        with pytest.raises(PyGpuTypeError, match="cull_backfaces"):
            py_gpu.render(_tri(), (8, 8), cull_backfaces=value)


@pytest.mark.parametrize("ids", [1.7, torch.tensor([1.7]), torch.tensor([True])])
def test_material_ids_must_be_integers(ids):
    with pytest.raises(PyGpuTypeError, match="material_ids` must be integers"):
        MeshBatch(torch.rand(4, 3), ONE, material_ids=ids)


def test_backend_option_errors_are_value_errors():
    with pytest.raises(PyGpuValueError, match="memory_budget"):
        py_gpu.select_backend("torch", memory_budget=0)
    with pytest.raises(BackendUnavailableError, match="unknown backend"):
        py_gpu.select_backend("nope")


def test_huge_framebuffer_is_refused():
    with pytest.raises(PyGpuValueError, match="exceed the largest supported side"):
        FrameBuffer.new(100000, 100000)


@pytest.mark.parametrize("color,err", [("red", PyGpuTypeError), ((1, "g", 3), PyGpuTypeError),
                                       ((1, 2), PyGpuValueError), ((1.0, math.nan, 3), PyGpuValueError)])
def test_seed_colors_are_checked(color, err):
    with pytest.raises(err, match="RGB color"):
        tri = ScreenTriangle(ScreenVertex(1, 1, 1), ScreenVertex(5, 1, 1), ScreenVertex(1, 5, 1), color)
        py_gpu.select_backend("numpy").render(RasterBatch([tri]), 8, 8)


# ---- 11. the command line --------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [
    ["seed", "--triangles", "-5"], ["seed", "--width", "abc"], ["seed", "--height", "0"],
    ["seed", "--width", "100000"], ["seed", "--backend", "nope"], ["seed", "--output", "/nonexistent/dir/x.png"],
    ["demo", "--frames", "0"], ["demo", "--frames", "x"], ["demo", "--backend", "nope", "--frames", "1"],
    ["bogus"], [],
])
def test_cli_bad_arguments_are_one_line_and_exit_2(args, tmp_path):
    run = subprocess.run([sys.executable, "-m", "py_gpu.cli", *args], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0], run.stderr
    assert "Traceback" not in run.stderr


def test_cli_zero_triangles_renders_the_background(tmp_path):
    run = subprocess.run([sys.executable, "-m", "py_gpu.cli", "seed", "--triangles", "0", "--backend", "numpy",
                          "--width", "8", "--height", "6", "--output", "empty.png"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "empty.png").stat().st_size > 0


@pytest.mark.filterwarnings("error:invalid value:RuntimeWarning")  # the range overflowed to inf, then 0 * inf
@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # GL's float32 depth: inf
def test_gl_depth_range_wider_than_float64_holds(gl_available):
    """Screen-space depths of -1e308 and 1e308 are finite, but their range is not: GL maps it in
    halves and draws the near face where the reference does (the depth GL reports for them is
    float32's, inf)."""
    v = torch.tensor([[[0.0, 0.0, 1e308], [8.0, 0.0, 1e308], [0.0, 8.0, 1e308],
                       [0.0, 0.0, -1e308], [6.0, 0.0, -1e308], [0.0, 6.0, -1e308]]], dtype=torch.float64)
    batch = TriangleBatch(v, torch.tensor([[0, 1, 2], [3, 4, 5]]))
    want = py_gpu.render(batch, (8, 8), backend="reference")
    got = py_gpu.render(batch, (8, 8), backend="moderngl")
    assert torch.equal(got.face_index, want.face_index)
    assert int((want.face_index == 1).sum()) > 10 and int((want.face_index == 0).sum()) > 5
