"""The ModernGL backend against the reference: raster rule, parity, attachments, resources.

Small scenes are compared with the pure-Python reference; the seed fixture (1k and 10k faces at
640x360) with the NumPy backend, which is bit-identical to the reference (tests/test_numpy*).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import example, given

import py_gpu
from py_gpu._check import BackendUnavailableError
from py_gpu.backends import select_backend
from py_gpu.contracts import TriangleBatch
from py_gpu.fixtures import SEED_BACKGROUND, grid_fixture, seed_fixture
from py_gpu.settings import RasterSettings
from strategies import fixture_safe_settings, kind_batches

pytestmark = pytest.mark.gl

BG = tuple(c / 255.0 for c in SEED_BACKGROUND)


@pytest.fixture(scope="module")
def ref():
    return select_backend("reference")


@pytest.fixture(scope="module")
def numpy_backend():
    return select_backend("numpy")


def _batch(verts, faces, **colors) -> TriangleBatch:
    return TriangleBatch(torch.as_tensor(verts, dtype=torch.float64), torch.as_tensor(faces, dtype=torch.int64), **colors)


# -- registration, import and context errors (no GL needed for most) ------------------------------


def test_import_does_not_import_moderngl():
    code = (
        "import sys, py_gpu, py_gpu.backends.moderngl, py_gpu.moderngl_backend\n"
        "assert 'moderngl' not in sys.modules, 'moderngl imported at import time'\n"
        "from py_gpu.moderngl_backend import ModernGLRasterBackend\n"
        "from py_gpu.backends.moderngl import ModernGLBackend\n"
        "assert issubclass(ModernGLRasterBackend, ModernGLBackend)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_moderngl_names_the_install_command(monkeypatch):
    from py_gpu import _gl
    from py_gpu.backends import moderngl as mgl_backend

    monkeypatch.setitem(sys.modules, "moderngl", None)  # makes `import moderngl` fail
    with pytest.raises(BackendUnavailableError, match=r'pip install "py_gpu\[gl\]"'):
        _gl.import_moderngl()
    with pytest.raises(BackendUnavailableError, match=r'pip install "py_gpu\[gl\]"'):
        mgl_backend.ModernGLBackend()


def test_create_context_lists_every_failure(monkeypatch):
    moderngl = pytest.importorskip("moderngl")
    from py_gpu import _gl

    def fail(**kwargs):
        raise RuntimeError(f"no luck with {kwargs.get('backend', 'default')}")

    monkeypatch.setattr(moderngl, "create_standalone_context", fail)
    with pytest.raises(_gl.GLUnavailableError) as info:
        _gl.create_context()
    msg = str(info.value)
    assert "EGL (headless)" in msg and "platform default" in msg
    assert "no luck with egl" in msg and "no luck with default" in msg


def test_headless_tries_egl_first(monkeypatch):
    from py_gpu import _gl

    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    assert _gl.context_attempts()[0] == ("EGL (headless)", {"backend": "egl"})
    monkeypatch.setenv("DISPLAY", ":0")
    assert _gl.context_attempts()[0][0] == "platform default"


def test_select_backend_when_gl_fails(monkeypatch):
    from py_gpu import _gl

    monkeypatch.setattr(_gl, "_probe_result", ["EGL (headless): no EGL display (simulated)"])
    with pytest.raises(BackendUnavailableError, match="no EGL display"):
        select_backend("moderngl")
    auto = select_backend("auto")  # falls back silently
    assert type(auto).__name__ != "ModernGLBackend"


def test_select_backend_names_and_auto(gl_available):
    from py_gpu.backends.moderngl import ModernGLBackend

    for name in ("moderngl", "opengl", "gl", "gpu", "auto"):
        backend = select_backend(name)
        assert isinstance(backend, ModernGLBackend), name
        backend.release()
    caps = ModernGLBackend.capabilities
    assert caps.accelerated and caps.exact and caps.clip_space and not caps.differentiable
    assert caps.modes == ("hard",)


# -- the raster rule -------------------------------------------------------------------------------


def test_tie_rule_on_split_square(gl, ref):
    """Square [1.5, 5.5]^2 split on its diagonal: column 1 and row 5 in, column 5 and row 1 out,
    diagonal samples owned by the upper-right face; both windings."""
    verts = [[1.5, 1.5, 0.5], [5.5, 1.5, 0.5], [5.5, 5.5, 0.5], [1.5, 5.5, 0.5]]
    for faces in ([[0, 1, 2], [0, 2, 3]], [[0, 2, 1], [0, 3, 2]]):
        batch = _batch(verts, faces)
        got = gl.rasterize(batch, (8, 8)).face_index[0, :, :, 0]
        want = ref.rasterize(batch, (8, 8)).face_index[0, :, :, 0]
        assert torch.equal(got, want)
        assert (got[1:6, 1] >= 0)[1:].all() and (got[5, 1:5] >= 0).all()
        assert (got[:, 5] == -1).all() and (got[1, :] == -1).all()
        assert got[2, 2] == 0 and got[3, 3] == 0  # diagonal: upper-right triangle


def test_snapping_half_step(gl, ref):
    """An edge within half a 1/256 step of a sample keeps it; past half a step it loses it."""
    for eps in (0.4 / 256, 0.6 / 256, 0.5 / 256, 1.5 / 256):
        verts = [[2.5 + eps, 0.0, 0.5], [8.0, 0.0, 0.5], [8.0, 8.0, 0.5], [2.5 + eps, 8.0, 0.5]]
        batch = _batch(verts, [[0, 1, 2], [0, 2, 3]])
        got = gl.rasterize(batch, (8, 8)).face_index
        assert torch.equal(got, ref.rasterize(batch, (8, 8)).face_index), eps


def test_equal_depth_lower_face_wins_and_far_face_kept(gl, ref):
    big = [[0, 0, 1.0], [40, 0, 1.0], [0, 40, 1.0]]
    near = [[0, 0, 0.2], [10, 0, 0.2], [0, 10, 0.2]]
    far = [[20, 20, 9.0], [30, 20, 9.0], [20, 30, 9.0]]  # the farthest face must not be clipped
    verts = big + big + near + far
    batch = _batch(verts, [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]])
    got = gl.rasterize(batch, (32, 32))
    want = ref.rasterize(batch, (32, 32))
    assert torch.equal(got.face_index, want.face_index)
    assert (got.face_index == 0).any() and not (got.face_index == 1).any()
    assert (got.face_index == 3).any() and (got.face_index == 2).any()


# -- parity on the seed fixture ----------------------------------------------------------------------


@pytest.mark.parametrize("triangles", [1000, 10000])
def test_seed_fixture_parity(gl, numpy_backend, triangles):
    batch = seed_fixture(triangles).to_triangle_batch()
    got = gl.render_frame(batch, (360, 640), background=BG)
    want = numpy_backend.render_frame(batch, (360, 640), background=BG)
    same = got.face_index == want.face_index
    mismatches = int((~same).sum())
    total = same.numel()
    print(f"seed fixture {triangles}: {mismatches} of {total} pixels differ in face index")
    assert mismatches <= total * 1e-4
    assert torch.equal(got.face_index >= 0, want.face_index >= 0)  # coverage masks identical
    diff = (got.to_uint8().int() - want.to_uint8().int()).abs().amax(-1)
    assert int(diff[same].max()) <= 1
    covered = same & (want.face_index >= 0)
    torch.testing.assert_close(got.depth[covered].double(), want.depth[covered], rtol=1e-4, atol=1e-4)
    assert torch.equal(got.alpha[..., 0] > 0, want.face_index >= 0)
    assert gl.ctx.error == "GL_NO_ERROR"


def test_seed_protocol_render(gl_available, gl_watch):
    gl, numpy_backend = py_gpu.select_backend("moderngl"), py_gpu.select_backend("numpy")
    gl_watch.add(gl, what="selected ModernGL backend")
    raster_batch = seed_fixture(1000)
    got = gl.render(raster_batch, 640, 360, background=SEED_BACKGROUND)
    want = numpy_backend.render(raster_batch, 640, 360, background=SEED_BACKGROUND)
    a, b = got.to_numpy().astype(int), want.to_numpy().astype(int)
    differ = int((a != b).any(-1).sum())
    print(f"seed protocol render, 1000 faces: {differ} pixels differ")
    assert differ <= a.shape[0] * a.shape[1] * 1e-4
    assert tuple(a[0, 0]) == SEED_BACKGROUND or (a[0, 0] != 0).any()
    target = py_gpu.buffers.FrameBuffer.new(640, 360)
    assert gl.render(raster_batch, 640, 360, background=SEED_BACKGROUND, target=target) is target
    assert target.pixels == got.pixels


def test_grid_fixture_watertight(gl, ref):
    batch = grid_fixture()
    size = (96, 96)
    full = gl.rasterize(batch, size).face_index[0, :, :, 0]
    assert torch.equal(full, ref.rasterize(batch, size).face_index[0, :, :, 0])
    counts = torch.zeros(size, dtype=torch.int64)
    verts = batch.vertices
    for f in range(batch.num_faces):  # every face alone: each covered pixel is covered exactly once
        one = TriangleBatch(verts, batch.faces[f : f + 1])
        counts += (gl.rasterize(one, size).face_index[0, :, :, 0] >= 0).long()
    assert int(counts.max()) == 1
    assert torch.equal(counts == 1, full >= 0)


# -- random small batches against the reference ---------------------------------------------------
def _assert_equally_near(batch: TriangleBatch, got_face, want_face, differ) -> None:
    """Where GL's face differs from the reference's, both faces' exact (float64) depths at the pixel
    center agree within GL's depth precision there: 1e-4, plus the depth that GL's 1/256 px vertex
    grid and float32 interpolation can move on steep faces (the planes' slopes times 2/256 px)."""
    v = batch.vertices[0].double()

    def plane(f: int):  # screen-space depth of face f at (px, py), and its slope |dz/dx| + |dz/dy|
        (x0, y0, z0), (x1, y1, z1), (x2, y2, z2) = v[batch.faces[f]].tolist()
        d = (x1 - x0) * (y2 - y0) - (y1 - y0) * (x2 - x0)
        gx = ((z1 - z0) * (y2 - y0) - (z2 - z0) * (y1 - y0)) / d
        gy = ((z2 - z0) * (x1 - x0) - (z1 - z0) * (x2 - x0)) / d
        return (lambda px, py: z0 + gx * (px - x0) + gy * (py - y0)), abs(gx) + abs(gy)

    for _, row, col in differ.nonzero().tolist():
        (za, sa), (zb, sb) = plane(int(got_face[0, row, col])), plane(int(want_face[0, row, col]))
        gap = abs(za(col + 0.5, row + 0.5) - zb(col + 0.5, row + 0.5))
        assert gap <= 1e-4 + (sa + sb) * 2 / 256, (row, col, gap)



_H, _W = 12, 16


#: Found by a random run: two copies of a steep one-pixel face, drawn in both windings; GL's depth of
#: one copy is 2e-4 off the exact plane there (snapped corners, float32 interpolation).
_STEEP_TWINS = _batch([[0, 0, 0]] * 4 + [[1.0, 0.0, 1.0], [-0.3, 2.0, 0.0], [0, 0, 0], [0, 0, 0]],
                      [[0, 1, 2], [1, 0, 3], [4, 5, 6], [5, 4, 7]],
                      vertex_colors=torch.zeros(1, 8, 3, dtype=torch.float64))


@fixture_safe_settings()
@given(batch=kind_batches())
@example(batch=_STEEP_TWINS)
def test_random_batches_match_reference(gl, batch):
    got = gl.render_frame(batch, (_H, _W), background=(0.1, 0.2, 0.3))
    want = select_backend("reference").render_frame(batch, (_H, _W), background=(0.1, 0.2, 0.3))
    # The documented promise: coverage is exact; a face may differ only where two faces are equally
    # near (GL resolves depth ties in its 24-bit depth buffer, the reference by face order).
    assert torch.equal(got.face_index >= 0, want.face_index >= 0)
    differ = got.face_index != want.face_index
    _assert_equally_near(batch, got.face_index, want.face_index, differ)
    # Colors agree to one 8-bit step where the face is well conditioned; on slivers thinner than
    # half a pixel's area the barycentrics are ill-conditioned and GL's float32 differs.
    tri = batch.vertices[0][batch.faces][..., :2]
    e1, e2 = tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]
    area = 0.5 * (e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]).abs()
    face = want.face_index.clamp(min=0)
    check = ~differ & ((want.face_index < 0) | (area[face] >= 0.5))
    diff = (got.to_uint8().int() - want.to_uint8().int()).abs().amax(-1)
    assert int(diff[check].max()) <= 1  # check includes the background, never empty
    assert gl.ctx.error == "GL_NO_ERROR"


