"""Fit a triangle's vertex positions to a target silhouette with soft rasterization.

The target silhouette is the same kind of triangle rendered elsewhere in the image. Hard
rasterization gives no gradient here (coverage is a step function); soft mode does. The edge
width ``sigma`` starts wide, so that the footprints overlap although the shapes do not, and
shrinks as the fit converges (coarse to fine).

    python examples/fit_silhouette.py [--steps 300] [--png docs/img/soft-fit-silhouette.png]
"""

from __future__ import annotations

import argparse
import math

import torch

from py_gpu import RasterSettings, TriangleBatch
from py_gpu.image import save_png
from py_gpu.raster.torch_soft import rasterize_soft
from py_gpu.shading.blend import silhouette

SIZE = (64, 64)  # (H, W)
FACES = torch.tensor([[0, 1, 2]])
#: float64 [3, 2] screen-space (x_px, y_px) of the target triangle
TARGET = torch.tensor([[44.0, 12.0], [56.0, 44.0], [30.0, 40.0]], dtype=torch.float64)
#: float64 [3, 2] start: moved about 20 px away and deformed
START = torch.tensor([[20.0, 26.0], [34.0, 50.0], [9.0, 52.0]], dtype=torch.float64)


def soft_alpha(xy: torch.Tensor, sigma: float) -> torch.Tensor:
    """float ``[H, W]`` soft silhouette of the triangle with float ``[3, 2]`` corners ``xy``."""
    verts = torch.cat((xy, torch.full((3, 1), 0.5, dtype=xy.dtype)), dim=1)[None]  # [1, 3, 3]
    s = RasterSettings(mode="soft", sigma=sigma, faces_per_pixel=1)
    return silhouette(rasterize_soft(TriangleBatch(verts, FACES), SIZE, s), s)[0, ..., 0]


def fit(steps: int = 300, start: torch.Tensor = START, target: torch.Tensor = TARGET, snapshots: bool = False):
    """Optimize the corners from ``start`` to match ``target``'s silhouette.

    Returns ``(corners float64 [3, 2], mean vertex error in px, snapshots)``; ``snapshots`` is a
    list of ``(step, corners)`` when asked for.
    """
    xy = start.clone().requires_grad_(True)
    opt = torch.optim.Adam([xy], lr=1.0)
    sigma_hi, sigma_lo = 60.0, 0.3
    shots = []
    for step in range(steps):
        frac = min(1.0, step / (0.7 * steps))
        sigma = sigma_hi * (sigma_lo / sigma_hi) ** frac  # geometric coarse-to-fine schedule
        for group in opt.param_groups:
            group["lr"] = 1.0 * (0.05 ** frac)
        with torch.no_grad():
            want = soft_alpha(target, sigma)  # the target, rendered at the same edge width
        loss = ((soft_alpha(xy, sigma) - want) ** 2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if snapshots and step % max(1, steps // 6) == 0:
            shots.append((step, xy.detach().clone()))
    corners = xy.detach()
    err = float((corners - target).norm(dim=1).mean())
    if snapshots:
        shots.append((steps, corners.clone()))
    return corners, err, shots


def save_strip(path: str, shots) -> None:
    """A strip of silhouettes over the optimization (red: target outline area, white: current)."""
    tiles = []
    target = soft_alpha(TARGET, 0.3)
    for _, corners in shots:
        cur = soft_alpha(corners, 0.3)
        rgb = torch.stack((torch.maximum(cur, 0.6 * target), cur, cur), dim=-1)
        tiles.append(torch.nn.functional.pad(rgb, (0, 0, 2, 2, 2, 2), value=0.25))
    strip = torch.cat(tiles, dim=1).repeat_interleave(3, dim=0).repeat_interleave(3, dim=1)  # 3x nearest
    strip = (strip.clamp(0, 1) * 255 + 0.5).to(torch.uint8).numpy()
    save_png(path, strip)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--png", default=None, help="write a PNG strip of the fit")
    args = parser.parse_args()
    corners, err, shots = fit(args.steps, snapshots=args.png is not None)
    start_err = float((START - TARGET).norm(dim=1).mean())
    print(f"mean vertex error: start {start_err:.2f} px -> end {err:.3f} px")
    print("fitted corners:", [tuple(round(v, 2) for v in row) for row in corners.tolist()])
    if args.png:
        save_strip(args.png, shots)
        print(f"wrote {args.png}")
    if not math.isfinite(err):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
