"""The demo scene: lit, textured shapes on a turntable (``py-gpu demo``).

Writes the first frame as a PNG and the turntable as an animated GIF (pillow), plus an MP4 when
asked for and imageio-ffmpeg is installed.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from PIL import Image

from ._check import PyGpuValueError, check_size
from .camera import Camera
from .shapes import cube, plane, torus, uv_sphere
from .renderer import Renderer
from .shading.lights import AmbientLight, DirectionalLight, Material, PointLight
from .shading.texture import Texture


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


def demo_scene(r: Renderer):
    """The demo scene uploaded to ``r``: ``(handle, textures, lights, camera)``, the camera framed for
    ``r.size``. Shared by the turntable and the benchmarks that time its frame."""
    H, W = r.size
    scene = r.upload([
        plane(4.5, 4).transformed(translate(0.0, -0.8, 0.0)).with_material(0),
        cube(1.1).transformed(translate(-1.7, -0.25, 0.0)).with_material(1),
        uv_sphere(24, 48, 0.7).transformed(translate(0.0, -0.1, -0.6)).with_material(2),
        torus(0.55, 0.2, 48, 24).transformed(translate(1.7, -0.1, 0.2)).with_material(2),
    ])
    textures = [Texture(checker(4, (0.85, 0.85, 0.8), (0.3, 0.32, 0.38))),
                Texture(checker(2, (0.95, 0.55, 0.2), (0.2, 0.45, 0.9))), Texture(stripes(64))]
    lights = [AmbientLight(intensity=0.25), DirectionalLight((-0.5, -1.0, -0.4), intensity=0.8),
              PointLight((0.0, 2.5, 2.5), (1.0, 0.85, 0.7), 3.0, (1.0, 0.0, 0.25))]
    camera = Camera.perspective((0.0, 2.2, 5.6), (0.0, -0.3, 0.0), fov_y=50.0, aspect=W / H, near=0.1, far=50.0)
    return scene, textures, lights, camera


def render_demo(out_dir: str | Path, *, frames: int = 24, size: tuple[int, int] = (240, 360),
                backend: str = "torch", mp4: bool = False) -> list[Path]:
    """Render the turntable into ``out_dir``; returns the files written (PNG, GIF, MP4 if any).

    ``size`` is ``(H, W)``. Geometry is uploaded once; each frame only changes the turntable
    transform.
    """
    H, W = check_size("render_demo", size)
    if isinstance(frames, bool) or not isinstance(frames, int) or frames < 1:
        raise PyGpuValueError(f"render_demo: `frames` must be a positive int, got {frames!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    r = Renderer((H, W), backend=backend, background=(0.06, 0.07, 0.1))
    scene, textures, lights, camera = demo_scene(r)
    images = []
    with torch.no_grad():
        for k in range(frames):
            spin = rotation_y(2 * math.pi * k / frames)
            frame = r.render(scene, camera, lights=lights, textures=textures, material=Material(0.35, 48.0),
                             transforms=spin, texture_filter="trilinear", gamma=2.2)
            images.append(frame.to_numpy()[0])
    r.release(scene)
    png, gif = out / "lit_textured_shapes.png", out / "lit_textured_shapes.gif"
    Image.fromarray(images[0]).save(png)
    Image.fromarray(images[0]).save(gif, save_all=True, append_images=[Image.fromarray(f) for f in images[1:]],
                                    duration=60, loop=0)
    written = [png, gif]
    if mp4:
        try:
            import imageio.v2 as imageio
        except ImportError:
            raise PyGpuValueError('render_demo: MP4 output needs imageio-ffmpeg: pip install imageio imageio-ffmpeg') from None
        path = out / "lit_textured_shapes.mp4"
        imageio.mimsave(path, images, fps=20)
        written.append(path)
    return written
