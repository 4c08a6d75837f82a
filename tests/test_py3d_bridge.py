"""The py_3d bridge's API: every keyword py_3d passes, the reference-compatible path, py_3d's own
``GPURenderer``, lazy construction, py_3d's conventions (pixel mapping, gamma, near and far), the
CPU fallback, backend parity, and py_gpu 0.0.1's calls.

These run against the real py3dengine whenever it is installed (it is a dev dependency, so CI
runs them); only an environment without it skips them.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

from py_gpu.adapters import py3d as py3d_adapter  # py_gpu's own module: an import error fails

# Skip only when the third-party package is absent. (Not pytest.importorskip("py_3d"): py3dengine
# 0.0.4 raises AttributeError at import outside Windows, which the adapter's _py3d() works around.)
if importlib.util.find_spec("py_3d") is None:
    pytest.skip('py_3d is not installed (pip install "py_gpu[py3d]", PyPI name py3dengine)', allow_module_level=True)


@pytest.fixture(scope="module")
def py_3d():
    return py3d_adapter._py3d()  # installed: importing it must work (with the Linux fix)


def _pixels(pb) -> np.ndarray:
    return np.frombuffer(pb.to_rgb_bytes(), dtype=np.uint8).reshape(pb.height, pb.width, 3)


def _bridge(**kw):
    return py3d_adapter.Py3DRasterRenderer(reference_compatible=False, **kw)


def _scene(py_3d, with_ground: bool):
    m = py_3d.Material
    scene = py_3d.Scene()
    scene.add(py_3d.Sphere((0, 1, 0), 1.0, m(color=(220, 80, 60), specular=0.4)))
    scene.add(py_3d.Box((2.2, 0.5, 0.5), (1, 1, 1), m(color=(60, 140, 220))))
    if with_ground:
        scene.add(py_3d.Plane((0, 0, 0), (0, 1, 0), m(color=(120, 200, 110)), size=20))
    scene.add_light(py_3d.Sun((-0.5, -1, 0.3)))
    return scene


def _view(py_3d, width=96, height=64, **kw):
    return py_3d.Camera(position=(0, 1.6, -5), target=(0.5, 0.8, 0)), py_3d.RenderSettings(width=width, height=height, **kw)


# ---- construction --------------------------------------------------------------------------------------
def test_accepts_every_keyword_py3d_passes(py_3d):
    # py_3d.GPURenderer, gpu_render_benchmark.py, fruit_bowl_demo.py, capsule_walk_demo.py
    r = py3d_adapter.Py3DRasterRenderer(reference_compatible=False, prefer_backend="auto", fast_materials=True)
    assert r.is_accelerated and r.fast_materials and r.backend == "py_gpu"
    r = py3d_adapter.Py3DRasterRenderer(reference_compatible=True, fast_materials=False, name="mine")
    assert not r.is_accelerated and r.name == "mine"
    backend = py_gpu_select("numpy")
    r = py3d_adapter.Py3DRasterRenderer(backend_impl=backend, reference_compatible=False)
    scene = _scene(py_3d, with_ground=False)
    cam, settings = _view(py_3d, 32, 24)
    r.render(scene, cam, settings)
    assert r.backend_impl is backend and r.capabilities.backend == backend.capabilities.name


def test_refuses_unknown_keywords_and_bad_values():
    with pytest.raises(TypeError):
        py3d_adapter.Py3DRasterRenderer(fast_material=True)  # misspelled: never silently ignored
    with pytest.raises(TypeError, match="reference_compatible"):
        py3d_adapter.Py3DRasterRenderer(reference_compatible="no")
    with pytest.raises(TypeError, match="prefer_backend"):
        py3d_adapter.Py3DRasterRenderer(prefer_backend=3)
    with pytest.raises(RuntimeError, match="unknown backend"):
        py3d_adapter.Py3DRasterRenderer(prefer_backend="vulkan")


def test_constructing_loads_neither_torch_nor_gl():
    """py_3d.GPURenderer() constructs the bridge without importing torch or moderngl (they load
    with the first frame), so construction takes a fraction of a second."""
    code = (
        "import sys\n"
        "from py_gpu.adapters.py3d import apply_import_fix\n"
        "apply_import_fix()\n"
        "import py_3d\n"
        "r = py_3d.GPURenderer()\n"
        "assert r.is_accelerated, 'GPURenderer found no bridge'\n"
        "assert 'torch' not in sys.modules and 'moderngl' not in sys.modules, 'construction loaded torch or GL'\n"
        "s = py_3d.Scene(); s.add(py_3d.Sphere((0, 0, 0), 1)); s.add_light(py_3d.Sun((0, -1, 1)))\n"
        "r.render(s, py_3d.Camera(), py_3d.RenderSettings(width=16, height=12))\n"
        "assert 'torch' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- the reference-compatible path -----------------------------------------------------------------------
def test_reference_compatible_delegates_to_one_cached_cpu_renderer(py_3d, monkeypatch):
    made = []
    original = py_3d.CPURenderer.__init__

    def counting(self, *a, **k):
        made.append(k)
        original(self, *a, **k)

    monkeypatch.setattr(py_3d.CPURenderer, "__init__", counting)
    scene = _scene(py_3d, with_ground=False)
    cam, settings = _view(py_3d, 48, 32)
    r = py3d_adapter.Py3DRasterRenderer()  # reference_compatible=True is the default, as in 0.0.1
    first = _pixels(r.render(scene, cam, settings))
    for _ in range(3):
        again = _pixels(r.render(scene, cam, settings))
    assert len(made) == 1 and made[0] == {}  # one CPURenderer, with its static-geometry cache on
    monkeypatch.setattr(py_3d.CPURenderer, "__init__", original)
    assert np.array_equal(first, _pixels(py_3d.CPURenderer().render(scene, cam, settings)))
    assert np.array_equal(first, again)
    assert r.capabilities.accelerated is False and r.capabilities.backend is None


# ---- py_3d's GPURenderer (py_3d's own tests of the bridge, run against py3dengine) ------------------------
def test_gpu_renderer_is_accelerated_and_renders_through_the_bridge(py_3d):
    renderer = py_3d.GPURenderer()
    assert renderer.is_accelerated
    assert isinstance(renderer.backend_renderer, py3d_adapter.Py3DRasterRenderer)
    assert renderer.name == "py_gpu accelerated renderer"
    scene = py_3d.Scene()
    scene.add(py_3d.Sphere((0, 0, 0), 1.0, py_3d.Material(color=(200, 80, 40))))
    scene.add_light(py_3d.Sun(direction=(0, 0, 1), intensity=1.0))
    camera = py_3d.Camera(position=(0, 0, -4), target=(0, 0, 0))
    settings = py_3d.RenderSettings(width=48, height=48, sphere_segments=10, sphere_rings=5)
    buffer = py_3d.RenderEngine(renderer).render(scene, camera, settings)
    assert (buffer.width, buffer.height) == (48, 48)
    assert any(pixel != py_3d.Color(0, 0, 0) for pixel in buffer.pixels)
    assert renderer.backend_renderer.stats.frames == 1  # drawn by py_gpu, not by the fallback
    assert renderer.backend_renderer.stats.cpu_frames == 0


def test_gpu_renderer_strict_mode_renders(py_3d):
    renderer = py_3d.GPURenderer(allow_cpu_fallback=False)
    assert renderer.is_accelerated
    buffer = py_3d.RenderEngine(renderer).render(py_3d.Scene(), py_3d.Camera(), py_3d.RenderSettings(width=8, height=8))
    assert buffer.width == 8 and set(buffer.pixels) == {py_3d.Color(0, 0, 0)}


# ---- py_3d's conventions ---------------------------------------------------------------------------------
def test_points_land_where_py3d_maps_them(py_3d):
    """NDC -1 and +1 map to pixel centers 0 and W - 1 (``(ndc + 1) * (W - 1) / 2``), not to the
    image edges: a point on the frustum's edge lands in the last column, as in CPURenderer."""
    width, height = 41, 23
    cam = py_3d.Camera(position=(0, 0, -5), target=(0, 0, 0), fov_degrees=60)
    settings = py_3d.RenderSettings(width=width, height=height, background=(0, 0, 0))
    half_h = 5 * np.tan(np.radians(30))
    half_w = half_h * width / height
    scene = py_3d.Scene()
    for k, (x, y) in enumerate([(half_w, 0), (-half_w, 0), (0, half_h), (0, -half_h), (0.3, 0.2), (half_w * 0.5, 0.7)]):
        scene.add(py_3d.Point3((x, y, 0), py_3d.Material(color=(40 * k + 30, 255, 255))))
    ref = _pixels(py_3d.CPURenderer().render(scene, cam, settings))
    ours = _pixels(_bridge().render(scene, cam, settings))
    assert np.array_equal(ours, ref)
    assert ref[height // 2, width - 1].any() and ref[height // 2, 0].any()


def test_gamma_truncates_like_py3d(py_3d):
    from py_gpu.adapters.py3d import shading
    from py_3d.render import _apply_gamma

    levels = torch.arange(256, dtype=torch.float64)[:, None].expand(256, 3)
    for g in (0.45, 1.0, 1.05, 1.12, 2.2):
        want = [_apply_gamma(py_3d.Color(v, v, v), g).r for v in range(256)]
        assert shading.gamma(levels, g)[:, 0].tolist() == [float(v) for v in want]


def test_flat_lighting_is_py3ds_bit_for_bit(py_3d):
    """Face colors come from py_3d's own model: Material.shade of _lighting_channels, truncated."""
    from py_3d.render import _lighting_channels

    from py_gpu.adapters.py3d import frame, scene as scene_mod, shading

    m = py_3d.Material(color=(200, 150, 90), absorption=(0.1, 0.2, 0.0), specular=0.5, roughness=0.3, shininess=9,
                       emission=(10, 0, 5), reflectivity=0.2)
    s = py_3d.Scene()
    s.add(py_3d.Sphere((0, 0, 0), 1.0, m))
    s.add_light(py_3d.Sun((-0.3, -1, 0.4), color=(255, 230, 200), intensity=0.8),
                py_3d.Lamp((1.5, 1, -2), color=(100, 150, 255), intensity=3.0, radius=5.0))
    cam, settings = py_3d.Camera(position=(0.5, 0.8, -3)), py_3d.RenderSettings(ambient=0.1, light_wrap=0.2,
                                                                                 bounce_light=0.3)
    cache = scene_mod.SceneCache(torch.device("cpu"))
    geometry, _ = cache.frame(s.objects, settings)
    view = frame.View(cam, settings.width, settings.height, torch.device("cpu"))
    lights, _ = shading.scene_lights(s.lights)
    to_eye = scene_mod.vec_normalized(view.eye - geometry.center, (0.0, 0.0, -1.0))
    normal = geometry.face_normal
    normal = torch.where((scene_mod.vec_dot(normal, to_eye) < 0)[:, None], -normal, normal)
    diffuse, specular = shading.lighting(geometry.center, normal, to_eye, geometry.face_material, geometry.table,
                                         lights, settings)
    ours = shading.shade(diffuse, specular, geometry.table.color[geometry.face_material], geometry.face_material,
                         geometry.table, settings.ambient)
    for f, tri in enumerate(py_3d.render._triangles_for(s.objects[0], settings)):
        center, n = tri.center(), tri.normal()
        view_dir = (cam.position - center).normalized(py_3d.Vec3(0.0, 0.0, -1.0))
        if n.dot(view_dir) < 0:
            n = -n
        lit = _lighting_channels(s, center, n, view_dir, m, settings, tri)
        want = m.shade(lit.diffuse, ambient=settings.ambient, specular_light=lit.specular).to_tuple()
        assert tuple(int(v) for v in ours[f].tolist()) == want, f


def test_far_plane_drops_the_whole_triangle_like_py3d(py_3d):
    scene = py_3d.Scene()
    scene.add(py_3d.Triangle((-1, -1, 2), (1, -1, 2), (0, 1, 40), py_3d.Material(emission=(255, 255, 255))))
    scene.add(py_3d.Triangle((-1, -1, 2), (1, -1, 2), (0, 1, 3), py_3d.Material(emission=(0, 255, 0))))
    cam = py_3d.Camera(position=(0, 0, -1), target=(0, 0, 0), far=20.0)
    settings = py_3d.RenderSettings(width=40, height=30)
    ref = _pixels(py_3d.CPURenderer().render(scene, cam, settings))
    assert np.array_equal(_pixels(_bridge().render(scene, cam, settings)), ref)
    assert not (ref == 255).all(-1).any()  # the triangle reaching past `far` is not drawn


def test_ground_plane_through_the_camera_is_clipped_not_dropped(py_3d):
    """The one intended difference: CPURenderer drops a triangle with a corner behind ``near``;
    the bridge clips it and draws the part in front."""
    scene = _scene(py_3d, with_ground=True)
    cam, settings = _view(py_3d, background=(0, 0, 0))
    batch = py3d_adapter.scene_to_triangle_batch(scene, cam, settings, dtype=torch.float64)
    assert bool((batch.vertices[0, :, 3] < cam.near).any()), "the scene should reach behind the camera"
    out = _pixels(_bridge(prefer_backend="numpy").render(scene, cam, settings))
    ref = _pixels(py_3d.CPURenderer().render(scene, cam, settings))
    assert (out[-1] != 0).any(-1).all(), "the ground must fill the bottom row of the image"
    assert not (ref[-1] != 0).any(-1).any(), "CPURenderer drops it"


# ---- fallback and capabilities ---------------------------------------------------------------------------
def test_a_light_torch_cannot_evaluate_falls_back_with_one_warning(py_3d):
    class Spot:
        def sample(self, point):
            return py_3d.LightSample(py_3d.Vec3(0, 1, 0), py_3d.Color(255, 255, 255), 0.5)

    scene = _scene(py_3d, with_ground=False)
    scene.add_light(Spot())
    cam, settings = _view(py_3d, 32, 24)
    r = _bridge()
    with pytest.warns(RuntimeWarning, match="CPURenderer"):
        first = _pixels(r.render(scene, cam, settings))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once only
        _pixels(r.render(scene, cam, settings))
    assert np.array_equal(first, _pixels(py_3d.CPURenderer().render(scene, cam, settings)))
    assert r.stats.cpu_frames == 2 and r.stats.frames == 0
    assert any("light" in item for item in r.capabilities.cpu_fallback)
    caps = r.capabilities
    assert any("ray_traced_shadows" in item for item in caps.computed)
    assert any("reflection_bounces" in item for item in caps.computed)
    assert caps.fast_materials_skips and caps.differences


# ---- backends and py_gpu 0.0.1's calls ---------------------------------------------------------------------
def test_silhouettes_match_py3d_reference_renderer(py_3d):
    scene = _scene(py_3d, with_ground=False)
    cam, settings = _view(py_3d, 160, 90, ambient=0.2, background=(10, 12, 30))
    ref = _pixels(py3d_adapter.Py3DRasterRenderer().render(scene, cam, settings))
    ours = _pixels(_bridge(prefer_backend="numpy").render(scene, cam, settings))
    bg = np.array([10, 12, 30])
    agree = ((ref != bg).any(-1) == (ours != bg).any(-1)).mean()
    assert agree > 0.998, f"coverage agrees on only {agree:.4f} of pixels"


@pytest.mark.parametrize("backend", ["reference", "torch", "moderngl"])
def test_backends_agree_through_the_bridge(py_3d, backend):
    from py_gpu.adapters.py3d import fixtures

    scene, cam, kw = fixtures.build("materials")
    settings = fixtures.settings(kw, 64, 40)
    want = _pixels(_bridge(prefer_backend="numpy").render(scene, cam, settings))
    try:
        got = _pixels(_bridge(prefer_backend=backend).render(scene, cam, settings))
    except RuntimeError as exc:  # pragma: no cover - moderngl without a GL context
        if backend == "moderngl" and "cannot run here" in str(exc):
            pytest.skip(str(exc))
        raise
    if backend == "moderngl":  # GL ties on exact edges may differ from the CPU rule
        assert (got != want).any(-1).mean() < 0.002
    else:
        assert np.array_equal(got, want)


def test_seed_batch_of_a_scene(py_3d):
    scene = _scene(py_3d, with_ground=True)
    scene.add(py_3d.Line3((0, 0.2, 0), (2, 1.5, 1), py_3d.Material(color=(255, 255, 0))))
    cam, settings = _view(py_3d, 64, 40)
    seed = py3d_adapter.scene_to_raster_batch(scene, cam, settings)
    assert len(seed.triangles) > 0
    fb = py_gpu_select("numpy").render(seed, 64, 40)
    assert any(px != (0, 0, 0) for px in fb.pixels)


def py_gpu_select(name):
    import py_gpu

    return py_gpu.select_backend(name)


def test_render_into_target(py_3d):
    scene = _scene(py_3d, with_ground=False)
    cam, settings = _view(py_3d, 32, 24)
    target = py_3d.PixelBuffer.from_rgb_bytes(32, 24, bytes(32 * 24 * 3))
    out = _bridge(prefer_backend="numpy").render(scene, cam, settings, target)
    assert out is target
    assert np.array_equal(_pixels(out), _pixels(_bridge(prefer_backend="numpy").render(scene, cam, settings)))
    with pytest.raises(ValueError):
        _bridge().render(scene, cam, settings, py_3d.PixelBuffer.new(4, 4))
    with pytest.raises(ValueError):
        py3d_adapter.frame_to_py3d_pixel_buffer(__import__("py_gpu").FrameBuffer.new(4, 4), target)


# ---- python -m py_gpu.adapters.py3d ------------------------------------------------------------------------
def test_runner_applies_the_import_fix_and_runs_the_script(py_3d, tmp_path):
    (tmp_path / "helper.py").write_text("VALUE = 7\n")
    script = tmp_path / "show.py"
    script.write_text(
        "import sys\n"
        "import py_3d\n"  # fails on Linux without the fix
        "import helper\n"  # the script's directory is on sys.path, as with `python script.py`
        "print(__name__, sys.argv[1:], helper.VALUE)\n"
        "sys.exit(3)\n"
    )
    run = subprocess.run([sys.executable, "-m", "py_gpu.adapters.py3d", str(script), "a", "--b"],
                         capture_output=True, text=True)
    assert run.returncode == 3, run.stderr
    assert run.stdout.strip() == "__main__ ['a', '--b'] 7"


def test_runner_usage_errors():
    run = subprocess.run([sys.executable, "-m", "py_gpu.adapters.py3d"], capture_output=True, text=True)
    assert run.returncode == 2 and "usage" in run.stderr
    run = subprocess.run([sys.executable, "-m", "py_gpu.adapters.py3d", "no_such_script.py"], capture_output=True,
                         text=True)
    assert run.returncode == 2 and "no such script" in run.stderr
