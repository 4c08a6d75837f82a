"""Hypothesis strategies shared by the parity tests: random small triangle batches that stress the raster rule.

- ``small_batches``: vertices mix coordinates on the pixel-center lattice and the 1/256 grid
  (exact edge ties), plain random floats, sub-pixel jitter, far off-screen and huge values.
  Faces reuse vertices (shared edges) and include degenerate (repeated or collinear) and edge-on
  triangles. Screen or clip space, with a random image size.
- ``hard_batches``: vertices shared by random faces, on the snapping grid, on its half steps
  (snapping ties), on sample positions, free and huge; with a random backface-culling flag.
- ``kind_batches``: one kind of hard case per batch (random, edge-on, shared edges, degenerate,
  off screen, huge, sub-pixel), snapped to a random grid, with vertex colors.
- ``clip_depths``: clip-space z of a triangle's three corners, away from the plane z = 0.

Every strategy builds CPU tensors; a device test moves the batch with ``TriangleBatch.to``.
The settings profiles (deadline, examples, derandomization under CI) are in conftest.py;
``fixture_safe_settings`` lets a hypothesis test take the ``device`` (or ``gl``) fixture.
- ``large_triangles`` draws triangles thousands of pixels long around small images.
"""

from __future__ import annotations

import math

import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from py_gpu import TriangleBatch


def coordinate(extent: int):
    on_center = st.integers(-2, 2 * extent + 2).map(lambda k: k / 2.0)  # pixel centers and corners
    on_grid = st.integers(-4 * 256, (extent + 4) * 256).map(lambda k: k / 256.0)
    free = st.floats(-3.0, extent + 3.0, allow_nan=False, allow_infinity=False)
    huge = st.floats(-5000.0, 5000.0, allow_nan=False, allow_infinity=False)
    return st.one_of(on_center, on_grid, free, huge)


@st.composite
def small_batches(draw, max_faces: int = 6, with_colors: str | None = None, clip_space: bool = False):
    """A screen-space (or clip-space) ``TriangleBatch`` of B=1, plus its ``(H, W)`` size."""
    height = draw(st.integers(1, 14))
    width = draw(st.integers(1, 14))
    extent = max(height, width)
    n_verts = draw(st.integers(3, 9))
    xs = draw(st.lists(coordinate(width), min_size=n_verts, max_size=n_verts))
    ys = draw(st.lists(coordinate(height), min_size=n_verts, max_size=n_verts))
    zs = draw(st.lists(st.sampled_from([0.25, 0.5, 0.5, 0.75, 1.0, 2.0]) | st.floats(0.0, 4.0), min_size=n_verts, max_size=n_verts))
    n_faces = draw(st.integers(0, max_faces))
    faces = []
    for _ in range(n_faces):
        kind = draw(st.sampled_from(["any", "any", "degenerate", "collinear"]))
        a, b, c = (draw(st.integers(0, n_verts - 1)) for _ in range(3))
        if kind == "degenerate":
            c = a
        faces.append([a, b, c])
        if kind == "collinear" and n_verts >= 3:
            # make vertex c the midpoint of a-b (an edge-on triangle)
            xs[c] = (xs[a] + xs[b]) / 2
            ys[c] = (ys[a] + ys[b]) / 2
    verts = torch.tensor([xs, ys, zs], dtype=torch.float64).T.unsqueeze(0)
    if clip_space:
        w = torch.tensor(draw(st.lists(st.floats(0.5, 3.0), min_size=n_verts, max_size=n_verts)), dtype=torch.float64)
        x_ndc = 2 * verts[0, :, 0] / width - 1
        y_ndc = 1 - 2 * verts[0, :, 1] / height
        verts = torch.stack([x_ndc * w, y_ndc * w, verts[0, :, 2] / 4 * w, w], -1).unsqueeze(0)
    faces_t = torch.tensor(faces, dtype=torch.int64).reshape(-1, 3)
    kwargs = {}
    if with_colors == "vertex":
        g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
        kwargs["vertex_colors"] = torch.rand(1, n_verts, 3, generator=g, dtype=torch.float64)
    elif with_colors == "face":
        g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
        kwargs["face_colors"] = torch.rand(1, len(faces), 3, generator=g, dtype=torch.float64)
    return TriangleBatch(verts, faces_t, **kwargs), (height, width)


def fixture_safe_settings(**kwargs) -> settings:
    """The loaded profile plus ``kwargs``, allowing function-scoped fixtures such as ``device``
    and ``gl``: they hold no per-example state, so the examples of one test may share them."""
    checks = [*settings.default.suppress_health_check, HealthCheck.function_scoped_fixture]
    return settings(suppress_health_check=checks, **kwargs)


# ---- hard_batches ---------------------------------------------------------------------------
_grid = st.integers(-8 * 256, 24 * 256).map(lambda v: v / 256.0)  # exactly on the snapping grid
_half = st.integers(-8 * 512, 24 * 512).map(lambda v: v / 512.0 + 1 / 1024)  # ties of the snapping
_free = st.floats(-6.0, 22.0, allow_nan=False, allow_infinity=False)
_centers = st.integers(0, 15).map(lambda v: v + 0.5)  # exactly on sample positions (edge-on)
_coord = st.one_of(_grid, _half, _free, _centers, st.floats(-3000.0, 3000.0), st.floats(6.0, 6.01))


