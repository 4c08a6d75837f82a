"""Render py_gpu 0.0.1's benchmark scene with a chosen backend and report frame time.

    python examples/benchmark_raster.py --backend numpy --frames 5 --triangles 1000 --output out.png

The scene is the seed fixture (py_gpu.fixtures.seed_fixture): random flat-colored triangles,
generator calls in exactly 0.0.1's order, background (6, 8, 12).
"""

from __future__ import annotations

import argparse
import sys
import time

import py_gpu
from py_gpu.fixtures import SEED_BACKGROUND, seed_fixture


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="auto", help="auto|cpu|reference|numpy|moderngl|gpu|torch")
    parser.add_argument("--frames", type=int, default=20)
    parser.add_argument("--triangles", type=int, default=1000)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=360)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--output", default=None, help="write the last frame to this PNG")
    args = parser.parse_args(argv)
    if args.frames < 1:
        parser.error("--frames must be >= 1")

    backend = py_gpu.select_backend(args.backend)
    batch = seed_fixture(args.triangles, args.width, args.height, seed=args.seed)
    frame = backend.render(batch, args.width, args.height, background=SEED_BACKGROUND)  # warm-up
    start = time.perf_counter()
    for _ in range(args.frames):
        frame = backend.render(batch, args.width, args.height, background=SEED_BACKGROUND)
    elapsed = time.perf_counter() - start
    ms = elapsed * 1000.0 / args.frames
    caps = backend.capabilities
    print(f"backend: {caps.name}")
    print(f"accelerated: {caps.accelerated}")
    print(f"triangles: {args.triangles}")
    print(f"size: {args.width}x{args.height}")
    print(f"average frame: {ms:.2f} ms")
    print(f"fps: {1000.0 / ms:.1f}")
    if args.output:
        frame.to_png(args.output)
        print(f"wrote: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
