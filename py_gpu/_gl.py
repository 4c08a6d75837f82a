"""The one place where py_gpu creates OpenGL contexts.

``create_context()`` tries the context kinds that can work here, in order, and reports every
failure when none does:

- with no ``DISPLAY`` / ``WAYLAND_DISPLAY`` on Linux: EGL (headless) first, then the platform
  default (GLX needs an X display);
- otherwise: the platform default first (GLX, WGL or CGL), then EGL;
- last, on Linux: EGL on Mesa's surfaceless platform (made here through ctypes).

fork(): a driver keeps per-process state for each kind of context (Mesa's llvmpipe: one set of
rasterizer threads per EGL display, made when the display is first initialized). A child forked
after its parent tried a kind inherits that state without the threads, and rendering there waits
for them forever. So each kind remembers the process that first tried it, and a child never
tries a kind its parent (or an earlier ancestor) did: a child of a process that used EGL gets
the surfaceless kind, a driver of its own. When every kind was tried before the fork,
``create_context()`` raises ``GLUnavailableError`` saying so and how to avoid it (``FORK_HINT``).

``probe_gl()`` answers, once per process, whether a context can be made here: ``None`` when it
can, else the reason (a forked child asks again). moderngl is imported only when one of these
functions is called.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
import threading

from ._check import BackendUnavailableError

#: The install command printed when moderngl is missing.
INSTALL_HINT = 'pip install "py_gpu[gl]"'
#: The OpenGL version py_gpu's shaders need (GLSL 330).
REQUIRED_GL = 330

#: What to do instead, said when a GL context would have to survive fork().
FORK_HINT = (
    "OpenGL contexts do not survive fork(). Start worker processes with the 'spawn' (or "
    "'forkserver') start method and create the GL backend in the worker, e.g. "
    "multiprocessing.get_context('spawn') or torch.utils.data.DataLoader(..., "
    "multiprocessing_context='spawn'); or make no GL context (no GL backend, no 'auto' backend "
    "choice) in the parent before it forks"
)
#: The label of the last kind of context tried (see ``context_attempts``).
SURFACELESS = "EGL surfaceless (Mesa)"

_probe_lock = threading.Lock()
_probe_result: list[str | None] = []  # empty until probed, then [reason-or-None]
#: label -> the process that first tried to make a context of that kind (inherited across fork)
_tried_in: dict[str, int] = {}


def _after_fork_in_child() -> None:
    """A forked child probes again, and never waits on a lock another thread of its parent held."""
    global _probe_lock
    _probe_lock = threading.Lock()
    _probe_result.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


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
    """The ``(label, create_standalone_context kwargs)`` pairs tried, in order.

    The surfaceless kind (Linux only) has no glcontext backend: ``create_context`` makes it with
    ``SurfacelessEGL`` and hands that to moderngl as ``context=``."""
    egl = ("EGL (headless)", {"backend": "egl"})
    default = ("platform default", {})
    attempts = [egl, default] if _headless() else [default, egl]
    if sys.platform.startswith("linux"):
        attempts.append((SURFACELESS, {}))
    return attempts


def create_context():
    """A new standalone moderngl context (GL >= 3.3), trying each kind of ``context_attempts()``.

    Kinds that a parent process tried before forking this one are skipped (see the module
    docstring); the context is current in the calling thread.

    Raises:
        GLUnavailableError: moderngl is missing, or no kind of context could be created; the
            message says which kinds were tried and why each one failed (and, after fork(),
            ``FORK_HINT``).
    """
    moderngl = import_moderngl()
    pid = os.getpid()
    failures, forked = [], False
    for label, kwargs in context_attempts():
        first = _tried_in.setdefault(label, pid)
        if first != pid:
            forked = True
            failures.append(f"{label}: first tried in process {first}, before fork() made this process")
            continue
        try:
            if label == SURFACELESS:
                ctx = _create_surfaceless(moderngl)
            else:
                ctx = moderngl.create_standalone_context(require=REQUIRED_GL, **kwargs)
        except Exception as exc:  # each driver reports failure with its own exception type
            failures.append(f"{label}: {type(exc).__name__}: {exc}".strip())
            continue
        return ctx
    display = os.environ.get("DISPLAY") or "(unset)"
    tried = "\n  - ".join(failures)
    if forked:
        raise GLUnavailableError(
            f"no OpenGL context could be created in this process ({pid}): it was forked after a GL context "
            "was made (a driver's state from before a fork() does not work after it), and no other kind of "
            f"context could be made here. Tried:\n  - {tried}\n{FORK_HINT}."
        )
    raise GLUnavailableError(
        "no OpenGL context could be created (DISPLAY=" + display + "). Tried:\n  - "
        + tried
        + "\nOn a headless Linux machine install an EGL-capable driver (e.g. Mesa: libegl1 libgl1-mesa-dri)."
    )


def _create_surfaceless(moderngl):
    """A moderngl context on a ``SurfacelessEGL`` context."""
    egl = SurfacelessEGL()
    try:
        return moderngl.create_standalone_context(require=REQUIRED_GL, context=egl)
    except Exception:
        egl.release()
        raise


# EGL enums (EGL 1.5, EGL_MESA_platform_surfaceless)
_EGL_NONE = 0x3038
_EGL_EXTENSIONS = 0x3055
_EGL_SURFACE_TYPE, _EGL_PBUFFER_BIT = 0x3033, 0x0001
_EGL_RENDERABLE_TYPE, _EGL_OPENGL_BIT = 0x3040, 0x0008
_EGL_OPENGL_API = 0x30A2
_EGL_CONTEXT_MAJOR_VERSION, _EGL_CONTEXT_MINOR_VERSION = 0x3098, 0x30FB
_EGL_CONTEXT_OPENGL_PROFILE_MASK, _EGL_CONTEXT_OPENGL_CORE_PROFILE_BIT = 0x30FD, 0x0001
_EGL_PLATFORM_SURFACELESS_MESA = 0x31DD


@functools.cache
def _load_egl():
    """libEGL through ctypes, with the signatures ``SurfacelessEGL`` calls (loaded once)."""
    egl = ctypes.CDLL(ctypes.util.find_library("EGL") or "libEGL.so.1")
    vp, i32, ip = ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_int32)
    for name, res, args in (
        ("eglGetError", i32, []),
        ("eglQueryString", ctypes.c_char_p, [vp, i32]),
        ("eglGetProcAddress", vp, [ctypes.c_char_p]),
        ("eglInitialize", ctypes.c_uint, [vp, ip, ip]),
        ("eglBindAPI", ctypes.c_uint, [ctypes.c_uint]),
        ("eglChooseConfig", ctypes.c_uint, [vp, ip, ctypes.POINTER(vp), i32, ip]),
        ("eglCreateContext", vp, [vp, vp, vp, ip]),
        ("eglMakeCurrent", ctypes.c_uint, [vp, vp, vp, vp]),
        ("eglDestroyContext", ctypes.c_uint, [vp, vp]),
    ):
        fn = getattr(egl, name)
        fn.restype, fn.argtypes = res, args
    get_display = ctypes.CFUNCTYPE(vp, ctypes.c_uint, vp, vp)
    address = egl.eglGetProcAddress(b"eglGetPlatformDisplay") or egl.eglGetProcAddress(b"eglGetPlatformDisplayEXT")
    if not address:
        raise RuntimeError("libEGL has no eglGetPlatformDisplay")
    return egl, get_display(address)


def surfaceless_offered() -> bool:
    """Whether libEGL offers Mesa's surfaceless platform (asked without initializing any display)."""
    try:
        egl, _ = _load_egl()
    except (OSError, AttributeError, RuntimeError):
        return False
    return b"EGL_MESA_platform_surfaceless" in (egl.eglQueryString(None, _EGL_EXTENSIONS) or b"").split()


