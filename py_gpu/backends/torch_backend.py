"""The torch backend: exact hard mode and SoftRas soft mode on any torch device, differentiable.

Hard mode is :mod:`py_gpu.raster.torch_hard` (pixel for pixel the reference's raster rule) with
the shared shader :func:`py_gpu.shading.flat.shade_hard`; soft mode is
:mod:`py_gpu.raster.torch_soft` and :mod:`py_gpu.shading.blend`, imported when first used.

Differences from the other exact backends:
- ``Frame.image`` and ``Fragments.bary``/``depth`` carry gradients to vertex positions and
  colors. Both are computed in float64 on CPU and CUDA. ``Fragments`` come back in the batch's
  dtype; hard-mode ``Frame`` tensors stay float64 even for float32 batches, so that
  ``Frame.to_uint8()`` equals the reference's 8-bit colors exactly (a float32 image would move
  colors lying exactly on a rounding boundary). Gradients still reach float32 inputs.
- On MPS (no float64) depth, barycentrics and colors are computed in float32; coverage and the
  face index stay exact, 8-bit colors may differ from the reference by one step.
"""

from __future__ import annotations

import torch

from .._check import BackendUnavailableError, PyGpuTypeError, PyGpuValueError, check_rgb, check_size
from ..buffers import FrameBuffer
from ..contracts import Fragments, Frame, TriangleBatch, quantize  # noqa: F401  (Frame: return type)
from ..settings import RasterSettings
from .base import BackendCapabilities, ExactBackend, as_triangle_batch
from .registry import register_backend


def _resolve_device(device) -> torch.device | None:
    """``None`` (follow the batch), or a usable ``torch.device`` from a name or device."""
    if device is None:
        return None
    if isinstance(device, str):
        try:
            device = torch.device(device)
        except RuntimeError as exc:
            raise PyGpuValueError(f"TorchBackend: `device` {device!r} is not a torch device ({exc})") from None
    if not isinstance(device, torch.device):
        raise PyGpuTypeError(f"TorchBackend: `device` must be a str or torch.device, got {type(device).__name__}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise BackendUnavailableError(
            "TorchBackend: device 'cuda' was asked for but torch.cuda.is_available() is False; "
            "install a CUDA build of torch or use device='cpu'"
        )
    if device.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise BackendUnavailableError(
                "TorchBackend: device 'mps' was asked for but torch.backends.mps.is_available() is False; "
                "use device='cpu'"
            )
    if device.type not in ("cpu", "cuda", "mps"):
        raise PyGpuValueError(f"TorchBackend: device type {device.type!r} is not supported (cpu, cuda, mps)")
    return device


