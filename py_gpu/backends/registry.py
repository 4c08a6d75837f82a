"""The backend registry and ``create_backend``.

Each backend registers a name, aliases, a factory, an availability probe and an ``auto``
priority. ``create_backend("auto")`` tries the available ones from the highest priority down;
``create_backend(name)`` fails loudly, saying why that backend cannot run and how to fix it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import torch

from .._check import BackendUnavailableError, PyGpuTypeError, PyGpuValueError

log = logging.getLogger("py_gpu")


@dataclass(frozen=True)
class BackendEntry:
    name: str
    factory: Callable[..., object]
    probe: Callable[[], str | None]  # None when usable, else the reason it is not
    priority: int
    aliases: tuple[str, ...] = ()
    summary: str = ""


@dataclass(frozen=True)
class BackendStatus:
    """One line of ``available_backends()``."""

    name: str
    available: bool
    reason: str
    aliases: tuple[str, ...]
    summary: str


_REGISTRY: dict[str, BackendEntry] = {}
_ALIASES: dict[str, str] = {}


def register_backend(
    name: str,
    factory: Callable[..., object],
    *,
    probe: Callable[[], str | None] = lambda: None,
    priority: int = 0,
    aliases: tuple[str, ...] = (),
    summary: str = "",
) -> None:
    """Add (or replace) a backend. ``probe()`` returns None when it can run, else why not."""
    _REGISTRY[name] = BackendEntry(name, factory, probe, priority, tuple(aliases), summary)
    _ALIASES[name] = name
    for alias in aliases:
        _ALIASES[alias] = name


def _probe(entry: BackendEntry) -> str | None:
    try:
        return entry.probe()
    except Exception as exc:  # a probe that crashes means "not available", with the cause
        return f"{type(exc).__name__}: {exc}"


def available_backends() -> list[BackendStatus]:
    """Every registered backend, whether it can run here, and why not."""
    out = []
    for entry in sorted(_REGISTRY.values(), key=lambda e: -e.priority):
        reason = _probe(entry)
        out.append(BackendStatus(entry.name, reason is None, reason or "ok", entry.aliases, entry.summary))
    return out


def _status_lines() -> str:
    lines = []
    for s in available_backends():
        alias = f" (aliases: {', '.join(s.aliases)})" if s.aliases else ""
        lines.append(f"  - {s.name}{alias}: {'available' if s.available else 'unavailable: ' + s.reason}")
    return "\n".join(lines)


def create_backend(prefer: str = "auto", *, factories: dict | None = None, **options):
    """Return a backend instance.

    Args:
        prefer: ``"auto"`` (the fastest that works here), or a backend name or alias:
            ``"reference"``/``"cpu"``, ``"numpy"``, ``"torch"``, ``"moderngl"``/``"opengl"``/``"gl"``/``"gpu"``.
        factories: optional ``{name: factory}`` used instead of the registered factories (a
            layer above builds its own subclasses of the same backends this way).
        **options: passed to the backend's constructor (``device=`` for torch, ``memory_budget=`` ...).

    Raises:
        BackendUnavailableError: the named backend cannot run here (the message says why and
            lists the others); or the name is unknown.
    """
    if not isinstance(prefer, str):
        raise PyGpuTypeError(f"create_backend: `prefer` must be a string, got {type(prefer).__name__}")
    factories = factories or {}
    key = prefer.strip().lower()
    if key == "auto":
        for entry in sorted(_REGISTRY.values(), key=lambda e: -e.priority):
            if entry.priority < 0:
                continue
            reason = _probe(entry)
            if reason is None:
                try:
                    return factories.get(entry.name, entry.factory)(**options)
                except (TypeError, PyGpuValueError):  # a bad option is the caller's error, on any backend
                    raise
                except Exception as exc:  # fall through to the next backend
                    log.debug("create_backend('auto'): %s failed to start: %s", entry.name, exc)
                    continue
            log.debug("create_backend('auto'): skipping %s: %s", entry.name, reason)
        raise BackendUnavailableError("create_backend('auto'): no backend can run here:\n" + _status_lines())
    name = _ALIASES.get(key)
    if name is None:
        raise BackendUnavailableError(f"create_backend: unknown backend {prefer!r}. Backends:\n" + _status_lines())
    entry = _REGISTRY[name]
    reason = _probe(entry)
    if reason is not None:
        raise BackendUnavailableError(
            f"create_backend: backend {name!r} cannot run here: {reason}\nBackends:\n" + _status_lines()
        )
    try:
        return factories.get(name, entry.factory)(**options)
    except (BackendUnavailableError, TypeError, PyGpuValueError):  # the cause is already named
        raise
    except Exception as exc:
        raise BackendUnavailableError(f"create_backend: backend {name!r} failed to start: {exc}") from exc


def torch_devices() -> list[str]:
    """Torch device types usable here, e.g. ``["cpu", "cuda:0 (NVIDIA H200)"]``."""
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices += [f"cuda:{i} ({torch.cuda.get_device_name(i)})" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        devices.append("mps")
    return devices