# -- attachments, clip space, batches, channels ------------------------------------------------------


def _clip_batch(B=2, n=12, seed=3):
    g = torch.Generator().manual_seed(seed)
    w = 0.5 + 2.5 * torch.rand(B, 3 * n, 1, generator=g, dtype=torch.float64)
    ndc = torch.rand(B, 3 * n, 3, generator=g, dtype=torch.float64) * 1.6 - 0.8
    verts = torch.cat([ndc * w, w], -1)
    faces = torch.arange(3 * n).reshape(n, 3)
    colors = torch.rand(B, 3 * n, 3, generator=g, dtype=torch.float64)
    return TriangleBatch(verts, faces, vertex_colors=colors)


def test_clip_space_perspective(gl, ref):
    batch = _clip_batch()
    size = (24, 32)
    got, want = gl.rasterize(batch, size), ref.rasterize(batch, size)
    assert torch.equal(got.face_index, want.face_index)
    m = want.face_index >= 0
    torch.testing.assert_close(got.bary.double()[m], want.bary[m], rtol=0, atol=2e-3)
    torch.testing.assert_close(got.depth.double()[m], want.depth[m], rtol=0, atol=2e-3)  # snapped vs exact positions
    img_got = gl.render_frame(batch, size).to_uint8().int()
    img_want = ref.render_frame(batch, size).to_uint8().int()
    assert int((img_got - img_want).abs().max()) <= 1


