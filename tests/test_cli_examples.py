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
    assert main(["demo", "--quick", "--no-progress", "--out", str(tmp_path), "--frames", "2", "--width", "64",
                 "--height", "48"]) == 0
    png = np.asarray(Image.open(tmp_path / "lit_textured_shapes.png"))
    assert png.shape == (48, 64, 3)
    assert png.std() > 10  # shapes were drawn, not just background
    gif = Image.open(tmp_path / "lit_textured_shapes.gif")
    assert gif.n_frames == 2
    with pytest.raises(ValueError, match="frames"):
        from py_gpu.demo import render_demo

        render_demo(tmp_path, frames=0)


def test_demo_measures_backends_and_fits(tmp_path, capsys):
    """The quick demo: a row per exact backend with its match against the reference, a pose fit
    that gets closer, a deformation whose silhouette IoU rises, and every picture written."""
    from py_gpu.showcase import run_demo

    lines = []
    res = run_demo(tmp_path, quick=True, progress=False, say=lines.append)
    names = [row[0] for row in res.table]
    assert names[:3] == ["reference", "numpy", "torch"]
    for name, ms, same in res.table:
        assert ms > 0 and same >= (99.0 if name == "moderngl" else 100.0), (name, same)
    assert res.pose_error_deg[1] < res.pose_error_deg[0] - 5.0
    assert res.deform_iou[1] > res.deform_iou[0]
    for name in ("pose_before_after.png", "pose_fit.gif", "deform_before_after.png", "deform_fit.gif",
                 "lit_textured_shapes.png", "lit_textured_shapes.gif"):
        assert (tmp_path / name).stat().st_size > 0, name
        Image.open(tmp_path / name).verify()
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert any("matplotlib" in n for n in res.notes)
    else:
        assert (tmp_path / "loss_curves.png").stat().st_size > 0
    assert any("pixels equal to the reference" in line for line in lines)


@pytest.mark.slow
def test_default_demo_fits_converge(tmp_path, capsys):
    """``py-gpu demo`` as the README runs it (default sizes and steps)."""
    assert main(["demo", "--no-progress", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "pose fit: 40.0 degrees off ->" in out
    end = float(out.split("pose fit: 40.0 degrees off ->")[1].split()[0])
    assert end < 2.0
    iou = float(out.split("silhouette IoU")[1].split("->")[1].split()[0])
    assert iou > 0.85
