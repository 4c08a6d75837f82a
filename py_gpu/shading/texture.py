"""Texture sampling: nearest, bilinear and trilinear (mipmapped) filtering, repeat/clamp wrapping,
texture atlases. Plain differentiable torch.

Conventions:

- A texture is float ``[Ht, Wt, C]`` or ``[B, Ht, Wt, C]``, row 0 at the **top** (as an image file).
- UV ``(u, v)``: u to the right, **v up** (``v = 0`` is the bottom row, as in OBJ and OpenGL).
  Texel ``(row i, column j)`` covers ``u in [j/Wt, (j+1)/Wt]``, ``v in [1 - (i+1)/Ht, 1 - i/Ht]``;
  its center is sampled exactly.
- Gradients flow to the texture values and, through the bilinear weights, to the UVs. The
  mipmap level of detail is chosen without gradient (as on GPUs, it is a discrete choice).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .._check import PyGpuTypeError, PyGpuValueError, check_finite, check_float

__all__ = ["Texture", "sample_texture", "build_mipmaps", "uv_derivatives", "atlas_uv"]

_FILTERS = ("nearest", "bilinear", "trilinear")
_WRAPS = ("repeat", "clamp")


def build_mipmaps(texture: torch.Tensor, max_levels: int | None = None) -> list[torch.Tensor]:
    """Mip pyramid of float ``[B, Ht, Wt, C]``: level 0 is ``texture``, each next level halves
    both sides (box filter, area-averaged for odd sizes) down to 1x1. Differentiable."""
    levels = [texture]
    x = texture.permute(0, 3, 1, 2)  # [B, C, Ht, Wt]
    while (x.shape[-1] > 1 or x.shape[-2] > 1) and (max_levels is None or len(levels) < max_levels):
        h, w = max(1, x.shape[-2] // 2), max(1, x.shape[-1] // 2)
        x = F.adaptive_avg_pool2d(x, (h, w))
        levels.append(x.permute(0, 2, 3, 1))
    return levels


class Texture:
    """A texture image with its mip pyramid built on first use and cached.

    ``image``: float ``[Ht, Wt, C]`` or ``[B, Ht, Wt, C]``. The cache is rebuilt when the image
    requires grad (so gradients reach it) or was modified in place.
    """

    def __init__(self, image: torch.Tensor, *, filter: str = "bilinear", wrap: str = "repeat"):
        self.image = _check_texture("Texture", image)
        self.filter = _check_choice("Texture", "filter", filter, _FILTERS)
        self.wrap = _check_choice("Texture", "wrap", wrap, _WRAPS)
        self._mips: list[torch.Tensor] | None = None
        self._version = -1
        #: how many times the pyramid was built (tests use it to prove caching)
        self.builds = 0

    def mipmaps(self) -> list[torch.Tensor]:
        if self.image.requires_grad:
            self.builds += 1
            return build_mipmaps(self.image)
        if self._mips is None or self._version != self.image._version:
            self._mips = build_mipmaps(self.image)
            self._version = self.image._version
            self.builds += 1
        return self._mips

    def sample(self, uv: torch.Tensor, *, uv_grad: torch.Tensor | None = None, lod: torch.Tensor | None = None,
               filter: str | None = None) -> torch.Tensor:
        """:func:`sample_texture` with this texture's filter and wrap mode (``filter`` overrides)."""
        return sample_texture(self, uv, filter=filter or self.filter, wrap=self.wrap, uv_grad=uv_grad, lod=lod)


def _check_choice(where, name, value, choices):
    if value not in choices:
        raise PyGpuValueError(f"{where}: `{name}` must be one of {choices}, got {value!r}")
    return value


