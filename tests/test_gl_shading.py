"""GL shading of ``Renderer.render`` (py_gpu.renderer.gl_path, py_gpu.backends.gl_shading).

Each scene is rendered twice on the same ModernGL renderer: shaded in GL (``shading="auto"``)
and by the torch shading pass (``shading="torch"``), which rasterize the same fragments. The
images must agree within 1/255 on at least ``PARITY`` of the pixels (float32 GLSL against
torch: a few pixels may differ at exact edge ties or texel boundaries), and ``RenderStats``
must say which path ran.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from py_gpu.camera import Camera
from py_gpu.demo import checker, rotation_y, stripes, translate
from py_gpu.renderer import Renderer
from py_gpu.settings import RasterSettings
from py_gpu.shading.lights import AmbientLight, DirectionalLight, Material, PointLight
from py_gpu.shading.texture import Texture
from py_gpu.shapes import cube, plane, torus, uv_sphere

pytestmark = pytest.mark.gl

SIZE = (96, 128)
#: Fraction of pixels whose color must agree within 1/255 (and whose face id must be equal).
PARITY = 0.999
LIGHTS = [AmbientLight(intensity=0.2), DirectionalLight((-1.0, -1.0, -0.5), intensity=0.8),
          PointLight((0.5, 2.0, 1.5), (1.0, 0.9, 0.8), 2.0, (1.0, 0.1, 0.3))]


@pytest.fixture(params=["depth in alpha", "depth buffer"])
def r(request, gl_available, gl_watch, monkeypatch):
    """A renderer on its own ModernGL backend, checked for GL errors after the test; each test runs
    with depth written by the shading pass (the default for these small meshes) and read from the
    depth buffer (the default above ``DEPTH_OUT_FACES``)."""
    import py_gpu.backends.gl_shading as gl_shading

    if request.param == "depth buffer":
        monkeypatch.setattr(gl_shading, "DEPTH_OUT_FACES", 0)
    renderer = Renderer(SIZE, backend="moderngl", background=(0.1, 0.2, 0.3))
    gl_watch.add(renderer.backend, what="renderer's ModernGL backend")
    yield renderer
    renderer.backend.release()


def _camera(eye=(0.6, 1.8, 3.2), at=(0.0, 0.0, 0.0)) -> Camera:
    return Camera.perspective(eye, at, fov_y=55.0, aspect=SIZE[1] / SIZE[0], near=0.1, far=30.0)


def _colored_torus():
    g = torch.Generator().manual_seed(3)
    m = torus(1.0, 0.35, 40, 20)
    return m.with_colors(torch.rand(m.positions.shape[0], 3, generator=g) * 0.8 + 0.2)


def _both(r: Renderer, handle, camera, **kw):
    """The frame shaded in GL (asserted) and the same call shaded in torch."""
    with torch.no_grad():
        gl = r.render(handle, camera, **kw)
        assert r.stats.shading == "gl", r.stats.shading_reason
        assert r.stats.shading_reason == ""
        ref = r.render(handle, camera, shading="torch", **kw)
        assert r.stats.shading == "torch" and "shading='torch'" in r.stats.shading_reason
    return gl, ref


def _assert_parity(gl, ref, what: str) -> None:
    covered = (ref.face_index >= 0).float().mean().item()
    assert covered > 0.1, f"{what}: the scene covers only {covered:.3f} of the image"
    face = (gl.face_index == ref.face_index).double().mean().item()
    close = ((gl.image - ref.image).abs().amax(-1) <= 1.0 / 255.0 + 1e-6).double().mean().item()
    print(f"{what}: face ids agree on {face:.6f}, colors within 1/255 on {close:.6f} of pixels")
    assert face >= PARITY, f"{what}: face ids agree on {face:.6f} of pixels"
    assert close >= PARITY, f"{what}: colors agree within 1/255 on {close:.6f} of pixels"
    same = gl.face_index == ref.face_index
    assert torch.equal(gl.alpha[same], ref.alpha[same])
    hit = same & (ref.face_index >= 0)
    assert float((gl.depth[hit] - ref.depth[hit]).abs().max()) < 1e-5
    assert gl.image.dtype == ref.image.dtype and gl.face_index.dtype == torch.int64
    _assert_covers_its_own_pixels(gl)


def _assert_covers_its_own_pixels(gl) -> None:
    """The lazy id pass covers exactly the pixels the shading pass wrote a depth to, and alpha is
    that coverage."""
    drawn = torch.isfinite(gl.depth)
    assert torch.equal(gl.face_index >= 0, drawn)
    assert torch.equal(gl.alpha[..., 0], drawn.to(gl.alpha.dtype))
    assert bool(torch.isinf(gl.depth[~drawn]).all()) and bool((gl.depth[drawn] >= 0).all())


@pytest.mark.parametrize("model", ["unlit", "lambert", "blinn_phong"])
def test_vertex_colors(r, model):
    h = r.upload(_colored_torus())
    gl, ref = _both(r, h, _camera(), lights=LIGHTS, model=model)
    _assert_parity(gl, ref, f"vertex colors, {model}")
    assert gl.image.std() > 0.05  # really shaded: not one flat color


@pytest.mark.parametrize("light", [AmbientLight((0.9, 0.7, 0.5), 0.6), DirectionalLight((0.3, -1.0, -0.8), (1.0, 0.8, 0.6), 1.3),
                                   PointLight((-0.8, 1.5, 1.2), (0.7, 0.9, 1.0), 3.0, (1.0, 0.2, 0.5))],
                         ids=["ambient", "directional", "point"])
@pytest.mark.parametrize("model", ["lambert", "blinn_phong"])
def test_each_light_kind(r, light, model):
    h = r.upload(uv_sphere(24, 48, 1.0))
    gl, ref = _both(r, h, _camera((0.4, 0.8, 2.8)), lights=[light], model=model, material=Material((0.5, 0.4, 0.3), 24.0))
    _assert_parity(gl, ref, f"{type(light).__name__}, {model}")


@pytest.mark.parametrize("filt", ["nearest", "bilinear", "trilinear"])
@pytest.mark.parametrize("wrap", ["repeat", "clamp"])
def test_textured_with_mipmaps(r, filt, wrap):
    """A tiled checker on a plane seen at a grazing angle and a torus: every mip level is used."""
    g = torch.Generator().manual_seed(5)
    tex = Texture(checker(8, (0.9, 0.85, 0.8), (0.15, 0.25, 0.6)) * (0.8 + 0.2 * torch.rand(64, 64, 1, generator=g)))
    floor = plane(8.0, 6)
    floor = replace(floor, uvs=floor.uvs * 6.0 - 1.0)  # tiles (repeat) or edge texels (clamp)
    h = r.upload([floor.transformed(translate(0.0, -0.6, 0.0)), torus(0.7, 0.25, 48, 24)])
    gl, ref = _both(r, h, _camera((0.0, 0.9, 3.5), (0.0, -0.3, -1.0)), lights=LIGHTS, textures=tex,
                    texture_filter=filt, texture_wrap=wrap, gamma=2.2)
    _assert_parity(gl, ref, f"texture {filt} {wrap}")


def test_per_material_textures_transforms_and_gamma_on_the_demo_scene(r):
    scene = r.upload([
        plane(4.5, 4).transformed(translate(0.0, -0.8, 0.0)).with_material(0),
        cube(1.1).transformed(translate(-1.7, -0.25, 0.0)).with_material(1),
        uv_sphere(24, 48, 0.7).transformed(translate(0.0, -0.1, -0.6)).with_material(2),
        torus(0.55, 0.2, 48, 24).transformed(translate(1.7, -0.1, 0.2)).with_material(3),
    ])
    textures = [Texture(checker(4, (0.85, 0.85, 0.8), (0.3, 0.32, 0.38))),
                checker(2, (0.95, 0.55, 0.2), (0.2, 0.45, 0.9)), Texture(stripes(64)), None]
    cam = Camera.perspective((0.0, 2.2, 5.6), (0.0, -0.3, 0.0), fov_y=50.0, aspect=SIZE[1] / SIZE[0])
    for k in (0, 7):
        gl, ref = _both(r, scene, cam, lights=LIGHTS, textures=textures, material=Material(0.35, 48.0),
                        transforms=rotation_y(2 * math.pi * k / 24), texture_filter="trilinear", gamma=2.2,
                        attachments=("object_id", "material_id", "instance_id"))
        _assert_parity(gl, ref, f"demo scene, turn {k}")
        for name in ("object_id", "material_id", "instance_id"):
            same = gl.face_index == ref.face_index
            assert torch.equal(gl.extras[name][same], ref.extras[name][same]), name
        assert set(gl.extras["material_id"].unique().tolist()) == {-1, 0, 1, 2, 3}


def test_atlas_rects(r):
    atlas = torch.cat([checker(2, (1.0, 0.2, 0.2), (0.2, 0.2, 1.0)), stripes(16)], 1)  # [16, 32, 3]
    rects = torch.tensor([[0.02, 0.02, 0.48, 0.98], [0.52, 0.02, 0.98, 0.98]])
    h = r.upload([cube(1.0).transformed(translate(-0.7, 0.0, 0.0)).with_material(0),
                  uv_sphere(16, 32, 0.6).transformed(translate(0.8, 0.0, 0.0)).with_material(1)])
    for filt in ("bilinear", "trilinear"):
        gl, ref = _both(r, h, _camera((0.3, 1.0, 3.0)), lights=LIGHTS, textures=atlas, atlas_rects=rects,
                        texture_filter=filt)
        _assert_parity(gl, ref, f"atlas, {filt}")


def test_instances_transforms_and_several_views(r):
    h = r.upload(_colored_torus())
    inst = torch.eye(4).repeat(3, 1, 1)
    inst[:, :3, 3] = torch.tensor([[-1.6, 0.0, 0.0], [0.0, 0.4, -1.0], [1.6, 0.0, 0.3]])
    inst[1, :3, :3] = rotation_y(0.8)[:3, :3] * 0.7
    eyes = torch.tensor([[0.5, 2.5, 4.5], [-2.0, 1.0, 4.0]])
    cams = Camera.perspective(eyes, torch.zeros(2, 3), fov_y=60.0, aspect=SIZE[1] / SIZE[0])
    tf = rotation_y(0.3) @ translate(0.0, 0.1, 0.0)
    gl, ref = _both(r, h, cams, instances=inst, transforms=tf, lights=LIGHTS, textures=checker(2, (1.0, 1.0, 1.0), (0.4, 0.4, 0.4)),
                    attachments=("instance_id",))
    assert gl.image.shape == (2, *SIZE, 3)
    _assert_parity(gl, ref, "instances, transforms, two views")
    assert set(gl.extras["instance_id"].unique().tolist()) == {-1, 0, 1, 2}


def test_float64_renderer_and_cull(gl_available, gl_watch):
    r = Renderer(SIZE, backend="moderngl", dtype=torch.float64)
    gl_watch.add(r.backend)
    try:
        h = r.upload(cube(1.2))
        cam = _camera((0.0, 0.0, 0.3))  # inside the cube: culling empties the frame
        gl, ref = _both(r, h, cam, lights=LIGHTS)
        assert gl.image.dtype == torch.float64 and gl.depth.dtype == torch.float64
        _assert_parity(gl, ref, "inside a cube, float64")
        with torch.no_grad():
            culled = r.render(h, cam, cull_backfaces=True)
        assert r.stats.shading == "gl" and bool((culled.face_index == -1).all())
        outside = r.render(h, _camera(), cull_backfaces=True, lights=LIGHTS)
        want = r.render(h, _camera(), cull_backfaces=True, lights=LIGHTS, shading="torch")
        _assert_parity(outside, want, "culled cube")
    finally:
        r.backend.release()


def test_fallbacks_are_reported(r):
    h = r.upload(_colored_torus())
    cam = _camera()
    cases = [
        (dict(attachments=("normal",)), "G-buffer"),
        (dict(flat=True), "flat"),
        (dict(shading="torch"), "shading='torch'"),
    ]
    for kw, why in cases:
        frame = r.render(h, cam, lights=LIGHTS, **kw)
        assert r.stats.shading == "torch" and why in r.stats.shading_reason, (kw, r.stats.shading_reason)
        assert frame.image.shape == (1, *SIZE, 3)
    # a tensor that needs gradients: the torch pass runs, and the gradient arrives
    tex = checker(2, (1.0, 1.0, 1.0), (0.5, 0.5, 0.5)).requires_grad_(True)
    th = r.upload(torus(1.0, 0.35, 40, 20))
    frame = r.render(th, cam, lights=LIGHTS, textures=tex)
    assert r.stats.shading == "torch" and "`textures[0]` requires grad" in r.stats.shading_reason
    frame.image.sum().backward()
    assert tex.grad is not None and float(tex.grad.abs().sum()) > 0
    with torch.no_grad():  # the same call without grad mode is shaded in GL
        r.render(th, cam, lights=LIGHTS, textures=tex)
    assert r.stats.shading == "gl"
    frames = r.stats.frames
    assert r.stats.gl_frames < frames
    # soft mode and other backends are shaded in torch, saying why
    t = Renderer(SIZE, backend="torch", settings=RasterSettings(mode="soft"))
    t.render(t.upload(cube(1.0)), cam)
    assert t.stats.shading == "torch" and "no GL shading" in t.stats.shading_reason
    assert "soft mode" in r.backend.shading_capabilities["falls_back_for"]


def test_buffers_are_kept_and_resent_only_on_change(r):
    gl = r.backend
    h = r.upload(_colored_torus())
    tex = Texture(checker(4, (0.9, 0.9, 0.9), (0.2, 0.2, 0.2)))
    cam = _camera()
    with torch.no_grad():
        first = r.render(h, cam, lights=LIGHTS, textures=tex, texture_filter="trilinear")
        before = (gl.counters.attribute_uploads, gl.counters.texture_uploads, gl.counters.geometry_uploads)
        for _ in range(5):
            last = r.render(h, cam, lights=LIGHTS, textures=tex, texture_filter="trilinear")
    assert before == (1, 1, 1)
    assert (gl.counters.attribute_uploads, gl.counters.texture_uploads, gl.counters.geometry_uploads) == before
    assert gl.counters.vertex_uploads == 0
    assert torch.equal(first.image, last.image)
    assert first.image.data_ptr() != last.image.data_ptr()  # each frame owns its tensors
    with torch.no_grad():
        h.colors[:] = torch.tensor([1.0, 0.2, 0.2])  # in place: the shading buffers follow
        tex.image[:4] = 0.0
        red = r.render(h, cam, lights=LIGHTS, textures=tex, texture_filter="trilinear")
    assert (gl.counters.attribute_uploads, gl.counters.texture_uploads) == (before[0] + 1, before[1] + 1)
    ref = r.render(h, cam, lights=LIGHTS, textures=tex, texture_filter="trilinear", shading="torch")
    _assert_parity(red, ref, "after in-place changes")
    # releasing the handle frees its shading buffers with it
    held = len(gl.gl_objects())
    mine = len(h._gpu.objects())
    r.release(h)
    assert len(gl.gl_objects()) == held - mine and mine >= 6


def test_provoking_layout_gives_each_face_its_own_last_corner():
    """Face ids travel as a flat varying from each face's last corner: that corner must be the
    face's alone, and every corner must still be the same vertex."""
    import numpy as np

    from py_gpu.backends.gl_shading import provoking_layout

    faces = torus(1.0, 0.35, 12, 8).faces.numpy()
    V = int(faces.max()) + 1
    indices, rows, face_of = provoking_layout(faces, V)
    new = indices.reshape(-1, 3).astype(np.int64)
    assert np.array_equal(rows[new], faces)  # the same triangles, corners in the same order
    assert np.unique(new[:, 2]).size == faces.shape[0]  # one provoking corner per face
    assert np.array_equal(face_of[new[:, 2]], np.arange(faces.shape[0]))
    empty = provoking_layout(np.zeros((0, 3), np.int64), 0)
    assert [a.size for a in empty] == [0, 0, 0]


