"""The backend contract: capabilities, and the base class every backend builds on.

A backend draws batches it can draw: screen space, or clip space with every ``w > 0``. It never
clips: the front end (:mod:`py_gpu.frontend`) clips once against the near plane, dispatches,
and maps the result back once. The public methods validate their arguments and call three hooks:

- ``_fragments(batch, size, settings) -> Fragments`` (required),
- ``_frame(batch, size, background, settings, blend) -> Frame`` (default: shade the fragments),
- ``_rgb8(batch, size, background, settings) -> uint8 [B, H, W, 3]`` (default: quantize the frame).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._check import PyGpuTypeError, PyGpuValueError, check_rgb, check_size
from ..contracts import Fragments, Frame, TriangleBatch
from ..image import quantize
from ..settings import BlendSettings, RasterSettings
from ..shading.composite import shade_fragments


@dataclass(frozen=True)
class BackendCapabilities:
    """What a backend supports. The first five fields keep py_gpu 0.0.1's order.

    Attributes:
        name: human-readable backend name.
        accelerated: True when it is faster than the pure-Python reference.
        supports_depth: returns a depth buffer.
        supports_textures: samples textures.
        supports_vertex_attributes: interpolates per-vertex attributes.
        differentiable: ``Frame.image`` carries gradients.
        modes: raster modes it renders (``"hard"``, ``"soft"``).
        clip_space: accepts ``[B, V, 4]`` clip-space vertices (already clipped, every ``w > 0``).
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


class Backend:
    """Base of every backend. Subclasses set ``capabilities`` and implement ``_fragments``.

    Results of a CPU backend are moved to the batch's device (``results_follow_batch``).
    """

    capabilities: BackendCapabilities
    #: move results to the batch's device (CPU rasterizers); a device-native backend sets False
    results_follow_batch = True

    # -- hooks --------------------------------------------------------------------------------------
    def _fragments(self, batch: TriangleBatch, size, settings: RasterSettings) -> Fragments:  # pragma: no cover
        raise NotImplementedError

    def _frame(self, batch: TriangleBatch, size, background, settings: RasterSettings, blend: BlendSettings) -> Frame:
        return shade_fragments(batch, self._fragments(batch, size, settings), background, settings, blend)

    def _rgb8(self, batch: TriangleBatch, size, background, settings: RasterSettings) -> torch.Tensor:
        image = self._frame(batch, size, background, settings, BlendSettings()).image
        return quantize(image.detach()[..., :3])

    # -- validation ------------------------------------------------------------------------------------
    def check_settings(self, where: str, settings: RasterSettings | None) -> RasterSettings:
        """``settings`` (default ``RasterSettings()``), refused when this backend cannot render its mode."""
        if settings is None:
            settings = RasterSettings()
        if not isinstance(settings, RasterSettings):
            raise PyGpuTypeError(f"{where}: `settings` must be a RasterSettings, got {type(settings).__name__}")
        if settings.mode not in self.capabilities.modes:
            raise PyGpuValueError(
                f"{where}: the {self.capabilities.name} backend renders modes {self.capabilities.modes}, "
                f"not {settings.mode!r}; use backend='torch' for soft mode"
            )
        return settings

    def _drawable(self, where: str, batch) -> TriangleBatch:
        if not isinstance(batch, TriangleBatch):
            raise PyGpuTypeError(f"{where}: `batch` must be a TriangleBatch, got {type(batch).__name__}")
        if batch.is_clip_space and batch.vertices.numel() and not bool((batch.vertices[..., 3] > 0).all()):
            raise PyGpuValueError(
                f"{where}: clip-space vertices with w <= 0 reach a backend only after near-plane clipping; "
                "call py_gpu.rasterize / py_gpu.render, which clip once, or clip with py_gpu.raster.clip_batch"
            )
        return batch

    @staticmethod
    def _nothing(batch: TriangleBatch, size, settings: RasterSettings) -> Fragments:
        """The fragments of a batch of no elements (``B = 0``): every backend returns the same."""
        k = settings.faces_per_pixel if settings.mode == "soft" else 1
        return Fragments.empty(0, size, k, dtype=batch.dtype, device=batch.device, soft=settings.mode == "soft")

    def _follow(self, result, batch: TriangleBatch):
        if not self.results_follow_batch:
            return result
        return to_device(result, batch.device)

    # -- public -------------------------------------------------------------------------------------
    def rasterize(self, batch: TriangleBatch, size, *, settings: RasterSettings | None = None) -> Fragments:
        """``Fragments`` of a drawable ``batch`` at ``size = (H, W)`` (hard: K = 1, exact)."""
        where = f"{type(self).__name__}.rasterize"
        tb = self._drawable(where, batch)
        size = check_size(where, size)
        s = self.check_settings(where, settings)
        if tb.batch_size == 0:
            return self._nothing(tb, size, s)
        return self._follow(self._fragments(tb, size, s), tb)

    def render_frame(self, batch: TriangleBatch, size, *, background=(0.0, 0.0, 0.0),
                     settings: RasterSettings | None = None, blend: BlendSettings | None = None) -> Frame:
        """A ``Frame`` of a drawable ``batch`` at ``size = (H, W)``; ``background`` is float RGB in [0, 1]."""
        where = f"{type(self).__name__}.render_frame"
        tb = self._drawable(where, batch)
        size = check_size(where, size)
        bg = check_rgb(where, "background", background, scale=1.0)
        if blend is not None and not isinstance(blend, BlendSettings):
            raise PyGpuTypeError(f"{where}: `blend` must be a BlendSettings, got {type(blend).__name__}")
        s = self.check_settings(where, settings)
        if tb.batch_size == 0:
            return shade_fragments(tb, self._nothing(tb, size, s), bg, s, blend or BlendSettings())
        return self._follow(self._frame(tb, size, bg, s, blend or BlendSettings()), tb)

    def render_rgb8(self, batch: TriangleBatch, size, *, background=(0.0, 0.0, 0.0),
                    settings: RasterSettings | None = None) -> torch.Tensor:
        """uint8 ``[B, H, W, 3]`` image of a drawable ``batch`` (quantized by the raster rule).

        Backends take shortcuts here with the same 8-bit result (flat colors resolved per face,
        GL drawing straight into an 8-bit target)."""
        where = f"{type(self).__name__}.render_rgb8"
        tb = self._drawable(where, batch)
        size = check_size(where, size)
        bg = check_rgb(where, "background", background, scale=1.0)
        s = self.check_settings(where, settings)
        if tb.batch_size == 0:
            return torch.zeros(0, size[0], size[1], 3, dtype=torch.uint8, device=tb.device)
        return self._follow(self._rgb8(tb, size, bg, s), tb)


def to_device(result, device: torch.device):
    """``Fragments``, ``Frame`` or a tensor on ``device`` (a no-op when already there)."""
    if isinstance(result, torch.Tensor):
        return result.to(device)
    if isinstance(result, Fragments):
        if result.face_index.device == device:
            return result
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return Fragments(move(result.face_index), move(result.bary), move(result.depth), move(result.dist),
                         move(result.screen_bary), move(result.alpha))
    if result.image.device == device:
        return result
    return Frame(result.image.to(device), result.alpha.to(device), result.depth.to(device),
                 result.face_index.to(device), {k: v.to(device) for k, v in result.extras.items()})
