"""Input validation of the contracts and the public entry points: clear errors, never garbage."""

from __future__ import annotations

import math

import pytest
import torch

import py_gpu
from py_gpu import BlendSettings, Fragments, Frame, FrameBuffer, RasterBatch, RasterSettings, ScreenTriangle, ScreenVertex, TriangleBatch

TRI = torch.tensor([[[0.0, 0.0, 0.5], [4.0, 0.0, 0.5], [0.0, 4.0, 0.5]]])
FACES = torch.tensor([[0, 1, 2]])


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_vertices(bad):
    v = TRI.clone()
    v[0, 1, 0] = bad
    with pytest.raises(ValueError, match="vertices.*NaN or inf"):
        TriangleBatch(v, FACES)


@pytest.mark.parametrize("faces", [[[0, 1, 3]], [[-1, 0, 1]]])
def test_face_index_out_of_range(faces):
    with pytest.raises(ValueError, match="faces.*out of range"):
        TriangleBatch(TRI, torch.tensor(faces))


@pytest.mark.parametrize(
    "verts,match",
    [(torch.zeros(1, 3, 2), "vertices.*shape"), (torch.zeros(1, 1, 3, 3), "vertices.*shape"), (torch.zeros(3), "vertices.*shape")],
)
def test_wrong_vertex_shape(verts, match):
    with pytest.raises(ValueError, match=match):
        TriangleBatch(verts, FACES)


