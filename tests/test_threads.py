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


class _FakeLibc:
    def __init__(self, result=1):
        self.calls, self.result = [], result

    def mallopt(self, param, value):
        self.calls.append((param, value))
        return self.result


@pytest.fixture
def fresh_heap(monkeypatch):
    """A process state in which py_gpu has not made its first CPU call yet, with a fake glibc."""
    libc = _FakeLibc()
    monkeypatch.setattr(_runtime, "_HEAP", {"applied": None})
    monkeypatch.setattr(_runtime, "_glibc", lambda: libc)
    monkeypatch.delenv("PY_GPU_HEAP_PAD", raising=False)
    return libc


def test_the_first_cpu_call_sets_the_heap_pad_once(fresh_heap):
    py_gpu.render(TRI, (8, 8), backend="torch")
    py_gpu.render(TRI, (8, 8), backend="torch")
    assert fresh_heap.calls == [(-2, _runtime.HEAP_PAD)]  # M_TOP_PAD, once per process
    assert _runtime.tune_heap() == _runtime.HEAP_PAD == 64 << 20


@pytest.mark.parametrize("env, calls, applied", [("0", [], 0), ("12345", [(-2, 12345)], 12345)])
def test_the_environment_sizes_or_disables_the_heap_pad(fresh_heap, monkeypatch, env, calls, applied):
    monkeypatch.setenv("PY_GPU_HEAP_PAD", env)
    assert _runtime.tune_heap() == applied
    assert fresh_heap.calls == calls


@pytest.mark.parametrize("bad", ["-1", "64M", "1e6", str(2**31)])
def test_a_bad_heap_pad_is_refused(fresh_heap, monkeypatch, bad):
    monkeypatch.setenv("PY_GPU_HEAP_PAD", bad)
    with pytest.raises(py_gpu.PyGpuValueError, match="PY_GPU_HEAP_PAD"):
        py_gpu.render(TRI, (8, 8), backend="torch")
    assert fresh_heap.calls == []


def test_other_c_libraries_and_refusals_leave_the_heap_alone(fresh_heap, monkeypatch):
    monkeypatch.setattr(_runtime, "_glibc", lambda: None)  # macOS, Windows, musl
    assert _runtime.tune_heap() == 0
    monkeypatch.setattr(_runtime, "_HEAP", {"applied": None})
    refusing = _FakeLibc(result=0)
    monkeypatch.setattr(_runtime, "_glibc", lambda: refusing)
    assert _runtime.tune_heap() == 0 and refusing.calls == [(-2, _runtime.HEAP_PAD)]


@pytest.mark.skipif(_runtime._glibc() is None, reason="glibc only")
def test_glibc_accepts_the_heap_pad_in_a_fresh_process():
    code = ("import torch, py_gpu; from py_gpu import _runtime; assert _runtime._HEAP['applied'] is None; "
            "py_gpu.render(py_gpu.TriangleBatch(torch.tensor([[[1.0, 1, 0.5], [7, 2, 0.5], [2, 7, 0.5]]]), "
            "torch.tensor([[0, 1, 2]])), (8, 8), backend='torch'); "
            "assert _runtime._HEAP['applied'] == 64 << 20, _runtime._HEAP")
    env = {k: v for k, v in os.environ.items() if k != "PY_GPU_HEAP_PAD"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)
