"""Benchmark and test fixtures (docs/DESIGN: "benchmark fixtures"), shared by tests, examples and benchmarks.

- ``seed_fixture``: py_gpu 0.0.1's random-triangle benchmark, generator calls in exactly its order.
- ``mesh_fixture``: closed meshes (:mod:`py_gpu.shapes` icosphere, torus) of a requested face count, projected
  orthographically so they cover about half of the frame.
- ``grid_fixture``: a tessellated square whose triangles share edges (the watertightness test).
"""

from __future__ import annotations

import math
import random

import numpy as np
import torch

from . import shapes
from .contracts import TriangleBatch
from .compat import RasterBatch, ScreenTriangle, ScreenVertex

SEED_BACKGROUND = (6, 8, 12)


def seed_fixture(triangles: int, width: int = 640, height: int = 360, seed: int = 7) -> RasterBatch:
    """py_gpu 0.0.1's benchmark scene. Per triangle, in this order: cx, cy, size, z, r, g, b, u1, u2."""
    rng = random.Random(seed)
    tris = []
    for _ in range(triangles):
        cx = rng.uniform(0, width)
        cy = rng.uniform(0, height)
        size = rng.uniform(8, 48)
        z = rng.uniform(0.2, 8)
        r = rng.randrange(40, 255)
        g = rng.randrange(40, 255)
        b = rng.randrange(40, 255)
        u1 = rng.uniform(-0.1, 0.1)
        u2 = rng.uniform(-0.1, 0.1)
        tris.append(
            ScreenTriangle(
                ScreenVertex(cx, cy - size, z),
                ScreenVertex(cx - size, cy + size, z + u1),
                ScreenVertex(cx + size, cy + size, z + u2),
                (r, g, b),
            )
        )
    return RasterBatch(tris)


def mesh_fixture(kind: str, faces: int, width: int = 512, height: int = 512, *, dtype=torch.float64,
                 device=None, colors: str = "vertex", tilt: float = 0.6) -> TriangleBatch:
    """A closed mesh of about ``faces`` faces, rotated by ``tilt`` rad and projected orthographically
    into screen space so that it covers roughly half of a ``width x height`` frame.

    ``kind`` is ``"icosphere"`` (face counts 20*4**level: 1280, 20480, 81920, 1310720 ...) or
    ``"torus"`` (exactly ``faces`` rounded to 2*m*n). Depth is in [0.25, 0.75].
    ``colors`` is ``"vertex"`` (smooth per-vertex colors from position), ``"face"`` or ``"none"``.
    """
    if kind == "icosphere":
        shape = shapes.icosphere(max(0, round(math.log(max(faces, 20) / 20, 4))), dtype=torch.float64)
    elif kind == "torus":
        n = max(3, int(round(math.sqrt(faces / 2 / 2.5))))
        shape = shapes.torus(1.0 / 1.4, 0.4 / 1.4, int(round(2.5 * n)), n, dtype=torch.float64)
    else:
        raise ValueError(f"mesh_fixture: unknown kind {kind!r} (icosphere, torus)")
    v, f = shape.positions.numpy(), shape.faces.numpy()
    radius = 0.5
    c, s = math.cos(tilt), math.sin(tilt)
    rot = np.array([[1, 0, 0], [0, c, -s], [0, s, c]]) @ np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])
    p = v @ rot.T
    scale = radius * min(width, height) * 0.82
    screen = np.stack([width / 2 + p[:, 0] * scale, height / 2 - p[:, 1] * scale, 0.5 + 0.25 * p[:, 2]], -1)
    verts = torch.from_numpy(screen).to(dtype=dtype, device=device)[None]
    faces_t = torch.from_numpy(f).to(device=device)
    if colors == "vertex":
        col = torch.from_numpy(0.5 + 0.5 * v).to(dtype=dtype, device=device)[None]
        return TriangleBatch(verts, faces_t, vertex_colors=col)
    if colors == "face":
        g = torch.Generator().manual_seed(0)
        col = torch.rand(1, f.shape[0], 3, generator=g, dtype=torch.float64).to(dtype=dtype, device=device)
        return TriangleBatch(verts, faces_t, face_colors=col)
    return TriangleBatch(verts, faces_t)


def grid_fixture(n: int = 16, width: int = 96, height: int = 96, *, jitter: float = 0.3, seed: int = 0,
                 dtype=torch.float64) -> TriangleBatch:
    """A square tessellated into ``2 n^2`` triangles sharing edges, with interior vertices jittered
    so edges run at arbitrary angles. All faces share one depth, so coverage is the only question."""
    g = torch.Generator().manual_seed(seed)
    lin = torch.linspace(0.1, 0.9, n + 1, dtype=torch.float64)
    yy, xx = torch.meshgrid(lin * height, lin * width, indexing="ij")
    step = 0.8 * min(width, height) / n
    noise = (torch.rand(n + 1, n + 1, 2, generator=g, dtype=torch.float64) - 0.5) * 2 * jitter * step
    noise[0, :] = noise[-1, :] = noise[:, 0] = noise[:, -1] = 0
    x = xx + noise[..., 0]
    y = yy + noise[..., 1]
    verts = torch.stack([x, y, torch.full_like(x, 0.5)], -1).reshape(1, -1, 3).to(dtype)
    idx = torch.arange((n + 1) * (n + 1)).reshape(n + 1, n + 1)
    a, b, c, d = idx[:-1, :-1], idx[:-1, 1:], idx[1:, 1:], idx[1:, :-1]
    faces = torch.cat([torch.stack([a, b, c], -1).reshape(-1, 3), torch.stack([a, c, d], -1).reshape(-1, 3)])
    return TriangleBatch(verts, faces)
