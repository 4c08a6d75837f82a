"""The release artifacts: ``python -m build`` makes a pure-Python wheel and an sdist, and the wheel,
installed into a fresh virtual environment, runs ``py-gpu info`` and a small render."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

RENDER = """
import torch, py_gpu
verts = torch.tensor([[[2.0, 2.0, 0.5], [30.0, 4.0, 0.5], [8.0, 28.0, 0.5]]])
batch = py_gpu.TriangleBatch(verts, torch.tensor([[0, 1, 2]]), face_colors=torch.tensor([[[1.0, 0.5, 0.0]]]))
frame = py_gpu.render(batch, (32, 32))
assert int((frame.face_index >= 0).sum()) > 100
assert py_gpu.__file__.startswith(__import__("sys").prefix), py_gpu.__file__  # the installed copy
frame.to_png("triangle.png")
print("rendered", int((frame.face_index >= 0).sum()), "pixels")
"""


@pytest.mark.slow
def test_wheel_builds_installs_and_renders(tmp_path):
    pytest.importorskip("build", reason="the release test needs `build` (pip install build)")
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], check=True,
                   capture_output=True, timeout=600)
    wheels, sdists = list(dist.glob("*.whl")), list(dist.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1
    wheel = wheels[0]
    assert wheel.name.endswith("-py3-none-any.whl")  # pure Python
    names = zipfile.ZipFile(wheel).namelist()
    assert "py_gpu/__init__.py" in names and "py_gpu/compat/paths.py" in names
    assert not any(n.startswith(("tests/", "benchmarks/", "examples/")) for n in names)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    # the wheel itself, without re-downloading torch: its dependencies come from this
    # environment's site-packages through a .pth file, after the wheel's own copy
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True, timeout=300)
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    ours = [p for p in site.getsitepackages() + [sysconfig.get_paths()["purelib"]] if Path(p).is_dir()]
    (Path(purelib) / "zz_host_deps.pth").write_text("\n".join(ours) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    info = subprocess.run([str(venv / "bin" / "py-gpu"), "info"], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=300)
    assert info.returncode == 0, info.stderr
    assert "py_gpu 0.1" in info.stdout and "reference" in info.stdout
    run = subprocess.run([str(py), "-c", RENDER], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "triangle.png").stat().st_size > 0