def test_clip_space_crossing_the_eye_is_clipped_by_the_front_end(gl):
    # the third vertex is behind the eye (w < 0); the front end keeps the part with z >= 0,
    # ndc y in [-0.5, -0.09], and GL draws only what is in front
    verts = torch.tensor([[[-0.5, -0.5, 0.5, 1.0], [0.5, -0.5, 0.5, 1.0], [0.0, 1.0, -3.0, -0.5]]], dtype=torch.float64)
    batch = TriangleBatch(verts, torch.tensor([[0, 1, 2]]))
    with pytest.raises(py_gpu.PyGpuValueError, match="near-plane clipping"):
        gl.rasterize(batch, (16, 16))  # a backend never clips
    frags = py_gpu.rasterize(batch, (16, 16), backend=gl)
    rows = (frags.face_index[0, :, :, 0] == 0).any(1).nonzero()[:, 0]
    assert rows.numel() and int(rows.min()) >= 8 and int(rows.max()) <= 12  # y_px = (1 - y_ndc) * 8
    assert torch.isfinite(frags.depth[frags.face_index >= 0]).all()
    assert gl.ctx.error == "GL_NO_ERROR"


def test_batch_elements_render_independently(gl):
    batch = _clip_batch(B=3, seed=5)
    frame = gl.render_frame(batch, (20, 20))
    assert frame.image.shape == (3, 20, 20, 3) and frame.face_index.shape == (3, 20, 20)
    for b in range(3):
        one = TriangleBatch(batch.vertices[b : b + 1], batch.faces, vertex_colors=batch.vertex_colors[b : b + 1])
        alone = gl.render_frame(one, (20, 20))
        assert torch.equal(alone.face_index[0], frame.face_index[b])
        assert torch.equal(alone.image[0], frame.image[b])
    assert not torch.equal(frame.face_index[0], frame.face_index[1])


