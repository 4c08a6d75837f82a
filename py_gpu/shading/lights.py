"""Per-pixel lighting: ambient, directional and point lights; Lambert and Blinn-Phong; gamma.

All plain differentiable torch: gradients reach light colors/positions/directions, albedo,
normals, positions and material parameters given as tensors. Work is in linear RGB; apply
:func:`gamma_encode` last.

Shapes: points are ``[B, ...]`` (e.g. a G-buffer ``[B, H, W, 3]``); light parameters are
``[3]`` / scalars (shared) or ``[B, 3]`` / ``[B]`` (per batch element).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Union

import torch

from .._check import PyGpuTypeError, PyGpuValueError

__all__ = ["AmbientLight", "DirectionalLight", "PointLight", "Material", "shade", "gamma_encode", "gamma_decode"]

Vec = Union[Sequence[float], torch.Tensor]


@dataclass(frozen=True, eq=False)
class AmbientLight:
    """Uniform light from everywhere: adds ``color * intensity * albedo``."""

    color: Vec = (1.0, 1.0, 1.0)
    intensity: float | torch.Tensor = 0.2


@dataclass(frozen=True, eq=False)
class DirectionalLight:
    """Light from infinitely far away. ``direction`` is where the light *travels* (from the light
    toward the scene), in world space; it need not be unit length."""

    direction: Vec = (0.0, -1.0, -1.0)
    color: Vec = (1.0, 1.0, 1.0)
    intensity: float | torch.Tensor = 1.0


@dataclass(frozen=True, eq=False)
class PointLight:
    """Light from ``position`` (world space), attenuated by ``1 / (c + l d + q d^2)`` with
    ``attenuation = (c, l, q)`` and ``d`` the distance."""

    position: Vec = (0.0, 2.0, 2.0)
    color: Vec = (1.0, 1.0, 1.0)
    intensity: float | torch.Tensor = 1.0
    attenuation: tuple[float, float, float] = (1.0, 0.0, 0.0)


@dataclass(frozen=True, eq=False)
class Material:
    """Blinn-Phong surface parameters (the albedo comes from textures or vertex colors).

    Attributes:
        specular: float or ``[3]`` specular color/strength. 0 gives Lambert.
        shininess: Blinn-Phong exponent (> 0).
    """

    specular: float | Vec = 0.25
    shininess: float | torch.Tensor = 32.0


def _param(value, like: torch.Tensor, ndim: int, channels: int | None, where: str, name: str) -> torch.Tensor:
    """A light/material parameter as a tensor broadcastable to ``[B, ..., channels]`` (``ndim`` dims)."""
    t = value if isinstance(value, torch.Tensor) else torch.as_tensor(value, dtype=like.dtype)
    if not t.is_floating_point():
        t = t.to(like.dtype)
    t = t.to(device=like.device, dtype=like.dtype)
    if channels is None:  # scalar-ish: [] or [B]
        if t.dim() > 1:
            raise PyGpuValueError(f"{where}: `{name}` must be a number or [B], got {tuple(t.shape)}")
        t = t.reshape(-1, *([1] * (ndim - 1)))
        return t
    if t.dim() == 0:
        t = t.expand(channels)
    if t.shape[-1] != channels or t.dim() > 2:
        raise PyGpuValueError(f"{where}: `{name}` must have shape [{channels}] or [B, {channels}], got {tuple(t.shape)}")
    return t.reshape(-1, *([1] * (ndim - 2)), channels)


def _unit(v: torch.Tensor) -> torch.Tensor:
    return v / v.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def shade(albedo: torch.Tensor, normals: torch.Tensor, positions: torch.Tensor, eye: torch.Tensor, lights: Sequence,
          *, model: str = "blinn_phong", material: Material | None = None, two_sided: bool = True) -> torch.Tensor:
    """Light surface points.

    Args:
        albedo: float ``[B, ..., C]`` diffuse color (linear RGB, C >= 3; channels past 3 pass through).
        normals: float ``[B, ..., 3]`` surface normals in world space (normalized here).
        positions: float ``[B, ..., 3]`` world positions of the points.
        eye: float ``[B, 3]`` or ``[3]`` camera centers (for specular and two-sided lighting).
        lights: ``AmbientLight`` / ``DirectionalLight`` / ``PointLight`` objects.
        model: ``"lambert"`` (diffuse only) or ``"blinn_phong"`` (diffuse + specular).
        material: specular strength and shininess (Blinn-Phong); default ``Material()``.
        two_sided: flip normals that face away from the camera (so the inside of a box is lit).

    Returns:
        float ``[B, ..., C]`` linear color ``albedo * (ambient + sum diffuse) + sum specular``.
    """
    where = "shade"
    if model not in ("lambert", "blinn_phong"):
        raise PyGpuValueError(f"{where}: `model` must be 'lambert' or 'blinn_phong', got {model!r}")
    for name, t in (("albedo", albedo), ("normals", normals), ("positions", positions)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise PyGpuTypeError(f"{where}: `{name}` must be a float tensor")
    if normals.shape[-1] != 3 or positions.shape[-1] != 3 or albedo.shape[-1] < 3:
        raise PyGpuValueError(f"{where}: need normals/positions [..., 3] and albedo [..., C>=3], got "
                              f"{tuple(normals.shape)}, {tuple(positions.shape)}, {tuple(albedo.shape)}")
    mat = material or Material()
    nd = positions.dim()
    rgb = albedo[..., :3]
    n = _unit(normals)
    e = _param(eye, positions, nd, 3, where, "eye")
    view = _unit(e - positions)  # toward the camera
    if two_sided:
        n = torch.where((n * view).sum(-1, keepdim=True) < 0, -n, n)
    diffuse = torch.zeros_like(rgb)
    specular = torch.zeros_like(rgb)
    ks = _param(mat.specular, positions, nd, 3, where, "material.specular") if model == "blinn_phong" else None
    shin = _param(mat.shininess, positions, nd, None, where, "material.shininess") if model == "blinn_phong" else None
    for light in lights:
        if isinstance(light, AmbientLight):
            diffuse = diffuse + _param(light.color, positions, nd, 3, where, "color") * \
                _param(light.intensity, positions, nd, None, where, "intensity")
            continue
        if isinstance(light, DirectionalLight):
            to_light = -_unit(_param(light.direction, positions, nd, 3, where, "direction"))
            scale = _param(light.intensity, positions, nd, None, where, "intensity")
        elif isinstance(light, PointLight):
            delta = _param(light.position, positions, nd, 3, where, "position") - positions
            dist = delta.norm(dim=-1, keepdim=True).clamp_min(1e-12)
            to_light = delta / dist
            c, l, q = light.attenuation
            scale = _param(light.intensity, positions, nd, None, where, "intensity") / (c + l * dist + q * dist * dist)
        else:
            raise PyGpuTypeError(f"{where}: unknown light {type(light).__name__}; use AmbientLight, DirectionalLight, PointLight")
        radiance = _param(light.color, positions, nd, 3, where, "color") * scale
        ndl = (n * to_light).sum(-1, keepdim=True)
        lit = ndl.clamp_min(0.0)
        diffuse = diffuse + radiance * lit
        if model == "blinn_phong":
            h = _unit(to_light + view)
            ndh = (n * h).sum(-1, keepdim=True).clamp_min(0.0)
            spec = torch.where(ndl > 0, ndh.clamp_min(1e-12) ** shin, torch.zeros_like(ndh))
            specular = specular + radiance * ks * spec
    out = rgb * diffuse + specular
    if albedo.shape[-1] > 3:
        out = torch.cat([out, albedo[..., 3:]], -1)
    return out


def gamma_encode(color: torch.Tensor, gamma: float = 2.2) -> torch.Tensor:
    """Linear -> display: ``clamp(c, 0, 1) ** (1 / gamma)`` (gradient-safe at 0). ``gamma=1`` only clamps."""
    if not gamma > 0:
        raise PyGpuValueError(f"gamma_encode: `gamma` must be > 0, got {gamma}")
    c = color.clamp(0.0, 1.0)
    if gamma == 1.0:
        return c
    return torch.where(c > 0, c.clamp_min(1e-12) ** (1.0 / gamma), torch.zeros_like(c))


def gamma_decode(color: torch.Tensor, gamma: float = 2.2) -> torch.Tensor:
    """Display -> linear: ``clamp(c, 0, 1) ** gamma`` (for texture images stored gamma-encoded)."""
    if not gamma > 0:
        raise PyGpuValueError(f"gamma_decode: `gamma` must be > 0, got {gamma}")
    return color.clamp(0.0, 1.0) ** gamma