class TorchBackend(ExactBackend):
    """Vectorized torch rasterizer, exact in hard mode, differentiable, on CPU, CUDA and MPS.

    Args:
        device: where to render (``"cpu"``, ``"cuda"``, ``"mps"`` or a ``torch.device``). By
            default each batch renders on its own device. Results live on this device.
        memory_budget: bytes of working memory per call; overrides ``settings.memory_budget``.
    """

    capabilities = BackendCapabilities(
        name="torch (vectorized, differentiable)",
        accelerated=True,
        supports_depth=True,
        supports_textures=False,
        supports_vertex_attributes=True,
        differentiable=True,
        modes=("hard", "soft"),
        clip_space=True,
        devices=("cpu", "cuda", "mps"),
        exact=True,
    )

    def __init__(self, device=None, memory_budget: int | None = None):
        self.device = _resolve_device(device)
        if memory_budget is not None and (isinstance(memory_budget, bool) or not isinstance(memory_budget, int) or memory_budget <= 0):
            raise PyGpuValueError(f"TorchBackend: `memory_budget` must be a positive int (bytes), got {memory_budget!r}")
        self.memory_budget = memory_budget

    # -- plumbing ---------------------------------------------------------------------------------
    def _prepare(self, batch: TriangleBatch, settings: RasterSettings) -> tuple[TriangleBatch, RasterSettings]:
        if self.device is not None and batch.device != self.device:
            # MPS has no float64: float64 batches (the seed API's default) arrive there as float32
            dtype = torch.float32 if self.device.type == "mps" and batch.dtype == torch.float64 else None
            batch = batch.to(self.device, dtype=dtype)
        if self.memory_budget is not None:
            settings = settings.with_(memory_budget=self.memory_budget)
        return batch, settings

    def _hard(self, batch: TriangleBatch, size, settings: RasterSettings, *, exact: bool) -> Fragments:
        """Hard-mode fragments; clip-space input is clipped against the near plane first (as in
        every exact backend) and the fragments mapped back to the input faces. ``exact`` keeps
        the compute dtype (float64) instead of the batch's."""
        from ..raster.torch_hard import rasterize_hard, rasterize_hard_exact

        raster = rasterize_hard_exact if exact else rasterize_hard
        if not batch.is_clip_space:
            return raster(batch, size, settings)
        from ..raster.clip import clip_batch

        clipped = clip_batch(batch)
        return clipped.unclip(raster(clipped.batch, size, settings))

    def _fragments(self, batch: TriangleBatch, size, settings: RasterSettings) -> Fragments:
        batch, settings = self._prepare(batch, settings)
        if settings.mode == "soft":
            from ..raster.torch_soft import rasterize_soft

            if not batch.is_clip_space:
                return rasterize_soft(batch, size, settings)
            from ..raster.clip import clip_batch

            clipped = clip_batch(batch)
            return clipped.unclip(rasterize_soft(clipped.batch, size, settings))
        return self._hard(batch, size, settings, exact=False)

    def _clipped_fragments(self, tb: TriangleBatch, size, s: RasterSettings) -> Fragments:
        return self._fragments(tb, size, s)  # clipping happens in _hard

    def _frame(self, batch: TriangleBatch, size, background, settings: RasterSettings) -> Frame:
        batch, settings = self._prepare(batch, settings)
        if settings.mode == "soft":
            from ..shading.blend import render_soft

            if not batch.is_clip_space:
                return render_soft(batch, size, background=background, settings=settings)
            # clip against the near plane; the clipped batch carries the colors, and face ids
            # are mapped back to the input faces
            from ..raster.clip import clip_batch

            clipped = clip_batch(batch)
            frame = render_soft(clipped.batch, size, background=background, settings=settings)
            face = frame.face_index
            face = torch.where(face >= 0, clipped.face_map[face.clamp(min=0)], face)
            return Frame(frame.image, frame.alpha, frame.depth, face, frame.extras)
        from ..shading.flat import shade_hard

        # shaded from float64 barycentrics, as the reference does, and kept in float64: rounding
        # the image to float32 would move colors that sit exactly on an 8-bit rounding boundary
        return shade_hard(batch, self._hard(batch, size, settings, exact=True), background)

    # -- tensor API (no move back to the batch's device, no detach) ------------------------------
    def rasterize(self, batch, size, *, settings: RasterSettings | None = None) -> Fragments:
        """``Fragments`` at ``size = (H, W)`` on the backend's device (default: the batch's).

        Hard mode: K = 1, exact. Soft mode: K = ``settings.faces_per_pixel`` with edge distances.
        """
        where = "TorchBackend.rasterize"
        tb = as_triangle_batch(where, batch)
        size = check_size(where, size)
        return self._fragments(tb, size, self._settings(where, settings))

    def render_frame(self, batch, size, *, background=(0.0, 0.0, 0.0), settings: RasterSettings | None = None) -> Frame:
        """A differentiable ``Frame`` at ``size = (H, W)``; ``background`` is float RGB in [0, 1]."""
        where = "TorchBackend.render_frame"
        tb = as_triangle_batch(where, batch)
        size = check_size(where, size)
        bg = check_rgb(where, "background", background, scale=1.0)
        return self._frame(tb, size, bg, self._settings(where, settings))


    # -- seed protocol -----------------------------------------------------------------------------
    def _seed_frame(self, batch: TriangleBatch, size, background) -> FrameBuffer:
        """The seed protocol's image. Flat-colored screen-space batches (per-face colors, or none)
        take a shortcut with the same 8-bit result: a flat color does not depend on the
        barycentrics, so only the face index of each pixel is resolved, and each face's color is
        quantized once instead of per pixel. Everything else goes through ``render_frame``.
        """
        tb, bg = batch, background
        colors = tb.face_colors
        flat = tb.vertex_colors is None and (colors is None or colors.shape[-1] >= 3)
        if not flat or tb.is_clip_space:
            return super()._seed_frame(tb, size, bg)
        height, width = size
        from ..raster.torch_hard import compute_dtype, rasterize_face_index

        tb, settings = self._prepare(tb, RasterSettings())
        dev = tb.device
        dtype = compute_dtype(dev)  # the dtype render_frame shades in, so the 8-bit colors agree
        face = rasterize_face_index(tb, (height, width), settings)[0].reshape(-1)  # [H*W], -1: empty
        if colors is None:
            table = torch.full((tb.num_faces, 3), 255, dtype=torch.uint8, device=dev)  # white
        else:
            table = quantize(colors[0, :, :3].to(device=dev, dtype=dtype))  # [F, 3] uint8
        table = torch.cat([table, quantize(torch.tensor(bg, dtype=dtype, device=dev))[None]])  # row F: background
        face = torch.where(face < 0, tb.num_faces, face)
        rgb = table.index_select(0, face).reshape(height, width, 3)
        return FrameBuffer.from_numpy(rgb.cpu().numpy())


def register() -> None:
    """Add the torch backend to the registry (``select_backend("torch", device=...)``)."""
    register_backend(
        "torch",
        TorchBackend,
        priority=50,
        summary="vectorized torch: exact hard mode + soft mode, differentiable, CPU/CUDA/MPS",
    )
