"""Backend registry, selection and the errors it gives."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

import py_gpu
from py_gpu import BackendUnavailableError
from py_gpu.backends import register_backend, registry


def _registry_state() -> tuple[dict, dict]:
    return dict(registry._REGISTRY), dict(registry._ALIASES)


@contextmanager
def _temporary_backends():
    """Backends registered inside are gone afterwards: the registry is restored in place."""
    entries, aliases = _registry_state()
    try:
        yield
    finally:
        registry._REGISTRY.clear()
        registry._REGISTRY.update(entries)
        registry._ALIASES.clear()
        registry._ALIASES.update(aliases)


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
    before = _registry_state()
    with _temporary_backends():
        register_backend("broken-test", object, probe=lambda: "needs the frobnicator: pip install frob", priority=-1,
                         aliases=("frob-test",))
        with pytest.raises(BackendUnavailableError, match="frobnicator"):
            py_gpu.select_backend("broken-test")
        with pytest.raises(BackendUnavailableError, match="frobnicator"):
            py_gpu.select_backend("frob-test")
        status = {s.name: s for s in py_gpu.available_backends()}
        assert not status["broken-test"].available
        assert "frob" in status["broken-test"].reason
        assert status["numpy"].available
    assert _registry_state() == before, "the test backend must not stay registered"
    assert "broken-test" not in {s.name for s in py_gpu.available_backends()}
    with pytest.raises(BackendUnavailableError, match="unknown backend 'frob-test'"):
        py_gpu.select_backend("frob-test")


def test_auto_skips_backends_that_fail_to_start():
    def explode():
        raise RuntimeError("no device")

    before = _registry_state()
    with _temporary_backends():
        register_backend("exploding-test", explode, priority=10**6)
        assert registry._REGISTRY["exploding-test"].factory is explode
        be = py_gpu.select_backend("auto")
        assert be.capabilities.accelerated
    assert _registry_state() == before, "the test backend must not stay registered"


def test_select_backend_type_error():
    with pytest.raises(TypeError):
        py_gpu.select_backend(3)


def test_capabilities_are_honest():
    ref = py_gpu.select_backend("reference").capabilities
    assert not ref.accelerated and ref.exact and not ref.differentiable and ref.modes == ("hard",)
    assert py_gpu.select_backend("numpy").capabilities.accelerated
