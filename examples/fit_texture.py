"""Fit a 64 x 64 texture on a sphere from renders of 12 views (a small version of nvdiffrast's ``earth``).

The target is a UV sphere (``py_gpu.shapes.uv_sphere``) wearing a procedural "planet" texture
(continents, an ocean, ice caps), lit by an ambient and a directional light. The estimate starts
from a flat grey texture. Every step renders 4 of the 12 views with ``py_gpu.Renderer`` (hard
rasterization, bilinear texture sampling, Lambert shading, display gamma 2.2; the texture is an ordinary tensor
with ``requires_grad``) and backpropagates the image difference to the texels.

The metric is the PSNR of the fitted texture against the target's, over the visible texels:
those that get at least half a texel's bilinear weight from the 12 views.

    python examples/fit_texture.py [--steps 300] [--size 128] [--out DIR]
"""

from __future__ import annotations

import math

import torch

import py_gpu
from py_gpu import fit
from py_gpu.shading.lights import AmbientLight, DirectionalLight
from py_gpu.shading.texture import sample_texture

from _fitting import Recorder, main

TEXTURE = 64  # texels per side
VIEWS, VIEWS_PER_STEP = 12, 4
LIGHTS = [AmbientLight(intensity=0.4), DirectionalLight((-0.5, -0.4, -1.0), intensity=0.6),
          DirectionalLight((0.5, -0.2, 1.0), intensity=0.6)]


def planet_texture(n: int = TEXTURE, seed: int = 7) -> torch.Tensor:
    """float ``[n, n, 3]`` in [0, 1], row 0 at the top (v = 1): smooth random continents on blue,
    white caps near the poles. Periodic in u, so the sphere's seam does not show."""
    g = torch.Generator().manual_seed(seed)
    u = (torch.arange(n, dtype=torch.float64) + 0.5) / n
    v = 1.0 - (torch.arange(n, dtype=torch.float64) + 0.5) / n  # row 0 is v = 1
    vv, uu = torch.meshgrid(v, u, indexing="ij")
    height = torch.zeros(n, n, dtype=torch.float64)
    for k in range(1, 7):  # a few periodic waves per octave
        for _ in range(4):
            a = int(torch.randint(1, k + 1, (1,), generator=g)) * (1 if float(torch.rand(1, generator=g)) < 0.5 else -1)
            b = int(torch.randint(-k, k + 1, (1,), generator=g))
            phase = float(torch.rand(1, generator=g)) * 2 * math.pi
            height += torch.cos(2 * math.pi * (a * uu + b * vv * 0.5) + phase) / math.sqrt(k)
    land = torch.sigmoid((height - 0.1) * 6.0)[..., None]  # [n, n, 1]
    ocean = torch.tensor([0.08, 0.2, 0.5], dtype=torch.float64)
    ground = torch.stack([0.25 + 0.35 * torch.sigmoid(height), 0.45 + 0.15 * torch.cos(3 * height),
                          0.15 + 0.1 * torch.sigmoid(-height)], -1)
    color = land * ground + (1 - land) * ocean
    ice = torch.sigmoid((torch.abs(vv - 0.5) - 0.38) * 40.0)[..., None]
    return (ice * 0.92 + (1 - ice) * color).clamp(0, 1).float()


def cameras(device):
    """The 12 training views: 3 rings of 4 (elevations -35, 0, 35 degrees), staggered in azimuth."""
    el = torch.tensor([-35.0] * 4 + [0.0] * 4 + [35.0] * 4, device=device)
    az = torch.tensor([0, 90, 180, 270, 45, 135, 225, 315, 0, 90, 180, 270], dtype=torch.float32, device=device)
    return fit.orbit_camera(3.0, el, az + 20.0, fov_y=45.0)


def visible_texels(uv: torch.Tensor, mask: torch.Tensor, n: int) -> torch.Tensor:
    """bool ``[n, n]``: texels that get at least 0.5 of bilinear weight from the pixels in ``mask``."""
    probe = torch.zeros(n, n, 1, dtype=uv.dtype, device=uv.device, requires_grad=True)
    sample_texture(probe + 1.0, uv[mask]).sum().backward()
    return probe.grad[..., 0] >= 0.5