@pytest.mark.parametrize("channels", [1, 4, 6])
def test_channels_and_flat_colors(gl, numpy_backend, channels):
    g = torch.Generator().manual_seed(channels)
    verts = torch.rand(1, 30, 3, generator=g, dtype=torch.float64) * torch.tensor([40.0, 30.0, 1.0], dtype=torch.float64)
    faces = torch.randint(0, 30, (10, 3), generator=g)
    for key, count in (("vertex_colors", 30), ("face_colors", 10)):
        cols = torch.rand(1, count, channels, generator=g, dtype=torch.float64)
        batch = TriangleBatch(verts, faces, **{key: cols})
        got = gl.render_frame(batch, (30, 40), background=(0.2, 0.4, 0.6))
        want = numpy_backend.render_frame(batch, (30, 40), background=(0.2, 0.4, 0.6))
        assert got.image.shape == want.image.shape == (1, 30, 40, channels)
        assert torch.equal(got.face_index, want.face_index)
        tol = 1e-6 if key == "face_colors" else 2e-3
        torch.testing.assert_close(got.image.double(), want.image, rtol=0, atol=tol)


def test_cull_backfaces(gl, ref):
    verts = [[2, 2, 0.5], [12, 2, 0.5], [2, 12, 0.5], [14, 14, 0.4], [4, 14, 0.4], [14, 4, 0.4]]
    batch = _batch(verts, [[0, 1, 2], [3, 4, 5], [0, 2, 1]])
    s = RasterSettings(cull_backfaces=True)
    got, want = gl.rasterize(batch, (16, 16), settings=s), ref.rasterize(batch, (16, 16), settings=s)
    assert torch.equal(got.face_index, want.face_index)
    assert len(set(got.face_index.unique().tolist()) - {-1}) == 1


