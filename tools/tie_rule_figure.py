"""Draw docs/img/tie-rule.png: the square [1.5, 5.5]^2 split on its diagonal, rendered by the
reference rasterizer at 7 x 7 px and enlarged, with the pixel centers marked. Samples on the
left column and bottom row are in, on the right column and top row out, and samples on the
diagonal belong to one triangle only (docs/raster-rule.md, section 3).

    python tools/tie_rule_figure.py [--out docs/img/tie-rule.png]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw

import py_gpu

ROOT = Path(__file__).resolve().parents[1]
N, ZOOM = 7, 48


def draw(out: Path) -> Path:
    v = torch.tensor([[[1.5, 1.5, 0.5], [5.5, 1.5, 0.5], [5.5, 5.5, 0.5], [1.5, 5.5, 0.5]]], dtype=torch.float64)
    colors = torch.tensor([[[0.95, 0.55, 0.2], [0.2, 0.5, 0.95]]], dtype=torch.float64)
    batch = py_gpu.TriangleBatch(v, torch.tensor([[0, 1, 2], [0, 2, 3]]), face_colors=colors)
    frame = py_gpu.render(batch, (N, N), backend="reference", background=(0.97, 0.97, 0.97))
    img = Image.fromarray(np.kron(frame.to_numpy()[0], np.ones((ZOOM, ZOOM, 1), dtype=np.uint8)))
    d = ImageDraw.Draw(img)
    for i in range(N + 1):
        d.line([(i * ZOOM, 0), (i * ZOOM, N * ZOOM)], fill=(200, 200, 200))
        d.line([(0, i * ZOOM), (N * ZOOM, i * ZOOM)], fill=(200, 200, 200))
    s = ZOOM  # the square's outline and diagonal
    pts = [(1.5 * s, 1.5 * s), (5.5 * s, 1.5 * s), (5.5 * s, 5.5 * s), (1.5 * s, 5.5 * s)]
    d.line(pts + [pts[0]], fill=(30, 30, 30), width=2)
    d.line([pts[0], pts[2]], fill=(30, 30, 30), width=2)
    for r in range(N):
        for c in range(N):
            x, y = (c + 0.5) * ZOOM, (r + 0.5) * ZOOM
            d.ellipse([x - 3, y - 3, x + 3, y + 3], fill=(20, 20, 20))
    out.parent.mkdir(parents=True, exist_ok=True)
    img.save(out)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "img" / "tie-rule.png"))
    print(f"wrote {draw(Path(parser.parse_args().out))}")