@st.composite
def hard_batches(draw):
    """``(TriangleBatch, cull_backfaces)``: screen-space float64, B=1, for a 12x16 image."""
    n_verts = draw(st.integers(3, 9))
    xs = draw(st.lists(_coord, min_size=n_verts, max_size=n_verts))
    ys = draw(st.lists(_coord, min_size=n_verts, max_size=n_verts))
    zs = draw(st.lists(st.sampled_from([0.25, 0.5, 0.5, 0.75]) | st.floats(-1, 2), min_size=n_verts, max_size=n_verts))
    n_faces = draw(st.integers(0, 10))
    index = st.integers(0, n_verts - 1)
    faces = draw(st.lists(st.tuples(index, index, index), min_size=n_faces, max_size=n_faces))
    # shared edges: a face reusing an edge of the previous one, in the other direction
    if faces and draw(st.booleans()):
        a, b, _ = faces[-1]
        faces.append((b, a, draw(index)))
    verts = torch.tensor([xs, ys, zs], dtype=torch.float64).T.contiguous()
    faces_t = torch.tensor(faces, dtype=torch.int64).reshape(-1, 3)
    colors = torch.rand(n_verts, 3, generator=torch.Generator().manual_seed(n_verts), dtype=torch.float64)
    return TriangleBatch(verts, faces_t, vertex_colors=colors), draw(st.booleans())


# ---- kind_batches -------------------------------------------------------------------------------
KINDS = ("random", "edge_on", "shared_edge", "degenerate", "off_screen", "huge", "sub_pixel")


@st.composite
def kind_batches(draw):
    """A screen-space float64 ``TriangleBatch`` (B=1, for a 12x16 image) of one hard case."""
    kind = draw(st.sampled_from(list(KINDS)))
    grid = draw(st.sampled_from([1.0, 0.5, 0.125, 1 / 256, 0.0]))  # coarse grids make exact ties

    def coord(lo, hi):
        value = draw(st.floats(lo, hi, allow_nan=False))
        return round(value / grid) * grid if grid else value

    def point(lo=-4.0, hi=20.0):
        return [coord(lo, hi), coord(lo, hi), draw(st.floats(0.0, 1.0))]

    n = draw(st.integers(1, 5))
    verts, faces = [], []
    for _ in range(n):
        base = len(verts)
        if kind == "huge":
            tri = [point(-3000.0, 3000.0) for _ in range(3)]
        elif kind == "off_screen":
            tri = [point(-40.0, 60.0) for _ in range(3)]
        elif kind == "sub_pixel":
            p = point()
            tri = [p, [p[0] + coord(-0.9, 0.9), p[1] + coord(-0.9, 0.9), p[2]], [p[0] + coord(-0.9, 0.9), p[1], p[2]]]
        elif kind == "edge_on":
            a, b = point(), point()
            t = draw(st.floats(0.0, 1.0))
            tri = [a, b, [a[0] + t * (b[0] - a[0]), a[1] + t * (b[1] - a[1]), a[2]]]
        elif kind == "degenerate":
            a, b = point(), point()
            tri = [a, b, list(a)]
        else:
            tri = [point() for _ in range(3)]
        verts += tri
        faces.append([base, base + 1, base + 2])
        if kind == "shared_edge":
            verts.append(point())
            faces.append([base + 1, base, base + 3])
    colors = torch.tensor([[draw(st.floats(0, 1)) for _ in range(3)] for _ in verts], dtype=torch.float64)
    return TriangleBatch(torch.tensor(verts, dtype=torch.float64), torch.tensor(faces, dtype=torch.int64),
                         vertex_colors=colors)


# ---- clip_depths --------------------------------------------------------------------------------
def clip_depths():
    """Three clip-space z values in [-1, 1], none within 1e-3 of the near plane z = 0."""
    return st.lists(st.floats(-1.0, 1.0).filter(lambda x: abs(x) > 1e-3), min_size=3, max_size=3)


def uniform(lo: float, hi: float, steps: int = 1 << 16):
    """Floats spread evenly over ``[lo, hi)``: ``st.floats`` and ``st.integers`` favor the ends and
    small values, so the integer is scattered by an odd multiplier (a permutation of ``[0, steps)``)."""
    return st.integers(0, steps - 1).map(lambda k: lo + (hi - lo) * (k * 40503 % steps) / steps)


@st.composite
def large_triangles(draw, max_leg: float = 8000.0, max_faces: int = 3, sides=(8, 128)):
    """A screen-space ``TriangleBatch`` (B=1) of 1..``max_faces`` large triangles, and its ``(H, W)``.

    Each triangle has a corner in or near the image and two more up to ``max_leg`` px away, in any
    direction: right triangles with axis-aligned legs (any of the four orientations) or arbitrary
    ones. Every vertex stays inside GL's 8,192 px guard band. Depth is constant per face, from a
    small set, so faces are either equally near (a tie) or far apart.
    """
    height = draw(st.integers(*sides))
    width = draw(st.integers(*sides))
    leg = uniform(64.0, max_leg)
    verts, faces = [], []
    for _ in range(draw(st.integers(1, max_faces))):
        ax = draw(uniform(-16.0, width + 16.0))
        ay = draw(uniform(-16.0, height + 16.0))
        z = draw(st.sampled_from([0.25, 0.5, 0.75]))
        if draw(st.booleans()):
            sx, sy = draw(st.sampled_from([-1.0, 1.0])), draw(st.sampled_from([-1.0, 1.0]))
            tri = [[ax, ay], [ax, ay + sy * draw(leg)], [ax + sx * draw(leg), ay]]
        else:
            tri = [[ax, ay]]
            for _ in range(2):
                r, t = draw(leg), draw(uniform(0.0, 2 * math.pi))
                tri.append([ax + r * math.cos(t), ay + r * math.sin(t)])
        faces.append([len(verts), len(verts) + 1, len(verts) + 2])
        verts += [[x, y, z] for x, y in tri]
    batch = TriangleBatch(torch.tensor([verts], dtype=torch.float64), torch.tensor(faces, dtype=torch.int64))
    return batch, (height, width)