def test_wrong_dtypes():
    with pytest.raises(TypeError, match="vertices.*floating"):
        TriangleBatch(TRI.long(), FACES)
    with pytest.raises(TypeError, match="faces.*int64"):
        TriangleBatch(TRI, FACES.float())
    with pytest.raises(TypeError, match="vertex_colors.*floating"):
        TriangleBatch(TRI, FACES, vertex_colors=torch.ones(1, 3, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match="faces.*shape"):
        TriangleBatch(TRI, torch.tensor([[0, 1, 2, 0]]))


def test_wrong_color_shapes():
    with pytest.raises(ValueError, match="vertex_colors.*shape"):
        TriangleBatch(TRI, FACES, vertex_colors=torch.ones(1, 4, 3))
    with pytest.raises(ValueError, match="face_colors.*shape"):
        TriangleBatch(TRI, FACES, face_colors=torch.ones(1, 2, 3))
    with pytest.raises(ValueError, match="batch size"):
        TriangleBatch(TRI, FACES, face_colors=torch.ones(2, 1, 3))
    with pytest.raises(ValueError, match="not both"):
        TriangleBatch(TRI, FACES, vertex_colors=torch.ones(1, 3, 3), face_colors=torch.ones(1, 1, 3))
    with pytest.raises(ValueError, match="face_colors.*NaN"):
        TriangleBatch(TRI, FACES, face_colors=torch.tensor([[[0.0, math.nan, 0.0]]]))


def test_huge_coordinates_rejected_with_advice():
    v = TRI.clone()
    v[0, 0, 0] = 1e9
    with pytest.raises(ValueError, match="supported range"):
        TriangleBatch(v, FACES)


def test_clip_space_behind_camera_needs_clipping():
    v = torch.tensor([[[0.0, 0.0, 0.0, 1.0], [1.0, 0.0, 0.0, -1.0], [0.0, 1.0, 0.0, 1.0]]])
    batch = TriangleBatch(v, FACES)
    with pytest.raises(ValueError, match="near plane"):
        batch.screen_vertices((8, 8))


@pytest.mark.parametrize("size", [(0, 8), (8, -1), (8, 10**6)])
@pytest.mark.parametrize("backend", ["reference", "numpy"])
def test_bad_image_size(backend, size):
    be = py_gpu.select_backend(backend)
    with pytest.raises(ValueError, match="height|width"):
        be.render_frame(TriangleBatch(TRI, FACES), size)


@pytest.mark.parametrize("backend", ["reference", "numpy"])
def test_bad_seed_protocol_arguments(backend):
    be = py_gpu.select_backend(backend)
    batch = RasterBatch([ScreenTriangle(ScreenVertex(0, 0, 1), ScreenVertex(4, 0, 1), ScreenVertex(0, 4, 1))])
    with pytest.raises(ValueError, match="width"):
        be.render(batch, 0, 4)
    with pytest.raises(ValueError, match="height"):
        be.render(batch, 4, -2)
    with pytest.raises(TypeError, match="width"):
        be.render(batch, 4.5, 4)
    with pytest.raises(ValueError, match="3 channels"):
        be.render(batch, 4, 4, background=(1, 2))
    with pytest.raises(TypeError, match="batch"):
        be.render([1, 2, 3], 4, 4)
    with pytest.raises(ValueError, match="target"):
        be.render(batch, 4, 4, target=py_gpu.FrameBuffer.new(5, 4))


def test_seed_triangle_color_length():
    with pytest.raises(ValueError, match="three channels"):
        ScreenTriangle(ScreenVertex(0, 0, 1), ScreenVertex(1, 0, 1), ScreenVertex(0, 1, 1), (1, 2))


@pytest.mark.parametrize(
    "kwargs,exc",
    [
        ({"sigma": 0.0}, ValueError),
        ({"sigma": -1.0}, ValueError),
        ({"faces_per_pixel": 0}, ValueError),
        ({"faces_per_pixel": 2.5}, TypeError),
        ({"mode": "blurry"}, ValueError),
        ({"memory_budget": 0}, ValueError),
        ({"cutoff": 0.5}, ValueError),
        ({"cull_backfaces": 1}, TypeError),
    ],
)
def test_settings_validation(kwargs, exc):
    with pytest.raises(exc):
        RasterSettings(**kwargs)


@pytest.mark.parametrize(
    "kwargs,exc",
    [
        ({"gamma": 0.0}, ValueError),
        ({"gamma": math.nan}, ValueError),
        ({"gamma": "0.1"}, TypeError),
        ({"znear": 1.0, "zfar": 1.0}, ValueError),
        ({"zfar": math.inf}, ValueError),
        ({"background_epsilon": -1e-3}, ValueError),
    ],
)
def test_blend_settings_validation(kwargs, exc):
    with pytest.raises(exc):
        BlendSettings(**kwargs)


def test_exact_backends_refuse_soft_mode():
    with pytest.raises(ValueError, match="soft"):
        py_gpu.select_backend("numpy").rasterize(TriangleBatch(TRI, FACES), (4, 4), settings=RasterSettings(mode="soft"))


def test_batch_accepts_unbatched_and_int32_and_numpy():
    import numpy as np

    b = TriangleBatch(TRI[0].numpy(), np.array([[0, 1, 2]], dtype=np.int32), face_colors=np.ones((1, 3)))
    assert b.vertices.shape == (1, 3, 3) and b.faces.dtype == torch.int64
    assert b.face_colors.shape == (1, 1, 3)
    assert not b.is_clip_space and b.batch_size == 1 and b.num_faces == 1


def test_frame_and_fragments_properties():
    frame = py_gpu.select_backend("numpy").render_frame(TriangleBatch(TRI, FACES, face_colors=torch.tensor([[[1.0, 0.5, 0.0]]])), (4, 6))
    assert isinstance(frame, Frame)
    assert frame.size == (4, 6) and frame.batch_size == 1
    assert frame.to_uint8().dtype == torch.uint8
    assert frame.to_numpy().shape == (1, 4, 6, 3)
    fb = FrameBuffer.from_frame(frame)
    assert fb.get_pixel(0, 0) == (255, 128, 0)
    assert fb.get_pixel(5, 3) == (0, 0, 0)
    frags = py_gpu.select_backend("numpy").rasterize(TriangleBatch(TRI, FACES), (4, 6))
    assert isinstance(frags, Fragments)
    assert frags.size == (4, 6) and frags.faces_per_pixel == 1
    assert frags.mask.dtype == torch.bool


def test_one_source_of_defaults():
    """Entry points never carry their own default for a RasterSettings field: they pass None
    through, so RasterSettings is the single source of defaults."""
    import dataclasses
    import inspect

    fields = {f.name for f in dataclasses.fields(RasterSettings)}
    for fn in (py_gpu.render, py_gpu.rasterize):
        params = inspect.signature(fn).parameters
        shared = fields & set(params)
        assert {"mode", "sigma", "faces_per_pixel"} <= shared
        for name in shared:
            assert params[name].default is None, f"{fn.__name__}({name}=...) has its own default"


def test_batch_to_changes_device_and_dtype():
    b = TriangleBatch(TRI.double(), FACES, face_colors=torch.ones(1, 1, 3, dtype=torch.float64))
    c = b.to("cpu", dtype=torch.float32)
    assert c.vertices.dtype == torch.float32 and c.face_colors.dtype == torch.float32
    assert c.faces.dtype == torch.int64
    assert torch.equal(c.vertices, TRI)
