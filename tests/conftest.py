"""Shared test setup: devices, dtypes, tolerances, GL availability, hypothesis profiles.

- Devices come from ``PY_GPU_TEST_DEVICES`` (comma list, default: cpu plus cuda/mps when present);
  an absent device is skipped with a reason.
- GL tests use the ``gl_context`` fixture. Without a context they skip with the reason, unless
  ``PY_GPU_REQUIRE_GL=1`` is set (CI), where a missing context fails them.
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