def test_readback_arrays_are_recycled_only_when_no_frame_holds_them(r):
    """A frame's tensors wrap the readback arrays: a held frame keeps its pixels, and an array
    comes back only after every tensor and view made from it is gone."""
    h = r.upload(_colored_torus())
    views = [_camera(), _camera(eye=(-2.0, 1.0, 2.5)), _camera(eye=(2.5, -1.0, 1.0))]
    with torch.no_grad():
        first = r.render(h, views[0], lights=LIGHTS)
        kept = (first.image.clone(), first.depth.clone(), first.face_index.clone(), first.alpha.clone())
        view = first.image[10:20]  # a view alone keeps the array busy
        ptrs = (first.image.data_ptr(), first.face_index.data_ptr(), first.alpha.data_ptr())
        del first
        second = r.render(h, views[1], lights=LIGHTS)
        assert second.image.data_ptr() != ptrs[0]
        assert (second.face_index.data_ptr(), second.alpha.data_ptr()) == ptrs[1:]  # nothing held those
        assert torch.equal(view, kept[0][10:20])
        del view
        third = r.render(h, views[2], lights=LIGHTS)
        assert third.image.data_ptr() == ptrs[0]
        assert not torch.equal(third.image, kept[0])
        again = r.render(h, views[0], lights=LIGHTS)
        assert again.image.data_ptr() != ptrs[0]  # `third` still holds it
    for got, want in zip((again.image, again.depth, again.face_index, again.alpha), kept):
        assert torch.equal(got, want)
    assert torch.equal(second.alpha, (second.face_index >= 0).float()[..., None])


