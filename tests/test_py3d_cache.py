"""No per-frame work for static geometry: the bridge converts a py_3d object once, finds it again
by identity (CPURenderer's cache key) or by value (a scene rebuilt every frame), translates a moved
object instead of rebuilding it, rebuilds only a changed object, and never lights per triangle in
Python."""

from __future__ import annotations

import dataclasses
import importlib.util

import numpy as np
import pytest

py3d_adapter = pytest.importorskip("py_gpu.adapters.py3d")


@pytest.fixture(scope="module")
def py_3d():
    if importlib.util.find_spec("py_3d") is None:  # pragma: no cover - py3dengine is a dev dependency
        pytest.skip("py3dengine is not installed")
    return py3d_adapter._py3d()


def _pixels(pb) -> np.ndarray:
    return np.frombuffer(pb.to_rgb_bytes(), dtype=np.uint8).reshape(pb.height, pb.width, 3)


@pytest.fixture
def spy(py_3d, monkeypatch):
    """Counts ``to_triangles`` calls per py_3d class."""
    calls: dict[str, int] = {}
    for cls in (py_3d.Sphere, py_3d.Box, py_3d.Plane, py_3d.Mesh, py_3d.Bowl, py_3d.TransformedMesh):
        original = cls.to_triangles

        def counting(self, *a, _original=original, _name=cls.__name__, **k):
            calls[_name] = calls.get(_name, 0) + 1
            return _original(self, *a, **k)

        monkeypatch.setattr(cls, "to_triangles", counting)
    return calls


def _objects(py_3d, texture=None):
    m = py_3d.Material
    return [
        py_3d.Plane((0, -1, 0), (0, 1, 0), m(color=(120, 200, 110), texture=texture), size=6),
        py_3d.Sphere((-0.8, 0, 0), 0.6, m(color=(220, 80, 60), specular=0.4)),
        py_3d.Box((0.9, -0.3, 0.2), (0.7, 0.7, 0.7), m(color=(60, 140, 220))),
        py_3d.Mesh([py_3d.Triangle((-2, 1, 1), (-1, 1.5, 1), (-1.5, 0.5, 1), m(color=(250, 250, 0)))]),
    ]


def _scene(py_3d, objects):
    scene = py_3d.Scene()
    scene.add(*objects)
    scene.add_light(py_3d.Sun((-0.4, -1, 0.5)), py_3d.Lamp((1, 2, -2), intensity=2.0))
    return scene


def _view(py_3d):
    return py_3d.Camera(position=(0, 1.2, -4), target=(0, 0, 0)), py_3d.RenderSettings(width=64, height=40, ambient=0.1)


def test_unchanged_frames_convert_nothing(py_3d, spy):
    texture = py_3d.PixelBuffer(4, 4, [py_3d.Color(10 * i, 200, 90) for i in range(16)])
    scene = _scene(py_3d, _objects(py_3d, texture))
    cam, settings = _view(py_3d)
    r = py3d_adapter.Py3DRasterRenderer(reference_compatible=False)
    r.render(scene, cam, settings)
    first = dict(spy)
    assert sum(first.values()) == 4
    for _ in range(10):
        r.render(scene, cam, settings)
    assert spy == first, "to_triangles was called after the first frame"
    stats = r.stats.scene
    assert (stats.conversions, stats.moves, stats.assemblies, stats.texture_uploads) == (4, 0, 1, 1)


def test_a_scene_rebuilt_every_frame_from_equal_objects_converts_nothing(py_3d, spy):
    cam, settings = _view(py_3d)
    r = py3d_adapter.Py3DRasterRenderer(reference_compatible=False)
    r.render(_scene(py_3d, _objects(py_3d)), cam, settings)
    first = dict(spy)
    for _ in range(10):
        r.render(_scene(py_3d, _objects(py_3d)), cam, settings)  # new, equal objects each frame
    assert spy == first
    assert r.stats.scene.conversions == 4 and r.stats.scene.assemblies == 1


def test_moving_one_object_rebuilds_nothing(py_3d, spy):
    objects = _objects(py_3d)
    cam, settings = _view(py_3d)
    r = py3d_adapter.Py3DRasterRenderer(reference_compatible=False)
    r.render(_scene(py_3d, objects), cam, settings)
    first = dict(spy)
    for step in range(1, 4):
        objects[1] = dataclasses.replace(objects[1], center=py_3d.Vec3(-0.8 + 0.1 * step, 0.05 * step, 0.0))
        objects[2] = dataclasses.replace(objects[2], center=py_3d.Vec3(0.9, -0.3 + 0.1 * step, 0.2))
        moved = _scene(py_3d, objects)
        got = _pixels(r.render(moved, cam, settings))
        assert spy == first, "a moved object was rebuilt"
        assert r.stats.scene.moves == 2 * step and r.stats.scene.conversions == 4
        fresh = _pixels(py3d_adapter.Py3DRasterRenderer(reference_compatible=False).render(moved, cam, settings))
        assert np.array_equal(got, fresh)  # translated geometry renders as freshly converted geometry
        first = dict(spy)  # (the fresh renderer converted its own copies)


