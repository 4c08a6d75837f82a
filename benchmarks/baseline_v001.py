"""A faithful re-creation of py_gpu 0.0.1's NumPy backend, used only as a speed baseline.

0.0.1 looped over triangles in Python and, per triangle, evaluated float edge functions on a
meshgrid of its bounding box with a depth compare. Its frames are not exact (no snapping, no
tie rule, pixel-center bounding boxes off by one); only its time is compared.
"""

from __future__ import annotations

from math import ceil, floor

import numpy as np


def render_v001_numpy(batch, width: int, height: int, background=(0, 0, 0)) -> np.ndarray:
    frame = np.empty((height, width, 3), dtype=np.uint8)
    frame[:, :] = np.array(background, dtype=np.uint8)
    depth = np.full((height, width), np.inf, dtype=np.float32)
    for tri in batch.triangles:
        a, b, c = tri.a, tri.b, tri.c
        x0 = max(0, floor(min(a.x, b.x, c.x)))
        x1 = min(width - 1, ceil(max(a.x, b.x, c.x)))
        y0 = max(0, floor(min(a.y, b.y, c.y)))
        y1 = min(height - 1, ceil(max(a.y, b.y, c.y)))
        area = (c.x - a.x) * (b.y - a.y) - (c.y - a.y) * (b.x - a.x)
        if abs(area) < 1e-12 or x0 > x1 or y0 > y1:
            continue
        px, py = np.meshgrid(np.arange(x0, x1 + 1, dtype=np.float32) + 0.5, np.arange(y0, y1 + 1, dtype=np.float32) + 0.5)
        inv = 1.0 / area
        w0 = ((px - b.x) * (c.y - b.y) - (py - b.y) * (c.x - b.x)) * inv
        w1 = ((px - c.x) * (a.y - c.y) - (py - c.y) * (a.x - c.x)) * inv
        w2 = ((px - a.x) * (b.y - a.y) - (py - a.y) * (b.x - a.x)) * inv
        inside = (w0 >= -1e-9) & (w1 >= -1e-9) & (w2 >= -1e-9)
        if not inside.any():
            continue
        z = w0 * a.z + w1 * b.z + w2 * c.z
        view = depth[y0 : y1 + 1, x0 : x1 + 1]
        upd = inside & (z < view)
        view[upd] = z[upd]
        frame[y0 : y1 + 1, x0 : x1 + 1][upd] = np.array(tri.color, dtype=np.uint8)
    return frame