def test_gl_frame_decodes_its_own_readback_on_first_use(r):
    """``GLFrame`` decodes depth, face ids and alpha when first read: a frame read after later
    renders gives what it gave at once, ``dataclasses.replace`` keeps the decoded fields, and the
    fields stay frozen."""
    from dataclasses import FrozenInstanceError

    from py_gpu import Frame
    from py_gpu.renderer.gl_path import GLFrame

    h = r.upload(_colored_torus())
    with torch.no_grad():
        eager = r.render(h, _camera(), lights=LIGHTS)
        want = (eager.depth.clone(), eager.face_index.clone(), eager.alpha.clone())
        lazy = r.render(h, _camera(), lights=LIGHTS)  # nothing read yet
        for eye in [(-2.0, 1.0, 2.5), (2.5, -1.0, 1.0), (0.0, 3.0, 0.5)]:
            r.render(h, _camera(eye=eye), lights=LIGHTS)
    assert isinstance(lazy, GLFrame) and isinstance(lazy, Frame)
    assert "depth" not in lazy.__dict__
    for got, ref in zip((lazy.depth, lazy.face_index, lazy.alpha), want):
        assert torch.equal(got, ref)
    moved = replace(lazy, image=lazy.image * 0.5)
    assert torch.equal(moved.face_index, want[1]) and torch.equal(moved.depth, want[0])
    with pytest.raises(FrozenInstanceError):
        lazy.depth = want[0]


