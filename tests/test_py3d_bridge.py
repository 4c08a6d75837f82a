"""The py_3d bridge: py_gpu 0.0.1's Py3DRasterRenderer API, near-plane clipping, backend parity."""

from __future__ import annotations

import importlib.util

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
    return py3d_adapter._py3d()


def _pixels(pb) -> np.ndarray:
    return np.array([[c.r, c.g, c.b] for c in pb.pixels], dtype=np.uint8).reshape(pb.height, pb.width, 3)


def _scene(py_3d, with_ground: bool):
    m = py_3d.Material
    scene = py_3d.Scene()
    scene.add(py_3d.Sphere((0, 1, 0), 1.0, m(color=(220, 80, 60), specular=0.4)))
    scene.add(py_3d.Box((2.2, 0.5, 0.5), (1, 1, 1), m(color=(60, 140, 220))))
    if with_ground:
        scene.add(py_3d.Plane((0, 0, 0), (0, 1, 0), m(color=(120, 200, 110)), size=20))
    scene.add_light(py_3d.Sun((-0.5, -1, 0.3)))
    return scene


def test_silhouettes_match_py3d_reference_renderer(py_3d):
    scene = _scene(py_3d, with_ground=False)
    cam = py_3d.Camera(position=(0, 1.6, -5), target=(0.5, 0.8, 0))
    settings = py_3d.RenderSettings(width=160, height=90, ambient=0.2, background=(10, 12, 30))
    ref = _pixels(py3d_adapter.Py3DRasterRenderer().render(scene, cam, settings))
    ours = _pixels(py3d_adapter.Py3DRasterRenderer(reference_compatible=False, prefer_backend="numpy").render(scene, cam, settings))
    bg = np.array([10, 12, 30])
    agree = ((ref != bg).any(-1) == (ours != bg).any(-1)).mean()
    assert agree > 0.97, f"coverage agrees on only {agree:.3f} of pixels"
    covered = (ours != bg).any(-1)
    assert 0.05 < covered.mean() < 0.5


def test_ground_plane_through_the_camera_is_clipped_not_dropped(py_3d):
    scene = _scene(py_3d, with_ground=True)
    cam = py_3d.Camera(position=(0, 1.6, -5), target=(0.5, 0.8, 0))
    settings = py_3d.RenderSettings(width=96, height=64, background=(0, 0, 0))
    batch = py3d_adapter.scene_to_triangle_batch(scene, cam, settings, dtype=torch.float64)
    assert bool((batch.vertices[0, :, 3] < cam.near).any()), "the scene should reach behind the camera"
    out = _pixels(py3d_adapter.Py3DRasterRenderer(reference_compatible=False, prefer_backend="numpy").render(scene, cam, settings))
    assert (out[-1] != 0).any(-1).all(), "the ground must fill the bottom row of the image"


def test_backends_agree_through_the_bridge(py_3d):
    scene = _scene(py_3d, with_ground=True)
    cam = py_3d.Camera(position=(0.3, 1.2, -4), target=(0.5, 0.8, 0))
    settings = py_3d.RenderSettings(width=64, height=40)
    a = _pixels(py3d_adapter.Py3DRasterRenderer(reference_compatible=False, prefer_backend="numpy").render(scene, cam, settings))
    b = _pixels(py3d_adapter.Py3DRasterRenderer(reference_compatible=False, prefer_backend="reference").render(scene, cam, settings))
    assert np.array_equal(a, b)
    seed = py3d_adapter.scene_to_raster_batch(scene, cam, settings)
    assert len(seed.triangles) > 0


def test_render_into_target(py_3d):
    scene = _scene(py_3d, with_ground=False)
    cam = py_3d.Camera(position=(0, 1.6, -5), target=(0.5, 0.8, 0))
    settings = py_3d.RenderSettings(width=32, height=24)
    target = py_3d.PixelBuffer.from_rgb_bytes(32, 24, bytes(32 * 24 * 3))
    out = py3d_adapter.Py3DRasterRenderer(reference_compatible=False, prefer_backend="numpy").render(scene, cam, settings, target)
    assert out is target
    with pytest.raises(ValueError):
        py3d_adapter.frame_to_py3d_pixel_buffer(__import__("py_gpu").FrameBuffer.new(4, 4), target)
