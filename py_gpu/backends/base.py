"""The backend contract: capabilities, the seed protocol, and the shared exact-backend plumbing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from .._check import PyGpuTypeError, PyGpuValueError, check_extent, check_rgb, check_size
from ..buffers import ColorLike, FrameBuffer
from ..contracts import Fragments, Frame, TriangleBatch
from ..geometry import RasterBatch
from ..settings import RasterSettings


@dataclass(frozen=True)
class BackendCapabilities:
    """What a backend supports. The first five fields are py_gpu 0.0.1's, in its order.

    Attributes:
        name: human-readable backend name.
        accelerated: True when it is faster than the pure-Python reference.
        supports_depth: returns a depth buffer.
        supports_textures: samples textures.
        supports_vertex_attributes: interpolates per-vertex attributes.
        differentiable: ``Frame.image`` carries gradients.
        modes: raster modes it renders (``"hard"``, ``"soft"``).
        clip_space: accepts ``[B, V, 4]`` clip-space vertices.
        devices: torch device types its results can live on.
        exact: follows docs/raster-rule.md exactly (face index identical to the reference).
    """

    name: str
    accelerated: bool
    supports_depth: bool = True
    supports_textures: bool = False
    supports_vertex_attributes: bool = False
    differentiable: bool = False
    modes: tuple[str, ...] = ("hard",)
    clip_space: bool = True
    devices: tuple[str, ...] = ("cpu",)
    exact: bool = True


@runtime_checkable
class RasterBackend(Protocol):
    """py_gpu 0.0.1's backend protocol; every backend still implements it."""

    capabilities: BackendCapabilities

    def render(
        self,
        batch: RasterBatch,
        width: int,
        height: int,
        *,
        background: ColorLike = (0, 0, 0),
        target: FrameBuffer | None = None,
    ) -> FrameBuffer: ...


def as_triangle_batch(where: str, batch) -> TriangleBatch:
    """Accept a ``TriangleBatch`` or a seed ``RasterBatch``."""
    if isinstance(batch, TriangleBatch):
        return batch
    if isinstance(batch, RasterBatch):
        return batch.to_triangle_batch()
    raise PyGpuTypeError(f"{where}: `batch` must be a TriangleBatch or RasterBatch, got {type(batch).__name__}")


class ExactBackend:
    """Shared plumbing of the exact backends: subclasses provide ``_fragments`` and ``_frame``."""

    capabilities: BackendCapabilities

    # -- to implement ---------------------------------------------------------------------------
    def _fragments(self, batch: TriangleBatch, size: tuple[int, int], settings: RasterSettings) -> Fragments:  # pragma: no cover
        raise NotImplementedError

    def _frame(self, batch: TriangleBatch, size: tuple[int, int], background, settings: RasterSettings) -> Frame:
        from ..shading.flat import shade_hard

        return shade_hard(batch, self._fragments(batch, size, settings), background)

    def _settings(self, where: str, settings: RasterSettings | None) -> RasterSettings:
        if settings is None:
            return RasterSettings()
        if not isinstance(settings, RasterSettings):
            raise PyGpuTypeError(f"{where}: `settings` must be a RasterSettings, got {type(settings).__name__}")
        if settings.mode not in self.capabilities.modes:
            raise PyGpuValueError(
                f"{where}: the {self.capabilities.name} backend renders modes {self.capabilities.modes}, "
                f"not {settings.mode!r}; use backend='torch' for soft mode"
            )
        return settings

    # -- tensor API -------------------------------------------------------------------------------
    def rasterize(self, batch, size, *, settings: RasterSettings | None = None) -> Fragments:
        """Hard-mode ``Fragments`` (K = 1) at ``size = (H, W)``, on the batch's device.

        Clip-space input is clipped against the near plane first (``py_gpu.raster.clip``); the
        fragments refer to the input faces, with barycentrics of their corners.
        """
        where = f"{type(self).__name__}.rasterize"
        tb = as_triangle_batch(where, batch)
        size = check_size(where, size)
        s = self._settings(where, settings)
        return _to_device(self._clipped_fragments(tb, size, s), tb.device)

    def _clipped_fragments(self, tb: TriangleBatch, size, s: RasterSettings) -> Fragments:
        if not tb.is_clip_space:
            return self._fragments(tb, size, s)
        from ..raster.clip import clip_batch

        clipped = clip_batch(tb)
        return clipped.unclip(self._fragments(clipped.batch, size, s))

    def render_frame(self, batch, size, *, background=(0.0, 0.0, 0.0), settings: RasterSettings | None = None) -> Frame:
        """A ``Frame`` at ``size = (H, W)``; ``background`` is float RGB in [0, 1]."""
        where = f"{type(self).__name__}.render_frame"
        tb = as_triangle_batch(where, batch)
        size = check_size(where, size)
        bg = check_rgb(where, "background", background, scale=1.0)
        s = self._settings(where, settings)
        if tb.is_clip_space:
            from ..shading.flat import shade_hard

            frame = shade_hard(tb, self._clipped_fragments(tb, size, s), bg)
        else:
            frame = self._frame(tb, size, bg, s)
        return _frame_to_device(frame, tb.device)

    # -- seed protocol ------------------------------------------------------------------------------
    def render(self, batch, width: int, height: int, *, background: ColorLike = (0, 0, 0), target: FrameBuffer | None = None) -> FrameBuffer:
        """py_gpu 0.0.1's call: ``(width, height)`` order, 0-255 background, returns a ``FrameBuffer``."""
        where = f"{type(self).__name__}.render"
        check_extent(where, "width", width)
        check_extent(where, "height", height)
        bg = check_rgb(where, "background", background, scale=255.0)
        tb = as_triangle_batch(where, batch)
        if tb.batch_size != 1:
            raise PyGpuValueError(
                f"{where}: the FrameBuffer protocol renders one image but the batch has B={tb.batch_size}; "
                "use render_frame() for batches"
            )
        if target is not None:
            if not isinstance(target, FrameBuffer):
                raise PyGpuTypeError(f"{where}: `target` must be a FrameBuffer, got {type(target).__name__}")
            if target.width != width or target.height != height:
                raise PyGpuValueError("target frame dimensions must match render dimensions")
        fb = self._seed_frame(tb, (height, width), bg)
        if target is not None:
            target.pixels[:] = fb.pixels
            return target
        return fb

    def _seed_frame(self, batch: TriangleBatch, size: tuple[int, int], background) -> FrameBuffer:
        """The seed protocol's image for a validated ``B = 1`` batch; backends may take shortcuts."""
        return self.render_frame(batch, size, background=background).to_framebuffer(0)


def _to_device(frags: Fragments, device: torch.device) -> Fragments:
    if frags.face_index.device == device:
        return frags
    move = lambda t: None if t is None else t.to(device)  # noqa: E731
    return Fragments(move(frags.face_index), move(frags.bary), move(frags.depth), move(frags.dist), move(frags.screen_bary))


def _frame_to_device(frame: Frame, device: torch.device) -> Frame:
    if frame.image.device == device:
        return frame
    return Frame(
        frame.image.to(device), frame.alpha.to(device), frame.depth.to(device), frame.face_index.to(device),
        {k: v.to(device) for k, v in frame.extras.items()},
    )
