"""Shading: turn Fragments into colors (interpolate, flat/vertex colors, blending)."""

from .blend import render_soft, silhouette
from .flat import shade_hard
from .lights import AmbientLight, DirectionalLight, Material, PointLight, gamma_decode, gamma_encode, shade
from .texture import Texture, atlas_uv, sample_texture

__all__ = [
    "AmbientLight",
    "DirectionalLight",
    "Material",
    "PointLight",
    "Texture",
    "atlas_uv",
    "gamma_decode",
    "gamma_encode",
    "render_soft",
    "sample_texture",
    "shade",
    "shade_hard",
    "silhouette",
]
