"""py_3d's 1-pixel lines and points, vectorized: ``CPURenderer._draw_projected_line`` for every
segment at once (wireframe edges, edge highlights, ``Line3``, ``LineSet3``), ``_draw_point``, and
the depth-tested composite of their samples with the triangles' pixels.

py_3d draws each segment as ``int(steps) + 1`` samples ``round(start + (end - start) * i /
steps)`` with ``steps = max(|dx|, |dy|, 1)`` and the depth interpolated linearly on screen; a
sample lands where it is strictly nearer than what is there. Only the samples that can reach the
image are generated, so a segment that projects far off screen costs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .scene import F64

#: Bits of the draw-order key: object index, phase (0 triangles and lines, 1 edge highlights), sequence.
_PHASE_SHIFT = 43
_OBJECT_SHIFT = 44
_SAMPLE_BITS = 22


def order_key(objects: torch.Tensor, phase: int, sequence: torch.Tensor) -> torch.Tensor:
    """int64 draw-order keys: lower draws first (so it wins a depth tie, as py_3d's strict test)."""
    return (objects << _OBJECT_SHIFT) | (phase << _PHASE_SHIFT) | sequence


@dataclass(frozen=True)
class Samples:
    """Fragments of lines or points: flat pixel index, depth, draw-order key, 0-255 color (``[S]``,
    ``[S]``, ``[S]``, ``[S, 3]``)."""

    pixel: torch.Tensor
    depth: torch.Tensor
    order: torch.Tensor
    color: torch.Tensor

    @staticmethod
    def cat(parts: list["Samples"]) -> "Samples":
        return Samples(*(torch.cat([getattr(p, f) for p in parts]) for f in ("pixel", "depth", "order", "color")))


def segment_samples(x0, y0, z0, x1, y1, z1, color: torch.Tensor, order: torch.Tensor, size, *,
                    bias: float = 0.0) -> Samples:
    """The samples of projected segments (float64 ``[S]`` screen coordinates and depths), each with
    a 0-255 ``color`` ``[S, 3]`` and a draw-order key ``order`` ``[S]`` (sample ``i`` of a segment
    gets ``order + i``); ``bias`` is subtracted from the depth (``edge_highlight_depth_bias``)."""
    height, width = size
    dev = x0.device
    dx, dy = x1 - x0, y1 - y0
    steps = torch.maximum(torch.maximum(dx.abs(), dy.abs()), torch.ones_like(dx))
    count = torch.floor(steps)  # samples 0 .. int(steps)
    # the sample indices that can land in the image: x and y within a pixel of it
    lo = torch.zeros_like(steps)
    hi = count.clone()
    for start, delta, side in ((x0, dx, width), (y0, dy, height)):
        moving = delta != 0.0
        safe = torch.where(moving, delta, torch.ones_like(delta))
        ta = (-1.0 - start) / safe * steps
        tb = (side - start) / safe * steps
        lo = torch.where(moving, torch.maximum(lo, torch.minimum(ta, tb).floor() - 1.0), lo)
        hi = torch.where(moving, torch.minimum(hi, torch.maximum(ta, tb).ceil() + 1.0), hi)
        outside = ~moving & ((start < -1.0) | (start > side))
        hi = torch.where(outside, lo - 1.0, hi)
    hi = torch.minimum(hi, lo + float(2 ** _SAMPLE_BITS - 1))
    n = (hi - lo + 1.0).clamp_min(0.0).to(torch.int64)
    total = int(n.sum())
    if total == 0:
        return _empty(dev)
    seg = torch.repeat_interleave(torch.arange(n.shape[0], device=dev), n)
    first = torch.cumsum(n, 0) - n
    index = (torch.arange(total, device=dev) - first[seg]).to(F64) + lo[seg]
    amount = index / steps[seg]
    x = torch.round(x0[seg] + dx[seg] * amount)
    y = torch.round(y0[seg] + dy[seg] * amount)
    z = z0[seg] + (z1[seg] - z0[seg]) * amount - bias
    inside = (x >= 0) & (x < width) & (y >= 0) & (y < height)
    pixel = (y * width + x).to(torch.int64)
    keys = order[seg] + index.to(torch.int64)
    return Samples(pixel[inside], z[inside], keys[inside], color[seg][inside])


def point_samples(x, y, z, color: torch.Tensor, order: torch.Tensor, size) -> Samples:
    """``_draw_point``: each projected point at ``(round(x), round(y))``."""
    height, width = size
    x, y = torch.round(x), torch.round(y)
    inside = (x >= 0) & (x < width) & (y >= 0) & (y < height)
    pixel = (y * width + x).to(torch.int64)
    return Samples(pixel[inside], z[inside], order[inside], color[inside])


def _empty(device) -> Samples:
    i = torch.zeros(0, dtype=torch.int64, device=device)
    return Samples(i, torch.zeros(0, dtype=F64, device=device), i, torch.zeros(0, 3, dtype=F64, device=device))


def composite(image: torch.Tensor, triangles: Samples | None, strokes: Samples) -> None:
    """Write into ``image`` (uint8 ``[H * W, 3]``) the nearest fragment of each pixel among the triangles'
    pixels (already in ``image``) and the line and point samples; equal depths go to the earlier
    drawn (lower key), as py_3d's strictly-less depth test does."""
    keep = torch.isfinite(strokes.depth)
    strokes = Samples(strokes.pixel[keep], strokes.depth[keep], strokes.order[keep], strokes.color[keep])
    if strokes.pixel.numel() == 0:
        return
    frags = strokes if triangles is None else Samples.cat([triangles, strokes])
    size = image.shape[0]
    nearest = torch.full((size,), float("inf"), dtype=F64, device=image.device)
    nearest = nearest.scatter_reduce(0, frags.pixel, frags.depth, "amin")
    tied = frags.depth == nearest[frags.pixel]
    first = torch.full((size,), torch.iinfo(torch.int64).max, dtype=torch.int64, device=image.device)
    first = first.scatter_reduce(0, frags.pixel[tied], frags.order[tied], "amin")
    win = tied & (frags.order == first[frags.pixel])
    image[frags.pixel[win]] = frags.color[win].to(image.dtype)
