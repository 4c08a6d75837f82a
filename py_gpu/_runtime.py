"""How many CPU threads py_gpu's own work uses.

torch's intra-op parallelism makes every multi-threaded op wait for all of its threads. On a
machine whose cores are busy with other work (a laptop, a shared CI runner), py_gpu's many small
ops then wait for descheduled threads: one competing process made a 1,000-triangle 640x360
render 5-8x slower with 2 threads than with 1. So by default py_gpu runs *its own* CPU work of
up to :data:`SMALL_WORK` pixels on one thread, and larger work with torch's setting; the user's
own torch ops are never affected (the setting is restored when each py_gpu call returns).

The policy, set by :func:`set_threads` or the environment variable ``PY_GPU_THREADS``:

- ``"auto"`` (default): one thread for calls of up to ``SMALL_WORK`` pixels, torch's otherwise;
- ``"torch"``: always torch's own setting (``torch.get_num_threads()``);
- an int ``n``: always ``n`` threads.

Only the forward call is covered: a later ``loss.backward()`` runs with the caller's setting.
``torch.set_num_threads`` is process-wide, so torch work running in *other* threads during a
py_gpu call sees the same limit.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Iterator

import torch

from ._check import PyGpuTypeError, PyGpuValueError

#: Largest call (B * H * W pixels) that "auto" runs on one thread.
SMALL_WORK = 2**21


def _parse(value) -> str | int:
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("auto", "torch"):
            return text
        if text.isdigit() and int(text) > 0:
            return int(text)
        raise PyGpuValueError(f"py_gpu threads: expected 'auto', 'torch' or a positive int, got {value!r}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise PyGpuTypeError(f"py_gpu threads: expected 'auto', 'torch' or a positive int, got {value!r}")
    if value < 1:
        raise PyGpuValueError(f"py_gpu threads: a thread count must be >= 1, got {value}")
    return value


_POLICY: str | int = _parse(os.environ.get("PY_GPU_THREADS", "auto"))
_LOCAL = threading.local()  # nesting depth per thread: only the outermost call sets threads


def set_threads(policy) -> str | int:
    """Set the thread policy (``"auto"``, ``"torch"`` or an int); returns the previous one."""
    global _POLICY
    previous, _POLICY = _POLICY, _parse(policy)
    return previous


def get_threads() -> str | int:
    """The current thread policy."""
    return _POLICY


def _wanted(device: torch.device, pixels: int) -> int | None:
    if device.type != "cpu" or _POLICY == "torch":
        return None
    if isinstance(_POLICY, int):
        return _POLICY
    return 1 if pixels <= SMALL_WORK else None


@contextlib.contextmanager
def cpu_threads(device, pixels: int) -> Iterator[None]:
    """Run the block with the policy's thread count for work of ``pixels`` on ``device``."""
    depth = getattr(_LOCAL, "depth", 0)
    n = _wanted(torch.device(device), pixels) if depth == 0 else None
    previous = torch.get_num_threads()
    change = n is not None and n != previous
    _LOCAL.depth = depth + 1
    if change:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        _LOCAL.depth = depth
        if change:
            torch.set_num_threads(previous)
