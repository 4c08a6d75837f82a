"""Shared test setup: devices, dtypes, tolerances, GL availability, hypothesis profiles.

- Devices come from ``PY_GPU_TEST_DEVICES`` (comma list, default: cpu plus cuda/mps when present);
  an absent device is skipped with a reason.
- ``dtype`` is float32 and float64; float64 on MPS (which has no float64) skips with the reason.
- GL tests use ``gl_available`` (skip without a context, with the reason, unless
  ``PY_GPU_REQUIRE_GL=1`` is set (CI), where a missing context fails them) and ``gl``, a
  ModernGL backend shared by one test module. Every test that uses ``gl`` (or registers another
  backend with ``gl_watch``) starts with no pending GL error and fails if its GL calls leave one
  (``ctx.error`` must read ``GL_NO_ERROR`` after the test).
- Hypothesis is derandomized under ``CI=true`` and never has a deadline.
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci", deadline=None, max_examples=60, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci" if os.environ.get("CI", "").lower() == "true" else "default")

#: Tolerances per dtype, one table for every test: (rtol, atol).
TOLERANCES = {torch.float32: (1e-4, 1e-5), torch.float64: (1e-7, 1e-9)}


@pytest.fixture(autouse=True)
def _seed_everything():
    """Every test starts from the same global random state (tests also seed their own generators)."""
    import random

    import numpy as np

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    yield


def _devices() -> list[str]:
    env = os.environ.get("PY_GPU_TEST_DEVICES")
    if env:
        return [d.strip() for d in env.split(",") if d.strip()]
    return ["cpu", "cuda", "mps"]


def _device_available(name: str) -> str | None:
    kind = name.split(":")[0]
    if kind == "cpu":
        return None
    if kind == "cuda":
        return None if torch.cuda.is_available() else "CUDA is not available"
    if kind == "mps":
        mps = getattr(torch.backends, "mps", None)
        return None if mps is not None and mps.is_available() else "MPS is not available"
    return f"unknown device {name!r}"


@pytest.fixture(params=_devices())
def device(request) -> torch.device:
    """Every test device; skipped with the reason when absent."""
    reason = _device_available(request.param)
    if reason:
        pytest.skip(reason)
    return torch.device(request.param)


@pytest.fixture(params=[torch.float32, torch.float64], ids=["f32", "f64"])
def dtype(request) -> torch.dtype:
    """float32 and float64; float64 skips on MPS (a test taking ``device`` too gets every pair)."""
    if request.param == torch.float64 and "device" in request.fixturenames:
        if request.getfixturevalue("device").type == "mps":
            pytest.skip("MPS has no float64")
    return request.param


def require_gl() -> bool:
    return os.environ.get("PY_GPU_REQUIRE_GL", "") == "1"


@pytest.fixture(scope="session")
def gl_available() -> None:
    """Skip (or, with PY_GPU_REQUIRE_GL=1, fail) when no OpenGL context can be created."""
    try:
        from py_gpu._gl import probe_gl
    except ImportError as exc:  # the GL module itself is missing
        reason = f"py_gpu GL support missing: {exc}"
    else:
        reason = probe_gl()
    if reason is not None:
        if require_gl():
            pytest.fail(f"PY_GPU_REQUIRE_GL=1 but no OpenGL context: {reason}")
        pytest.skip(f"no OpenGL context: {reason}")


# ---- GL error checks ----------------------------------------------------------------------------
def gl_errors(backend) -> list[str]:
    """Every pending GL error of ``backend``'s context (reading them clears them); [] when clean."""
    ctx = getattr(backend, "ctx", None)
    if ctx is None or getattr(backend, "_released", False):
        return []
    errors = []
    with ctx:  # glGetError reads the current context: make this one current
        for _ in range(16):  # one flag per error kind; a few reads empty them all
            error = ctx.error
            if error == "GL_NO_ERROR":
                break
            errors.append(error)
    return errors


class GLWatch:
    """The GL backends one test uses; their contexts must be free of errors after it."""

    def __init__(self) -> None:
        self.backends: list = []

    def add(self, backend, *, what: str = "backend"):
        """Watch ``backend``; fails now if its context already holds an error (left by someone else)."""
        errors = gl_errors(backend)
        if errors:
            pytest.fail(f"GL error before the test, on the {what}: {', '.join(errors)} "
                        "(left by an earlier test or fixture); ctx.error must be GL_NO_ERROR", pytrace=False)
        self.backends.append(backend)
        return backend

    def errors(self) -> list[str]:
        return [e for backend in self.backends for e in gl_errors(backend)]


@pytest.fixture
def gl_watch() -> GLWatch:
    """Register GL backends whose contexts are checked for errors when the test body ends."""
    return GLWatch()


@pytest.fixture(scope="module")
def gl_backend(gl_available):
    """One ModernGL backend per test module (contexts are expensive); tests take ``gl``."""
    from py_gpu.backends.moderngl import ModernGLBackend

    backend = ModernGLBackend()
    yield backend
    backend.release()


@pytest.fixture
def gl(gl_backend, gl_watch):
    """The module's ModernGL backend, checked for GL errors before and after the test."""
    return gl_watch.add(gl_backend, what="shared ModernGL backend")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """After the test body: a GL error left on a watched context fails the test (not its teardown)."""
    watch = item.funcargs.get("gl_watch") if hasattr(item, "funcargs") else None
    try:
        result = yield
    except BaseException:
        if watch is not None:
            watch.errors()  # clear them, so that the next test starts clean; the test failed anyway
        raise
    if watch is not None:
        errors = watch.errors()
        if errors:
            pytest.fail(f"{item.nodeid} left GL errors: {', '.join(errors)}; ctx.error must be GL_NO_ERROR "
                        "after every GL call", pytrace=False)
    return result
