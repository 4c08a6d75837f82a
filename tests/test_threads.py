"""py_gpu's thread policy: small CPU calls run on one intra-op thread, the caller's torch setting
is restored afterwards, and the policy can be set to torch's own or a fixed count."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import py_gpu
from py_gpu import _runtime, frontend
from py_gpu.renderer import renderer as renderer_module

TRI = py_gpu.TriangleBatch(torch.tensor([[[1.0, 1, 0.5], [7, 2, 0.5], [2, 7, 0.5]]]), torch.tensor([[0, 1, 2]]))


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)
    py_gpu.set_threads("auto")


def _threads_seen_by(monkeypatch, module, name):
    seen = []
    original = getattr(module, name)

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return seen


def test_small_calls_run_on_one_thread_and_restore_the_setting(two_threads, monkeypatch):
    seen = _threads_seen_by(monkeypatch, frontend, "render_batch")
    py_gpu.render(TRI, (8, 8))
    assert seen == [1] and torch.get_num_threads() == 2
    seen_r = _threads_seen_by(monkeypatch, frontend, "rasterize_batch")
    py_gpu.rasterize(TRI, (8, 8))
    assert seen_r == [1] and torch.get_num_threads() == 2


def test_large_calls_and_other_policies_keep_torch_threads(two_threads, monkeypatch):
    assert _runtime._wanted(torch.device("cpu"), _runtime.SMALL_WORK + 1) is None
    assert _runtime._wanted(torch.device("cpu"), 64) == 1
    assert _runtime._wanted(torch.device("meta"), 64) is None  # only CPU work is limited
    seen = _threads_seen_by(monkeypatch, frontend, "render_batch")
    assert py_gpu.set_threads("torch") == "auto"
    py_gpu.render(TRI, (8, 8))
    py_gpu.set_threads(1)
    assert py_gpu.get_threads() == 1
    py_gpu.render(TRI, (8, 8))
    assert seen == [2, 1] and torch.get_num_threads() == 2


def test_renderer_calls_are_covered_and_errors_restore_threads(two_threads, monkeypatch):
    seen = _threads_seen_by(monkeypatch, renderer_module, "raster_pass")
    r = py_gpu.Renderer((8, 8))
    h = r.upload(py_gpu.shapes.cube(1.0))
    r.render(h, py_gpu.Camera.perspective((0.0, 0.0, 3.0)))
    assert seen == [1] and torch.get_num_threads() == 2

    def boom(*args, **kwargs):
        raise RuntimeError("inside py_gpu")

    monkeypatch.setattr(frontend, "render_batch", boom)
    with pytest.raises(RuntimeError, match="inside py_gpu"):
        py_gpu.render(TRI, (8, 8))
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("bad,err", [("many", py_gpu.PyGpuValueError), (0, py_gpu.PyGpuValueError),
                                     (2.5, py_gpu.PyGpuTypeError), (True, py_gpu.PyGpuTypeError)])
def test_bad_policies_are_refused(bad, err):
    with pytest.raises(err, match="threads"):
        py_gpu.set_threads(bad)
    assert py_gpu.get_threads() == "auto"


def test_environment_sets_the_policy():
    code = "import py_gpu; assert py_gpu.get_threads() == 3, py_gpu.get_threads()"
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ, PY_GPU_THREADS="3"), timeout=120)
