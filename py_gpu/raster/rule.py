"""Constants and scalar helpers of the exact raster rule (docs/raster-rule.md).

Everything here is plain Python so that the reference rasterizer reads as the rule itself.
"""

from __future__ import annotations

#: Subpixel bits: vertex x, y are snapped to 1/256 px.
SUBPIXEL_BITS = 8
SUBPIXEL = 1 << SUBPIXEL_BITS  # 256
#: Offset of a pixel's sample from its corner, in subpixel units (0.5 px).
HALF_PIXEL = SUBPIXEL // 2  # 128


def snap(value: float) -> int:
    """Snap a pixel coordinate to the 1/256 grid: round to nearest, ties to even."""
    return round(value * SUBPIXEL)


def owns_edge(dx: int, dy: int) -> bool:
    """Whether a positively oriented edge with direction (dx, dy) owns samples lying exactly on it.

    Positive orientation means the triangle interior is where the edge function is > 0, i.e.
    on the side of the inward normal (-dy, dx). Owned: *left* edges (interior towards +x, so
    dy < 0) and *bottom* edges (horizontal, interior towards -y, so dy == 0 and dx < 0).
    This is what Mesa's llvmpipe does with py_gpu's y-down pixel mapping.
    """
    return dy < 0 or (dy == 0 and dx < 0)


def edge_function(ax: int, ay: int, bx: int, by: int, px: int, py: int) -> int:
    """Integer edge function of the edge a -> b at p: > 0 on the interior side of a positive triangle."""
    return (bx - ax) * (py - ay) - (by - ay) * (px - ax)


def barycentrics(x0, y0, x1, y1, x2, y2, px, py):
    """Affine (screen-space) barycentric weights of p, in float64, in the rule's operation order.

    Every exact backend evaluates exactly these expressions, in this order, so their float64
    results are bit-identical. Returns None when the float area is zero.
    """
    d = (x1 - x0) * (y2 - y0) - (y1 - y0) * (x2 - x0)
    if d == 0.0:
        return None
    l0 = ((x2 - x1) * (py - y1) - (y2 - y1) * (px - x1)) / d
    l1 = ((x0 - x2) * (py - y2) - (y0 - y2) * (px - x2)) / d
    l2 = ((x1 - x0) * (py - y0) - (y1 - y0) * (px - x0)) / d
    return l0, l1, l2
