"""The ``py-gpu`` command.

- ``py-gpu info``: version, backends (available or why not), torch devices, optional packages.
- ``py-gpu seed``: render the seed benchmark scene with the best available backend to a PNG.
- ``py-gpu demo``: every backend on one scene (time, pixels equal to the reference), a lit,
  textured turntable, a pose fit and a mesh deformation, with PNGs, GIFs and loss curves.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from ._check import MAX_IMAGE_SIDE, BackendUnavailableError, PyGpuTypeError, PyGpuValueError
from ._version import __version__
from .backends import available_backends, torch_devices
from .compat import detect_gpu_packages, select_backend
from .fixtures import SEED_BACKGROUND, seed_fixture
from .showcase import run_demo


def _info(args) -> int:
    print(f"py_gpu {__version__} (torch {torch.__version__}, python {sys.version.split()[0]})")
    print("backends (best first):")
    for s in available_backends():
        if s.name.endswith("-test"):
            continue
        state = "available" if s.available else f"unavailable: {s.reason}"
        alias = f" [{', '.join(s.aliases)}]" if s.aliases else ""
        print(f"  {s.name}{alias}: {state}")
    try:
        auto = select_backend("auto")
        print(f"auto -> {auto.capabilities.name}")
    except Exception as exc:  # pragma: no cover - reference always works
        print(f"auto -> none ({exc})")
    print("torch devices: " + ", ".join(torch_devices()))
    print("optional packages: " + (", ".join(detect_gpu_packages()) or "none"))
    return 0


def _seed(args) -> int:
    backend = select_backend(args.backend)
    batch = seed_fixture(args.triangles, args.width, args.height, seed=args.seed)
    t0 = time.perf_counter()
    frame = backend.render(batch, args.width, args.height, background=SEED_BACKGROUND)
    ms = (time.perf_counter() - t0) * 1000
    frame.to_png(args.output)
    print(f"{backend.capabilities.name}: {args.triangles} triangles at {args.width}x{args.height} in {ms:.1f} ms -> {args.output}")
    return 0


def _demo(args) -> int:
    t0 = time.perf_counter()
    size = None if args.width is None and args.height is None else (args.height or 240, args.width or 360)
    result = run_demo(args.out, quick=args.quick, progress=not args.no_progress, backend=args.backend,
                      frames=args.frames, size=size, mp4=args.mp4)
    print(f"done in {time.perf_counter() - t0:.1f} s; wrote {len(result.files)} files into {args.out}/:")
    for path in result.files:
        print(f"  {path}")
    return 0


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr and exit status 2."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _count(low: int, high: int | None = None):
    """An argparse type: an int in [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"in {low}..{high}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    return parse


_SIDE = _count(1, MAX_IMAGE_SIDE)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="py-gpu", description="py_gpu: a PyTorch-native triangle rasterizer")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser("info", help="backends, their availability, and torch devices")
    p.set_defaults(func=_info)
    p = sub.add_parser("seed", help="render the seed benchmark scene to a PNG")
    p.add_argument("--backend", default="auto")
    p.add_argument("--triangles", type=_count(0), default=1000)
    p.add_argument("--width", type=_SIDE, default=640)
    p.add_argument("--height", type=_SIDE, default=360)
    p.add_argument("--seed", type=_count(0), default=7)
    p.add_argument("--output", default="py_gpu_seed.png")
    p.set_defaults(func=_seed)
    p = sub.add_parser("demo", help="every backend side by side, a turntable, two gradient fits; pictures and plots")
    p.add_argument("--out", default="py_gpu-demo", help="output folder (default: ./py_gpu-demo)")
    p.add_argument("--quick", action="store_true", help="a smaller, faster run")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--frames", type=_count(1, 10_000), default=None, help="turntable frames (default 24)")
    p.add_argument("--width", type=_SIDE, default=None, help="turntable width (default 360)")
    p.add_argument("--height", type=_SIDE, default=None, help="turntable height (default 240)")
    p.add_argument("--backend", default="torch", help="backend of the turntable (default torch)")
    p.add_argument("--mp4", action="store_true", help="also write an MP4 (needs imageio-ffmpeg)")
    p.set_defaults(func=_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command. Usage errors and errors the project names (bad values, a backend that
    cannot run here, a missing optional package, an unwritable output) are one line on stderr
    and exit status 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (PyGpuValueError, PyGpuTypeError, BackendUnavailableError, ImportError, OSError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"py-gpu {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
