"""Shared test helpers: parity of two implementations (forward and gradients), device utilities."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import pytest
import torch

from conftest import TOLERANCES
from py_gpu.backends.base import to_device

CPU = torch.device("cpu")


def on_cpu(result):
    """A ``Frame``, ``Fragments`` or tensor on the CPU (where reference results are compared)."""
    return to_device(result, CPU)


def float64_on(device: torch.device) -> torch.dtype:
    """``torch.float64`` for a float64-only test (gradcheck, bit-exact parity); skips on MPS."""
    if device.type == "mps":
        pytest.skip("MPS has no float64")
    return torch.float64


def tolerances(dtype: torch.dtype) -> tuple[float, float]:
    """``(rtol, atol)`` from the one table in conftest."""
    return TOLERANCES[dtype]


@dataclass
class Comparison:
    """What ``compare_impls`` saw of the first implementation (for further assertions)."""

    outputs: tuple[torch.Tensor, ...]  # detached, on their own devices
    grads: tuple[torch.Tensor | None, ...]  # one per differentiable input, on the input's device


def _as_tuple(out) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _fresh(inputs: Sequence) -> list:
    """Independent leaf copies of the inputs that require grad; everything else as is."""
    return [x.detach().clone().requires_grad_(True) if isinstance(x, torch.Tensor) and x.requires_grad else x
            for x in inputs]


def compare_impls(impl_a: Callable, impl_b: Callable, inputs: Sequence, *, seed: int = 0,
                  dtype: torch.dtype | None = None, rtol: float | None = None, atol: float | None = None,
                  grads: bool = True, label: str = "") -> Comparison:
    """Run ``impl_a(*inputs)`` and ``impl_b(*inputs)`` and check that they agree, forward and backward.

    - ``inputs``: the arguments. Tensors with ``requires_grad=True`` are the variables: each
      implementation gets its own fresh leaf copy of them. An implementation may move its inputs
      (e.g. an oracle that runs on the CPU); gradients come back to the inputs' devices.
    - Outputs (a tensor or a tuple of tensors) are compared on the CPU: floating ones within
      ``rtol``/``atol`` (non-finite entries must be equal), the others exactly.
    - Gradients: every floating output that requires grad gets the same seeded random upstream
      gradient (zero at non-finite entries) in both runs; the gradients of the variables, from
      ``torch.autograd.grad``, are compared with the same tolerances.
    - Tolerances default to ``TOLERANCES[dtype]``; ``dtype`` defaults to the widest floating
      output dtype.

    Returns the first implementation's outputs and gradients.
    """
    runs = []
    for impl in (impl_a, impl_b):
        args = _fresh(inputs)
        outs = _as_tuple(impl(*args))
        runs.append((args, outs))
    (args_a, outs_a), (args_b, outs_b) = runs
    tag = f"{label}: " if label else ""
    assert len(outs_a) == len(outs_b), f"{tag}{len(outs_a)} outputs against {len(outs_b)}"
    floats = [o.dtype for o in outs_a if o.is_floating_point()]
    if dtype is None:
        dtype = torch.float64 if torch.float64 in floats else torch.float32
    d_rtol, d_atol = TOLERANCES[dtype]
    rtol = d_rtol if rtol is None else rtol
    atol = d_atol if atol is None else atol

    for k, (a, b) in enumerate(zip(outs_a, outs_b)):
        assert a.shape == b.shape, f"{tag}output {k}: shape {tuple(a.shape)} against {tuple(b.shape)}"
        a_cpu, b_cpu = a.detach().cpu(), b.detach().cpu()
        if a.is_floating_point():
            torch.testing.assert_close(a_cpu, b_cpu.to(a_cpu.dtype), rtol=rtol, atol=atol,
                                       msg=lambda m, k=k: f"{tag}output {k} differs: {m}")
        else:
            assert torch.equal(a_cpu, b_cpu), f"{tag}output {k} differs in {int((a_cpu != b_cpu).sum())} entries"

    variables = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.requires_grad]
    if not grads or not variables:
        return Comparison(tuple(o.detach() for o in outs_a), ())
    g = torch.Generator().manual_seed(seed)
    upstream = []
    for o in outs_a:
        if o.is_floating_point() and o.requires_grad:
            up = torch.randn(o.shape, generator=g, dtype=torch.float64)
            up = torch.where(torch.isfinite(o.detach()).cpu(), up, torch.zeros((), dtype=up.dtype))
            upstream.append(up)
        else:
            upstream.append(None)
    result = []
    for args, outs in runs:
        pairs = [(o, up.to(device=o.device, dtype=o.dtype)) for o, up in zip(outs, upstream) if up is not None]
        assert pairs, f"{tag}no output requires grad"
        for o, _ in pairs:
            assert o.requires_grad, f"{tag}an output of one implementation has no gradient"
        got = torch.autograd.grad([o for o, _ in pairs], [args[i] for i in variables],
                                  grad_outputs=[u for _, u in pairs], allow_unused=True)
        result.append([torch.zeros_like(args[i]) if gr is None else gr for i, gr in zip(variables, got)])
    for i, ga, gb in zip(variables, *result):
        torch.testing.assert_close(ga.cpu(), gb.cpu().to(ga.dtype), rtol=rtol, atol=atol,
                                   msg=lambda m, i=i: f"{tag}gradient with respect to input {i} differs: {m}")
    return Comparison(tuple(o.detach() for o in outs_a), tuple(result[0]))
