"""The ``py-gpu`` command: each subcommand's happy path, and bad input as one line on stderr with
exit status 2 and no traceback (run as a subprocess, the way a user runs it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from py_gpu.mesh import save_obj
from py_gpu.shapes import torus

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str, cwd: Path = ROOT, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "py_gpu.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def obj(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("obj")
    save_obj(folder / "torus.obj", torus(1.0, 0.3, 24, 12))
    (folder / "broken.obj").write_text("v 1 2\nf 1 2 9\n")
    return folder


@pytest.mark.parametrize("command", ["info", "seed", "demo", "render", "fit", "bench"])
def test_every_subcommand_has_help(command):
    r = cli(command, "--help")
    assert r.returncode == 0 and "usage: py-gpu " + command in r.stdout


def test_info_lists_backends_and_devices():
    r = cli("info")
    assert r.returncode == 0
    assert "reference" in r.stdout and "torch devices: cpu" in r.stdout


def test_seed_writes_the_png(tmp_path):
    r = cli("seed", "--backend", "numpy", "--width", "64", "--height", "40", "--output", str(tmp_path / "s.png"))
    assert r.returncode == 0, r.stderr
    assert np.asarray(Image.open(tmp_path / "s.png")).shape == (40, 64, 3)


@pytest.mark.parametrize("extra", [[], ["--mode", "soft", "--camera", "4,30,10", "--no-lights"]])
def test_render_draws_the_obj(obj, tmp_path, extra):
    out = tmp_path / "t.png"
    r = cli("render", str(obj / "torus.obj"), "-o", str(out), "--size", "80x60", *extra)
    assert r.returncode == 0, r.stderr
    img = np.asarray(Image.open(out)).astype(float)
    assert img.shape == (60, 80, 3)
    assert img.std() > 10  # the torus is there, not only the background
    assert f"{torus(1.0, 0.3, 24, 12).num_faces} faces" in r.stdout


def test_fit_runs_a_recipe(tmp_path):
    r = cli("fit", "cube", "--steps", "5", "--size", "16", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "before_after.png").stat().st_size > 0


def test_bench_runs_a_quick_suite():
    r = cli("bench", "--quick", "--only", "core", "--no-write")
    assert r.returncode == 0, r.stderr
    assert "reference" in r.stdout and "numpy" in r.stdout


@pytest.mark.parametrize("args,needle", [
    (["render", "missing.obj"], "no such file"),
    (["render", "{obj}/broken.obj"], "needs 3 numbers"),
    (["render", "{obj}/torus.obj", "--backend", "nope"], "unknown backend"),
    (["render", "{obj}/torus.obj", "--size", "-5"], "--size"),
    (["seed", "--width", "-3"], "--width"),
    (["demo", "--backend", "nope", "--quick"], "unknown backend"),
    (["fit", "nope"], "invalid choice"),
    (["render", "{obj}/torus.obj", "--camera", "1,2"], "distance,elevation,azimuth"),
    (["nope"], "invalid choice"),
])
def test_bad_input_is_one_line_and_status_2(obj, tmp_path, args, needle):
    r = cli(*[a.format(obj=obj) for a in args], cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert needle in lines[0] and "Traceback" not in r.stderr
