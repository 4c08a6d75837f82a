"""Regenerate every picture in docs/ with one command.

    python docs/make_figures.py                 # full size, into docs/img (a few minutes)
    python docs/make_figures.py --quick --out /tmp/figures   # small and fast, elsewhere (tests)

Each picture comes from the project's own code: the tools/ scripts, the fitting recipes in
examples/ (their ``before_after.png``), ``py_gpu.demo``, the seed fixture, and the py_3d bridge's
benchmark. ``FIGURES`` lists them; ``tests/test_make_figures.py`` runs the quick mode and checks
that every picture the docs show is in the list.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMG = ROOT / "docs" / "img"


def _tool(name: str):
    spec = importlib.util.spec_from_file_location(f"figure_{name}", ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _python(*args: str) -> None:
    subprocess.run([sys.executable, *args], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def architecture(out: Path, quick: bool) -> None:
    tool = _tool("architecture")
    tool.IMAGE = out / "architecture.png"
    tool.draw()


def antialias(out: Path, quick: bool) -> None:
    tool = _tool("antialias_figure")
    tool.IMAGE = out / "antialias.png"
    tool.draw()


def soft(out: Path, quick: bool) -> None:
    _tool("soft_figure").draw(out / "soft-image-alpha.png")


def tie_rule(out: Path, quick: bool) -> None:
    _tool("tie_rule_figure").draw(out / "tie-rule.png")


def turntable(out: Path, quick: bool) -> None:
    from py_gpu.demo import render_demo

    render_demo(out, frames=3 if quick else 24, size=(60, 90) if quick else (240, 360))


def seed(out: Path, quick: bool) -> None:
    _python("-m", "py_gpu.cli", "seed", "--output", str(out / "seed-fixture.png"),
            *(["--width", "160", "--height", "90", "--triangles", "100"] if quick else []))


def soft_fits(out: Path, quick: bool) -> None:
    steps = ["--steps", "10"] if quick else []
    _python("examples/fit_silhouette.py", *steps, "--png", str(out / "soft-fit-silhouette.png"))
    _python("examples/fit_cube_pose.py", *steps, "--png", str(out / "soft-fit-cube.png"))


#: recipe -> extra options of its full-size run for the picture
RECIPES = {"camera": [], "vertex_colors": [], "cube": [], "deform": [], "obj": [], "pose": [], "texture": []}
PICTURE_NAME = {"vertex_colors": "colours"}


def fitting(out: Path, quick: bool) -> None:
    (out / "fitting").mkdir(parents=True, exist_ok=True)
    for name, extra in RECIPES.items():
        with tempfile.TemporaryDirectory() as tmp:
            size = ["--steps", "3", "--size", "32"] if quick else []
            _python(f"examples/fit_{name}.py", *size, *extra, "--out", tmp)
            shutil.copy(Path(tmp) / "before_after.png", out / "fitting" / f"{PICTURE_NAME.get(name, name)}.png")


def py3d(out: Path, quick: bool) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import py3d_bench

    py3d_bench.picture(out / "py3d-fruit-bowl.png")


#: (maker, the pictures it writes, relative to docs/img)
FIGURES = [
    (architecture, ["architecture.png"]),
    (antialias, ["antialias.png"]),
    (soft, ["soft-image-alpha.png"]),
    (tie_rule, ["tie-rule.png"]),
    (turntable, ["lit_textured_shapes.png", "lit_textured_shapes.gif"]),
    (seed, ["seed-fixture.png"]),
    (soft_fits, ["soft-fit-silhouette.png", "soft-fit-cube.png"]),
    (fitting, [f"fitting/{PICTURE_NAME.get(n, n)}.png" for n in RECIPES]),
    (py3d, ["py3d-fruit-bowl.png"]),
]


def outputs() -> list[str]:
    """Every picture the script writes, relative to docs/img."""
    return [name for _, names in FIGURES for name in names]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(IMG), help="folder for the pictures (default: docs/img)")
    parser.add_argument("--quick", action="store_true", help="small sizes and few steps (for tests)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for maker, names in FIGURES:
        maker(out, args.quick)
        print(f"wrote {', '.join(names)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
