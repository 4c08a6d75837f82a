"""Fit the per-vertex colors of a fixed mesh to a target image with Adam (the "colours" recipe).

The target is a 1,280-face icosphere rendered with random vertex colors; the estimate starts
grey. Geometry does not change, so the mesh is rasterized once; every step interpolates the
current colors at the fragments (``py_gpu.interpolate``) and backpropagates an L1 loss to them.
The metric is the mean absolute pixel error of the final 8-bit render, in 1/255 units.

    python examples/fit_vertex_colors.py [--steps 200] [--size 128] [--device cpu] [--out DIR]
    py-gpu fit colours --steps 200
"""

from __future__ import annotations

import torch

import py_gpu
from py_gpu import TriangleBatch
from py_gpu.fixtures import mesh_fixture

from _fitting import Recorder, main


def run(steps: int = 200, size: int = 128, device: str = "cpu", seed: int = 0, out=None, lr: float = 0.05,
        faces: int = 1280) -> dict:
    """Fit the colors; ``metric`` is the final mean absolute pixel error in 1/255 (target < 1)."""
    hw = (size, size)
    mesh = mesh_fixture("icosphere", faces, size, size, device=device)
    gen = torch.Generator().manual_seed(seed)
    num_verts = mesh.vertices.shape[1]
    target_colors = torch.rand(1, num_verts, 3, generator=gen, dtype=torch.float64).to(device)
    target = py_gpu.render(TriangleBatch(mesh.vertices, mesh.faces, vertex_colors=target_colors), hw).image
    colors = torch.full((1, num_verts, 3), 0.5, dtype=torch.float64, device=device, requires_grad=True)
    start = colors.detach().clone()
    opt = torch.optim.Adam([colors], lr=lr)
    frags = py_gpu.rasterize(mesh, hw)  # fixed geometry: rasterize once
    covered = frags.face_index[..., 0] >= 0  # [1, H, W]

    def picture(c: torch.Tensor) -> torch.Tensor:
        return py_gpu.render(TriangleBatch(mesh.vertices, mesh.faces, vertex_colors=c), hw).image[0]

    def error(c: torch.Tensor) -> float:
        got = py_gpu.render(TriangleBatch(mesh.vertices, mesh.faces, vertex_colors=c), hw).to_uint8()[0]
        return (got.double() - (target[0] * 255).round()).abs().mean().item()

    print(f"colours: {num_verts} vertices, {steps} steps at {size}x{size}; pixel error at the start {error(start):.2f} / 255")
    rec = Recorder(out, steps)
    for step in range(steps):
        image = py_gpu.interpolate(colors, frags, mesh.faces)[..., 0, :]  # [1, H, W, 3]
        loss = (image - target)[covered].abs().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            colors.clamp_(0.0, 1.0)
        rec.loss(step, "L1 (x255)", loss.item() * 255)
        rec.frame(step, lambda: [("estimate", picture(colors.detach())), ("target", target[0])])
    end = error(colors.detach())
    print(f"mean absolute pixel error: start {error(start):.2f} -> end {end:.3f} / 255 (target < 1)")
    rec.frame(steps, lambda: [("estimate", picture(colors.detach())), ("target", target[0])], force=True)
    files = rec.write([("start", picture(start)), ("result", picture(colors.detach())), ("target", target[0])],
                      title="colours", ylabel="L1 x 255")
    return dict(metric=end, start_error=error(start), files=files)


def _options(parser) -> None:
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--faces", type=int, default=1280, help="icosphere face count (20 * 4**level)")


if __name__ == "__main__":
    main("colours", run, steps=200, size=128, doc=__doc__, extra=_options)
