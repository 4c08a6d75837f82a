"""The one place where py_gpu creates OpenGL contexts.

``create_context()`` tries the context kinds that can work here, in order, and reports every
failure when none does:

- with no ``DISPLAY`` / ``WAYLAND_DISPLAY`` on Linux: EGL (headless) first, then the platform
  default (GLX needs an X display);
- otherwise: the platform default first (GLX, WGL or CGL), then EGL.

``probe_gl()`` answers, once per process, whether a context can be made here: ``None`` when it
can, else the reason. moderngl is imported only when one of these functions is called.
"""

from __future__ import annotations

import os
import sys
import threading

from ._check import BackendUnavailableError

#: The install command printed when moderngl is missing.
INSTALL_HINT = 'pip install "py_gpu[gl]"'
#: The OpenGL version py_gpu's shaders need (GLSL 330).
REQUIRED_GL = 330

_probe_lock = threading.Lock()
_probe_result: list[str | None] = []  # empty until probed, then [reason-or-None]


class GLUnavailableError(BackendUnavailableError):
    """No OpenGL context could be created; the message lists each kind tried and why it failed."""


def import_moderngl():
    """Import moderngl, or raise ``GLUnavailableError`` with the install command."""
    try:
        import moderngl
    except ImportError as exc:
        raise GLUnavailableError(f"the ModernGL backend needs the moderngl package ({exc}); install it with: {INSTALL_HINT}") from exc
    return moderngl


def _headless() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    return not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def context_attempts() -> list[tuple[str, dict]]:
    """The ``(label, create_standalone_context kwargs)`` pairs tried, in order."""
    egl = ("EGL (headless)", {"backend": "egl"})
    default = ("platform default", {})
    return [egl, default] if _headless() else [default, egl]


def create_context():
    """A new standalone moderngl context (GL >= 3.3), trying each kind of ``context_attempts()``.

    Raises:
        GLUnavailableError: moderngl is missing, or no kind of context could be created; the
            message says which kinds were tried and why each one failed.
    """
    moderngl = import_moderngl()
    failures = []
    for label, kwargs in context_attempts():
        try:
            ctx = moderngl.create_standalone_context(require=REQUIRED_GL, **kwargs)
        except Exception as exc:  # each driver reports failure with its own exception type
            failures.append(f"{label}: {type(exc).__name__}: {exc}".strip())
            continue
        return ctx
    display = os.environ.get("DISPLAY") or "(unset)"
    raise GLUnavailableError(
        "no OpenGL context could be created (DISPLAY=" + display + "). Tried:\n  - "
        + "\n  - ".join(failures)
        + "\nOn a headless Linux machine install an EGL-capable driver (e.g. Mesa: libegl1 libgl1-mesa-dri)."
    )


def probe_gl() -> str | None:
    """``None`` when an OpenGL context can be created here, else the reason (cached per process)."""
    with _probe_lock:
        if not _probe_result:
            try:
                ctx = create_context()
            except BackendUnavailableError as exc:
                _probe_result.append(str(exc))
            except Exception as exc:  # pragma: no cover - a driver crashing in an unexpected way
                _probe_result.append(f"{type(exc).__name__}: {exc}")
            else:
                ctx.release()
                _probe_result.append(None)
        return _probe_result[0]