def test_empty_and_float32(gl):
    empty = TriangleBatch(torch.zeros(1, 0, 3), torch.zeros(0, 3, dtype=torch.int64))
    frame = gl.render_frame(empty, (4, 5), background=(1.0, 0.5, 0.0))
    assert (frame.face_index == -1).all() and torch.isinf(frame.depth).all()
    assert torch.equal(frame.image[0, 0, 0], torch.tensor([1.0, 0.5, 0.0]))
    batch = seed_fixture(50, 64, 48).to_triangle_batch(dtype=torch.float32)
    frags = gl.rasterize(batch, (48, 64))
    assert frags.bary.dtype == torch.float32 and frags.face_index.dtype == torch.int64
    assert frags.bary.shape == (1, 48, 64, 1, 3)


# -- resources ------------------------------------------------------------------------------------


def _track_gl_objects(monkeypatch, moderngl, kinds):
    """Record every GL object of ``kinds`` the context creates; returns ``live()``, those not yet released."""
    created = []
    for name in kinds:
        original = getattr(moderngl.Context, name)

        def wrapper(self, *args, __original=original, **kwargs):
            obj = __original(self, *args, **kwargs)
            created.append(obj)
            return obj

        monkeypatch.setattr(moderngl.Context, name, wrapper)

    def live():
        return [o for o in created if not isinstance(o.mglo, moderngl.InvalidObject)]

    return live


def test_no_leaks_over_200_frames(gl_available, monkeypatch):
    moderngl = pytest.importorskip("moderngl")
    from py_gpu.backends.moderngl import MAX_CACHED_SIZES, ModernGLBackend

    live = _track_gl_objects(monkeypatch, moderngl, ("buffer", "texture", "depth_renderbuffer", "renderbuffer",
                                                     "framebuffer", "program", "vertex_array"))

    backend = ModernGLBackend()
    g = torch.Generator().manual_seed(11)
    counts = []
    for frame in range(200):
        H, W = 8 + (frame * 7) % 41, 8 + (frame * 13) % 53
        n = 1 + (frame * 37) % 300
        verts = torch.rand(1, 3 * n, 3, generator=g, dtype=torch.float64) * torch.tensor([W, H, 1.0], dtype=torch.float64)
        kind = frame % 3
        colors = {}
        if kind == 1:
            colors = {"vertex_colors": torch.rand(1, 3 * n, 3, generator=g, dtype=torch.float64)}
        elif kind == 2:
            colors = {"face_colors": torch.rand(1, n, 3, generator=g, dtype=torch.float64)}
        batch = TriangleBatch(verts, torch.arange(3 * n).reshape(n, 3), **colors)
        if frame % 2:
            backend.render_frame(batch, (H, W))
        else:
            backend.render_rgb8(batch, (H, W))
        counts.append(len(live()))
        assert len(live()) == len(backend.gl_objects())  # nothing alive that the backend does not hold
    assert backend.ctx.error == "GL_NO_ERROR"
    per_size = 7
    # bounded: framebuffers of the cached sizes, 6 programs, 6 vertex arrays, one vertex buffer
    assert max(counts) <= MAX_CACHED_SIZES * per_size + 6 + 6 + 1
    assert len(backend._targets) <= MAX_CACHED_SIZES
    backend.release()
    assert live() == []
    backend.release()  # twice is safe
    with pytest.raises(BackendUnavailableError):
        backend.render_frame(batch, (4, 4))