def test_face_ids_decode_from_the_id_pass_codes():
    """The id pass stores face + 1 as int32 (0 where empty): the decode gives the faces back, -1
    where empty, up to the largest id."""
    import numpy as np

    from py_gpu.backends.gl_shading import MAX_FACES, Recycler, decode_faces

    faces = np.array([0, 1, 2, 4095, 1 << 20, MAX_FACES - 1], np.int64)
    codes = np.zeros((1, 2, 4), np.int32)
    codes.reshape(-1)[: faces.size] = faces + 1
    face = decode_faces(Recycler(), codes)
    assert face.shape == (1, 2, 4) and face.dtype == np.int64
    assert face.reshape(-1).tolist() == faces.tolist() + [-1, -1]


def test_face_ids_are_drawn_only_when_read(r):
    """A frame is one draw per view; its id pass (one more per view, two with the trilinear
    pre-pass) runs the first time ``face_index`` is read, once."""
    h = r.upload(_colored_torus())
    cams = Camera.perspective(torch.tensor([[0.6, 1.8, 3.2], [-2.0, 1.0, 2.5]]), torch.zeros(2, 3), fov_y=55.0,
                              aspect=SIZE[1] / SIZE[0])
    tex = Texture(checker(4, (0.9, 0.9, 0.9), (0.2, 0.2, 0.2)))
    for kw, passes in ((dict(), 1), (dict(textures=tex, texture_filter="trilinear"), 2)):
        with torch.no_grad():
            before = r.backend.counters.draws
            frame = r.render(h, cams, lights=LIGHTS, **kw)
            shaded = r.backend.counters.draws - before
            assert (frame.image.shape, frame.depth.shape, frame.alpha.shape) == ((2, *SIZE, 3), (2, *SIZE), (2, *SIZE, 1))
            assert r.backend.counters.draws - before == shaded
            ids = frame.face_index
            assert r.backend.counters.draws - before == shaded + 2 * passes
            assert frame.face_index is ids and r.backend.counters.draws - before == shaded + 2 * passes
        _assert_covers_its_own_pixels(frame)
        assert bool((frame.face_index >= 0).any(-1).any(-1).all())


