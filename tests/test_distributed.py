"""``examples/fit_multiview_distributed.py``: the views of a texture fit split over 2 CPU
processes (DDP over gloo, launched like ``torchrun``) give the single-process result."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "fit_multiview_distributed.py"
ARGS = ["--steps", "8", "--views", "4", "--size", "32", "--texels", "16", "--dtype", "float64", "--device", "cpu"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd: list[str], out: Path) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run(cmd + ARGS + ["--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return torch.load(out)


@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="torch.distributed with gloo is not available in this torch build")
def test_two_gloo_processes_match_one(tmp_path):
    one = _run([sys.executable, str(SCRIPT)], tmp_path / "one.pt")
    two = _run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--nnodes=1",
                f"--master_port={_free_port()}", str(SCRIPT)], tmp_path / "two.pt")
    assert one["world_size"] == 1 and two["world_size"] == 2
    assert one["metric"] > one["start_metric"] + 3.0  # the fit improved the texture
    assert torch.allclose(one["texture"], two["texture"], atol=1e-9, rtol=0), \
        (one["texture"] - two["texture"]).abs().max()
    assert torch.allclose(torch.as_tensor(one["losses"]), torch.as_tensor(two["losses"]), rtol=1e-9, atol=1e-12)
