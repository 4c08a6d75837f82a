"""py_gpu 0.0.1's backend protocol: ``backend.render(batch, width, height) -> FrameBuffer``.

The 0.0.1 classes are the core backends plus :class:`SeedProtocol`, so each one is also the
backend it extends (``py_gpu.render(batch, backend=select_backend("numpy"))`` works).
``select_backend`` is the core :func:`~py_gpu.backends.create_backend` building these classes.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .._check import PyGpuTypeError, PyGpuValueError, check_extent, check_rgb
from ..backends import ModernGLBackend, NumpyBackend, ReferenceBackend, TorchBackend, create_backend
from ..contracts import TriangleBatch
from ..frontend import render_rgb8
from .buffers import ColorLike, FrameBuffer
from .screen import RasterBatch


@runtime_checkable
class RasterBackend(Protocol):
    """py_gpu 0.0.1's backend protocol."""

    def render(
        self,
        batch: RasterBatch,
        width: int,
        height: int,
        *,
        background: ColorLike = (0, 0, 0),
        target: FrameBuffer | None = None,
    ) -> FrameBuffer: ...


class SeedProtocol:
    """Adds 0.0.1's ``render`` to a backend: ``(width, height)`` order, 0-255 colors, a ``FrameBuffer``."""

    def render(self, batch, width: int, height: int, *, background: ColorLike = (0, 0, 0),
               target: FrameBuffer | None = None) -> FrameBuffer:
        """Render a ``RasterBatch`` (or a ``B = 1`` ``TriangleBatch``) into a ``FrameBuffer``.

        Goes through the same front end as ``py_gpu.render`` (clip once, then the backend's
        8-bit path), so the pixels equal ``py_gpu.render(...).to_uint8()``.
        """
        where = f"{type(self).__name__}.render"
        check_extent(where, "width", width)
        check_extent(where, "height", height)
        bg = check_rgb(where, "background", background, scale=255.0)
        if isinstance(batch, RasterBatch):
            batch = batch.to_triangle_batch()
        if not isinstance(batch, TriangleBatch):
            raise PyGpuTypeError(f"{where}: `batch` must be a RasterBatch or TriangleBatch, got {type(batch).__name__}")
        if batch.batch_size != 1:
            raise PyGpuValueError(
                f"{where}: the FrameBuffer protocol renders one image but the batch has B={batch.batch_size}; "
                "use py_gpu.render() for batches"
            )
        if target is not None:
            if not isinstance(target, FrameBuffer):
                raise PyGpuTypeError(f"{where}: `target` must be a FrameBuffer, got {type(target).__name__}")
            if target.width != width or target.height != height:
                raise PyGpuValueError("target frame dimensions must match render dimensions")
        rgb = render_rgb8(self, batch, (height, width), bg)[0].cpu().numpy()  # uint8 [H, W, 3]
        if target is None:
            return FrameBuffer.from_numpy(rgb)
        target.pixels[:] = rgb.tobytes()
        return target


class CPURasterBackend(SeedProtocol, ReferenceBackend):
    """py_gpu 0.0.1's pure-Python backend: the reference rasterizer."""


class NumpyRasterBackend(SeedProtocol, NumpyBackend):
    """py_gpu 0.0.1's NumPy backend: the vectorized NumPy rasterizer."""


class ModernGLRasterBackend(SeedProtocol, ModernGLBackend):
    """py_gpu 0.0.1's OpenGL backend: the ModernGL rasterizer."""


class TorchRasterBackend(SeedProtocol, TorchBackend):
    """The torch backend with py_gpu 0.0.1's ``render`` protocol."""


#: The seed-protocol class built for each built-in backend name.
SEED_FACTORIES = {
    "reference": CPURasterBackend,
    "numpy": NumpyRasterBackend,
    "moderngl": ModernGLRasterBackend,
    "torch": TorchRasterBackend,
}


class _SeedAdapter(SeedProtocol):
    """The seed protocol around a registered backend that has no seed class of its own."""

    def __init__(self, backend) -> None:
        self._backend = backend

    def __getattr__(self, name):
        return getattr(self._backend, name)


def select_backend(prefer: str = "auto", **options):
    """A backend with py_gpu 0.0.1's ``render`` protocol (and the whole core backend API).

    ``prefer``: ``"auto"`` (the fastest that works here) or a name or alias (``"reference"``/
    ``"cpu"``, ``"numpy"``, ``"torch"``, ``"moderngl"``/``"opengl"``/``"gl"``/``"gpu"``).
    ``options`` go to the backend's constructor.

    Raises:
        BackendUnavailableError: the named backend cannot run here (the message says why and how
            to fix it), or the name is unknown.
    """
    backend = create_backend(prefer, factories=SEED_FACTORIES, **options)
    return backend if isinstance(backend, SeedProtocol) else _SeedAdapter(backend)