def test_a_frame_reads_its_own_face_ids_after_the_mesh_changes_or_goes(r):
    """Face ids read late are those of the frame's own draw: the id pass runs before in-place
    changes replace the shading buffers, before the handle is released, and before the backend is."""
    h = r.upload(_colored_torus())
    cam = _camera()
    with torch.no_grad():
        want = r.render(h, cam, lights=LIGHTS).face_index.clone()
        recolored = r.render(h, cam, lights=LIGHTS)  # face ids not read yet
        uploads = r.backend.counters.attribute_uploads
        h.colors[:] = 0.5  # in place: the same geometry, new shading buffers
        r.render(h, cam, lights=LIGHTS)
        assert r.backend.counters.attribute_uploads == uploads + 1
        assert torch.equal(recolored.face_index, want)
        early = r.render(h, cam, lights=LIGHTS)
        h.positions[:] = h.positions * 0.5  # in place: the next frame uploads new shading buffers
        moved = r.render(h, cam, lights=LIGHTS)
        assert not torch.equal(moved.face_index, want)
        assert torch.equal(early.face_index, want)
        released = r.render(h, cam, lights=LIGHTS)
        r.release(h)
        assert torch.equal(released.face_index, moved.face_index)
        h2 = r.upload(_colored_torus())
        last = r.render(h2, cam, lights=LIGHTS)
        r.backend.release()
        assert torch.equal(last.face_index, want)
    _assert_covers_its_own_pixels(last)