def run(steps: int = 300, size: int = 128, device: str = "cpu", seed: int = 0, out=None, lr: float = 0.05) -> dict:
    """Fit the texture; ``metric`` is the PSNR (dB) on visible texels (target >= 30)."""
    g = torch.Generator().manual_seed(seed)
    renderer = py_gpu.Renderer((size, size), device=device, background=(0.0, 0.0, 0.0))
    sphere = renderer.upload(py_gpu.shapes.uv_sphere(16, 32, 1.0))
    cams = cameras(device)
    target = planet_texture().to(device)
    kw = dict(lights=LIGHTS, model="lambert", gamma=2.2)
    with torch.no_grad():
        want = renderer.render(sphere, cams, textures=target, attachments=("uv",), **kw)
    visible = visible_texels(want.extras["uv"], want.alpha[..., 0] > 0, TEXTURE)
    texture = torch.full((TEXTURE, TEXTURE, 3), 0.5, device=device, requires_grad=True)
    start = texture.detach().clone()

    def psnr(t: torch.Tensor) -> float:
        mse = float(((t.detach().clamp(0, 1) - target) ** 2)[visible].mean())
        return 10.0 * math.log10(1.0 / max(mse, 1e-20))

    print(f"texture: {TEXTURE}x{TEXTURE} texels ({int(visible.sum())} visible), {VIEWS} views "
          f"({VIEWS_PER_STEP} per step), {steps} steps at {size}x{size}; PSNR at the start {psnr(texture):.2f} dB")
    opt = torch.optim.Adam([texture], lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda it: 0.05 ** min(1.0, it / max(steps, 1)))
    show = py_gpu.Camera(cams.view[5:6], cams.projection)
    rec = Recorder(out, steps)
    for step in range(steps):
        pick = torch.randperm(VIEWS, generator=g)[:VIEWS_PER_STEP].to(device)
        got = renderer.render(sphere, py_gpu.Camera(cams.view[pick], cams.projection), textures=texture, **kw)
        loss = ((got.image - want.image[pick]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        with torch.no_grad():
            texture.clamp_(0.0, 1.0)
        info = {"psnr_db": psnr(texture)} if step % max(1, steps // 10) == 0 or step == steps - 1 else {}
        rec.loss(step, "image MSE", loss.item(), **info)
        rec.frame(step, lambda: _panels(renderer, sphere, show, texture.detach(), target, kw))
    end = psnr(texture)
    print(f"texture PSNR on visible texels: start {psnr(start):.2f} dB -> end {end:.2f} dB (target >= 30)")
    with torch.no_grad():
        view = lambda t: renderer.render(sphere, show, textures=t, **kw).image[0]  # noqa: E731
        pictures = [("start", view(start)), ("result", view(texture.detach())), ("target", view(target)),
                    ("fitted texture", _texture_picture(texture.detach(), visible, size)),
                    ("target texture", _texture_picture(target, visible, size))]
    rec.frame(steps, lambda: _panels(renderer, sphere, show, texture.detach(), target, kw), force=True)
    files = rec.write(pictures, title="texture", ylabel="image MSE")
    return dict(metric=end, start_psnr=psnr(start), visible_texels=int(visible.sum()), files=files)


def _texture_picture(t: torch.Tensor, visible: torch.Tensor, size: int) -> torch.Tensor:
    """The texture enlarged to ``size`` rows, texels no view sees darkened."""
    shade = torch.where(visible[..., None], 1.0, 0.35)
    k = max(1, size // t.shape[0])
    return (t.clamp(0, 1) * shade).repeat_interleave(k, 0).repeat_interleave(k, 1)


def _panels(renderer, sphere, camera, texture, target, kw):
    with torch.no_grad():
        return [("estimate", renderer.render(sphere, camera, textures=texture, **kw).image[0]),
                ("target", renderer.render(sphere, camera, textures=target, **kw).image[0]),
                ("texture", _texture_picture(texture, torch.ones(texture.shape[:2], dtype=torch.bool,
                                                                    device=texture.device), 128))]


def _options(parser) -> None:
    parser.add_argument("--lr", type=float, default=0.05)


if __name__ == "__main__":
    main("texture", run, steps=300, size=128, doc=__doc__, extra=_options)
