"""Backend registry, selection and the errors it gives."""

from __future__ import annotations

import pytest

import py_gpu
from py_gpu import BackendUnavailableError
from py_gpu.backends import register_backend


def test_named_backends():
    assert isinstance(py_gpu.select_backend("reference"), py_gpu.CPURasterBackend)
    assert isinstance(py_gpu.select_backend("cpu"), py_gpu.CPURasterBackend)
    assert isinstance(py_gpu.select_backend("numpy"), py_gpu.NumpyRasterBackend)
    assert isinstance(py_gpu.select_backend(" NumPy "), py_gpu.NumpyRasterBackend)


def test_auto_picks_an_accelerated_backend():
    be = py_gpu.select_backend("auto")
    assert be.capabilities.accelerated
    assert isinstance(be, py_gpu.RasterBackend)


def test_unknown_backend_lists_the_others():
    with pytest.raises(BackendUnavailableError, match="unknown backend 'vulkan'") as info:
        py_gpu.select_backend("vulkan")
    assert "numpy" in str(info.value) and "reference" in str(info.value)


def test_unavailable_backend_says_why():
    register_backend("broken-test", object, probe=lambda: "needs the frobnicator: pip install frob", priority=-1)
    with pytest.raises(BackendUnavailableError, match="frobnicator"):
        py_gpu.select_backend("broken-test")
    status = {s.name: s for s in py_gpu.available_backends()}
    assert not status["broken-test"].available
    assert "frob" in status["broken-test"].reason
    assert status["numpy"].available


def test_auto_skips_backends_that_fail_to_start():
    def explode():
        raise RuntimeError("no device")

    register_backend("exploding-test", explode, priority=10**6)
    try:
        be = py_gpu.select_backend("auto")
        assert be.capabilities.accelerated
    finally:
        from py_gpu.backends import registry

        registry._REGISTRY.pop("exploding-test")
        registry._ALIASES.pop("exploding-test")


def test_select_backend_type_error():
    with pytest.raises(TypeError):
        py_gpu.select_backend(3)


def test_capabilities_are_honest():
    ref = py_gpu.select_backend("reference").capabilities
    assert not ref.accelerated and ref.exact and not ref.differentiable and ref.modes == ("hard",)
    assert py_gpu.select_backend("numpy").capabilities.accelerated
