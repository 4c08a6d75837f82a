"""Shading: turn Fragments into colors (interpolate, textures, lights, blending, compositing)."""

from .antialias import antialias, edge_topology
from .blend import blend, blend_weights, coverage, nearest_covering, silhouette
from .composite import (
    at_slot,
    background_tensor,
    composite_hard,
    composite_soft,
    render_soft,
    shade_fragments,
    shade_hard,
    shade_soft,
    slot_colors,
)
from .interpolate import gather_face, interpolate, interpolate_vertex
from .lights import AmbientLight, DirectionalLight, Material, PointLight, gamma_decode, gamma_encode, shade
from .texture import Texture, atlas_uv, sample_texture

__all__ = [
    "AmbientLight",
    "DirectionalLight",
    "Material",
    "PointLight",
    "Texture",
    "antialias",
    "at_slot",
    "atlas_uv",
    "background_tensor",
    "blend",
    "blend_weights",
    "composite_hard",
    "composite_soft",
    "coverage",
    "edge_topology",
    "gamma_decode",
    "gamma_encode",
    "gather_face",
    "interpolate",
    "interpolate_vertex",
    "nearest_covering",
    "render_soft",
    "sample_texture",
    "shade",
    "shade_fragments",
    "shade_hard",
    "shade_soft",
    "silhouette",
    "slot_colors",
]
