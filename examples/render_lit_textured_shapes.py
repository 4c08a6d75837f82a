"""Render lit, textured shapes rotating: writes a PNG (first frame) and an animated GIF
(or an MP4 when imageio-ffmpeg is installed and --mp4 is given).

    python examples/render_lit_textured_shapes.py [--out DIR] [--frames N] [--size H W] [--backend torch]
"""

from __future__ import annotations

import argparse
import math
import os

import torch
from PIL import Image

from py_gpu.camera import Camera
from py_gpu.mesh import cube, plane, torus, uv_sphere
from py_gpu.renderer import Renderer
from py_gpu.shading.lights import AmbientLight, DirectionalLight, Material, PointLight
from py_gpu.shading.texture import Texture


def checker(n: int, a, b) -> torch.Tensor:
    """float [n*8, n*8, 3] checkerboard of colors a and b."""
    i, j = torch.meshgrid(torch.arange(n * 8), torch.arange(n * 8), indexing="ij")
    on = (((i // 8) + (j // 8)) % 2 == 0)[..., None]
    return torch.where(on, torch.tensor(a), torch.tensor(b)).float()


def stripes(n: int) -> torch.Tensor:
    """float [n, n, 3] smooth rainbow stripes."""
    u = torch.linspace(0, 1, n)
    hue = (u[None, :] * 3 + u[:, None] * 0.5) * 2 * math.pi
    return torch.stack([0.55 + 0.45 * torch.sin(hue), 0.55 + 0.45 * torch.sin(hue + 2.1),
                        0.55 + 0.45 * torch.sin(hue + 4.2)], -1)


def rotation_y(angle: float) -> torch.Tensor:
    c, s = math.cos(angle), math.sin(angle)
    return torch.tensor([[c, 0.0, s, 0.0], [0.0, 1.0, 0.0, 0.0], [-s, 0.0, c, 0.0], [0.0, 0.0, 0.0, 1.0]])


def translate(x: float, y: float, z: float) -> torch.Tensor:
    m = torch.eye(4)
    m[:3, 3] = torch.tensor([x, y, z])
    return m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs/img")
    ap.add_argument("--frames", type=int, default=24)
    ap.add_argument("--size", type=int, nargs=2, default=(240, 360), metavar=("H", "W"))
    ap.add_argument("--backend", default="torch")
    ap.add_argument("--mp4", action="store_true", help="also write an MP4 (needs imageio-ffmpeg)")
    args = ap.parse_args()
    H, W = args.size
    os.makedirs(args.out, exist_ok=True)

    r = Renderer((H, W), backend=args.backend, background=(0.06, 0.07, 0.1))
    # geometry is converted and uploaded once; every frame only changes the turntable transform
    scene = r.upload([
        plane(4.5, 4).transformed(translate(0.0, -0.8, 0.0)).with_material(0),
        cube(1.1).transformed(translate(-1.7, -0.25, 0.0)).with_material(1),
        uv_sphere(24, 48, 0.7).transformed(translate(0.0, -0.1, -0.6)).with_material(2),
        torus(0.55, 0.2, 48, 24).transformed(translate(1.7, -0.1, 0.2)).with_material(2),
    ])
    # Texture objects build their mip pyramids once (trilinear filtering)
    textures = [Texture(checker(4, (0.85, 0.85, 0.8), (0.3, 0.32, 0.38))),
                Texture(checker(2, (0.95, 0.55, 0.2), (0.2, 0.45, 0.9))), Texture(stripes(64))]
    lights = [AmbientLight(intensity=0.25), DirectionalLight((-0.5, -1.0, -0.4), intensity=0.8),
              PointLight((0.0, 2.5, 2.5), (1.0, 0.85, 0.7), 3.0, (1.0, 0.0, 0.25))]
    camera = Camera.perspective((0.0, 2.2, 5.6), (0.0, -0.3, 0.0), fov_y=50.0, aspect=W / H, near=0.1, far=50.0)

    frames = []
    with torch.no_grad():
        for k in range(args.frames):
            spin = rotation_y(2 * math.pi * k / args.frames)
            frame = r.render(scene, camera, lights=lights, textures=textures, material=Material(0.35, 48.0),
                             transforms=spin, texture_filter="trilinear", gamma=2.2)
            frames.append(frame.to_numpy()[0])
    first = frames[0]
    png = os.path.join(args.out, "lit_textured_shapes.png")
    Image.fromarray(first).save(png)
    gif = os.path.join(args.out, "lit_textured_shapes.gif")
    Image.fromarray(frames[0]).save(gif, save_all=True, append_images=[Image.fromarray(f) for f in frames[1:]],
                                    duration=60, loop=0)
    print(f"wrote {png} and {gif} ({len(frames)} frames, {W}x{H})")
    if args.mp4:
        try:
            import imageio.v2 as imageio
        except ImportError:
            print('MP4 skipped: pip install imageio imageio-ffmpeg')
        else:
            mp4 = os.path.join(args.out, "lit_textured_shapes.mp4")
            imageio.mimsave(mp4, frames, fps=20)
            print(f"wrote {mp4}")


if __name__ == "__main__":
    main()
