"""The world-space renderer: scene state, per-frame geometry and raster pass, shading pass."""

from .renderer import Renderer
from .scene import MeshHandle, RenderStats
from .shading import ATTACHMENTS

__all__ = ["ATTACHMENTS", "MeshHandle", "RenderStats", "Renderer"]
