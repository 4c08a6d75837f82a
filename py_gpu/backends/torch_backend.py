"""The torch backend: exact hard mode and SoftRas soft mode on any torch device, differentiable.

Hard mode is :mod:`py_gpu.raster.torch_hard` (pixel for pixel the reference's raster rule) with
the shared shader :func:`py_gpu.shading.composite.shade_hard`; soft mode is
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

from .._check import PyGpuValueError, resolve_device
from ..contracts import Fragments, Frame, TriangleBatch
from ..image import quantize
from ..raster.torch_hard import compute_dtype, global_face_rows, rasterize_hard, rasterize_hard_exact
from ..raster.torch_soft import rasterize_soft
from ..settings import BlendSettings, RasterSettings
from ..shading.composite import background_tensor, render_soft_frame, shade_hard
from .base import Backend, BackendCapabilities
from .registry import register_backend


class TorchBackend(Backend):
    """Vectorized torch rasterizer, exact in hard mode, differentiable, on CPU, CUDA and MPS.

    Args:
        device: where to render (``"cpu"``, ``"cuda"``, ``"mps"`` or a ``torch.device``). By
            default each batch renders on its own device. Results live on this device.
        memory_budget: bytes of working memory per call; overrides ``settings.memory_budget``.

    Raises:
        BackendUnavailableError: ``device`` is CUDA or MPS and torch cannot use it here.
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
    results_follow_batch = False  # results stay on the backend's device, with their gradients

    def __init__(self, device=None, memory_budget: int | None = None):
        self.device = resolve_device("TorchBackend", device)
        if memory_budget is not None and (isinstance(memory_budget, bool) or not isinstance(memory_budget, int) or memory_budget <= 0):
            raise PyGpuValueError(f"TorchBackend: `memory_budget` must be a positive int (bytes), got {memory_budget!r}")
        self.memory_budget = memory_budget

    def _prepare(self, batch: TriangleBatch, settings: RasterSettings) -> tuple[TriangleBatch, RasterSettings]:
        if self.device is not None and batch.device != self.device:
            # MPS has no float64: float64 batches (the seed API's default) arrive there as float32
            dtype = torch.float32 if self.device.type == "mps" and batch.dtype == torch.float64 else None
            batch = batch.to(self.device, dtype=dtype)
        if self.memory_budget is not None:
            settings = settings.with_(memory_budget=self.memory_budget)
        return batch, settings

    def _fragments(self, batch: TriangleBatch, size, settings: RasterSettings) -> Fragments:
        batch, settings = self._prepare(batch, settings)
        if settings.mode == "soft":
            return rasterize_soft(batch, size, settings)
        return rasterize_hard(batch, size, settings)

    def _frame(self, batch: TriangleBatch, size, background, settings: RasterSettings, blend: BlendSettings) -> Frame:
        batch, settings = self._prepare(batch, settings)
        if settings.mode == "soft":  # rasterized and blended tile by tile, within the memory budget
            return render_soft_frame(batch, size, background, settings, blend)
        # shaded from float64 barycentrics, as the reference does, and kept in float64: rounding
        # the image to float32 would move colors that sit exactly on an 8-bit rounding boundary
        return shade_hard(batch, rasterize_hard_exact(batch, size, settings), background)

    def _rgb8(self, batch: TriangleBatch, size, background, settings: RasterSettings) -> torch.Tensor:
        """Flat-colored batches (per-face colors, or none) in hard mode take a shortcut with the
        same 8-bit result: a flat color does not depend on the barycentrics, so only the face
        index of each pixel is resolved, and each face's color is quantized once."""
        colors = batch.face_colors
        flat = batch.vertex_colors is None and (colors is None or colors.shape[-1] >= 3)
        if not flat or settings.mode != "hard":
            return super()._rgb8(batch, size, background, settings)
        batch, settings = self._prepare(batch, settings)
        dev, B, F = batch.device, batch.batch_size, batch.num_faces
        dtype = compute_dtype(dev)  # the dtype render_frame shades in, so the 8-bit colors agree
        if colors is None:
            table = torch.full((B * F, 3), 255, dtype=torch.uint8, device=dev)  # white
        else:
            table = quantize(colors[..., :3].to(device=dev, dtype=dtype)).reshape(B * F, 3)  # uint8
        bg = quantize(background_tensor(background, 3, dtype, dev)).view(1, 3)
        table = torch.cat([table, bg])  # row B * F: the background
        return global_face_rows(batch, size, settings, table)  # each pixel's face's row, b * F + f


def register() -> None:
    """Add the torch backend to the registry (``create_backend("torch", device=...)``)."""
    register_backend(
        "torch",
        TorchBackend,
        priority=50,
        summary="vectorized torch: exact hard mode + soft mode, differentiable, CPU/CUDA/MPS",
    )
