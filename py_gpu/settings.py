"""Settings: the one place where defaults live.

``RasterSettings`` holds what the rasterizer needs (mode, soft edge width, K, culling, memory);
``BlendSettings`` holds what soft color blending needs (the softmax temperature and depth range).
Every code path (hard, soft, the brute-force oracle, ``render``, ``rasterize``, ``Renderer``)
reads its defaults from these two dataclasses, so they cannot drift apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from ._check import PyGpuTypeError, PyGpuValueError

#: Default working-memory budget for one rasterize call, in bytes.
DEFAULT_MEMORY_BUDGET = 512 * 2**20


def _check_number(where: str, name: str, value, *, positive: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PyGpuTypeError(f"{where}: `{name}` must be a number, got {value!r}")
    if math.isnan(value) or math.isinf(value) or (positive and not value > 0):
        kind = "finite number > 0" if positive else "finite number"
        raise PyGpuValueError(f"{where}: `{name}` must be a {kind}, got {value!r}")


class _WithMixin:
    def with_(self, **changes):
        """A copy with ``changes`` applied; ``None`` values are ignored."""
        changes = {k: v for k, v in changes.items() if v is not None}
        return replace(self, **changes) if changes else self

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


@dataclass(frozen=True)
class RasterSettings(_WithMixin):
    """Rasterization settings, shared by every backend and mode.

    Attributes:
        mode: ``"hard"`` (exact, K = 1) or ``"soft"`` (SoftRas edges, K = ``faces_per_pixel``).
        sigma: soft edge width in px^2: ``D = sigmoid(sign * d^2 / sigma)``. Same edge width at any
            resolution. Default 1.0 px^2.
        faces_per_pixel: K, the nearest faces kept per pixel in soft mode. Default 8.
        cutoff: the coverage probability below which a face is ignored; sets the blur radius
            ``r = sqrt(sigma * ln(1/cutoff - 1))``. Default 1e-4.
        cull_backfaces: drop faces whose screen winding is clockwise (y down) before rasterizing.
        memory_budget: bytes of working memory one call may use; work is chunked to fit.
    """

    mode: str = "hard"
    sigma: float = 1.0
    faces_per_pixel: int = 8
    cutoff: float = 1e-4
    cull_backfaces: bool = False
    memory_budget: int = DEFAULT_MEMORY_BUDGET

    def __post_init__(self) -> None:
        where = "RasterSettings"
        if self.mode not in ("hard", "soft"):
            raise PyGpuValueError(f"{where}: `mode` must be 'hard' or 'soft', got {self.mode!r}")
        for name in ("sigma", "cutoff"):
            _check_number(where, name, getattr(self, name), positive=True)
        if not self.cutoff < 0.5:
            raise PyGpuValueError(f"{where}: `cutoff` must be < 0.5, got {self.cutoff}")
        k = self.faces_per_pixel
        if isinstance(k, bool) or not isinstance(k, int):
            raise PyGpuTypeError(f"{where}: `faces_per_pixel` must be an int, got {k!r}")
        if k < 1:
            raise PyGpuValueError(f"{where}: `faces_per_pixel` must be >= 1, got {k}")
        if not isinstance(self.cull_backfaces, bool):
            raise PyGpuTypeError(f"{where}: `cull_backfaces` must be a bool, got {self.cull_backfaces!r}")
        if isinstance(self.memory_budget, bool) or not isinstance(self.memory_budget, int) or self.memory_budget <= 0:
            raise PyGpuValueError(f"{where}: `memory_budget` must be a positive int (bytes), got {self.memory_budget!r}")

    @property
    def blur_radius(self) -> float:
        """Pixels beyond which a face's soft coverage is below ``cutoff``."""
        return math.sqrt(self.sigma * math.log(1.0 / self.cutoff - 1.0))


@dataclass(frozen=True)
class BlendSettings(_WithMixin):
    """Soft color blending settings (SoftRas eq. 6).

    Attributes:
        gamma: temperature of the softmax over normalized depth. Default 1e-4 (SoftRas' value).
        znear, zfar: the depth range mapped to normalized depth 1 (near) .. 0 (far). ``None``
            (default) chooses it so that it cannot go wrong: clip-space input uses ``z/w`` in
            ``[0, 1]``; screen-space input uses the range each batch element actually has
            (detached), ``znear`` its nearest vertex and ``zfar`` its farthest plus its depth
            extent, so its faces span normalized depth ``[0.5, 1]`` whatever the unit.
            Explicit values are used as given; a face outside them gets a one-time warning.
        composite: how the soft ``Frame.image`` is formed. ``"over"`` (default): the faces'
            softmax-blended color composited with the soft silhouette ``alpha`` over the
            background, ``alpha * color + (1 - alpha) * background``, so the image fades with
            ``alpha`` across every silhouette edge. ``"softras"``: SoftRas' and PyTorch3D's
            ``softmax_rgb_blend`` form, where the background is one more softmax term of weight
            ``background_epsilon``; its image has no silhouette gradient where one face is in front.
        background_epsilon: weight of the background term in the ``"softras"`` form. Default 1e-10.
    """

    gamma: float = 1e-4
    znear: float | None = None
    zfar: float | None = None
    composite: str = "over"
    background_epsilon: float = 1e-10

    def __post_init__(self) -> None:
        where = "BlendSettings"
        for name in ("gamma", "background_epsilon"):
            _check_number(where, name, getattr(self, name), positive=True)
        if (self.znear is None) != (self.zfar is None):
            raise PyGpuValueError(f"{where}: give both `znear` and `zfar`, or neither (automatic range); "
                                  f"got znear={self.znear}, zfar={self.zfar}")
        if self.znear is not None:
            for name in ("znear", "zfar"):
                _check_number(where, name, getattr(self, name), positive=False)
            if not self.zfar > self.znear:
                raise PyGpuValueError(f"{where}: need znear < zfar, got znear={self.znear}, zfar={self.zfar}")
        if self.composite not in COMPOSITES:
            raise PyGpuValueError(f"{where}: `composite` must be one of {COMPOSITES}, got {self.composite!r}")

    @property
    def auto_range(self) -> bool:
        """Whether the depth range is chosen per call (``znear = zfar = None``)."""
        return self.znear is None


#: The soft image forms of ``BlendSettings.composite``.
COMPOSITES = ("over", "softras")


def resolve_settings(where: str, settings, blend, **overrides) -> tuple[RasterSettings, BlendSettings]:
    """``(RasterSettings, BlendSettings)`` from optional objects plus keyword overrides.

    Each override goes to whichever dataclass has a field of that name; ``None`` means "unset".
    """
    raster = RasterSettings() if settings is None else settings
    blending = BlendSettings() if blend is None else blend
    if not isinstance(raster, RasterSettings):
        raise PyGpuTypeError(f"{where}: `settings` must be a RasterSettings, got {type(raster).__name__}")
    if not isinstance(blending, BlendSettings):
        raise PyGpuTypeError(f"{where}: `blend` must be a BlendSettings, got {type(blending).__name__}")
    raster_names, blend_names = RasterSettings.field_names(), BlendSettings.field_names()
    unknown = [k for k in overrides if k not in raster_names and k not in blend_names]
    if unknown:  # pragma: no cover - a programming error inside py_gpu
        raise PyGpuTypeError(f"{where}: unknown settings {unknown}")
    raster = raster.with_(**{k: v for k, v in overrides.items() if k in raster_names})
    blending = blending.with_(**{k: v for k, v in overrides.items() if k in blend_names})
    return raster, blending
