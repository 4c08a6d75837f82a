"""py_gpu 0.0.1's screen-space classes, and their conversions to and from ``TriangleBatch``.

Both conversions live here (``RasterBatch.to_triangle_batch`` and ``RasterBatch.from_triangle_batch``):
the core never imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .._check import PyGpuTypeError, PyGpuValueError
from ..contracts import TriangleBatch
from .buffers import ColorLike, as_rgb


@dataclass(frozen=True)
class ScreenVertex:
    """A projected vertex in pixel coordinates (y down, pixel centers at +0.5) plus depth."""

    x: float
    y: float
    z: float


@dataclass(frozen=True)
class ScreenTriangle:
    """A projected triangle with one flat 0-255 RGB color."""

    a: ScreenVertex
    b: ScreenVertex
    c: ScreenVertex
    color: ColorLike = (255, 255, 255)

    def __post_init__(self) -> None:
        object.__setattr__(self, "color", as_rgb(self.color))


@dataclass(frozen=True)
class RasterBatch:
    """A batch of projected triangles ready for a raster backend."""

    triangles: tuple[ScreenTriangle, ...]

    def __init__(self, triangles) -> None:
        object.__setattr__(self, "triangles", tuple(triangles))

    def to_triangle_batch(self, *, dtype: torch.dtype = torch.float64, device=None):
        """This batch as a ``B = 1`` screen-space ``TriangleBatch`` with flat face colors in [0, 1].

        The batch is immutable, so the conversion is done once per (dtype, device) and cached:
        rendering the same ``RasterBatch`` every frame does no per-frame conversion.
        """
        cache = self.__dict__.get("_converted")
        if cache is None:
            cache = {}
            object.__setattr__(self, "_converted", cache)
        key = (dtype, str(torch.device(device)) if device is not None else "cpu")
        batch = cache.get(key)
        if batch is None:
            batch = cache[key] = raster_batch_to_triangle_batch(self, dtype=dtype, device=device)
        return batch

    @classmethod
    def from_triangle_batch(cls, batch: TriangleBatch, index: int = 0) -> "RasterBatch":
        """Element ``index`` of a screen-space ``TriangleBatch`` (see :func:`triangle_batch_to_raster_batch`)."""
        return triangle_batch_to_raster_batch(batch, index)


def raster_batch_to_triangle_batch(batch: RasterBatch, *, dtype: torch.dtype = torch.float64, device=None):
    """Seed ``RasterBatch`` -> ``TriangleBatch`` (3 unshared vertices per face, flat colors / 255)."""
    if not isinstance(batch, RasterBatch):
        raise PyGpuTypeError(f"expected a RasterBatch, got {type(batch).__name__}")
    tris = batch.triangles
    n = len(tris)
    for i, t in enumerate(tris):
        if not isinstance(t, ScreenTriangle):
            raise PyGpuTypeError(f"RasterBatch.triangles[{i}] must be a ScreenTriangle, got {type(t).__name__}")
    try:
        coords = np.array(
            [(t.a.x, t.a.y, t.a.z, t.b.x, t.b.y, t.b.z, t.c.x, t.c.y, t.c.z) for t in tris], dtype=np.float64
        ).reshape(n, 3, 3)
    except (TypeError, ValueError) as exc:
        raise PyGpuTypeError(f"RasterBatch: vertex coordinates must be numbers ({exc})") from None
    colors = np.array([t.color for t in tris], dtype=np.float64).reshape(n, 3)
    vertices = torch.from_numpy(coords.reshape(1, n * 3, 3)).to(dtype=dtype, device=device)
    faces = torch.arange(n * 3, dtype=torch.int64, device=device).reshape(n, 3)
    face_colors = torch.from_numpy(colors / 255.0).to(dtype=dtype, device=device).reshape(1, n, 3)
    return TriangleBatch(vertices, faces, face_colors=face_colors)


def triangle_batch_to_raster_batch(batch: TriangleBatch, index: int = 0) -> RasterBatch:
    """``TriangleBatch`` element ``index`` -> seed ``RasterBatch``.

    The seed format has one flat color per triangle: per-vertex colors are averaged over the
    face's vertices. Colors are quantized to 0-255 with the raster rule.
    """
    if not isinstance(batch, TriangleBatch):
        raise PyGpuTypeError(f"to_raster_batch: expected a TriangleBatch, got {type(batch).__name__}")
    if batch.is_clip_space:
        raise PyGpuValueError("to_raster_batch: needs screen-space [B, V, 3] vertices, got clip space")
    if not 0 <= index < batch.batch_size:
        raise PyGpuValueError(f"to_raster_batch: `index` {index} out of range for batch size {batch.batch_size}")
    verts = batch.vertices[index].detach().cpu().double()
    faces = batch.faces.cpu()
    if batch.face_colors is not None:
        face_rgb = batch.face_colors[index, :, :3].detach().cpu().double()
    elif batch.vertex_colors is not None:
        face_rgb = batch.vertex_colors[index].detach().cpu().double()[faces].mean(dim=1)[:, :3]
    else:
        face_rgb = torch.ones(faces.shape[0], 3, dtype=torch.float64)
    rgb = torch.floor(face_rgb.clamp(0, 1) * 255.0 + 0.5).to(torch.int64).tolist()
    tri_xyz = verts[faces].tolist()
    triangles = [
        ScreenTriangle(ScreenVertex(*a), ScreenVertex(*b), ScreenVertex(*c), tuple(color))
        for (a, b, c), color in zip(tri_xyz, rgb)
    ]
    return RasterBatch(triangles)
