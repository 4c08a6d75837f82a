"""The ``py-gpu`` command.

- ``py-gpu info``: version, backends (available or why not), torch devices, optional packages.
- ``py-gpu seed``: render the seed benchmark scene with the best available backend to a PNG.
- ``py-gpu demo``: every backend on one scene (time, pixels equal to the reference), a lit,
  textured turntable, a pose fit and a mesh deformation, with PNGs, GIFs and loss curves.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import torch

from ._check import MAX_IMAGE_SIDE, BackendUnavailableError, PyGpuTypeError, PyGpuValueError
from ._version import __version__
from .backends import available_backends, torch_devices
from .compat import detect_gpu_packages, select_backend
from .fixtures import SEED_BACKGROUND, seed_fixture
from .fit import orbit_camera
from .mesh import load_obj_with_materials
from .renderer import Renderer
from .settings import RasterSettings
from .shading.lights import AmbientLight, DirectionalLight
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


def _render(args) -> int:
    path = Path(args.mesh)
    if not path.is_file():
        raise PyGpuValueError(f"no such file: {path}")
    mesh, materials = load_obj_with_materials(path)
    if mesh.num_faces == 0:
        raise PyGpuValueError(f"{path}: the OBJ has no faces")
    H, W = args.size
    pos = mesh.positions.reshape(-1, 3)
    center = (pos.amax(0) + pos.amin(0)) / 2
    radius = float((pos - center).norm(dim=-1).max()) or 1.0
    distance, elevation, azimuth = args.camera if args.camera else (2.6 * radius, 20.0, 30.0)
    cam = orbit_camera(distance, elevation, azimuth, at=tuple(center.tolist()), fov_y=45.0, aspect=W / H,
                       near=max(1e-3, distance - 2 * radius) * 0.5, far=distance + 2 * radius)
    r = Renderer((H, W), backend=args.backend, background=(0.12, 0.13, 0.16),
                 settings=RasterSettings(mode=args.mode))
    textures = [m.texture for m in materials] if materials else None
    lights = [AmbientLight(intensity=0.35), DirectionalLight((-0.4, -1.0, -0.6), intensity=0.85)] if args.lights else ()
    t0 = time.perf_counter()
    frame = r.render(r.upload(mesh), cam, lights=lights, textures=textures, model="lambert" if args.lights else "unlit",
                     gamma=2.2)
    ms = (time.perf_counter() - t0) * 1000
    frame.to_png(args.output)
    print(f"{path.name}: {mesh.num_faces} faces, {len(materials)} materials, {args.mode} on {args.backend} "
          f"at {W}x{H} in {ms:.1f} ms -> {args.output}")
    return 0


_RECIPES = {"colours": "fit_vertex_colors", "colors": "fit_vertex_colors", "pose": "fit_pose",
            "camera": "fit_camera", "deform": "fit_deform", "texture": "fit_texture", "cube": "fit_cube",
            "obj": "fit_obj", "silhouette": "fit_silhouette"}


def _repo_folder(name: str, command: str) -> Path:
    """The repository's ``name`` folder (examples/, benchmarks/), from the working directory or
    beside the package; they are not part of the wheel."""
    for base in (Path.cwd(), Path(__file__).resolve().parents[1]):
        if (base / name).is_dir():
            return base / name
    raise PyGpuValueError(f"{command} needs the repository's {name}/ folder, which the wheel does not install; "
                          "run it from a clone of the py_gpu repository")


def _fit(args) -> int:
    script = _repo_folder("examples", "py-gpu fit") / f"{_RECIPES[args.recipe]}.py"
    cmd = [sys.executable, str(script)] + list(args.options)
    return subprocess.call(cmd)


def _bench(args) -> int:
    script = _repo_folder("benchmarks", "py-gpu bench") / "run.py"
    cmd = [sys.executable, str(script)] + (["--quick"] if args.quick else []) + (["--only", args.only] if args.only else [])
    if args.no_write:
        cmd.append("--no-write")
    return subprocess.call(cmd)


def _size(text: str) -> tuple[int, int]:
    """An argparse type: ``N`` or ``WxH`` -> ``(H, W)``."""
    parts = text.lower().split("x")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or WxH, got {text!r}") from None
    if len(values) not in (1, 2) or any(v < 1 or v > MAX_IMAGE_SIDE for v in values):
        raise argparse.ArgumentTypeError(f"sizes must be in 1..{MAX_IMAGE_SIDE}, as N or WxH; got {text!r}")
    w, h = (values[0], values[0]) if len(values) == 1 else values
    return h, w


def _camera(text: str) -> tuple[float, float, float]:
    try:
        d, el, az = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected distance,elevation,azimuth (degrees), got {text!r}") from None
    if not d > 0:
        raise argparse.ArgumentTypeError(f"the distance must be > 0, got {d}")
    return d, el, az


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
    _add_file_commands(sub)
    return parser


def _add_file_commands(sub) -> None:
    """``render``, ``fit`` and ``bench``."""
    p = sub.add_parser("render", help="render an OBJ (with its MTL materials and textures) to a PNG")
    p.add_argument("mesh", help="an .obj file")
    p.add_argument("-o", "--output", default="render.png")
    p.add_argument("--backend", default="torch")
    p.add_argument("--size", type=_size, default=(480, 640), help="N or WxH (default 640x480)")
    p.add_argument("--camera", type=_camera, default=None,
                   help="distance,elevation,azimuth in degrees around the mesh's center (default: framed)")
    p.add_argument("--mode", choices=("hard", "soft"), default="hard")
    p.add_argument("--lights", action=argparse.BooleanOptionalAction, default=True,
                   help="ambient + directional light, Lambert (default); --no-lights shows the albedo")
    p.set_defaults(func=_render)
    p = sub.add_parser("fit", help="run a fitting recipe from examples/ (pass its options after the name)")
    p.add_argument("recipe", choices=sorted(_RECIPES), help="the recipe")
    p.add_argument("options", nargs=argparse.REMAINDER, help="the recipe's own options, e.g. --steps 100 --device cpu")
    p.set_defaults(func=_fit)
    p = sub.add_parser("bench", help="run the benchmarks/ suites and write docs/benchmarks.md")
    p.add_argument("--quick", action="store_true", help="small cases only")
    p.add_argument("--only", default=None, help="comma list of suites (torch, soft, moderngl, ...)")
    p.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    p.set_defaults(func=_bench)


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