def _check_texture(where: str, texture) -> torch.Tensor:
    """The texture as a float ``[B, Ht, Wt, C]`` tensor: uint8 texels become ``texel / 255``;
    channels-first images and NaN/inf texels are refused."""
    if not isinstance(texture, torch.Tensor):
        raise PyGpuTypeError(f"{where}: `texture` must be a tensor or Texture, got {type(texture).__name__}")
    if texture.dtype == torch.uint8:
        texture = texture.to(torch.float32) / 255.0
    check_float(where, "texture", texture)
    shape = tuple(texture.shape)
    if texture.dim() in (3, 4) and shape[-3] in (1, 2, 3, 4) and shape[-1] > 4:
        raise PyGpuValueError(
            f"{where}: `texture` of shape {shape} looks channels-first; textures are channels-last "
            f"[Ht, Wt, C] or [B, Ht, Wt, C] (use texture.permute(1, 2, 0) or .permute(0, 2, 3, 1))"
        )
    if texture.dim() == 3:
        texture = texture.unsqueeze(0)
    if texture.dim() != 4 or texture.shape[1] < 1 or texture.shape[2] < 1 or texture.shape[3] < 1:
        raise PyGpuValueError(f"{where}: `texture` must have shape [Ht, Wt, C] or [B, Ht, Wt, C], got {shape}")
    check_finite(where, "texture", texture)
    return texture


def _wrap_index(i: torch.Tensor, n: int, wrap: str) -> torch.Tensor:
    return torch.remainder(i, n) if wrap == "repeat" else i.clamp(0, n - 1)


