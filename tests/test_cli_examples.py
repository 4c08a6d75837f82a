"""The command line and the seed benchmark example run and write what they say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from py_gpu.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_info_lists_backends_and_devices(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "reference [cpu]: available" in out
    assert "numpy: available" in out
    assert "torch devices: cpu" in out
    assert "auto -> " in out


def test_seed_command_writes_png(tmp_path, capsys):
    out = tmp_path / "seed.png"
    assert main(["seed", "--backend", "numpy", "--triangles", "50", "--width", "64", "--height", "48", "--output", str(out)]) == 0
    img = np.asarray(Image.open(out))
    assert img.shape == (48, 64, 3)
    assert (img != np.array([6, 8, 12])).any()  # triangles were drawn over the background


def test_benchmark_example(tmp_path):
    out = tmp_path / "out.png"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "benchmark_raster.py"), "--backend", "numpy", "--frames", "2",
         "--triangles", "200", "--width", "160", "--height", "90", "--output", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    for key in ("backend: numpy", "accelerated: True", "triangles: 200", "size: 160x90", "average frame:", "fps:"):
        assert key in proc.stdout
    assert np.asarray(Image.open(out)).shape == (90, 160, 3)


def test_demo_command_writes_png_and_gif(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--frames", "2", "--width", "64", "--height", "48"]) == 0
    png = np.asarray(Image.open(tmp_path / "lit_textured_shapes.png"))
    assert png.shape == (48, 64, 3)
    assert png.std() > 10  # shapes were drawn, not just background
    gif = Image.open(tmp_path / "lit_textured_shapes.gif")
    assert gif.n_frames == 2
    with pytest.raises(ValueError, match="frames"):
        from py_gpu.demo import render_demo

        render_demo(tmp_path, frames=0)
