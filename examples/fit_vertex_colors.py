"""Fit the per-vertex colors of a fixed mesh to a target image with Adam.

The target is the same icosphere rendered with other (random) vertex colors. Geometry does not
change, so the mesh is rasterized once; every step interpolates the current colors at the
fragments (``py_gpu.interpolate``) and backpropagates an L1 loss to them.

    python examples/fit_vertex_colors.py                 # writes fit_vertex_colors.png
    python examples/fit_vertex_colors.py --steps 300 --size 256 --out /tmp/fit.png

The PNG shows target | start | result side by side.
"""

from __future__ import annotations

import argparse

import torch

import py_gpu
from py_gpu import FrameBuffer, TriangleBatch
from py_gpu.fixtures import mesh_fixture


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=128, help="image side in pixels")
    parser.add_argument("--faces", type=int, default=1280, help="icosphere face count (20 * 4**level)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default="fit_vertex_colors.png")
    args = parser.parse_args(argv)

    size = (args.size, args.size)
    mesh = mesh_fixture("icosphere", args.faces, args.size, args.size, device=args.device)
    gen = torch.Generator().manual_seed(0)
    num_verts = mesh.vertices.shape[1]
    target_colors = torch.rand(1, num_verts, 3, generator=gen, dtype=torch.float64).to(args.device)
    target = py_gpu.render(TriangleBatch(mesh.vertices, mesh.faces, vertex_colors=target_colors), size).image

    colors = torch.full((1, num_verts, 3), 0.5, dtype=torch.float64, device=args.device, requires_grad=True)
    start = colors.detach().clone()
    optimizer = torch.optim.Adam([colors], lr=args.lr)
    frags = py_gpu.rasterize(mesh, size)  # fixed geometry: rasterize once
    covered = frags.face_index[..., 0] >= 0  # [1, H, W]
    for step in range(args.steps):
        optimizer.zero_grad()
        image = py_gpu.interpolate(colors, frags, mesh.faces)[..., 0, :]  # [1, H, W, 3]
        loss = (image - target)[covered].abs().mean()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            colors.clamp_(0.0, 1.0)
        if step % 50 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  L1 {loss.item() * 255:.3f} / 255")

    def frame(c: torch.Tensor) -> torch.Tensor:
        return py_gpu.render(TriangleBatch(mesh.vertices, mesh.faces, vertex_colors=c), size).to_uint8()[0].cpu()

    result = frame(colors.detach())
    error = (result.double() - target.cpu()[0].mul(255).round()).abs().mean().item()
    print(f"mean absolute pixel error: {error:.3f} / 255")
    strip = torch.cat([frame(target_colors), frame(start), result], dim=1)  # [H, 3W, 3] uint8
    FrameBuffer.from_numpy(strip.numpy()).to_png(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
