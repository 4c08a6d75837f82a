"""``RasterSettings``: the one place where rasterization defaults live.

Every code path (hard, soft, brute-force oracle, ``render``) reads its defaults from here, so
they cannot drift apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ._check import PyGpuTypeError, PyGpuValueError

#: Default working-memory budget for one rasterize call, in bytes.
DEFAULT_MEMORY_BUDGET = 512 * 2**20


@dataclass(frozen=True)
class RasterSettings:
    """Rasterization settings, shared by every backend and mode.

    Attributes:
        mode: ``"hard"`` (exact, K = 1) or ``"soft"`` (SoftRas edges, K = ``faces_per_pixel``).
        sigma: soft edge width in px^2: ``D = sigmoid(sign * d^2 / sigma)``. Same edge width at any
            resolution. Default 1.0 px^2.
        gamma: temperature of the softmax over depth in soft color blending. Default 1e-4
            (SoftRas' value, for depth normalized to [0, 1] between ``znear`` and ``zfar``).
        faces_per_pixel: K, the nearest faces kept per pixel in soft mode. Default 8.
        cutoff: the coverage probability below which a face is ignored; sets the blur radius
            ``r = sqrt(sigma * ln(1/cutoff - 1))``. Default 1e-4.
        znear, zfar: the depth range mapped to [0, 1] for soft color blending. Defaults 0 and 1
            match clip-space ``z/w`` produced by ``py_gpu.camera`` and screen depth in [0, 1];
            set them to your scene's range for other depths.
        background_epsilon: weight of the background term in the soft softmax. Default 1e-10.
        cull_backfaces: drop faces whose screen winding is clockwise (y down) before rasterizing.
        memory_budget: bytes of working memory one call may use; work is chunked to fit.
    """

    mode: str = "hard"
    sigma: float = 1.0
    gamma: float = 1e-4
    faces_per_pixel: int = 8
    cutoff: float = 1e-4
    znear: float = 0.0
    zfar: float = 1.0
    background_epsilon: float = 1e-10
    cull_backfaces: bool = False
    memory_budget: int = DEFAULT_MEMORY_BUDGET

    def __post_init__(self) -> None:
        where = "RasterSettings"
        if self.mode not in ("hard", "soft"):
            raise PyGpuValueError(f"{where}: `mode` must be 'hard' or 'soft', got {self.mode!r}")
        for name in ("sigma", "gamma", "cutoff", "background_epsilon"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise PyGpuTypeError(f"{where}: `{name}` must be a number, got {value!r}")
            if not (value > 0) or math.isinf(value):
                raise PyGpuValueError(f"{where}: `{name}` must be a finite number > 0, got {value!r}")
        if not self.cutoff < 0.5:
            raise PyGpuValueError(f"{where}: `cutoff` must be < 0.5, got {self.cutoff}")
        k = self.faces_per_pixel
        if isinstance(k, bool) or not isinstance(k, int):
            raise PyGpuTypeError(f"{where}: `faces_per_pixel` must be an int, got {k!r}")
        if k < 1:
            raise PyGpuValueError(f"{where}: `faces_per_pixel` must be >= 1, got {k}")
        if not (math.isfinite(self.znear) and math.isfinite(self.zfar) and self.zfar > self.znear):
            raise PyGpuValueError(f"{where}: need finite znear < zfar, got znear={self.znear}, zfar={self.zfar}")
        if isinstance(self.memory_budget, bool) or not isinstance(self.memory_budget, int) or self.memory_budget <= 0:
            raise PyGpuValueError(f"{where}: `memory_budget` must be a positive int (bytes), got {self.memory_budget!r}")

    @property
    def blur_radius(self) -> float:
        """Pixels beyond which a face's soft coverage is below ``cutoff``."""
        return math.sqrt(self.sigma * math.log(1.0 / self.cutoff - 1.0))

    def with_(self, **changes) -> "RasterSettings":
        """A copy with ``changes`` applied; ``None`` values are ignored."""
        changes = {k: v for k, v in changes.items() if v is not None}
        return replace(self, **changes) if changes else self
