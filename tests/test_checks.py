"""The data-dependent input checks can be switched off (``py_gpu.set_checks``, ``PY_GPU_CHECKS=0``);
shape, dtype and device checks stay on."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch

import py_gpu
from py_gpu import PyGpuTypeError, PyGpuValueError, TriangleBatch

NAN_TRI = torch.tensor([[[1.0, 1.0, 0.5], [5.0, 1.0, 0.5], [math.nan, 5.0, 0.5]]])
ONE = torch.tensor([[0, 1, 2]])


def test_checks_on_by_default_and_switchable():
    assert py_gpu._check.checks_enabled()
    with pytest.raises(PyGpuValueError, match="NaN"):
        TriangleBatch(NAN_TRI, ONE)
    with py_gpu.checks(False):
        assert not py_gpu._check.checks_enabled()
        TriangleBatch(NAN_TRI, ONE)  # values are not read
        TriangleBatch(torch.tensor([[[1.0, 1, 0.5], [3e6, 1, 0.5], [1, 5, 0.5]]]), ONE)  # nor bounds
        with pytest.raises(PyGpuValueError, match="shape"):  # shapes still are
            TriangleBatch(torch.zeros(1, 3, 5), ONE)
        with pytest.raises(PyGpuTypeError, match="floating-point"):  # and dtypes
            TriangleBatch(torch.zeros(1, 3, 3, dtype=torch.int64), ONE)
    assert py_gpu._check.checks_enabled()  # restored
    with pytest.raises(PyGpuValueError, match="NaN"):
        TriangleBatch(NAN_TRI, ONE)


def test_set_checks_returns_the_previous_value_and_wants_a_bool():
    assert py_gpu.set_checks(False) is True
    try:
        assert py_gpu.set_checks(False) is False
    finally:
        py_gpu.set_checks(True)
    with pytest.raises(PyGpuTypeError, match="bool"):
        py_gpu.set_checks("no")


def test_render_with_checks_off_is_identical_on_valid_input():
    batch = TriangleBatch(torch.tensor([[[1.0, 1, 0.5], [7, 2, 0.5], [2, 7, 0.5]]]), ONE,
                          vertex_colors=torch.rand(1, 3, 3, generator=torch.Generator().manual_seed(0)))
    want = py_gpu.render(batch, (8, 8), backend="torch")
    with py_gpu.checks(False):
        got = py_gpu.render(TriangleBatch(batch.vertices, ONE, vertex_colors=batch.vertex_colors), (8, 8), backend="torch")
        frags = py_gpu.rasterize(batch, (8, 8), backend="torch")
        colors = py_gpu.interpolate(batch.vertex_colors, frags, ONE, kind="vertex")
    assert torch.equal(got.image, want.image) and torch.equal(got.face_index, want.face_index)
    assert colors.shape == (1, 8, 8, 1, 3)


def test_environment_variable_turns_checks_off():
    code = ("import math, torch, py_gpu\n"
            "assert not py_gpu._check.checks_enabled()\n"
            "py_gpu.TriangleBatch(torch.tensor([[[0., 0, math.nan], [1, 0, 0], [0, 1, 0]]]), torch.tensor([[0, 1, 2]]))\n")
    env = dict(os.environ, PY_GPU_CHECKS="0")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)
