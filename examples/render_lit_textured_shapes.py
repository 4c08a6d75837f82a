"""Render lit, textured shapes rotating: writes a PNG (first frame) and an animated GIF
(and an MP4 with --mp4 when imageio-ffmpeg is installed). Same as ``py-gpu demo``.

    python examples/render_lit_textured_shapes.py [--out DIR] [--frames N] [--size H W] [--backend torch]
"""

from __future__ import annotations

import argparse

from py_gpu.demo import render_demo


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs/img")
    ap.add_argument("--frames", type=int, default=24)
    ap.add_argument("--size", type=int, nargs=2, default=(240, 360), metavar=("H", "W"))
    ap.add_argument("--backend", default="torch")
    ap.add_argument("--mp4", action="store_true", help="also write an MP4 (needs imageio-ffmpeg)")
    args = ap.parse_args()
    for path in render_demo(args.out, frames=args.frames, size=tuple(args.size), backend=args.backend, mp4=args.mp4):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
