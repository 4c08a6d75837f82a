"""The test helpers themselves: compare_impls notices a difference in outputs or in gradients."""

from __future__ import annotations

import pytest
import torch

from helpers import compare_impls


def _inputs(dtype):
    g = torch.Generator().manual_seed(3)
    x = torch.rand(4, 5, generator=g, dtype=dtype).requires_grad_(True)
    w = torch.rand(5, 2, generator=g, dtype=dtype).requires_grad_(True)
    return x, w


class _SameForwardScaledBackward(torch.autograd.Function):
    """The identity forward, a gradient off by a factor: a gradient-only bug."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * 1.01


def test_compare_impls_accepts_equal_and_reports_gradients(dtype):
    x, w = _inputs(dtype)
    result = compare_impls(lambda x, w: (x @ w, (x @ w).argmax(-1)), lambda x, w: ((w.T @ x.T).T, (x @ w).argmax(-1)),
                           (x, w))
    gx, gw = result.grads
    assert gx.shape == x.shape and gw.shape == w.shape and float(gx.abs().sum()) > 0
    assert x.grad is None and w.grad is None  # the caller's tensors are left alone


def test_compare_impls_catches_a_forward_difference(dtype):
    x, w = _inputs(dtype)
    with pytest.raises(AssertionError, match="output 0 differs"):
        compare_impls(lambda x, w: x @ w, lambda x, w: (x @ w) * (1 + 1e-3), (x, w))
    with pytest.raises(AssertionError, match="output 1 differs"):
        compare_impls(lambda x, w: (x @ w, (x @ w).argmax(-1)), lambda x, w: (x @ w, (x @ w).argmin(-1)), (x, w))


def test_compare_impls_catches_a_gradient_difference(dtype):
    x, w = _inputs(dtype)
    with pytest.raises(AssertionError, match="gradient with respect to input 0"):
        compare_impls(lambda x, w: x @ w, lambda x, w: _SameForwardScaledBackward.apply(x) @ w, (x, w))