def _fetch(tex: torch.Tensor, row: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
    """Texels of ``tex [B, Ht, Wt, C]`` at integer ``row``/``col`` ``[B, N]`` -> ``[B, N, C]``."""
    B, H, W, C = tex.shape
    flat = tex.reshape(B, H * W, C)
    idx = row * W + col
    return torch.gather(flat, 1, idx[..., None].expand(-1, -1, C))


def _sample_level(tex: torch.Tensor, u: torch.Tensor, v: torch.Tensor, mode: str, wrap: str) -> torch.Tensor:
    """Sample ``tex [B, Ht, Wt, C]`` at ``u, v`` ``[B, N]`` -> ``[B, N, C]``."""
    _, H, W, _ = tex.shape
    x = u * W - 0.5  # continuous texel coordinates: texel centers at integers
    y = (1.0 - v) * H - 0.5
    if mode == "nearest":
        col = _wrap_index(torch.floor(x + 0.5).long(), W, wrap)
        row = _wrap_index(torch.floor(y + 0.5).long(), H, wrap)
        return _fetch(tex, row, col)
    x0f, y0f = torch.floor(x.detach()), torch.floor(y.detach())
    fx, fy = (x - x0f)[..., None], (y - y0f)[..., None]
    x0, y0 = x0f.long(), y0f.long()
    c0, c1 = _wrap_index(x0, W, wrap), _wrap_index(x0 + 1, W, wrap)
    r0, r1 = _wrap_index(y0, H, wrap), _wrap_index(y0 + 1, H, wrap)
    top = _fetch(tex, r0, c0) * (1 - fx) + _fetch(tex, r0, c1) * fx
    bottom = _fetch(tex, r1, c0) * (1 - fx) + _fetch(tex, r1, c1) * fx
    return top * (1 - fy) + bottom * fy


def _trilinear(mips: list[torch.Tensor], u: torch.Tensor, v: torch.Tensor, level: torch.Tensor, wrap: str) -> torch.Tensor:
    """Bilinear samples of the two mip levels around ``level`` ``[B, N]``, blended by its fraction.

    Each level is sampled only at the points that use it (for an unbatched texture), so the
    cost is two bilinear lookups per point whatever the number of levels.
    """
    lo = torch.floor(level).long()
    frac = level - lo.to(level.dtype)
    zero = torch.zeros_like(frac)
    out = torch.zeros(*u.shape, mips[0].shape[-1], dtype=u.dtype, device=u.device)
    for k, mip in enumerate(mips):
        w = torch.where(lo == k, 1 - frac, zero) + torch.where(lo + 1 == k, frac, zero)  # [B, N]
        if mip.shape[0] == 1 and u.shape[0] == 1:
            idx = torch.nonzero(w[0] > 0).squeeze(1)
            if idx.numel():
                sample = _sample_level(mip, u[:, idx], v[:, idx], "bilinear", wrap)
                out = out.index_add(1, idx, w[:, idx, None] * sample)
        elif bool((w > 0).any()):
            out = out + w[..., None] * _sample_level(mip, u, v, "bilinear", wrap)
    return out


def uv_derivatives(uv: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Screen-space UV derivatives of a UV image by finite differences.

    Args:
        uv: float ``[B, H, W, 2]`` UVs per pixel.
        mask: optional bool ``[B, H, W]``: pixels with valid UVs. A difference is taken only
            between two valid pixels (forward, else backward); otherwise it is 0.

    Returns:
        float ``[B, H, W, 4]``: ``(du/dx, dv/dx, du/dy, dv/dy)`` per pixel (x right, y down). No gradient.
    """
    uv = uv.detach()
    if mask is None:
        mask = torch.ones(uv.shape[:-1], dtype=torch.bool, device=uv.device)

    def along(dim: int) -> torch.Tensor:
        n = uv.shape[dim]
        if n < 2:
            return torch.zeros_like(uv)
        d = uv.narrow(dim, 1, n - 1) - uv.narrow(dim, 0, n - 1)  # between i and i+1
        ok = (mask.narrow(dim, 1, n - 1) & mask.narrow(dim, 0, n - 1))[..., None]
        d = torch.where(ok, d, torch.zeros_like(d))
        okf = ok.to(uv.dtype)
        pad_shape = list(d.shape)
        pad_shape[dim] = 1
        zero = torch.zeros(pad_shape, dtype=uv.dtype, device=uv.device)
        fwd, fwd_ok = torch.cat([d, zero], dim), torch.cat([okf, zero[..., :1]], dim)
        bwd = torch.cat([zero, d], dim)
        return torch.where(fwd_ok > 0, fwd, bwd)

    return torch.cat([along(2), along(1)], -1)


def sample_texture(texture, uv: torch.Tensor, *, filter: str = "bilinear", wrap: str = "repeat",
                   uv_grad: torch.Tensor | None = None, lod: torch.Tensor | None = None) -> torch.Tensor:
    """Sample a texture at UV coordinates.

    Args:
        texture: float ``[Ht, Wt, C]`` or ``[B, Ht, Wt, C]`` tensor, or a :class:`Texture` (whose
            mip pyramid is cached).
        uv: float ``[..., 2]`` UVs (v up). With a batched texture the first dim of ``uv`` is ``B``.
        filter: ``"nearest"``, ``"bilinear"`` or ``"trilinear"`` (bilinear on the two nearest mip
            levels, blended by the fractional level of detail).
        wrap: ``"repeat"`` (tile) or ``"clamp"`` (edge texels extend).
        uv_grad: trilinear only: float ``[..., 4]`` screen derivatives ``(du/dx, dv/dx, du/dy, dv/dy)``
            (see :func:`uv_derivatives`). When omitted and ``uv`` is an image ``[B, H, W, 2]``, they
            are estimated by finite differences.
        lod: trilinear only: float ``[...]`` explicit level of detail (overrides ``uv_grad``).

    Returns:
        float ``[..., C]``, differentiable with respect to the texture and ``uv``.
    """
    where = "sample_texture"
    _check_choice(where, "filter", filter, _FILTERS)
    _check_choice(where, "wrap", wrap, _WRAPS)
    tex_obj = texture if isinstance(texture, Texture) else None
    tex = tex_obj.image if tex_obj is not None else _check_texture(where, texture)
    if not isinstance(uv, torch.Tensor):
        raise PyGpuTypeError(f"{where}: `uv` must be a tensor, got {type(uv).__name__}")
    check_float(where, "uv", uv)
    if uv.shape[-1:] != (2,):
        raise PyGpuValueError(f"{where}: `uv` must have shape [..., 2], got {tuple(uv.shape)}")
    check_finite(where, "uv", uv)
    for name, t in (("uv_grad", uv_grad), ("lod", lod)):
        if t is not None:
            if not isinstance(t, torch.Tensor):
                raise PyGpuTypeError(f"{where}: `{name}` must be a tensor, got {type(t).__name__}")
            check_float(where, name, t)
            check_finite(where, name, t)
    B = tex.shape[0]
    lead = uv.shape[:-1]
    if B > 1:
        if uv.dim() < 2 or uv.shape[0] != B:
            raise PyGpuValueError(f"{where}: a batched texture (B={B}) needs uv of shape [B, ..., 2], got {tuple(uv.shape)}")
        flat = uv.reshape(B, -1, 2)
    else:
        flat = uv.reshape(1, -1, 2)
    tex = tex.to(uv.dtype)
    u, v = flat[..., 0], flat[..., 1]
    if filter != "trilinear":
        out = _sample_level(tex, u, v, filter, wrap)
        return out.reshape(*lead, tex.shape[-1])

    mips = [m.to(uv.dtype) for m in (tex_obj.mipmaps() if tex_obj is not None else build_mipmaps(tex))]
    if lod is None:
        if uv_grad is None:
            if uv.dim() != 4:
                raise PyGpuValueError(f"{where}: trilinear filtering needs `uv_grad` or `lod` unless uv is an image [B, H, W, 2]")
            uv_grad = uv_derivatives(uv)
        g = uv_grad.detach().reshape(flat.shape[0], -1, 4)
        Ht, Wt = tex.shape[1], tex.shape[2]
        dx = torch.sqrt((g[..., 0] * Wt) ** 2 + (g[..., 1] * Ht) ** 2)
        dy = torch.sqrt((g[..., 2] * Wt) ** 2 + (g[..., 3] * Ht) ** 2)
        level = torch.log2(torch.maximum(dx, dy).clamp_min(1e-12))
    else:
        level = lod.detach().to(uv.dtype).reshape(flat.shape[0], -1)
    out = _trilinear(mips, u, v, level.clamp(0.0, len(mips) - 1), wrap)
    return out.reshape(*lead, tex.shape[-1])


def atlas_uv(uv: torch.Tensor, material_ids: torch.Tensor, rects: torch.Tensor, *, wrap: str = "repeat") -> torch.Tensor:
    """Map per-material UVs into a texture atlas.

    Args:
        uv: float ``[..., 2]`` UVs of each material's own ``[0, 1]^2`` square.
        material_ids: int64 ``[...]`` material of each sample (indexes ``rects``).
        rects: float ``[M, 4]`` ``(u0, v0, u1, v1)``: where material ``m``'s square lies in the atlas.
        wrap: ``"repeat"`` tiles inside the rect; ``"clamp"`` clamps to it.

    Returns:
        float ``[..., 2]`` atlas UVs ``rect_min + wrap(uv) * rect_size``. Sample them with ``wrap="clamp"``.
        Bilinear filtering reads neighbouring texels, so leave a gutter of a texel or two between rects.
    """
    where = "atlas_uv"
    _check_choice(where, "wrap", wrap, _WRAPS)
    check_float(where, "rects", rects)
    if rects.dim() != 2 or rects.shape[-1] != 4:
        raise PyGpuValueError(f"{where}: `rects` must have shape [M, 4], got {tuple(rects.shape)}")
    if material_ids.shape != uv.shape[:-1]:
        raise PyGpuValueError(f"{where}: `material_ids` shape {tuple(material_ids.shape)} must be uv's {tuple(uv.shape[:-1])}")
    if material_ids.numel() and (int(material_ids.min()) < 0 or int(material_ids.max()) >= rects.shape[0]):
        raise PyGpuValueError(f"{where}: material id out of range for {rects.shape[0]} rects")
    r = rects.to(uv.dtype)[material_ids]  # [..., 4]
    local = uv - torch.floor(uv.detach()) if wrap == "repeat" else uv.clamp(0.0, 1.0)
    return r[..., :2] + local * (r[..., 2:] - r[..., :2])

