"""Central input checks.

Every public entry point validates user input through these helpers, never with ``assert``
(``python -O`` strips asserts). Each message names the function, the argument, and what was
expected versus what arrived. The exceptions are subclasses of ``ValueError`` / ``TypeError``
so that ordinary ``except`` clauses catch them.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator, Sequence

import numpy as np
import torch

#: Largest |x| or |y| (pixels) a screen-space vertex may have. Snapped to 1/256 px this keeps
#: every integer edge function inside int64 with room to spare (2**28 subpixels per axis).
MAX_SCREEN_COORD = float(2**20)
#: Largest width or height, in pixels, of a render target.
MAX_IMAGE_SIDE = 16384

#: Data-dependent checks (finite values, index ranges, coordinate bounds) are on unless
#: ``PY_GPU_CHECKS=0`` is set or :func:`set_checks` turns them off. Shape, dtype and device
#: checks are always on: they cost no host synchronization.
_DATA_CHECKS = os.environ.get("PY_GPU_CHECKS", "1").strip().lower() not in ("0", "false", "no", "off")


def set_checks(enabled: bool) -> bool:
    """Turn the data-dependent input checks on or off; returns the previous setting.

    Off, py_gpu no longer reads tensor values to validate them (NaN/inf, face index ranges,
    screen-coordinate bounds), which saves one host synchronization per check, and invalid
    values give undefined (but memory-safe) results instead of an error. Shape, dtype and device
    checks stay on. Also set by the environment variable ``PY_GPU_CHECKS=0``.
    """
    global _DATA_CHECKS
    if not isinstance(enabled, bool):
        raise PyGpuTypeError(f"set_checks: `enabled` must be a bool, got {enabled!r}")
    previous, _DATA_CHECKS = _DATA_CHECKS, enabled
    return previous


def checks_enabled() -> bool:
    """Whether the data-dependent input checks run (see :func:`set_checks`)."""
    return _DATA_CHECKS


@contextlib.contextmanager
def checks(enabled: bool) -> Iterator[None]:
    """``with py_gpu.checks(False): ...`` runs a block with the data-dependent checks switched."""
    previous = set_checks(enabled)
    try:
        yield
    finally:
        set_checks(previous)


class PyGpuValueError(ValueError):
    """A value is out of range, non-finite, or of the wrong shape."""


class PyGpuTypeError(TypeError):
    """An argument has the wrong type or dtype."""


class BackendUnavailableError(RuntimeError):
    """A backend was asked for by name but cannot run here; the message says why and how to fix it."""


class MemoryBudgetError(PyGpuValueError):
    """The request cannot fit in the memory budget; the message says what to change."""


class PyGpuWarning(UserWarning):
    """Something will render, but probably not as meant; the message says what to change."""


def check_tensor(where: str, name: str, value: Any) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise PyGpuTypeError(f"{where}: `{name}` must be a torch.Tensor, got {type(value).__name__}")
    return value


def check_float(where: str, name: str, t: torch.Tensor) -> None:
    if not t.is_floating_point():
        raise PyGpuTypeError(
            f"{where}: `{name}` must be a floating-point tensor (float32 or float64), got {t.dtype}"
        )


def check_finite(where: str, name: str, t: torch.Tensor) -> None:
    if _DATA_CHECKS and t.numel() and not bool(torch.isfinite(t).all()):
        bad = (~torch.isfinite(t)).nonzero()[0].tolist()
        raise PyGpuValueError(f"{where}: `{name}` contains NaN or inf (first at index {bad})")


def check_shape(where: str, name: str, t: torch.Tensor, expected: Sequence[int | None | tuple], text: str) -> None:
    """Check ``t.shape`` against ``expected``; ``None`` matches any size, a tuple any of its sizes."""
    ok = t.dim() == len(expected)
    if ok:
        for got, want in zip(t.shape, expected):
            if want is None:
                continue
            if isinstance(want, tuple):
                ok = ok and got in want
            else:
                ok = ok and got == want
    if not ok:
        raise PyGpuValueError(f"{where}: `{name}` must have shape {text}, got {tuple(t.shape)}")


def check_faces(where: str, faces: torch.Tensor, num_verts: int) -> torch.Tensor:
    """Validate a face list: integer ``[F, 3]`` indices into ``num_verts`` vertices; returns int64.

    int32/int16/int8/uint8 are widened to int64; an empty 1-D tensor is read as ``[0, 3]``.
    """
    if faces.dtype in (torch.int32, torch.int16, torch.uint8, torch.int8):
        faces = faces.long()
    if faces.dtype != torch.int64:
        raise PyGpuTypeError(f"{where}: `faces` must be an int64 (or int32) tensor, got {faces.dtype}")
    if faces.dim() == 1 and faces.numel() == 0:
        faces = faces.reshape(0, 3)
    check_shape(where, "faces", faces, (None, 3), "[F, 3]")
    if _DATA_CHECKS and faces.numel():
        lo, hi = int(faces.min()), int(faces.max())
        if lo < 0 or hi >= num_verts:
            raise PyGpuValueError(
                f"{where}: `faces` index out of range: values span [{lo}, {hi}] but there are "
                f"{num_verts} vertices (valid: 0..{num_verts - 1})"
            )
    return faces


def check_same_device(where: str, reference: torch.Tensor, **others: torch.Tensor | None) -> None:
    for name, t in others.items():
        if t is not None and t.device != reference.device:
            raise PyGpuValueError(
                f"{where}: `{name}` is on {t.device} but the vertices are on {reference.device}; "
                "move every tensor of a batch to one device"
            )


def check_size(where: str, size: Any) -> tuple[int, int]:
    """Validate an image ``size`` given as ``(height, width)``."""
    if isinstance(size, int) and not isinstance(size, bool):
        size = (size, size)
    if not isinstance(size, (tuple, list)) or len(size) != 2:
        raise PyGpuTypeError(f"{where}: `size` must be (height, width) integers, got {size!r}")
    height, width = size
    check_extent(where, "height", height)
    check_extent(where, "width", width)
    return int(height), int(width)


def check_extent(where: str, name: str, value: Any) -> int:
    if isinstance(value, np.integer):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise PyGpuTypeError(f"{where}: `{name}` must be an int, got {type(value).__name__}")
    if value <= 0:
        raise PyGpuValueError(f"{where}: `{name}` must be positive, got {value}")
    if value > MAX_IMAGE_SIDE:
        raise PyGpuValueError(
            f"{where}: `{name}` = {value} exceeds the largest supported side ({MAX_IMAGE_SIDE} px); "
            "render in tiles or at a lower resolution"
        )
    return value


def check_rgb(where: str, name: str, value: Any, *, scale: float) -> tuple[float, float, float]:
    """Validate an RGB triple; ``scale`` is 1.0 for float colors and 255 for 8-bit ones."""
    try:
        items = tuple(value)
    except TypeError:
        raise PyGpuTypeError(f"{where}: `{name}` must be an (r, g, b) sequence, got {value!r}") from None
    if len(items) != 3:
        raise PyGpuValueError(f"{where}: `{name}` must have exactly 3 channels, got {len(items)}")
    out = []
    for channel in items:
        try:
            f = float(channel)
        except (TypeError, ValueError):
            raise PyGpuTypeError(f"{where}: `{name}` channels must be numbers, got {channel!r}") from None
        if f != f or f in (float("inf"), float("-inf")):
            raise PyGpuValueError(f"{where}: `{name}` channels must be finite, got {channel!r}")
        out.append(f / scale)
    return out[0], out[1], out[2]


def check_positive(where: str, name: str, value: Any) -> float:
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise PyGpuTypeError(f"{where}: `{name}` must be a number, got {value!r}") from None
    if not f > 0 or f == float("inf"):
        raise PyGpuValueError(f"{where}: `{name}` must be a finite number > 0, got {value!r}")
    return f


def resolve_device(where: str, device: Any) -> torch.device | None:
    """``None`` (follow the data), or a usable ``torch.device`` from a name or a device.

    Raises:
        BackendUnavailableError: CUDA or MPS was asked for but torch cannot use it here.
        PyGpuValueError / PyGpuTypeError: not a device, or a device type py_gpu does not render on.
    """
    if device is None:
        return None
    if isinstance(device, str):
        try:
            device = torch.device(device)
        except RuntimeError as exc:
            raise PyGpuValueError(f"{where}: `device` {device!r} is not a torch device ({exc})") from None
    if not isinstance(device, torch.device):
        raise PyGpuTypeError(f"{where}: `device` must be a str or torch.device, got {type(device).__name__}")
    if device.type not in ("cpu", "cuda", "mps"):
        raise PyGpuValueError(
            f"{where}: device type {device.type!r} cannot render (it holds no data); use 'cpu', 'cuda' or 'mps'"
        )
    if device.type == "cuda" and not torch.cuda.is_available():
        raise BackendUnavailableError(
            f"{where}: device {str(device)!r} was asked for but torch.cuda.is_available() is False "
            f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'}); install a CUDA build of "
            "torch or use device='cpu'"
        )
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise BackendUnavailableError(
            f"{where}: device {str(device)!r} was asked for but only {torch.cuda.device_count()} CUDA device(s) exist"
        )
    if device.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise BackendUnavailableError(
                f"{where}: device 'mps' was asked for but torch.backends.mps.is_available() is False; use device='cpu'"
            )
    return device
