"""The pure-Python reference rasterizer: slow, obviously correct, and the oracle for every other path.

It walks each face's bounding box pixel by pixel and applies docs/raster-rule.md literally:
integer edge functions on 1/256-snapped positions with the left/bottom tie rule, float64
barycentrics from the unsnapped positions, a strictly-less depth test in face order.
"""

from __future__ import annotations

import math

import torch

from .._check import MemoryBudgetError
from ..contracts import Fragments, TriangleBatch
from .rule import HALF_PIXEL, SUBPIXEL, barycentrics, edge_function, owns_edge, snap


#: Largest number of pixels (all batch elements together) the reference rasterizes in one call.
MAX_REFERENCE_PIXELS = 4096 * 4096


def rasterize_reference(batch: TriangleBatch, size: tuple[int, int], *, cull_backfaces: bool = False) -> Fragments:
    """Hard-mode fragments (K = 1) of ``batch`` at ``size = (H, W)``, computed in plain Python floats.

    With ``cull_backfaces``, faces whose snapped area is positive (clockwise on screen with y
    down, i.e. clockwise in OpenGL's y-up NDC) are skipped.
    """
    height, width = size
    if height * width * batch.batch_size > MAX_REFERENCE_PIXELS:
        raise MemoryBudgetError(
            f"rasterize_reference: {batch.batch_size} x {width}x{height} pixels is more than the pure-Python "
            f"reference handles ({MAX_REFERENCE_PIXELS} pixels, about 200 bytes each as Python objects); "
            "use the numpy or torch backend, or a smaller image"
        )
    screen = batch.screen_vertices(size).detach().to("cpu", torch.float64).tolist()  # [B][V][3]
    w_all = batch.vertices[..., 3].detach().to("cpu", torch.float64).tolist() if batch.is_clip_space else None
    faces = batch.faces.cpu().tolist()
    out_face, out_bary, out_depth = [], [], []
    for b in range(batch.batch_size):
        face_buf = [-1] * (height * width)
        bary_buf = [(0.0, 0.0, 0.0)] * (height * width)
        depth_buf = [math.inf] * (height * width)
        verts = screen[b]
        for f, (i0, i1, i2) in enumerate(faces):
            ws = None if w_all is None else (w_all[b][i0], w_all[b][i1], w_all[b][i2])
            _raster_face(f, verts[i0], verts[i1], verts[i2], ws, width, height, face_buf, bary_buf, depth_buf, cull_backfaces)
        out_face.append(face_buf)
        out_bary.append(bary_buf)
        out_depth.append(depth_buf)
    shape = (batch.batch_size, height, width, 1)
    return Fragments(
        face_index=torch.tensor(out_face, dtype=torch.int64).reshape(shape),
        bary=torch.tensor(out_bary, dtype=torch.float64).reshape(*shape, 3),
        depth=torch.tensor(out_depth, dtype=torch.float64).reshape(shape),
    )


def _raster_face(f, v0, v1, v2, ws, width, height, face_buf, bary_buf, depth_buf, cull) -> None:
    # 1. Snap to the 1/256 grid.
    X = [snap(v0[0]), snap(v1[0]), snap(v2[0])]
    Y = [snap(v0[1]), snap(v1[1]), snap(v2[1])]
    area = edge_function(X[0], Y[0], X[1], Y[1], X[2], Y[2])
    if area == 0 or (cull and area > 0):
        return  # degenerate (covers nothing) or culled back face
    order = (0, 1, 2) if area > 0 else (0, 2, 1)  # positive orientation for the coverage test
    edges = []
    for k in range(3):
        a, c = order[k], order[(k + 1) % 3]
        edges.append((X[a], Y[a], X[c], Y[c], owns_edge(X[c] - X[a], Y[c] - Y[a])))
    # 2. Pixels whose sample (col + 0.5, row + 0.5) lies in the snapped bounding box.
    col0 = max(0, -((HALF_PIXEL - min(X)) // SUBPIXEL))
    col1 = min(width - 1, (max(X) - HALF_PIXEL) // SUBPIXEL)
    row0 = max(0, -((HALF_PIXEL - min(Y)) // SUBPIXEL))
    row1 = min(height - 1, (max(Y) - HALF_PIXEL) // SUBPIXEL)
    for row in range(row0, row1 + 1):
        py = row * SUBPIXEL + HALF_PIXEL
        for col in range(col0, col1 + 1):
            px = col * SUBPIXEL + HALF_PIXEL
            inside = True
            for ax, ay, bx, by, owned in edges:
                e = edge_function(ax, ay, bx, by, px, py)
                if e < 0 or (e == 0 and not owned):
                    inside = False
                    break
            if not inside:
                continue
            # 3. Barycentrics (float64, unsnapped) and depth.
            sx, sy = col + 0.5, row + 0.5
            lam = barycentrics(v0[0], v0[1], v1[0], v1[1], v2[0], v2[1], sx, sy)
            if lam is None:  # float area zero: fall back to the snapped positions
                lam = barycentrics(
                    X[0] / SUBPIXEL, Y[0] / SUBPIXEL, X[1] / SUBPIXEL, Y[1] / SUBPIXEL, X[2] / SUBPIXEL, Y[2] / SUBPIXEL, sx, sy
                )
            l0, l1, l2 = lam
            z = l0 * v0[2] + l1 * v1[2] + l2 * v2[2]
            index = row * width + col
            if not z < depth_buf[index]:  # 4. strictly-less depth test, faces in order
                continue
            if ws is not None:  # perspective-correct weights for clip-space input
                q0, q1, q2 = l0 / ws[0], l1 / ws[1], l2 / ws[2]
                s = q0 + q1 + q2
                l0, l1, l2 = q0 / s, q1 / s, q2 / s
            depth_buf[index] = z
            face_buf[index] = f
            bary_buf[index] = (l0, l1, l2)
