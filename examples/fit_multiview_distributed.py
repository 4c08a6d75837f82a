"""Fit a sphere's texture from many views, the views split across processes (torch.distributed DDP).

The target is a UV sphere (``py_gpu.shapes.uv_sphere``) wearing a smooth random texture, lit by
an ambient and a directional light, seen by ``--views`` cameras on a ring around it. The
estimate starts from a flat grey texture held by a small ``nn.Module`` wrapped in
``torch.nn.parallel.DistributedDataParallel``. Every step each process renders its own share of
the views with ``py_gpu.Renderer`` (hard rasterization, bilinear texture sampling) and
backpropagates its part of the loss; DDP averages the gradients, and every process takes the
same Adam step.

The loss is normalized so that the averaged gradient is the full-batch one: with ``V`` views
and ``N`` processes, a process holding views ``S`` minimizes ``(N / V) * sum_{v in S} mse_v``,
so the DDP average ``(1 / N) * sum`` over processes is ``(1 / V) * sum_v grad mse_v``, the
gradient of the mean image error over all views. Any number of processes therefore gives the
result of one process (up to the order of floating-point sums).

    python examples/fit_multiview_distributed.py --steps 100 --views 8 --out fit.pt
    torchrun --nproc_per_node=2 examples/fit_multiview_distributed.py --steps 100 --views 8 --out fit.pt

Without ``torchrun`` it runs as one process (world size 1). Processes communicate over gloo on
the CPU and NCCL on CUDA (each process takes ``cuda:LOCAL_RANK``). Rank 0 writes ``--out``
(``torch.save`` of a dict: the fitted ``texture``, the ``metric`` (texture PSNR in dB over the
texels the views see) and ``start_metric``, the per-step global ``losses``, ``world_size``).
"""

from __future__ import annotations

import argparse
import gc
import math
import os

import torch
import torch.distributed as dist

import py_gpu
from py_gpu import fit
from py_gpu.shading.lights import AmbientLight, DirectionalLight
from py_gpu.shading.texture import sample_texture

LIGHTS = [AmbientLight(intensity=0.45), DirectionalLight((-0.5, -0.4, -1.0), intensity=0.7)]
RENDER = dict(lights=LIGHTS, model="lambert")


def target_texture(n: int, seed: int, dtype: torch.dtype) -> torch.Tensor:
    """float ``[n, n, 3]`` in [0, 1]: a sum of a few smooth random waves per channel, periodic in u."""
    g = torch.Generator().manual_seed(seed)
    u = (torch.arange(n, dtype=torch.float64) + 0.5) / n
    vv, uu = torch.meshgrid(u, u, indexing="ij")
    out = torch.full((n, n, 3), 0.5, dtype=torch.float64)
    for _ in range(6):
        a = int(torch.randint(1, 4, (1,), generator=g))
        b = int(torch.randint(-2, 3, (1,), generator=g))
        phase = float(torch.rand(1, generator=g)) * 2 * math.pi
        weight = torch.rand(3, generator=g, dtype=torch.float64) - 0.5
        out += weight * 0.5 * torch.cos(2 * math.pi * (a * uu + b * vv * 0.5) + phase)[..., None]
    return out.clamp(0, 1).to(dtype)


def ring_cameras(views: int, device, dtype) -> py_gpu.Camera:
    """``views`` cameras 3 units from the origin, azimuths evenly spaced, elevations alternating +-25 degrees."""
    k = torch.arange(views, dtype=dtype, device=device)
    elevation = torch.where(k % 2 == 0, 25.0, -25.0).to(dtype)
    return fit.orbit_camera(3.0, elevation, 360.0 * k / views + 10.0, fov_y=45.0)


class TextureModel(torch.nn.Module):
    """The parameters of the fit: one texture ``[n, n, 3]``. ``forward(camera)`` renders it."""

    def __init__(self, renderer: py_gpu.Renderer, mesh, n: int):
        super().__init__()
        self.renderer, self.mesh = renderer, mesh
        self.texture = torch.nn.Parameter(torch.full((n, n, 3), 0.5, dtype=renderer.dtype, device=renderer.device))

    def forward(self, camera: py_gpu.Camera) -> torch.Tensor:
        """float ``[B, H, W, 3]``: the sphere wearing the texture, one image per view."""
        if camera.view.shape[0] == 0:  # a process without views still takes part in the all-reduce
            H, W = self.renderer.size
            return self.texture.sum() * torch.zeros(0, H, W, 3, dtype=self.texture.dtype, device=self.texture.device)
        return self.renderer.render(self.mesh, camera, textures=self.texture, **RENDER).image


