"""Host synchronizations of ``py_gpu.render`` (torch backend, hard mode).

A host synchronization is any point where Python needs a tensor's *value*: on CUDA the host
then waits for the device. On CPU they are counted by patching every way torch hands a value
(or a value-dependent shape) to Python:

- value reads: ``Tensor.item``, ``tolist``, ``__bool__``, ``__int__``, ``__float__``,
  ``__index__``, ``numpy``, and ``Tensor.cpu`` / ``Tensor.to("cpu")`` (a device-to-host copy);
- ops whose output *shape* depends on values: ``nonzero`` (method and ``torch.nonzero``),
  ``torch.where`` with one argument, ``masked_select``, ``unique``, boolean-mask indexing
  (``t[mask]``), and ``repeat_interleave`` without ``output_size``.

With the data checks off (``py_gpu.set_checks(False)``), a one-pass render (low overdraw, within
the memory budget) makes exactly one: the read of its work sizes. A CUDA variant counts what
``torch.cuda.set_sync_debug_mode`` reports.
"""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch

import py_gpu
from py_gpu import TriangleBatch


class SyncCounter:
    """Counts host synchronizations (see the module docstring) while active; ``.calls`` names them."""

    _METHODS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "numpy", "nonzero",
                "masked_select", "unique")

    def __init__(self):
        self.calls: list[str] = []

    @contextlib.contextmanager
    def active(self):
        patch = pytest.MonkeyPatch()
        counter = self
        for name in self._METHODS:
            original = getattr(torch.Tensor, name)

            def counted(self, *args, _name=name, _original=original, **kwargs):
                counter.calls.append(_name)
                return _original(self, *args, **kwargs)

            patch.setattr(torch.Tensor, name, counted)
        original_getitem = torch.Tensor.__getitem__

        def getitem(self, index):
            items = index if isinstance(index, tuple) else (index,)
            if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items):
                counter.calls.append("mask index")
            return original_getitem(self, index)

        patch.setattr(torch.Tensor, "__getitem__", getitem)
        original_cpu, original_to = torch.Tensor.cpu, torch.Tensor.to

        def cpu(self, *args, **kwargs):
            counter.calls.append("cpu")
            return original_cpu(self, *args, **kwargs)

        def to(self, *args, **kwargs):
            target = kwargs.get("device", args[0] if args else None)
            if isinstance(target, (str, torch.device)) and torch.device(target).type == "cpu":
                counter.calls.append("to cpu")
            return original_to(self, *args, **kwargs)

        patch.setattr(torch.Tensor, "cpu", cpu)
        patch.setattr(torch.Tensor, "to", to)
        for name in ("nonzero", "masked_select", "unique", "argwhere"):
            original = getattr(torch, name)

            def counted_fn(*args, _name=name, _original=original, **kwargs):
                counter.calls.append(f"torch.{_name}")
                return _original(*args, **kwargs)

            patch.setattr(torch, name, counted_fn)
        where, repeat = torch.where, torch.repeat_interleave

        def where_fn(*args, **kwargs):
            if len(args) + len(kwargs) == 1:
                counter.calls.append("torch.where(mask)")
            return where(*args, **kwargs)

        def repeat_fn(*args, **kwargs):
            if kwargs.get("output_size") is None:
                counter.calls.append("repeat_interleave")
            return repeat(*args, **kwargs)

        patch.setattr(torch, "where", where_fn)
        patch.setattr(torch, "repeat_interleave", repeat_fn)
        try:
            yield self
        finally:
            patch.undo()


