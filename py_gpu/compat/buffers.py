"""py_gpu 0.0.1's dependency-free frame and depth buffers, kept source-compatible."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from .._check import MAX_IMAGE_SIDE, PyGpuTypeError, PyGpuValueError
from ..contracts import Frame
from ..image import encode_png

ColorLike = tuple[int, int, int]


def clamp_channel(value: int | float) -> int:
    """Round and clamp one 0-255 channel."""
    return max(0, min(255, int(round(value))))


def as_rgb(value: ColorLike) -> ColorLike:
    """Validate a 0-255 RGB triple and clamp each channel."""
    try:
        n = len(value)
    except TypeError:
        n = None
    if n is None or isinstance(value, (str, bytes)):
        raise PyGpuTypeError(f"RGB colors must be a sequence of three 0-255 numbers, got {value!r}") from None
    if n != 3:
        raise PyGpuValueError(f"RGB colors must have exactly three channels, got {n}")
    for channel in value:
        if isinstance(channel, bool) or not isinstance(channel, (int, float, np.integer, np.floating)):
            raise PyGpuTypeError(f"RGB colors must be a sequence of three 0-255 numbers, got {value!r}")
        if not math.isfinite(channel):
            raise PyGpuValueError(f"RGB color channels must be finite, got {value!r}")
    return (clamp_channel(value[0]), clamp_channel(value[1]), clamp_channel(value[2]))


def _validate_dimensions(width: int, height: int) -> None:
    if isinstance(width, bool) or isinstance(height, bool) or not isinstance(width, int) or not isinstance(height, int):
        raise PyGpuTypeError(f"buffer dimensions must be ints, got width={width!r}, height={height!r}")
    if width <= 0 or height <= 0:
        raise PyGpuValueError(f"buffer dimensions must be positive, got width={width}, height={height}")
    if max(width, height) > MAX_IMAGE_SIDE:
        raise PyGpuValueError(
            f"buffer dimensions {width}x{height} exceed the largest supported side ({MAX_IMAGE_SIDE} px); "
            "render in tiles or at a lower resolution"
        )


@dataclass
class FrameBuffer:
    """A row-major RGB byte buffer: ``pixels[(y * width + x) * 3 + channel]``, row 0 at the top."""

    width: int
    height: int
    pixels: bytearray = field(repr=False)

    def __post_init__(self) -> None:
        _validate_dimensions(self.width, self.height)
        expected = self.width * self.height * 3
        if len(self.pixels) != expected:
            raise PyGpuValueError(f"frame buffer requires {expected} bytes, got {len(self.pixels)}")

    @classmethod
    def new(cls, width: int, height: int, fill: ColorLike = (0, 0, 0)) -> "FrameBuffer":
        _validate_dimensions(width, height)
        buffer = cls(width, height, bytearray(width * height * 3))
        buffer.clear(fill)
        return buffer

    def clear(self, color: ColorLike = (0, 0, 0)) -> None:
        r, g, b = as_rgb(color)
        self.pixels[:] = bytes((r, g, b)) * (self.width * self.height)

    def index(self, x: int, y: int) -> int:
        if not (0 <= x < self.width and 0 <= y < self.height):
            raise IndexError(f"pixel coordinate out of bounds: {(x, y)}")
        return (y * self.width + x) * 3

    def set_pixel(self, x: int, y: int, color: ColorLike) -> None:
        """Set one pixel; coordinates outside the buffer are ignored (as in 0.0.1)."""
        if 0 <= x < self.width and 0 <= y < self.height:
            offset = (y * self.width + x) * 3
            self.pixels[offset : offset + 3] = bytes(as_rgb(color))

    def get_pixel(self, x: int, y: int) -> ColorLike:
        offset = self.index(x, y)
        return (self.pixels[offset], self.pixels[offset + 1], self.pixels[offset + 2])

    # ---- array interop ----------------------------------------------------------------------
    def to_numpy(self):
        """uint8 numpy array ``[H, W, 3]`` (a copy)."""
        return np.frombuffer(bytes(self.pixels), dtype=np.uint8).reshape(self.height, self.width, 3).copy()

    def to_tensor(self, device=None):
        """uint8 torch tensor ``[H, W, 3]`` (a copy) on ``device``."""
        return torch.from_numpy(self.to_numpy()).to(device) if device is not None else torch.from_numpy(self.to_numpy())

    @classmethod
    def from_frame(cls, frame: Frame, index: int = 0) -> "FrameBuffer":
        """Batch element ``index`` of a ``Frame`` (its first 3 channels, 8-bit by the raster rule)."""
        if not isinstance(frame, Frame):
            raise PyGpuTypeError(f"FrameBuffer.from_frame: `frame` must be a py_gpu.Frame, got {type(frame).__name__}")
        if frame.image.shape[-1] < 3:
            raise PyGpuValueError(f"FrameBuffer.from_frame: needs 3 color channels, image has {frame.image.shape[-1]}")
        if not 0 <= index < frame.batch_size:
            raise PyGpuValueError(f"FrameBuffer.from_frame: `index` {index} out of range for batch size {frame.batch_size}")
        return cls.from_numpy(frame.to_uint8()[index, ..., :3].cpu().numpy())

    @classmethod
    def from_numpy(cls, array) -> "FrameBuffer":
        """Build from a uint8 ``[H, W, 3]`` array (numpy or anything ``np.asarray`` accepts)."""
        arr = np.asarray(array)
        if arr.dtype != np.uint8:
            raise PyGpuTypeError(f"FrameBuffer.from_numpy: `array` must be uint8, got {arr.dtype}")
        if arr.ndim != 3 or arr.shape[2] != 3:
            raise PyGpuValueError(f"FrameBuffer.from_numpy: `array` must have shape [H, W, 3], got {arr.shape}")
        height, width = arr.shape[:2]
        return cls(int(width), int(height), bytearray(np.ascontiguousarray(arr).tobytes()))

    # ---- files --------------------------------------------------------------------------------
    def to_rgb_bytes(self) -> bytes:
        return bytes(self.pixels)

    def to_ppm_bytes(self) -> bytes:
        header = f"P6\n{self.width} {self.height}\n255\n".encode("ascii")
        return header + self.to_rgb_bytes()

    def to_ppm(self, path: str | Path) -> None:
        Path(path).write_bytes(self.to_ppm_bytes())

    def to_png_bytes(self) -> bytes:
        """PNG file contents (pillow when installed, a small built-in encoder otherwise)."""
        return encode_png(self.to_numpy())

    def to_png(self, path: str | Path) -> None:
        Path(path).write_bytes(self.to_png_bytes())


@dataclass
class DepthBuffer:
    """A row-major depth buffer where smaller values are closer."""

    width: int
    height: int
    values: list[float] = field(repr=False)

    def __post_init__(self) -> None:
        _validate_dimensions(self.width, self.height)
        expected = self.width * self.height
        if len(self.values) != expected:
            raise PyGpuValueError(f"depth buffer requires {expected} values, got {len(self.values)}")

    @classmethod
    def new(cls, width: int, height: int, fill: float = float("inf")) -> "DepthBuffer":
        _validate_dimensions(width, height)
        return cls(width, height, [fill] * (width * height))

    def clear(self, value: float = float("inf")) -> None:
        self.values[:] = [value] * (self.width * self.height)

    def to_numpy(self):
        """float64 numpy array ``[H, W]``."""
        return np.asarray(self.values, dtype=np.float64).reshape(self.height, self.width)

    @classmethod
    def from_numpy(cls, array) -> "DepthBuffer":
        arr = np.asarray(array, dtype=np.float64)
        if arr.ndim != 2:
            raise PyGpuValueError(f"DepthBuffer.from_numpy: `array` must have shape [H, W], got {arr.shape}")
        return cls(int(arr.shape[1]), int(arr.shape[0]), arr.ravel().tolist())