def setup(device_arg: str | None) -> tuple[int, int, torch.device]:
    """Join the process group (torchrun's environment, or a world of one) and pick this process's device."""
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    if device_arg is None:
        device_arg = f"cuda:{local}" if torch.cuda.is_available() else "cpu"
    device = torch.device(device_arg)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if world > 1:
        dist.init_process_group(backend)  # MASTER_ADDR/PORT, RANK, WORLD_SIZE from torchrun
    else:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    return rank, world, device


def run(steps: int, views: int, size: int, texels: int, seed: int, lr: float, dtype: torch.dtype,
        device: torch.device, rank: int, world: int) -> dict:
    """The fit on this process's share of the views; returns what rank 0 writes."""
    torch.manual_seed(seed)
    renderer = py_gpu.Renderer((size, size), device=device, dtype=dtype)
    mesh = renderer.upload(py_gpu.shapes.uv_sphere(12, 24, 1.0))
    cams = ring_cameras(views, device, dtype)
    target = target_texture(texels, seed, dtype).to(device)
    mine = torch.tensor_split(torch.arange(views, device=device), world)[rank]  # contiguous share of the views
    camera = py_gpu.Camera(cams.view[mine], cams.projection)
    with torch.no_grad():
        want = renderer.render(mesh, camera, textures=target, attachments=("uv",), **RENDER)
    visible = _visible_texels(want.extras["uv"], want.alpha[..., 0] > 0, texels)
    dist.all_reduce(visible, op=dist.ReduceOp.MAX)  # texels seen by any process's views
    visible = visible.bool()

    model = TextureModel(renderer, mesh, texels)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.Adam(ddp.parameters(), lr=lr)

    def psnr() -> float:
        mse = float(((model.texture.detach().clamp(0, 1) - target) ** 2)[visible].mean())
        return 10.0 * math.log10(1.0 / max(mse, 1e-20))

    start, losses = psnr(), []
    for _ in range(steps):
        images = ddp(camera)  # [len(mine), H, W, 3]
        per_view = ((images - want.image) ** 2).mean(dim=(1, 2, 3))  # [len(mine)]
        loss = per_view.sum() * (world / views)  # DDP's average over processes -> mean over all views
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            model.texture.clamp_(0.0, 1.0)
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(float(total) / world)  # the mean image MSE over all views
    return dict(texture=model.texture.detach().cpu(), metric=psnr(), start_metric=start, losses=losses,
                world_size=world, views=views, visible_texels=int(visible.sum()))


def _visible_texels(uv: torch.Tensor, mask: torch.Tensor, n: int) -> torch.Tensor:
    """int64 ``[n, n]``, 1 for texels that get at least half a texel's bilinear weight from the pixels in ``mask``."""
    probe = torch.zeros(n, n, 1, dtype=uv.dtype, device=uv.device, requires_grad=True)
    if bool(mask.any()):
        sample_texture(probe + 1.0, uv[mask]).sum().backward()
        return (probe.grad[..., 0] >= 0.5).long()
    return torch.zeros(n, n, dtype=torch.long, device=uv.device)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="optimization steps (default: 100)")
    parser.add_argument("--views", type=int, default=8, help="views in all, split across processes (default: 8)")
    parser.add_argument("--size", type=int, default=64, help="image side in pixels (default: 64)")
    parser.add_argument("--texels", type=int, default=32, help="texture side in texels (default: 32)")
    parser.add_argument("--lr", type=float, default=0.05, help="Adam learning rate (default: 0.05)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--device", default=None, help="torch device (default: cuda:LOCAL_RANK when CUDA is available, else cpu)")
    parser.add_argument("--out", default=None, help="file rank 0 writes the result to (torch.save)")
    args = parser.parse_args(argv)
    if args.views < 1 or args.steps < 0:
        parser.error("--views must be >= 1 and --steps >= 0")
    rank, world, device = setup(args.device)
    try:
        result = run(args.steps, args.views, args.size, args.texels, args.seed, args.lr, getattr(torch, args.dtype),
                     device, rank, world)
        if rank == 0:
            print(f"{world} process(es), {args.views} views, {args.steps} steps: texture PSNR "
                  f"{result['start_metric']:.2f} dB -> {result['metric']:.2f} dB", flush=True)
            if args.out:
                torch.save(result, args.out)
                print(f"wrote {args.out}")
        dist.barrier()
    finally:
        # DistributedDataParallel keeps reference cycles: free it (and its reducer's hold on the
        # process group) while the interpreter is alive, or gloo's threads may abort the process
        # when the interpreter tears it down at exit
        gc.collect()
        dist.destroy_process_group()
    return result


if __name__ == "__main__":
    main()
