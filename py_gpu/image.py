"""8-bit image output: quantization by the raster rule and PNG encoding (pillow when installed);
the exact sRGB transfer functions."""

from __future__ import annotations

from binascii import crc32
from io import BytesIO
from pathlib import Path
from struct import pack
from zlib import compress

import numpy as np
import torch

from ._check import PyGpuTypeError, PyGpuValueError


def quantize(values: torch.Tensor) -> torch.Tensor:
    """Float color to uint8 by the raster rule: ``floor(clamp(c, 0, 1) * 255 + 0.5)``."""
    return torch.floor(values.clamp(0.0, 1.0) * 255.0 + 0.5).to(torch.uint8)


def srgb_to_linear(values: torch.Tensor) -> torch.Tensor:
    """Decode sRGB-encoded float values (``[0, 1]``, any shape) to linear light, by the exact
    piecewise sRGB transfer function (IEC 61966-2-1): ``c / 12.92`` for ``c <= 0.04045``, else
    ``((c + 0.055) / 1.055) ** 2.4``. An 8-bit texel of 128 decodes to 0.2158. Differentiable;
    values below 0 continue the linear segment."""
    if not isinstance(values, torch.Tensor) or not values.is_floating_point():
        raise PyGpuTypeError(f"srgb_to_linear: `values` must be a float tensor, got {getattr(values, 'dtype', type(values).__name__)}")
    curve = ((values.clamp_min(0.04045) + 0.055) / 1.055) ** 2.4
    return torch.where(values <= 0.04045, values / 12.92, curve)


def linear_to_srgb(values: torch.Tensor) -> torch.Tensor:
    """Encode linear float values (``[0, 1]``, any shape) as sRGB, the exact inverse of
    :func:`srgb_to_linear`: ``12.92 c`` for ``c <= 0.0031308``, else ``1.055 c ** (1/2.4) - 0.055``.
    Differentiable; values below 0 continue the linear segment."""
    if not isinstance(values, torch.Tensor) or not values.is_floating_point():
        raise PyGpuTypeError(f"linear_to_srgb: `values` must be a float tensor, got {getattr(values, 'dtype', type(values).__name__)}")
    curve = 1.055 * values.clamp_min(0.0031308) ** (1.0 / 2.4) - 0.055
    return torch.where(values <= 0.0031308, values * 12.92, curve)


def encode_png(pixels) -> bytes:
    """PNG file contents of a uint8 ``[H, W, 3]`` array; pillow when installed, else a built-in encoder."""
    arr = np.ascontiguousarray(np.asarray(pixels))
    if arr.dtype != np.uint8:
        raise PyGpuTypeError(f"encode_png: `pixels` must be uint8, got {arr.dtype}")
    if arr.ndim != 3 or arr.shape[2] != 3 or 0 in arr.shape:
        raise PyGpuValueError(f"encode_png: `pixels` must have shape [H, W, 3] with H, W > 0, got {arr.shape}")
    try:
        from PIL import Image  # optional: smaller files
    except ImportError:
        return _encode_png(arr)
    out = BytesIO()
    Image.fromarray(arr, "RGB").save(out, format="PNG")
    return out.getvalue()


def save_png(path: str | Path, pixels) -> None:
    """Write a uint8 ``[H, W, 3]`` array to ``path`` as PNG."""
    Path(path).write_bytes(encode_png(pixels))


def _encode_png(arr: np.ndarray) -> bytes:
    """Minimal truecolor PNG encoder (filter 0 on every row)."""
    height, width = arr.shape[:2]
    rows = np.concatenate([np.zeros((height, 1), dtype=np.uint8), arr.reshape(height, width * 3)], axis=1)
    return b"".join(
        [
            b"\x89PNG\r\n\x1a\n",
            _png_chunk(b"IHDR", pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)),
            _png_chunk(b"IDAT", compress(rows.tobytes())),
            _png_chunk(b"IEND", b""),
        ]
    )


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    checksum = crc32(kind + data) & 0xFFFFFFFF
    return pack(">I", len(data)) + kind + data + pack(">I", checksum)
