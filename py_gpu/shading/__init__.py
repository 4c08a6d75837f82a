"""Shading: turn Fragments into colors (interpolate, flat/vertex colors, blending)."""

from .blend import render_soft, silhouette
from .flat import shade_hard

__all__ = ["render_soft", "shade_hard", "silhouette"]
