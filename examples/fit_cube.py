"""Fit a cube's 8 vertex positions and colors to renders from random views (nvdiffrast's ``cube``).

The target is a cube with random per-vertex colors. The estimate starts from the same cube with
every vertex moved by up to 0.5 (of a side of 2) along each axis and with other random colors.
Every step renders both from a few random views and backpropagates the image difference to the
positions and the colors. Two estimators give the silhouettes their gradient:

- ``antialias`` (default): hard rasterization, ``py_gpu.interpolate`` of the colors, then
  ``py_gpu.antialias`` (nvdiffrast's recipe);
- ``soft``: ``py_gpu.render(..., mode="soft")``, with the loss on ``image`` (alpha-composited).

The metric is the largest distance between a fitted vertex and its target.

    python examples/fit_cube.py [--estimator antialias|soft] [--steps 600] [--size 64] [--out DIR]
"""

from __future__ import annotations

import math

import torch

import py_gpu
from py_gpu.camera import perspective, transform_points

from _fitting import Recorder, main

#: float [8, 3] corners of the cube [-1, 1]^3 and int64 [12, 3] faces, counter-clockwise outside
CORNERS = [[x, y, z] for x in (-1.0, 1.0) for y in (-1.0, 1.0) for z in (-1.0, 1.0)]
_QUADS = [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)]
FACES = [t for a, b, c, d in _QUADS for t in ((a, b, c), (a, c, d))]
DISTANCE = 5.0  # camera distance from the cube's center
VIEWS = 4  # random views per step


def random_mvps(n: int, generator: torch.Generator, device) -> torch.Tensor:
    """float ``[n, 4, 4]`` model-view-projection matrices: the cube turned uniformly at random,
    ``DISTANCE`` in front of a 45-degree camera."""
    model = torch.eye(4, device=device).repeat(n, 1, 1)
    model[:, :3, :3] = py_gpu.fit.random_rotations(n, generator=generator, device=device)
    model[:, 2, 3] = -DISTANCE
    return perspective(45.0, 1.0, 1.0, 20.0, device=device) @ model


def render(positions: torch.Tensor, colors: torch.Tensor, mvp: torch.Tensor, size: int, estimator: str,
           faces: torch.Tensor, topology=None, sigma: float = 1.0) -> torch.Tensor:
    """float ``[B, H, W, 3]`` image of the cube (``positions [8, 3]``, ``colors [8, 3]``) over black."""
    clip = transform_points(mvp, positions)  # [B, 8, 4]
    cols = colors.expand(clip.shape[0], -1, -1)
    if estimator == "soft":
        frame = py_gpu.render(py_gpu.TriangleBatch(clip, faces, vertex_colors=cols), (size, size), mode="soft",
                              sigma=sigma)
        return frame.image  # composited with its soft alpha over black: edges carry gradients
    frags = py_gpu.rasterize(py_gpu.TriangleBatch(clip, faces), (size, size))
    color = py_gpu.interpolate(cols, frags, faces)[..., 0, :]  # [B, H, W, 3]
    color = torch.where(frags.face_index >= 0, color, torch.zeros((), device=color.device))
    return py_gpu.antialias(color, frags, clip, faces, topology=topology)


def run(steps: int = 600, size: int = 64, device: str = "cpu", seed: int = 0, out=None,
        estimator: str = "antialias", lr: float = 0.03) -> dict:
    """Fit the cube; returns ``metric`` (max vertex error, target < 1e-3) and the start error."""
    if estimator not in ("antialias", "soft"):
        raise ValueError(f"estimator must be 'antialias' or 'soft', got {estimator!r}")
    g = torch.Generator().manual_seed(seed)
    faces = torch.tensor(FACES, device=device)
    topology = py_gpu.shading.edge_topology(faces)
    pos_true = torch.tensor(CORNERS, device=device)
    col_true = torch.rand(8, 3, generator=g).to(device)
    pos = (pos_true + (torch.rand(8, 3, generator=g).to(device) - 0.5)).requires_grad_(True)
    col = torch.rand(8, 3, generator=g).to(device).requires_grad_(True)
    pos_start, col_start = pos.detach().clone(), col.detach().clone()

    def error(p: torch.Tensor) -> float:
        return float((p.detach() - pos_true).norm(dim=-1).max())

    start_error = error(pos)
    print(f"cube ({estimator}): {steps} steps at {size}x{size}, {VIEWS} views per step, "
          f"start max vertex error {start_error:.3f}")
    opt = torch.optim.Adam([pos, col], lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda it: 0.01 ** (it / max(steps, 1)))  # lr falls 100x
    show = random_mvps(1, torch.Generator().manual_seed(seed + 1), device)  # a fixed view for the pictures
    rec = Recorder(out, steps)
    for step in range(steps):
        mvp = random_mvps(VIEWS, g, device)
        with torch.no_grad():
            want = render(pos_true, col_true, mvp, size, estimator, faces, topology)
        loss = ((render(pos, col, mvp, size, estimator, faces, topology) - want) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        rec.loss(step, "image MSE", loss.item(), max_vertex_error=error(pos))
        rec.frame(step, lambda: [("estimate", render(pos.detach(), col.detach(), show, size, "antialias", faces)[0]),
                                 ("target", render(pos_true, col_true, show, size, "antialias", faces)[0])])
    end_error = error(pos)
    print(f"max vertex error: start {start_error:.4f} -> end {end_error:.2e} (target < 1e-3)")
    with torch.no_grad():
        pictures = [("start", render(pos_start, col_start, show, size, "antialias", faces)[0]),
                    ("result", render(pos.detach(), col.detach(), show, size, "antialias", faces)[0]),
                    ("target", render(pos_true, col_true, show, size, "antialias", faces)[0])]
    rec.frame(steps, lambda: pictures[1:], force=True)
    files = rec.write(pictures, title=f"cube, {estimator}", ylabel="image MSE")
    color_error = float((col.detach().clamp(0, 1) - col_true).abs().max())
    return dict(metric=end_error, start_error=start_error, color_error=color_error, estimator=estimator,
                files=files)


def _options(parser) -> None:
    parser.add_argument("--estimator", choices=("antialias", "soft"), default="antialias")
    parser.add_argument("--lr", type=float, default=0.03)


if __name__ == "__main__":
    main("cube", run, steps=600, size=64, doc=__doc__, extra=_options)
