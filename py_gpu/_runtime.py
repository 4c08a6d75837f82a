"""How py_gpu's CPU work uses the machine: how many threads, and how the C heap keeps freed memory.

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

**The heap pad.** A CPU render allocates and frees tens of megabytes of temporaries (frame
buffers, pieces of fragments). With glibc's default settings, the freed top of the heap is
handed back to the kernel at once, and the next call's first touch of every page faults again:
a 1,000-triangle 640x360 render took about 6,400 page faults and 35 ms, against 28 ms once glibc
keeps 64 MiB at the heap top (``mallopt(M_TOP_PAD)``). So at its first CPU call, py_gpu sets
glibc's top pad to :data:`HEAP_PAD` bytes. That is process-wide: up to that much freed memory
stays with the process instead of going back to the system. ``PY_GPU_HEAP_PAD`` (bytes, before
the first call) sets another size; ``0`` leaves glibc's setting alone. Other C libraries than
glibc (macOS, Windows, musl) are not touched.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import sys
import threading
from typing import Iterator

import torch

from ._check import PyGpuTypeError, PyGpuValueError

#: Largest call (B * H * W pixels) that "auto" runs on one thread.
SMALL_WORK = 2**21
#: Bytes glibc keeps at the top of the heap when it trims it (``M_TOP_PAD``), set at the first CPU call.
HEAP_PAD = 64 << 20
_M_TOP_PAD = -2  # glibc's mallopt parameter number


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


def _heap_pad() -> int:
    """The top pad asked for: ``PY_GPU_HEAP_PAD`` (bytes) or :data:`HEAP_PAD`."""
    text = os.environ.get("PY_GPU_HEAP_PAD", "").strip()
    if not text:
        return HEAP_PAD
    if not text.isdigit() or int(text) >= 2**31:
        raise PyGpuValueError(f"PY_GPU_HEAP_PAD: expected a byte count from 0 to 2**31 - 1, got {text!r}")
    return int(text)


def _glibc():
    """glibc's handle, or None on any other C library."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


_HEAP = {"applied": None}  # the pad set (bytes), 0 when left alone; None before the first CPU call


def tune_heap() -> int:
    """Set glibc's heap top pad once per process (see the module's docs); returns the bytes set, or
    0 when left alone (``PY_GPU_HEAP_PAD=0``, or not glibc)."""
    if _HEAP["applied"] is None:
        pad, libc = _heap_pad(), None
        if pad:
            libc = _glibc()
        ok = libc is not None and libc.mallopt(_M_TOP_PAD, pad) == 1
        _HEAP["applied"] = pad if ok else 0
    return _HEAP["applied"]


@contextlib.contextmanager
def cpu_threads(device, pixels: int) -> Iterator[None]:
    """Run the block with the policy's thread count for work of ``pixels`` on ``device`` (and, on
    the first CPU call, set the heap pad: :func:`tune_heap`)."""
    depth = getattr(_LOCAL, "depth", 0)
    if _HEAP["applied"] is None and torch.device(device).type == "cpu":
        tune_heap()
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
