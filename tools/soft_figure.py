"""Draw docs/img/soft-image-alpha.png: what soft mode's ``alpha`` and ``image`` carry, and what
``sigma`` and ``gamma`` change. Two overlapping triangles (red in front, blue behind).

    python tools/soft_figure.py [--out docs/img/soft-image-alpha.png]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw

import py_gpu

ROOT = Path(__file__).resolve().parents[1]
SIZE = 96


def scene() -> py_gpu.TriangleBatch:
    v = torch.tensor([[[14.0, 20.0, 0.3], [70.0, 26.0, 0.3], [30.0, 78.0, 0.3],
                       [30.0, 12.0, 0.6], [84.0, 44.0, 0.6], [52.0, 86.0, 0.6]]])
    colors = torch.tensor([[[0.95, 0.3, 0.2]] * 3 + [[0.2, 0.45, 0.95]] * 3])
    return py_gpu.TriangleBatch(v, torch.tensor([[0, 1, 2], [3, 4, 5]]), vertex_colors=colors)


def tile(img: torch.Tensor) -> np.ndarray:
    return (img.detach().clamp(0, 1)[0].expand(SIZE, SIZE, 3).numpy() * 255 + 0.5).astype(np.uint8)


def draw(out: Path) -> Path:
    batch, bg = scene(), (0.92, 0.92, 0.9)
    columns = [("hard", dict(mode="hard")), ("sigma 0.5", dict(mode="soft", sigma=0.5)),
               ("sigma 4", dict(mode="soft", sigma=4.0)), ("sigma 16", dict(mode="soft", sigma=16.0)),
               ("sigma 4, gamma 0.5", dict(mode="soft", sigma=4.0, gamma=0.5))]
    rows = []
    for _, kw in columns:
        f = py_gpu.render(batch, (SIZE, SIZE), background=bg, **kw)
        soft = kw["mode"] == "soft"
        ras = py_gpu.render(batch, (SIZE, SIZE), background=bg, composite="softras", **kw).image if soft else f.image
        rows.append([tile(f.alpha), tile(f.image), tile(ras)])
    pad, label = 4, 16
    W = len(columns) * (SIZE + pad) + pad + 120
    H = 3 * (SIZE + pad) + pad + label
    canvas = Image.new("RGB", (W, H), (255, 255, 255))
    d = ImageDraw.Draw(canvas)
    for r, name in enumerate(["alpha", "image (default)", "image, softras"]):
        d.text((4, label + pad + r * (SIZE + pad) + SIZE // 2 - 6), name, fill=(0, 0, 0))
    for c, (title, _) in enumerate(columns):
        x = 120 + pad + c * (SIZE + pad)
        d.text((x, 2), title, fill=(0, 0, 0))
        for r in range(3):
            canvas.paste(Image.fromarray(rows[c][r]), (x, label + pad + r * (SIZE + pad)))
    out.parent.mkdir(parents=True, exist_ok=True)
    canvas.save(out)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "img" / "soft-image-alpha.png"))
    print(f"wrote {draw(Path(parser.parse_args().out))}")
