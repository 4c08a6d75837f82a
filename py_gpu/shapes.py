"""Procedural shapes: cube, plane, UV sphere, icosphere and torus as ``MeshBatch`` objects.

Every shape is centered at the origin, wound counter-clockwise seen from outside (so backface
culling keeps the outside), and carries exact normals; all but the icosphere carry UVs. The test
and benchmark fixtures (:mod:`py_gpu.fixtures`) are built from these.
"""

from __future__ import annotations

import numpy as np
import torch

from ._check import PyGpuValueError
from .mesh import MeshBatch
from .mesh import mesh_from_arrays as _mesh


def cube(size: float = 1.0, *, dtype=torch.float32, device=None) -> MeshBatch:
    """Axis-aligned cube of edge ``size`` centered at the origin: 24 vertices (4 per side, flat
    normals), 12 faces, each side mapped to the full ``[0, 1]^2`` UV square."""
    h = size / 2.0
    # (normal, u axis, v axis) per side, u x v = normal so corners run counter-clockwise
    sides = [((1, 0, 0), (0, 0, -1), (0, 1, 0)), ((-1, 0, 0), (0, 0, 1), (0, 1, 0)),
             ((0, 1, 0), (1, 0, 0), (0, 0, -1)), ((0, -1, 0), (1, 0, 0), (0, 0, 1)),
             ((0, 0, 1), (1, 0, 0), (0, 1, 0)), ((0, 0, -1), (-1, 0, 0), (0, 1, 0))]
    v, n, uv, f = [], [], [], []
    for s, (nn, uu, vv) in enumerate(sides):
        nn, uu, vv = np.array(nn, float), np.array(uu, float), np.array(vv, float)
        for a, b in ((0, 0), (1, 0), (1, 1), (0, 1)):
            v.append(h * (nn + (2 * a - 1) * uu + (2 * b - 1) * vv))
            n.append(nn)
            uv.append((a, b))
        o = 4 * s
        f += [(o, o + 1, o + 2), (o, o + 2, o + 3)]
    return _mesh(v, f, n, uv, dtype, device)


def plane(size: float = 1.0, subdivisions: int = 1, *, dtype=torch.float32, device=None) -> MeshBatch:
    """Square in the y = 0 plane facing +Y, edge ``size``, centered at the origin, split into
    ``subdivisions^2`` quads (2 faces each). UV (0, 0) at (-x, +z), (1, 1) at (+x, -z)."""
    n = int(subdivisions)
    if n < 1:
        raise PyGpuValueError(f"plane: `subdivisions` must be >= 1, got {subdivisions}")
    t = np.linspace(0.0, 1.0, n + 1)
    uu, vv = np.meshgrid(t, t, indexing="xy")  # [n+1, n+1], rows = v
    v = np.stack([(uu - 0.5) * size, np.zeros_like(uu), (0.5 - vv) * size], -1).reshape(-1, 3)
    uv = np.stack([uu, vv], -1).reshape(-1, 2)
    idx = lambda i, j: i * (n + 1) + j  # noqa: E731  (row i = v, column j = u)
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    i, j = i.ravel(), j.ravel()
    a, b, c, d = idx(i, j), idx(i, j + 1), idx(i + 1, j + 1), idx(i + 1, j)
    f = np.concatenate([np.stack([a, b, c], 1), np.stack([a, c, d], 1)])
    normals = np.tile([0.0, 1.0, 0.0], (len(v), 1))
    return _mesh(v, f, normals, uv, dtype, device)


def uv_sphere(rings: int = 16, segments: int = 32, radius: float = 1.0, *, dtype=torch.float32, device=None) -> MeshBatch:
    """Latitude/longitude sphere with a UV seam (duplicated column at u = 1) and exact normals.

    ``u`` runs with longitude (around +Y), ``v`` from 0 at the south pole to 1 at the north pole.
    """
    if rings < 2 or segments < 3:
        raise PyGpuValueError(f"uv_sphere: need rings >= 2 and segments >= 3, got {rings}, {segments}")
    u = np.linspace(0.0, 1.0, segments + 1)
    vv = np.linspace(0.0, 1.0, rings + 1)
    U, V = np.meshgrid(u, vv, indexing="xy")  # [rings+1, segments+1]
    theta = U * 2 * np.pi
    phi = (V - 0.5) * np.pi
    n = np.stack([np.cos(phi) * np.sin(theta), np.sin(phi), np.cos(phi) * np.cos(theta)], -1).reshape(-1, 3)
    uv = np.stack([U, V], -1).reshape(-1, 2)
    cols = segments + 1
    i, j = np.meshgrid(np.arange(rings), np.arange(segments), indexing="ij")
    i, j = i.ravel(), j.ravel()
    a, b, c, d = i * cols + j, i * cols + j + 1, (i + 1) * cols + j + 1, (i + 1) * cols + j
    f = np.concatenate([np.stack([a, b, c], 1)[i > 0], np.stack([a, c, d], 1)[i < rings - 1]])
    return _mesh(n * radius, f, n, uv, dtype, device)


