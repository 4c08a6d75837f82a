"""The tensor contracts shared by every stage and backend.

``TriangleBatch`` goes in, ``Fragments`` come out of a rasterizer, and ``Frame`` comes out of
``render``. Named dims used throughout: ``B`` batch, ``V`` vertices, ``F`` faces, ``H``/``W``
image height/width, ``K`` faces kept per pixel, ``C`` channels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ._check import (
    MAX_SCREEN_COORD,
    PyGpuTypeError,
    PyGpuValueError,
    check_faces,
    check_finite,
    check_float,
    check_same_device,
    check_shape,
    checks_enabled,
)
from .image import quantize, save_png


def _as_tensor(value: Any, *, device=None, where: str = "TriangleBatch", name: str = "value") -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    if value is None or isinstance(value, (str, bytes, dict)):
        raise PyGpuTypeError(f"{where}: `{name}` must be a tensor or array, got {type(value).__name__}")
    try:
        return torch.as_tensor(value, device=device)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise PyGpuTypeError(f"{where}: `{name}` must be a tensor or array, got {type(value).__name__} ({exc})") from None


@dataclass(frozen=True, eq=False)
class TriangleBatch:
    """A batch of triangle meshes that share one face list: the input of every backend.

    Attributes:
        vertices: float ``[B, V, 3]`` screen space ``(x_px, y_px, depth)`` with y pointing down and
            pixel centers at ``+0.5``; or float ``[B, V, 4]`` clip space ``(x, y, z, w)``, mapped to
            pixels by ``x_px = (x/w + 1) * W/2``, ``y_px = (1 - y/w) * H/2``, ``depth = z/w``.
            A ``[V, 3|4]`` tensor is taken as ``B = 1``.
        faces: int64 ``[F, 3]`` vertex indices into ``V``, shared by every batch element.
            int32 input is widened to int64.
        vertex_colors: optional float ``[B, V, C]`` (or ``[V, C]``, broadcast over ``B``)
            per-vertex attributes, interpolated with perspective-correct barycentrics.
        face_colors: optional float ``[B, F, C]`` (or ``[F, C]``) flat per-face attributes.
            At most one of the two color kinds may be given; with neither, faces are white.

    Colors are float RGB in ``[0, 1]``. Every tensor lives on ``vertices.device``. float32 is the
    default; float64 works everywhere (use it for ``gradcheck``).
    """

    vertices: torch.Tensor
    faces: torch.Tensor
    vertex_colors: torch.Tensor | None = None
    face_colors: torch.Tensor | None = None

    def __post_init__(self) -> None:
        where = "TriangleBatch"
        verts = _as_tensor(self.vertices, where=where, name="vertices")
        check_float(where, "vertices", verts)
        if verts.dim() == 2:
            verts = verts.unsqueeze(0)
        check_shape(where, "vertices", verts, (None, None, (3, 4)), "[B, V, 3] (screen) or [B, V, 4] (clip)")
        check_finite(where, "vertices", verts)
        if verts.shape[-1] == 3 and verts.numel() and checks_enabled():
            biggest = float(verts[..., :2].detach().abs().max())
            if biggest > MAX_SCREEN_COORD:
                raise PyGpuValueError(
                    f"{where}: `vertices` has a screen coordinate of {biggest:.6g} px; the supported range "
                    f"is +-{MAX_SCREEN_COORD:.0f} px. Clip large triangles first, or pass clip-space "
                    "[B, V, 4] vertices"
                )

        faces = _as_tensor(self.faces, device=verts.device, where=where, name="faces")
        check_same_device(where, verts, faces=faces)
        faces = check_faces(where, faces, verts.shape[1])
        num_verts = verts.shape[1]

        if self.vertex_colors is not None and self.face_colors is not None:
            raise PyGpuValueError(f"{where}: give `vertex_colors` or `face_colors`, not both")
        vcol = self._attr(where, "vertex_colors", self.vertex_colors, verts, num_verts, "V")
        fcol = self._attr(where, "face_colors", self.face_colors, verts, faces.shape[0], "F")

        object.__setattr__(self, "vertices", verts)
        object.__setattr__(self, "faces", faces)
        object.__setattr__(self, "vertex_colors", vcol)
        object.__setattr__(self, "face_colors", fcol)

    @staticmethod
    def _attr(where, name, value, verts, count, dim_name):
        if value is None:
            return None
        t = _as_tensor(value, device=verts.device, where=where, name=name)
        check_float(where, name, t)
        if t.dim() == 2:
            t = t.unsqueeze(0)
        check_shape(where, name, t, (None, count, None), f"[B, {dim_name}={count}, C] or [{dim_name}, C]")
        if t.shape[0] not in (1, verts.shape[0]):
            raise PyGpuValueError(
                f"{where}: `{name}` has batch size {t.shape[0]} but the vertices have {verts.shape[0]}"
            )
        if t.shape[-1] < 1:
            raise PyGpuValueError(f"{where}: `{name}` must have at least one channel")
        check_same_device(where, verts, **{name: t})
        check_finite(where, name, t)
        return t.expand(verts.shape[0], -1, -1)

    # ---- derived facts -------------------------------------------------------------------
    @property
    def batch_size(self) -> int:
        return self.vertices.shape[0]

    @property
    def num_faces(self) -> int:
        return self.faces.shape[0]

    @property
    def is_clip_space(self) -> bool:
        """True for ``[B, V, 4]`` clip-space vertices."""
        return self.vertices.shape[-1] == 4

    @property
    def device(self) -> torch.device:
        return self.vertices.device

    @property
    def dtype(self) -> torch.dtype:
        return self.vertices.dtype

    @property
    def num_channels(self) -> int:
        colors = self.colors
        return 3 if colors is None else colors.shape[-1]

    @property
    def colors(self) -> torch.Tensor | None:
        return self.vertex_colors if self.vertex_colors is not None else self.face_colors

    def to(self, device=None, dtype: torch.dtype | None = None) -> "TriangleBatch":
        """The same batch on another device and/or float dtype (faces stay int64)."""

        def move(t, floating=True):
            if t is None:
                return None
            return t.to(device=device, dtype=dtype if floating else None)

        return TriangleBatch(move(self.vertices), move(self.faces, floating=False), move(self.vertex_colors),
                             move(self.face_colors))

    def screen_vertices(self, size: tuple[int, int]) -> torch.Tensor:
        """float ``[B, V, 3]`` screen-space ``(x_px, y_px, depth)`` for an image of ``size = (H, W)``.

        Clip-space input is divided by w here; every w must be positive (near-plane clipping
        happens before this step).
        """
        if not self.is_clip_space:
            return self.vertices
        height, width = size
        v = self.vertices
        w = v[..., 3]
        if v.numel() and not bool((w > 0).all()):
            raise PyGpuValueError(
                "TriangleBatch: clip-space vertices with w <= 0 must be clipped against the near plane "
                "before rasterizing"
            )
        x = (v[..., 0] / w + 1.0) * (width / 2.0)
        y = (1.0 - v[..., 1] / w) * (height / 2.0)
        z = v[..., 2] / w
        return torch.stack((x, y, z), dim=-1)


@dataclass(frozen=True, eq=False)
class Fragments:
    """What a rasterizer returns: the ``K`` faces kept per pixel, nearest first.

    Attributes:
        face_index: int64 ``[B, H, W, K]``, index into ``faces``; -1 where no face covers the pixel.
        bary: float ``[B, H, W, K, 3]`` perspective-correct barycentric weights of the face's three
            vertices at the pixel center (0 where empty). Differentiable in the torch backend.
        depth: float ``[B, H, W, K]`` interpolated screen depth (``z`` or ``z/w``); +inf where empty.
        dist: float ``[B, H, W, K]`` soft mode only: signed squared distance (px^2) from the pixel
            center to the face's nearest edge, negative outside. ``None`` in hard mode.
        screen_bary: float ``[B, H, W, K, 3]`` affine (screen-space) barycentrics, when they differ
            from ``bary`` (clip-space input); ``None`` otherwise.
        alpha: float ``[B, H, W, 1]`` soft mode only: the soft silhouette ``1 - prod(1 - D)`` over
            *every* face whose footprint reaches the pixel, not only the K kept ones (so a dense
            mesh's interior is opaque at any K). Differentiable. ``None`` in hard mode, and for
            fragments built by hand (then :func:`py_gpu.shading.blend.silhouette` uses the K slots).
    """

    face_index: torch.Tensor
    bary: torch.Tensor
    depth: torch.Tensor
    dist: torch.Tensor | None = None
    screen_bary: torch.Tensor | None = None
    alpha: torch.Tensor | None = None

    @property
    def size(self) -> tuple[int, int]:
        return self.face_index.shape[1], self.face_index.shape[2]

    @property
    def faces_per_pixel(self) -> int:
        return self.face_index.shape[3]

    @property
    def mask(self) -> torch.Tensor:
        """bool ``[B, H, W, K]``, True where a face is present."""
        return self.face_index >= 0

    @classmethod
    def empty(cls, batch_size: int, size, faces_per_pixel: int, *, dtype: torch.dtype, device,
              soft: bool = False) -> "Fragments":
        """Fragments where no face covers any pixel (``face_index`` -1, ``depth`` +inf)."""
        shape = (batch_size, int(size[0]), int(size[1]), faces_per_pixel)
        return cls(torch.full(shape, -1, dtype=torch.int64, device=device),
                   torch.zeros(*shape, 3, dtype=dtype, device=device),
                   torch.full(shape, float("inf"), dtype=dtype, device=device),
                   torch.zeros(shape, dtype=dtype, device=device) if soft else None, None,
                   torch.zeros(*shape[:3], 1, dtype=dtype, device=device) if soft else None)


@dataclass(frozen=True, eq=False)
class Frame:
    """What ``render`` returns. All tensors live on the batch's device.

    Attributes:
        image: float ``[B, H, W, C]`` shaded color composited over the background, in ``[0, 1]``
            for colors in ``[0, 1]``. Differentiable in the torch backend.
        alpha: float ``[B, H, W, 1]`` coverage: 1 covered / 0 empty in hard mode, soft in soft mode.
        depth: float ``[B, H, W]`` depth of the nearest face; +inf where empty.
        face_index: int64 ``[B, H, W]`` nearest face; -1 where empty.
        extras: named extra attachments (``"normal"``, ``"uv"`` ...), each ``[B, H, W, C]``.
    """

    image: torch.Tensor
    alpha: torch.Tensor
    depth: torch.Tensor
    face_index: torch.Tensor
    extras: dict = field(default_factory=dict)

    @property
    def batch_size(self) -> int:
        return self.image.shape[0]

    @property
    def size(self) -> tuple[int, int]:
        return self.image.shape[1], self.image.shape[2]

    def to_uint8(self) -> torch.Tensor:
        """uint8 ``[B, H, W, C]``: ``floor(clamp(c, 0, 1) * 255 + 0.5)``, the raster rule's quantization."""
        return quantize(self.image.detach())

    def to_png(self, path: str | Path, index: int = 0) -> None:
        """Write batch element ``index``'s RGB image (the first 3 channels, 8-bit) as a PNG file."""
        if self.image.shape[-1] < 3:
            raise PyGpuValueError(f"Frame.to_png: needs 3 color channels, image has {self.image.shape[-1]}")
        if not 0 <= index < self.batch_size:
            raise PyGpuValueError(f"Frame.to_png: `index` {index} out of range for batch size {self.batch_size}")
        save_png(path, self.to_uint8()[index, ..., :3].cpu().numpy())

    def to_numpy(self) -> np.ndarray:
        """uint8 ``[B, H, W, C]`` numpy array."""
        return self.to_uint8().cpu().numpy()

