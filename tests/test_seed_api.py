"""py_gpu 0.0.1's screen-space API keeps working, and converts to and from the tensor API."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch

import py_gpu
from py_gpu import DepthBuffer, FrameBuffer, RasterBatch, ScreenTriangle, ScreenVertex, TriangleBatch
from py_gpu.fixtures import seed_fixture


def test_old_import_paths():
    from py_gpu.backends import BackendCapabilities, RasterBackend, select_backend  # noqa: F401
    from py_gpu.buffers import DepthBuffer, FrameBuffer  # noqa: F401
    from py_gpu.detect import detect_gpu_packages
    from py_gpu.geometry import RasterBatch, ScreenTriangle, ScreenVertex  # noqa: F401
    from py_gpu.numpy_raster import NumpyRasterBackend
    from py_gpu.raster import CPURasterBackend

    assert isinstance(CPURasterBackend(), RasterBackend)
    assert isinstance(NumpyRasterBackend(), RasterBackend)
    assert "PyTorch" in detect_gpu_packages()
    caps = BackendCapabilities("x", True)  # 0.0.1's positional order still works
    assert caps.supports_depth and not caps.supports_textures


def test_seed_render_draws_flat_triangle():
    tri = ScreenTriangle(ScreenVertex(1, 1, 1.0), ScreenVertex(9, 1, 1.0), ScreenVertex(1, 9, 1.0), (200, 100, 50))
    for name in ("cpu", "numpy"):
        fb = py_gpu.select_backend(name).render(RasterBatch([tri]), 10, 10, background=(1, 2, 3))
        assert isinstance(fb, FrameBuffer)
        assert fb.get_pixel(2, 2) == (200, 100, 50)
        assert fb.get_pixel(9, 9) == (1, 2, 3)


def test_seed_render_into_target():
    batch = seed_fixture(50, 64, 48)
    target = FrameBuffer.new(64, 48)
    out = py_gpu.select_backend("numpy").render(batch, 64, 48, background=(6, 8, 12), target=target)
    assert out is target
    again = py_gpu.select_backend("cpu").render(batch, 64, 48, background=(6, 8, 12))
    assert again.pixels == target.pixels


def test_round_trip_raster_batch_triangle_batch():
    rb = seed_fixture(20, 64, 48)
    tb = rb.to_triangle_batch()
    assert tb.vertices.shape == (1, 60, 3) and tb.faces.shape == (20, 3)
    back = RasterBatch.from_triangle_batch(tb)
    assert back == rb  # dataclass equality: same vertices and colors
    tb2 = rb.to_triangle_batch(dtype=torch.float32)
    assert tb2.dtype == torch.float32


def test_to_raster_batch_averages_vertex_colors():
    v = torch.tensor([[[0.0, 0.0, 1.0], [4.0, 0.0, 1.0], [0.0, 4.0, 1.0]]])
    tb = TriangleBatch(v, torch.tensor([[0, 1, 2]]), vertex_colors=torch.tensor([[[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0]]]))
    rb = RasterBatch.from_triangle_batch(tb)
    assert rb.triangles[0].color == (85, 85, 85)


def test_framebuffer_numpy_tensor_round_trip():
    rng = np.random.default_rng(0)
    arr = rng.integers(0, 256, size=(5, 7, 3), dtype=np.uint8)
    fb = FrameBuffer.from_numpy(arr)
    assert (fb.width, fb.height) == (7, 5)
    assert np.array_equal(fb.to_numpy(), arr)
    assert torch.equal(fb.to_tensor(), torch.from_numpy(arr))
    assert fb.get_pixel(3, 2) == tuple(int(c) for c in arr[2, 3])
    with pytest.raises(TypeError):
        FrameBuffer.from_numpy(arr.astype(np.float32))
    with pytest.raises(ValueError):
        FrameBuffer.from_numpy(arr[..., :2])


def _decode_png(data: bytes) -> np.ndarray:
    """Tiny PNG reader for 8-bit RGB, filter 0 (what the built-in writer produces)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 4], "big")
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height = int.from_bytes(body[:4], "big"), int.from_bytes(body[4:8], "big")
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(height, width * 3 + 1)
    assert (raw[:, 0] == 0).all()
    return raw[:, 1:].reshape(height, width, 3)


def test_png_writers(tmp_path, monkeypatch):
    rng = np.random.default_rng(1)
    arr = rng.integers(0, 256, size=(6, 9, 3), dtype=np.uint8)
    fb = FrameBuffer.from_numpy(arr)
    fb.to_png(tmp_path / "pillow.png")
    from PIL import Image

    assert np.array_equal(np.asarray(Image.open(tmp_path / "pillow.png").convert("RGB")), arr)
    # without pillow the built-in encoder writes a valid PNG with the same pixels
    import builtins

    real_import = builtins.__import__

    def no_pil(name, *args, **kwargs):
        if name == "PIL" or name.startswith("PIL."):
            raise ImportError("no pillow")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pil)
    fb.to_png(tmp_path / "plain.png")
    monkeypatch.undo()
    assert np.array_equal(_decode_png((tmp_path / "plain.png").read_bytes()), arr)
    assert np.array_equal(np.asarray(Image.open(tmp_path / "plain.png").convert("RGB")), arr)


def test_framebuffer_and_depthbuffer_basics(tmp_path):
    fb = FrameBuffer.new(3, 2, (10, 20, 30))
    fb.set_pixel(1, 1, (300, -5, 7.6))
    assert fb.get_pixel(1, 1) == (255, 0, 8)
    fb.set_pixel(9, 9, (1, 1, 1))  # outside: ignored, as in 0.0.1
    with pytest.raises(IndexError):
        fb.get_pixel(3, 0)
    fb.to_ppm(tmp_path / "x.ppm")
    assert (tmp_path / "x.ppm").read_bytes().startswith(b"P6\n3 2\n255\n")
    with pytest.raises(ValueError):
        FrameBuffer(2, 2, bytearray(5))
    with pytest.raises(ValueError):
        FrameBuffer.new(0, 2)
    d = DepthBuffer.new(2, 2)
    assert d.to_numpy().shape == (2, 2) and np.isinf(d.to_numpy()).all()
    d2 = DepthBuffer.from_numpy(np.arange(6.0).reshape(2, 3))
    assert (d2.width, d2.height) == (3, 2) and d2.values[4] == 4.0