class SurfacelessEGL:
    """An OpenGL 3.3 core context on Mesa's surfaceless EGL platform, for moderngl's ``context=``.

    It lives on a display of its own: glcontext's EGL contexts all share the first EGL device's
    display, so this is the kind that is still fresh in a process forked from one that used
    EGL. It offers what moderngl asks of a context: ``load_opengl_function``, ``__enter__`` /
    ``__exit__`` (make it current in, or release it from, the calling thread) and ``release``.

    Raises:
        RuntimeError: libEGL, the surfaceless platform or a GL 3.3 core context is not available.
    """

    def __init__(self):
        if not surfaceless_offered():
            raise RuntimeError("EGL offers no surfaceless platform (EGL_MESA_platform_surfaceless)")
        egl, get_display = _load_egl()
        dpy = get_display(_EGL_PLATFORM_SURFACELESS_MESA, None, None)
        if not dpy:
            raise RuntimeError(f"eglGetPlatformDisplay failed (0x{egl.eglGetError():x})")
        major, minor = ctypes.c_int32(), ctypes.c_int32()
        if not egl.eglInitialize(dpy, ctypes.byref(major), ctypes.byref(minor)):
            raise RuntimeError(f"eglInitialize failed (0x{egl.eglGetError():x})")
        if not egl.eglBindAPI(_EGL_OPENGL_API):
            raise RuntimeError(f"eglBindAPI failed (0x{egl.eglGetError():x})")
        attrs = (ctypes.c_int32 * 5)(_EGL_SURFACE_TYPE, _EGL_PBUFFER_BIT, _EGL_RENDERABLE_TYPE, _EGL_OPENGL_BIT, _EGL_NONE)
        config, count = ctypes.c_void_p(), ctypes.c_int32()
        if not egl.eglChooseConfig(dpy, attrs, ctypes.byref(config), 1, ctypes.byref(count)) or count.value < 1:
            raise RuntimeError(f"eglChooseConfig found no OpenGL config (0x{egl.eglGetError():x})")
        version = (ctypes.c_int32 * 7)(
            _EGL_CONTEXT_MAJOR_VERSION, REQUIRED_GL // 100, _EGL_CONTEXT_MINOR_VERSION, REQUIRED_GL // 10 % 10,
            _EGL_CONTEXT_OPENGL_PROFILE_MASK, _EGL_CONTEXT_OPENGL_CORE_PROFILE_BIT, _EGL_NONE,
        )
        ctx = egl.eglCreateContext(dpy, config, None, version)
        if not ctx:
            raise RuntimeError(f"eglCreateContext failed (0x{egl.eglGetError():x})")
        self._egl, self._dpy, self._ctx = egl, dpy, ctx
        if not egl.eglMakeCurrent(dpy, None, None, ctx):
            self.release()
            raise RuntimeError(f"eglMakeCurrent failed (0x{egl.eglGetError():x})")

    def load_opengl_function(self, name: str) -> int:
        return self._egl.eglGetProcAddress(name.encode()) or 0

    def __enter__(self):
        self._egl.eglMakeCurrent(self._dpy, None, None, self._ctx)
        return self

    def __exit__(self, *exc):
        self._egl.eglMakeCurrent(self._dpy, None, None, None)

    def release(self) -> None:
        if self._ctx:
            self._egl.eglDestroyContext(self._dpy, self._ctx)
            self._ctx = None


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
