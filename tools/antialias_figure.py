"""Draw docs/img/antialias.png: a hard render's edges next to the same edges after py_gpu.antialias.

    python tools/antialias_figure.py

Two overlapping triangles over a dark background at 24 x 24 pixels, shown 12x enlarged (nearest
neighbour), with the true edges drawn as thin lines. Left: the hard render. Right: the same
render through ``py_gpu.antialias``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from PIL import Image, ImageDraw, ImageFont

import py_gpu

ROOT = Path(__file__).resolve().parents[1]
IMAGE = ROOT / "docs" / "img" / "antialias.png"
SIZE = 24
ZOOM = 12
MARGIN = 16
LABEL = 28

VERTICES = torch.tensor([[[2.3, 3.1, 0.6], [21.6, 6.2, 0.6], [7.4, 21.7, 0.6],  # back, orange
                          [9.2, 9.6, 0.3], [22.4, 14.1, 0.3], [12.7, 22.8, 0.3]]], dtype=torch.float64)  # front, blue
FACES = torch.tensor([[0, 1, 2], [3, 4, 5]])
FACE_COLORS = torch.tensor([[[0.95, 0.55, 0.15], [0.25, 0.55, 0.95]]], dtype=torch.float64)
BACKGROUND = torch.tensor([0.08, 0.09, 0.12], dtype=torch.float64)


def _font(size: int):
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # pillow < 10.1
        return ImageFont.load_default()


def render() -> tuple[torch.Tensor, torch.Tensor]:
    """The hard image and the antialiased one, float ``[H, W, 3]`` each."""
    frags = py_gpu.rasterize(py_gpu.TriangleBatch(VERTICES, FACES), (SIZE, SIZE))
    color = py_gpu.interpolate(FACE_COLORS, frags, FACES, kind="face")[..., 0, :]
    hard = torch.where(frags.face_index >= 0, color, BACKGROUND)
    return hard[0], py_gpu.antialias(hard, frags, VERTICES, FACES)[0]


def _panel(image: torch.Tensor) -> Image.Image:
    rgb = (image.clamp(0, 1) * 255 + 0.5).floor().to(torch.uint8).numpy()
    panel = Image.fromarray(rgb, "RGB").resize((SIZE * ZOOM, SIZE * ZOOM), Image.NEAREST)
    draw = ImageDraw.Draw(panel)
    for face in FACES.tolist():
        corners = [(float(VERTICES[0, i, 0]) * ZOOM, float(VERTICES[0, i, 1]) * ZOOM) for i in face]
        draw.line(corners + corners[:1], fill=(235, 235, 235), width=1)
    return panel


def draw() -> None:
    hard, smooth = render()
    side = SIZE * ZOOM
    out = Image.new("RGB", (3 * MARGIN + 2 * side, 2 * MARGIN + LABEL + side), (255, 255, 255))
    text = ImageDraw.Draw(out)
    font = _font(16)
    for i, (name, image) in enumerate((("hard render", hard), ("py_gpu.antialias", smooth))):
        x = MARGIN + i * (side + MARGIN)
        text.text((x, MARGIN), name, fill=(20, 20, 20), font=font)
        out.paste(_panel(image.detach()), (x, MARGIN + LABEL))
    IMAGE.parent.mkdir(parents=True, exist_ok=True)
    out.save(IMAGE, optimize=True)


if __name__ == "__main__":
    draw()
    print(f"wrote {IMAGE.relative_to(ROOT)}")