def test_more_faces_than_the_ids_hold_fall_back_to_torch(r, monkeypatch):
    """A mesh (times its instances) with more faces than the int32 face ids hold is shaded in
    torch, and ``RenderStats`` says why (the limit, about 2e9, is lowered here)."""
    import py_gpu.renderer.gl_path as gl_path

    h = r.upload(_colored_torus())
    monkeypatch.setattr(gl_path, "MAX_FACES", h.num_faces)
    with torch.no_grad():
        frame = r.render(h, _camera(), lights=LIGHTS)
    assert r.stats.shading == "torch" and "int32 face ids" in r.stats.shading_reason
    assert bool((frame.face_index >= 0).any()) and frame.face_index.max().item() < h.num_faces
    monkeypatch.setattr(gl_path, "MAX_FACES", h.num_faces + 1)
    with torch.no_grad():
        r.render(h, _camera(), lights=LIGHTS)
    assert r.stats.shading == "gl", r.stats.shading_reason


def _pixel_mesh(corners_px, size):
    """A white mesh of triangles given in image pixels (x right, y down) at depth 0.5, seen
    through a camera whose view and projection are the identity (positions are clip space)."""
    from py_gpu.mesh import MeshBatch

    H, W = size
    px = torch.tensor(corners_px, dtype=torch.float32).reshape(-1, 2)
    clip = torch.stack([2.0 * px[:, 0] / W - 1.0, 1.0 - 2.0 * px[:, 1] / H, torch.full_like(px[:, 0], 0.5)], -1)
    faces = torch.arange(clip.shape[0]).reshape(-1, 3)
    return MeshBatch(clip, faces), Camera(torch.eye(4)[None], torch.eye(4)[None])