#: The 12 corners and 20 faces of the icosahedron; every face runs counter-clockwise seen from outside.
_T = (1.0 + 5.0**0.5) / 2.0
_ICO_CORNERS = [(-1, _T, 0), (1, _T, 0), (-1, -_T, 0), (1, -_T, 0), (0, -1, _T), (0, 1, _T),
                (0, -1, -_T), (0, 1, -_T), (_T, 0, -1), (_T, 0, 1), (-_T, 0, -1), (-_T, 0, 1)]
_ICO_FACES = [(0, 11, 5), (0, 5, 1), (0, 1, 7), (0, 7, 10), (0, 10, 11), (1, 5, 9), (5, 11, 4), (11, 10, 2),
              (10, 7, 6), (7, 1, 8), (3, 9, 4), (3, 4, 2), (3, 2, 6), (3, 6, 8), (3, 8, 9), (4, 9, 5),
              (2, 4, 11), (6, 2, 10), (8, 6, 7), (9, 8, 1)]


def _subdivide(v: np.ndarray, f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split every face into 4 at its edge midpoints (shared between neighbours), pushed onto the
    unit sphere. Each child keeps its parent's winding."""
    key = np.sort(np.concatenate([f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]]), axis=1)
    edges, inverse = np.unique(key, axis=0, return_inverse=True)
    mid = v[edges[:, 0]] + v[edges[:, 1]]
    mid /= np.linalg.norm(mid, axis=1, keepdims=True)
    m01, m12, m20 = (inverse.reshape(3, -1) + len(v))
    a, b, c = f.T
    children = [(a, m01, m20), (b, m12, m01), (c, m20, m12), (m01, m12, m20)]
    return np.concatenate([v, mid]), np.concatenate([np.stack(t, 1) for t in children])


def icosphere(level: int = 2, radius: float = 1.0, *, dtype=torch.float32, device=None) -> MeshBatch:
    """Geodesic sphere with ``20 * 4**level`` faces, counter-clockwise seen from outside, and exact
    normals (no UVs: it has no seam). Level 3 has 1,280 faces, level 5 has 20,480."""
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 8:
        raise PyGpuValueError(f"icosphere: `level` must be an int in 0..8, got {level!r}")
    v = np.array(_ICO_CORNERS, dtype=np.float64)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    f = np.array(_ICO_FACES, dtype=np.int64)
    for _ in range(level):
        v, f = _subdivide(v, f)
    return _mesh(v * radius, f, v, None, dtype, device)


def torus(major_radius: float = 1.0, minor_radius: float = 0.35, major_segments: int = 32, minor_segments: int = 16,
          *, dtype=torch.float32, device=None) -> MeshBatch:
    """Torus around the +Y axis with UVs (u around the ring, v around the tube; seams duplicated)."""
    if major_segments < 3 or minor_segments < 3:
        raise PyGpuValueError("torus: need at least 3 segments each way")
    u = np.linspace(0.0, 1.0, major_segments + 1)
    w = np.linspace(0.0, 1.0, minor_segments + 1)
    U, Wt = np.meshgrid(u, w, indexing="ij")  # [maj+1, min+1]
    a, b = U * 2 * np.pi, Wt * 2 * np.pi
    center = np.stack([np.sin(a), np.zeros_like(a), np.cos(a)], -1) * major_radius
    n = np.stack([np.cos(b) * np.sin(a), np.sin(b), np.cos(b) * np.cos(a)], -1)
    v = (center + minor_radius * n).reshape(-1, 3)
    uv = np.stack([U, Wt], -1).reshape(-1, 2)
    cols = minor_segments + 1
    i, j = np.meshgrid(np.arange(major_segments), np.arange(minor_segments), indexing="ij")
    i, j = i.ravel(), j.ravel()
    q0, q1, q2, q3 = i * cols + j, (i + 1) * cols + j, (i + 1) * cols + j + 1, i * cols + j + 1
    f = np.concatenate([np.stack([q0, q1, q2], 1), np.stack([q0, q2, q3], 1)])
    return _mesh(v, f, n.reshape(-1, 3), uv, dtype, device)
