"""Shading: turn Fragments into colors (interpolate, flat/vertex colors, blending)."""

from .flat import shade_hard

__all__ = ["shade_hard"]
