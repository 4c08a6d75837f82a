"""The exact CPU backends: the pure-Python reference and the vectorized NumPy rasterizer."""

from __future__ import annotations

import torch

from .._check import PyGpuValueError
from ..contracts import Fragments, Frame, TriangleBatch
from ..raster.numpy_raster import rasterize_numpy
from ..raster.reference import rasterize_reference
from .base import Backend, BackendCapabilities


class ReferenceBackend(Backend):
    """The pure-Python reference rasterizer: slow, dependency-free beyond torch, and the oracle.

    Its hard-mode shading is done in plain Python floats too (an oracle for the shared
    interpolation kernel, :func:`py_gpu.shading.interpolate_vertex`).
    """

    capabilities = BackendCapabilities(
        name="reference (pure Python)",
        accelerated=False,
        supports_depth=True,
        supports_vertex_attributes=True,
    )

    def _fragments(self, batch: TriangleBatch, size, settings) -> Fragments:
        return rasterize_reference(batch, size, cull_backfaces=settings.cull_backfaces)

    def _frame(self, batch: TriangleBatch, size, background, settings, blend) -> Frame:
        frags = rasterize_reference(batch, size, cull_backfaces=settings.cull_backfaces)
        B, H, W = frags.face_index.shape[:3]
        face = frags.face_index.reshape(B, -1).tolist()
        bary = frags.bary.reshape(B, -1, 3).tolist()
        faces = batch.faces.tolist()
        vcol = batch.vertex_colors.detach().cpu().double().tolist() if batch.vertex_colors is not None else None
        fcol = batch.face_colors.detach().cpu().double().tolist() if batch.face_colors is not None else None
        C = batch.num_channels
        bg = list(background[:C]) + [0.0] * (C - min(3, C))
        image = []
        for b in range(B):
            rows = []
            for p, f in enumerate(face[b]):
                if f < 0:
                    rows.append(bg)
                elif fcol is not None:
                    rows.append(fcol[b][f])
                elif vcol is not None:
                    l0, l1, l2 = bary[b][p]
                    i0, i1, i2 = faces[f]
                    c0, c1, c2 = vcol[b][i0], vcol[b][i1], vcol[b][i2]
                    rows.append([l0 * c0[k] + l1 * c1[k] + l2 * c2[k] for k in range(C)])
                else:
                    rows.append([1.0] * C)
            image.append(rows)
        img = torch.tensor(image, dtype=torch.float64).reshape(B, H, W, C)
        covered = frags.face_index[..., 0] >= 0
        depth = frags.depth[..., 0]
        return Frame(image=img, alpha=covered[..., None].double(), depth=depth, face_index=frags.face_index[..., 0])


class NumpyBackend(Backend):
    """Vectorized NumPy rasterizer; bit-identical to the reference, chunked under ``memory_budget`` bytes."""

    capabilities = BackendCapabilities(
        name="numpy (vectorized CPU)",
        accelerated=True,
        supports_depth=True,
        supports_vertex_attributes=True,
    )

    def __init__(self, memory_budget: int | None = None):
        if memory_budget is not None and (isinstance(memory_budget, bool) or not isinstance(memory_budget, int)
                                          or memory_budget <= 0):
            raise PyGpuValueError(f"NumpyBackend: `memory_budget` must be a positive int (bytes), got {memory_budget!r}")
        self.memory_budget = memory_budget

    def _fragments(self, batch: TriangleBatch, size, settings) -> Fragments:
        budget = self.memory_budget if self.memory_budget is not None else settings.memory_budget
        return rasterize_numpy(batch, size, memory_budget=budget, cull_backfaces=settings.cull_backfaces)