@pytest.mark.parametrize("leg", [3000.0, 3500.0, 4000.0, 5250.0])
@pytest.mark.parametrize("size", [(64, 64), (64, 256), (256, 64)])
def test_triangles_thousands_of_pixels_long_are_never_lost(gl_available, gl_watch, size, leg):
    """Right triangles from the image's center with legs thousands of pixels long, and from the
    bottom-left corner tile: GL shading covers exactly the pixels the torch pass covers (llvmpipe
    lost such triangles when their box, cut at the framebuffer's sides, fell in its first tile)."""
    r = Renderer(size, backend="moderngl", background=(0.0, 0.0, 0.0))
    gl_watch.add(r.backend, what="renderer's ModernGL backend")
    H, W = size
    cases = [[(W / 2, H / 2), (W / 2, H / 2 + sy * leg), (W / 2 + sx * leg, H / 2)]
             for sy in (1.0, -1.0) for sx in (1.0, -1.0)]
    cases.append([(32.0, H - 32.0), (32.0, H - 32.0 + leg), (32.0 - leg, H - 32.0)])
    for corners in cases:
        mesh, cam = _pixel_mesh(corners, size)
        gl, ref = _both(r, r.upload(mesh), cam, lights=LIGHTS[:1])
        covered = ref.face_index >= 0
        assert bool(covered.any())
        assert torch.equal(gl.face_index >= 0, covered), f"triangle {corners} at {size}"
        assert torch.equal(torch.isfinite(gl.depth), covered), f"triangle {corners} at {size}"
    r.backend.release()


def test_lights_changed_in_place_are_seen_by_the_next_frame(r):
    """Light parameters reach GL through a one-entry memo keyed on the lights and the versions of
    their tensors: an in-place change to a light's tensor, or a new light, shows in the next frame."""
    h = r.upload(_colored_torus())
    color = torch.tensor([1.0, 0.9, 0.8])
    lights = [AmbientLight(intensity=0.2), DirectionalLight((-1.0, -1.0, -0.5), color, 0.8)]
    with torch.no_grad():
        first = r.render(h, _camera(), lights=lights).image.clone()
        assert torch.equal(r.render(h, _camera(), lights=list(lights)).image, first)
        color.mul_(0.25)
        dimmer, ref = _both(r, h, _camera(), lights=lights)
    _assert_parity(dimmer, ref, "after an in-place light change")
    assert float((first - dimmer.image).abs().max()) > 0.1
    with torch.no_grad():
        brighter, ref = _both(r, h, _camera(), lights=[lights[0], DirectionalLight((-1.0, -1.0, -0.5), intensity=1.5)])
    _assert_parity(brighter, ref, "a new light")
    assert float((brighter.image - dimmer.image).abs().max()) > 0.1


def test_one_texture_sampled_with_each_filter_and_wrap_in_turn(r):
    """A texture's GL filter and wrap are set only when a call asks for other ones: the same
    texture, rendered with each filter and wrap in turn (and back), matches the torch pass each time."""
    tex = Texture(checker(4, (0.9, 0.85, 0.8), (0.15, 0.25, 0.6)))
    floor = plane(4.0, 4)
    h = r.upload(replace(floor, uvs=floor.uvs * 3.0 - 1.0))
    cam = _camera((0.0, 1.2, 2.5), (0.0, 0.0, -0.5))
    images = {}
    for filt, wrap in [("nearest", "repeat"), ("bilinear", "repeat"), ("bilinear", "clamp"), ("nearest", "repeat")]:
        gl, ref = _both(r, h, cam, textures=tex, texture_filter=filt, texture_wrap=wrap)
        _assert_parity(gl, ref, f"{filt} {wrap}")
        images.setdefault((filt, wrap), gl.image.clone())
        assert torch.equal(images[(filt, wrap)], gl.image)
    assert float((images[("nearest", "repeat")] - images[("bilinear", "clamp")]).abs().max()) > 0.1


def test_frames_dropped_unread_leave_no_pending_id_passes_behind(r):
    """A render loop that never reads face ids keeps only a bounded list of waiting frames (weak
    references, pruned as it grows), and a frame still held is drawn when its buffers go."""
    h = r.upload(_colored_torus())
    with torch.no_grad():
        for _ in range(200):
            r.render(h, _camera(), lights=LIGHTS)
        held = r.render(h, _camera(), lights=LIGHTS)
    pending = h._gpu._shading.pending
    assert len(pending) <= 65 and sum(ref() is not None for ref in pending) == 1
    r.release(h)
    assert len(pending) == 0 and bool((held.face_index >= 0).any())
    _assert_covers_its_own_pixels(held)
