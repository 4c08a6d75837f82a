"""Benchmark and test fixtures (docs/DESIGN: "benchmark fixtures"), shared by tests, examples and benchmarks.

- ``seed_fixture``: py_gpu 0.0.1's random-triangle benchmark, generator calls in exactly its order.
- ``mesh_fixture``: closed meshes (icosphere, torus) of a requested face count, projected
  orthographically so they cover about half of the frame.
- ``grid_fixture``: a tessellated square whose triangles share edges (the watertightness test).
"""

from __future__ import annotations

import math
import random

import numpy as np
import torch

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


def icosphere(level: int) -> tuple[np.ndarray, np.ndarray]:
    """Unit icosphere: float64 ``[V, 3]`` positions, int64 ``[F, 3]`` faces (20 * 4**level faces)."""
    t = (1.0 + 5.0**0.5) / 2.0
    verts = [(-1, t, 0), (1, t, 0), (-1, -t, 0), (1, -t, 0), (0, -1, t), (0, 1, t),
             (0, -1, -t), (0, 1, -t), (t, 0, -1), (t, 0, 1), (-t, 0, -1), (-t, 0, 1)]
    faces = [(0, 11, 5), (0, 5, 1), (0, 1, 7), (0, 7, 10), (0, 10, 11), (1, 5, 9), (5, 11, 4), (11, 10, 2),
             (10, 7, 6), (7, 1, 8), (3, 9, 4), (3, 4, 2), (3, 2, 6), (3, 6, 8), (3, 8, 9), (4, 9, 5),
             (2, 4, 11), (6, 2, 10), (8, 6, 7), (9, 8, 1)]
    v = np.array(verts, dtype=np.float64)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    f = np.array(faces, dtype=np.int64)
    for _ in range(level):
        edges = np.concatenate([f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]])
        key = np.sort(edges, axis=1)
        uniq, inverse = np.unique(key, axis=0, return_inverse=True)
        mid = v[uniq[:, 0]] + v[uniq[:, 1]]
        mid /= np.linalg.norm(mid, axis=1, keepdims=True)
        m = inverse.reshape(3, -1).T + len(v)  # [F, 3] midpoints of edges 01, 12, 20
        v = np.concatenate([v, mid])
        a, b, c = f[:, 0], f[:, 1], f[:, 2]
        m01, m12, m20 = m[:, 0], m[:, 1], m[:, 2]
        f = np.concatenate([np.stack([a, m01, m20], 1), np.stack([b, m12, m01], 1),
                            np.stack([c, m20, m12], 1), np.stack([m01, m12, m20], 1)])
    return v, f


def torus(major_segments: int, minor_segments: int, major: float = 1.0, minor: float = 0.4):
    """Torus around the z axis: float64 ``[V, 3]``, int64 ``[F, 3]`` (2 * major * minor faces)."""
    i = np.arange(major_segments)[:, None]
    j = np.arange(minor_segments)[None, :]
    u = 2 * np.pi * i / major_segments
    w = 2 * np.pi * j / minor_segments
    x = (major + minor * np.cos(w)) * np.cos(u)
    y = (major + minor * np.cos(w)) * np.sin(u)
    z = minor * np.sin(w) * np.ones_like(u)
    v = np.stack([x, y, z], -1).reshape(-1, 3)
    idx = lambda a, b: (a % major_segments) * minor_segments + (b % minor_segments)  # noqa: E731
    a, b = np.meshgrid(np.arange(major_segments), np.arange(minor_segments), indexing="ij")
    a, b = a.ravel(), b.ravel()
    q0, q1, q2, q3 = idx(a, b), idx(a + 1, b), idx(a + 1, b + 1), idx(a, b + 1)
    f = np.concatenate([np.stack([q0, q1, q2], 1), np.stack([q0, q2, q3], 1)]).astype(np.int64)
    return v, f


def mesh_fixture(kind: str, faces: int, width: int = 512, height: int = 512, *, dtype=torch.float64,
                 device=None, colors: str = "vertex", tilt: float = 0.6) -> TriangleBatch:
    """A closed mesh of about ``faces`` faces, rotated by ``tilt`` rad and projected orthographically
    into screen space so that it covers roughly half of a ``width x height`` frame.

    ``kind`` is ``"icosphere"`` (face counts 20*4**level: 1280, 20480, 81920, 1310720 ...) or
    ``"torus"`` (exactly ``faces`` rounded to 2*m*n). Depth is in [0.25, 0.75].
    ``colors`` is ``"vertex"`` (smooth per-vertex colors from position), ``"face"`` or ``"none"``.
    """
    if kind == "icosphere":
        level = max(0, round(math.log(max(faces, 20) / 20, 4)))
        v, f = icosphere(level)
        radius = 0.5
    elif kind == "torus":
        n = max(3, int(round(math.sqrt(faces / 2 / 2.5))))
        v, f = torus(int(round(2.5 * n)), n)
        v = v / 1.4
        radius = 0.5
    else:
        raise ValueError(f"mesh_fixture: unknown kind {kind!r} (icosphere, torus)")
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