def test_rotating_a_sphere_or_transformed_mesh_rebuilds_nothing(py_3d, spy):
    m = py_3d.Material
    tri = py_3d.Triangle((0, 0, 0), (0.6, 0, 0.1), (0.2, 0.5, 0), m(color=(250, 200, 0)), normal_a=(0, 0, -1),
                         normal_b=(0, 0.2, -1), normal_c=(0.1, 0, -1))
    objects = [py_3d.Sphere((-0.6, 0, 0), 0.6, m(color=(220, 80, 60), specular=0.4)),
               py_3d.TransformedMesh(py_3d.Mesh([tri]), center=(0.8, -0.2, 0))]
    cam, _ = _view(py_3d)
    settings = py_3d.RenderSettings(width=64, height=40, ambient=0.1, smooth_shading=True)
    r = py3d_adapter.Py3DRasterRenderer(reference_compatible=False)
    r.render(_scene(py_3d, objects), cam, settings)
    first = dict(spy)
    for step in range(1, 3):
        turn = py_3d.Vec3(0.3 * step, 0.7 * step, -0.2 * step)
        objects = [dataclasses.replace(objects[0], rotation=turn, center=py_3d.Vec3(-0.6, 0.1 * step, 0)),
                   dataclasses.replace(objects[1], rotation=turn)]
        scene = _scene(py_3d, objects)
        got = _pixels(r.render(scene, cam, settings))
        assert spy == first, "a rotated object was rebuilt"
        fresh = _pixels(py3d_adapter.Py3DRasterRenderer(reference_compatible=False).render(scene, cam, settings))
        assert np.array_equal(got, fresh)
        ref = _pixels(py_3d.CPURenderer().render(scene, cam, settings))
        assert np.abs(got.astype(int) - ref.astype(int)).mean() < 0.05
        first = dict(spy)
    assert r.stats.scene.moves == 4 and r.stats.scene.conversions == 2


def test_changing_one_object_rebuilds_only_it(py_3d, spy):
    objects = _objects(py_3d)
    cam, settings = _view(py_3d)
    r = py3d_adapter.Py3DRasterRenderer(reference_compatible=False)
    r.render(_scene(py_3d, objects), cam, settings)
    before = dict(spy)
    objects[1] = dataclasses.replace(objects[1], radius=0.8)
    r.render(_scene(py_3d, objects), cam, settings)
    assert {k: spy[k] - before.get(k, 0) for k in spy} == {"Plane": 0, "Sphere": 1, "Box": 0, "Mesh": 0}
    assert r.stats.scene.conversions == 5


def test_sphere_resolution_is_part_of_the_key(py_3d, spy):
    scene = _scene(py_3d, _objects(py_3d))
    cam, settings = _view(py_3d)
    r = py3d_adapter.Py3DRasterRenderer(reference_compatible=False)
    r.render(scene, cam, settings)
    r.render(scene, cam, dataclasses.replace(settings, sphere_segments=24))
    assert spy["Sphere"] == 2 and spy["Box"] == 1


def test_lighting_is_never_evaluated_per_triangle_in_python(py_3d, monkeypatch):
    """py_3d's per-triangle functions are never called by a bridge frame (the lights are read
    once per frame: a Sun's direction is sampled once)."""
    from py_3d import render

    calls = {"shade": 0, "lighting": 0, "sample": 0}

    def count(name, fn):
        def wrapper(*a, **k):
            calls[name] += 1
            return fn(*a, **k)
        return wrapper

    monkeypatch.setattr(py_3d.Material, "shade", count("shade", py_3d.Material.shade))
    monkeypatch.setattr(render, "_lighting_channels", count("lighting", render._lighting_channels))
    monkeypatch.setattr(py_3d.Lamp, "sample", count("sample", py_3d.Lamp.sample))
    scene = _scene(py_3d, _objects(py_3d))
    cam, _ = _view(py_3d)
    settings = py_3d.RenderSettings(width=64, height=40, smooth_shading=True, ray_traced_shadows=True,
                                    reflection_bounces=1)
    r = py3d_adapter.Py3DRasterRenderer(reference_compatible=False)
    for _ in range(3):
        r.render(scene, cam, settings)
    assert calls == {"shade": 0, "lighting": 0, "sample": 0}


def test_a_texture_whose_pixels_are_replaced_is_read_again(py_3d):
    texture = py_3d.PixelBuffer(4, 4, [py_3d.Color(10 * i, 200, 90) for i in range(16)])
    scene = _scene(py_3d, _objects(py_3d, texture))
    cam, settings = _view(py_3d)
    r = py3d_adapter.Py3DRasterRenderer(reference_compatible=False)
    before = _pixels(r.render(scene, cam, settings))
    texture.pixels = [py_3d.Color(250, 10 * i, 30) for i in range(16)]
    after = _pixels(r.render(scene, cam, settings))
    assert r.stats.scene.texture_uploads == 2 and r.stats.scene.conversions == 4
    assert not np.array_equal(before, after)
    assert np.array_equal(after, _pixels(py3d_adapter.Py3DRasterRenderer(reference_compatible=False).render(
        scene, cam, settings)))