# -- persistent geometry (upload_geometry / rasterize_geometry) ---------------------------------------


def _world_triangles(n=40, seed=1):
    """``n`` random world-space triangles around the origin, float64 positions [3n, 3], faces [n, 3]."""
    g = torch.Generator().manual_seed(seed)
    pos = (torch.rand(3 * n, 3, generator=g, dtype=torch.float64) * 2 - 1) * 2.0
    return pos, torch.arange(3 * n).reshape(n, 3)


def _near_cameras():
    from py_gpu.camera import Camera

    eyes = torch.tensor([[0.0, 0.0, 0.3], [0.2, 0.1, -0.2]], dtype=torch.float64)
    ats = torch.tensor([[0.0, 0.0, -1.0], [0.3, 0.0, -2.0]], dtype=torch.float64)
    return Camera.perspective(eyes, ats, fov_y=70.0, near=0.3, far=3.0)


@pytest.mark.parametrize("cull", [False, True])
def test_geometry_near_plane_matches_cpu_clipping(gl, ref, cull):
    """GL clips at py_gpu's near plane: same faces, barycentrics of the original corners, depth z/w."""
    from py_gpu.raster.clip import clip_batch

    pos, faces = _world_triangles()
    cams = _near_cameras()
    clip = TriangleBatch(cams.world_to_clip(pos), faces)
    assert clip_batch(clip).num_clipped > 10  # many triangles cross the near plane
    s = RasterSettings(cull_backfaces=cull)
    mesh = gl.upload_geometry(pos, faces)
    got = gl.rasterize_geometry(mesh, cams.matrix, (48, 48), settings=s)
    want = py_gpu.rasterize(clip, (48, 48), backend=ref, settings=s)
    mismatches = int((got.face_index != want.face_index).sum())
    print(f"persistent geometry (cull={cull}): {mismatches} of {want.face_index.numel()} pixels differ in face index")
    assert mismatches <= 2
    same = (want.face_index >= 0) & (got.face_index == want.face_index)
    assert int(same.sum()) > 1000
    torch.testing.assert_close(got.bary.double()[same], want.bary[same], rtol=0, atol=1e-4)
    torch.testing.assert_close(got.depth.double()[same], want.depth[same], rtol=0, atol=1e-5)
    assert got.face_index.shape == (2, 48, 48, 1) and got.bary.dtype == torch.float32
    mesh.release()
    assert gl.ctx.error == "GL_NO_ERROR"


def test_geometry_beyond_the_far_plane_is_kept(gl, ref):
    """Nothing in front of the near plane is cut, even at z/w > 2 (GL's far plane is moved away)."""
    from py_gpu.camera import Camera

    pos, faces = _world_triangles(seed=2)
    cam = Camera.orthographic((0.0, 0.0, 0.5), (0.0, 0.0, -1.0), half_height=2.0, near=0.1, far=1.0).to(dtype=torch.float64)
    mesh = gl.upload_geometry(pos, faces)
    got = gl.rasterize_geometry(mesh, cam.matrix, (32, 32))
    want = py_gpu.rasterize(TriangleBatch(cam.world_to_clip(pos), faces), (32, 32), backend=ref)
    covered = want.face_index >= 0
    assert float(want.depth[covered].max()) > 2.0
    assert torch.equal(got.face_index >= 0, covered)  # exact coverage
    assert (got.face_index == want.face_index).double().mean() >= 0.999
    torch.testing.assert_close(got.depth.double()[covered], want.depth[covered], rtol=0, atol=1e-3)
    mesh.release()