def _scene(seed: int, n: int = 12, size=(40, 64), *, grad: bool = False, device="cpu") -> TriangleBatch:
    """``n`` small random triangles, low overdraw, with vertex colors."""
    g = torch.Generator().manual_seed(seed)
    H, W = size
    centers = torch.rand(1, n, 1, 2, generator=g) * torch.tensor([W, H])
    offsets = (torch.rand(1, n, 3, 2, generator=g) - 0.5) * 14
    xy = (centers + offsets).reshape(1, 3 * n, 2)
    z = torch.rand(1, n, 1, generator=g).repeat_interleave(3, 1) * 5 + 0.5
    verts = torch.cat([xy, z], -1).double().to(device)
    faces = torch.arange(3 * n, device=device).reshape(n, 3)
    colors = torch.rand(1, 3 * n, 3, generator=g, dtype=torch.float64).to(device)
    if grad:
        verts.requires_grad_(True)
    return TriangleBatch(verts, faces, vertex_colors=colors)


def _count(fn) -> list[str]:
    counter = SyncCounter()
    with counter.active():
        fn()
    return counter.calls


@pytest.fixture
def checks_off():
    previous = py_gpu.set_checks(False)
    yield
    py_gpu.set_checks(previous)


def test_the_counter_sees_each_kind_of_sync():
    t = torch.tensor([1.0, 0.0, 2.0])
    calls = _count(lambda: (t.item() if t.numel() == 1 else None, bool(t[0]), int(t[0]), float(t[2]),
                            t.nonzero(), torch.nonzero(t), t[t > 0], t.tolist(), t.cpu(),
                            torch.repeat_interleave(t.long()), torch.repeat_interleave(t.long(), output_size=3)))
    assert calls.count("__bool__") == 1 and calls.count("__int__") == 1 and calls.count("__float__") == 1
    assert "nonzero" in calls and "torch.nonzero" in calls and "mask index" in calls
    assert "tolist" in calls and "cpu" in calls and calls.count("repeat_interleave") == 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_pass_render_makes_one_sync(checks_off, seed):
    batch = _scene(seed)
    py_gpu.render(batch, (40, 64), backend="torch")  # warm: backend built, tables cached
    calls = _count(lambda: py_gpu.render(batch, (40, 64), backend="torch"))
    assert calls == ["tolist"], calls  # the one read of the work sizes


def test_one_pass_render_with_gradients_makes_one_sync(checks_off):
    batch = _scene(3, grad=True)
    py_gpu.render(batch, (40, 64), backend="torch")
    frame = None

    def go():
        nonlocal frame
        frame = py_gpu.render(batch, (40, 64), backend="torch")

    calls = _count(go)
    assert calls == ["tolist"], calls  # the one read of the work sizes
    frame.image.sum().backward()
    assert batch.vertices.grad is not None and bool(batch.vertices.grad.abs().sum() > 0)


def test_one_pass_frame_equals_the_reference(checks_off):
    batch = _scene(4, n=30)
    got = py_gpu.render(batch, (40, 64), backend="torch")
    want = py_gpu.render(batch, (40, 64), backend="reference")
    assert torch.equal(got.face_index, want.face_index)
    assert torch.equal(got.to_uint8(), want.to_uint8())
    assert torch.equal(got.depth, want.depth.to(got.depth.dtype))


def test_a_built_batch_is_not_checked_again_by_render():
    """The data checks run when a batch is built; rendering it (again) reads no values to re-check
    it: the same syncs are made with checks on as with them off."""
    batch = _scene(5)
    py_gpu.render(batch, (40, 64), backend="torch")
    on = _count(lambda: py_gpu.render(batch, (40, 64), backend="torch"))
    with py_gpu.checks(False):
        off = _count(lambda: py_gpu.render(batch, (40, 64), backend="torch"))
    assert on == off
    with pytest.raises(py_gpu.PyGpuValueError):  # while building one still checks
        TriangleBatch(torch.tensor([[[0.0, 0, 1], [1, 0, 1], [float("nan"), 1, 1]]]), torch.tensor([[0, 1, 2]]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
def test_cuda_one_pass_render_syncs_at_most_once(checks_off):
    batch = _scene(6, device="cuda")
    py_gpu.render(batch, (40, 64), backend="torch")
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            py_gpu.render(batch, (40, 64), backend="torch")
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    syncs = [w for w in caught if "synchroniz" in str(w.message).lower()]
    assert len(syncs) <= 1, [str(w.message) for w in syncs]