def test_geometry_instances_are_instance_major(gl, ref):
    pos, faces = _world_triangles(n=6, seed=4)
    pos = pos * 0.3
    cam = _near_cameras()
    cam = type(cam)(cam.view[:1], cam.projection)
    inst = torch.eye(4, dtype=torch.float64).repeat(2, 3, 1, 1)  # [B=2, N=3, 4, 4]
    inst[0, :, 0, 3] = torch.tensor([-0.6, 0.0, 0.6], dtype=torch.float64)
    inst[0, :, 2, 3] = -1.5
    inst[1, :, 1, 3] = torch.tensor([-0.5, 0.0, 0.5], dtype=torch.float64)
    inst[1, :, 2, 3] = -1.2
    mesh = gl.upload_geometry(pos, faces)
    before = gl.counters.instance_uploads
    got = gl.rasterize_geometry(mesh, cam.matrix, (32, 32), instances=inst)
    assert gl.counters.instance_uploads == before + 2  # one write per batch element, no vertex data
    F = faces.shape[0]
    for b in range(2):
        world = (pos[None] @ inst[b, :, :3, :3].transpose(-1, -2) + inst[b, :, None, :3, 3]).reshape(-1, 3)
        all_faces = (faces[None] + 3 * F * torch.arange(3)[:, None, None]).reshape(-1, 3)
        want = ref.rasterize(TriangleBatch(cam.world_to_clip(world), all_faces), (32, 32))
        assert torch.equal(got.face_index[b : b + 1], want.face_index)
        assert len(set(want.face_index[want.face_index >= 0].div(F, rounding_mode="floor").tolist())) == 3
    mesh.release()


def test_geometry_errors(gl):
    from py_gpu._check import PyGpuTypeError, PyGpuValueError

    pos, faces = _world_triangles(n=2)
    with pytest.raises(PyGpuValueError, match="positions"):
        gl.upload_geometry(pos[:, :2], faces)
    with pytest.raises(PyGpuValueError, match="faces"):
        gl.upload_geometry(pos, faces + 100)
    with pytest.raises(PyGpuTypeError, match="positions"):
        gl.upload_geometry(pos.long(), faces)
    mesh = gl.upload_geometry(pos, faces)
    with pytest.raises(PyGpuValueError, match="clip_from_world"):
        gl.rasterize_geometry(mesh, torch.eye(3), (8, 8))
    with pytest.raises(PyGpuValueError, match="instances"):
        gl.rasterize_geometry(mesh, torch.eye(4).repeat(2, 1, 1), (8, 8), instances=torch.eye(4).repeat(3, 1, 1, 1))
    with pytest.raises(PyGpuValueError, match="instances"):
        gl.rasterize_geometry(mesh, torch.eye(4), (8, 8), instances=torch.eye(4)[:3])
    with pytest.raises(PyGpuTypeError, match="GLMesh"):
        gl.rasterize_geometry(pos, torch.eye(4), (8, 8))
    mesh.release()
    with pytest.raises(PyGpuValueError, match="released"):
        gl.rasterize_geometry(mesh, torch.eye(4), (8, 8))
    empty = gl.upload_geometry(torch.zeros(0, 3), torch.zeros(0, 3, dtype=torch.int64))
    frags = gl.rasterize_geometry(empty, torch.eye(4), (4, 5))
    assert bool((frags.face_index == -1).all()) and bool(torch.isinf(frags.depth).all())
    empty.release()


def test_geometry_release_frees_gl_objects(gl_available, monkeypatch):
    moderngl = pytest.importorskip("moderngl")
    from py_gpu.backends.moderngl import ModernGLBackend

    live = _track_gl_objects(monkeypatch, moderngl, ("buffer", "vertex_array"))

    backend = ModernGLBackend()
    pos, faces = _world_triangles(n=8)
    cams = _near_cameras()
    a = backend.upload_geometry(pos, faces)
    b = backend.upload_geometry(pos * 0.5, faces)
    backend.rasterize_geometry(a, cams.matrix, (16, 16))
    backend.rasterize_geometry(a, cams.matrix, (16, 16), instances=torch.eye(4, dtype=torch.float64).repeat(5, 1, 1))
    backend.rasterize_geometry(b, cams.matrix, (16, 16))
    assert len(a.objects()) == 4 and len(b.objects()) == 2  # buffer + array (+ instance buffer and array)
    assert len(live()) == 6
    held = len(backend.gl_objects())  # also programs and framebuffers
    a.release()
    assert len(backend.gl_objects()) == held - 4
    assert len(live()) == 2 and not set(map(id, live())) & set(map(id, a.objects()))
    a.release()  # twice is safe
    assert a.released and backend.counters.geometry_releases == 1
    assert backend.ctx.error == "GL_NO_ERROR"
    from py_gpu._check import PyGpuValueError

    with pytest.raises(PyGpuValueError, match="released"):
        backend.rasterize_geometry(a, cams.matrix, (16, 16))
    backend.release()  # frees b as well
    assert live() == [] and b.released
    b.release()  # after the backend: still safe
