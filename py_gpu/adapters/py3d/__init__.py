"""Render py_3d scenes (``pip install "py_gpu[py3d]"``, import name ``py_3d``) through py_gpu.

``scene_to_triangle_batch`` turns a scene into one clip-space ``TriangleBatch`` with flat, lit
per-face colors (py_3d's own material and light model, evaluated per face). The front end
clips it against the near plane, so triangles that reach behind the camera are cut, not dropped.
``Py3DRasterRenderer`` is the renderer-compatible adapter py_gpu 0.0.1 shipped, with the same
constructor and ``render(scene, camera, settings, target=None)`` call.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import numpy as np
import torch

from .._check import BackendUnavailableError
from ..compat import FrameBuffer, RasterBatch, ScreenTriangle, ScreenVertex, select_backend
from ..contracts import TriangleBatch
from ..frontend import near_clip, render


def _py3d():
    try:
        import py_3d
    except ImportError as exc:
        raise BackendUnavailableError(
            'the py_3d bridge needs the py_3d package: pip install "py_gpu[py3d]" (PyPI name py3dengine)'
        ) from exc
    except AttributeError as exc:
        # py3dengine 0.0.4 declares Win32 window structs at import time and needs
        # ctypes.wintypes.HCURSOR, which CPython defines only on Windows. Give it the alias Windows
        # uses (HCURSOR is a HANDLE) and import again; nothing else is changed.
        import ctypes.wintypes as wintypes

        if "HCURSOR" not in str(exc) or hasattr(wintypes, "HCURSOR"):
            raise
        wintypes.HCURSOR = wintypes.HANDLE
        for name in [m for m in sys.modules if m == "py_3d" or m.startswith("py_3d.")]:
            del sys.modules[name]
        import py_3d
    return py_3d


@dataclass(frozen=True)
class _View:
    """py_3d camera conventions: camera space (right, up, forward), +forward into the screen."""

    basis: np.ndarray  # [3, 3] rows: right, true_up, forward
    position: np.ndarray  # [3]
    focal: float
    aspect: float
    near: float
    far: float

    @classmethod
    def of(cls, camera, width: int, height: int) -> "_View":
        right, up, forward = camera.basis()
        basis = np.array([[right.x, right.y, right.z], [up.x, up.y, up.z], [forward.x, forward.y, forward.z]])
        pos = np.array([camera.position.x, camera.position.y, camera.position.z])
        focal = 1.0 / math.tan(math.radians(camera.fov_degrees) / 2.0)
        return cls(basis, pos, focal, width / height, float(camera.near), float(camera.far))

    def to_clip(self, world: np.ndarray) -> np.ndarray:
        """float64 ``[N, 3]`` world points -> ``[N, 4]`` clip space; NDC depth in [0, 1] from near to far."""
        cam = (world - self.position) @ self.basis.T
        x = cam[:, 0] * self.focal / self.aspect
        y = cam[:, 1] * self.focal
        z = self.far * (cam[:, 2] - self.near) / (self.far - self.near)
        return np.stack([x, y, z, cam[:, 2]], axis=1)


def scene_to_triangle_batch(scene, camera, settings, *, dtype=torch.float32, device=None) -> TriangleBatch:
    """A py_3d scene as a ``B = 1`` clip-space batch with flat lit face colors in [0, 1].

    Lines (``Line3``) are not included; ``scene_to_raster_batch`` draws them as screen-space quads.
    """
    _py3d()
    view = _View.of(camera, settings.width, settings.height)
    corners, colors = [], []
    wireframe = getattr(settings, "wireframe", False)
    for obj in scene.objects:
        if _is_line(obj):
            continue
        for tri in _triangles_of(obj, settings):
            if _too_far(tri, camera, settings) or _facing_away(tri, camera, settings):
                continue
            color = _flat_color(tri, settings) if wireframe else _lit_color(scene, tri, camera, settings)
            corners.append([(p.x, p.y, p.z) for p in (tri.a, tri.b, tri.c)])
            colors.append(color)
    world = np.asarray(corners, dtype=np.float64).reshape(-1, 3)
    clip = view.to_clip(world) if len(world) else np.zeros((0, 4))
    n = len(corners)
    verts = torch.from_numpy(clip).to(dtype=dtype, device=device).reshape(1, n * 3, 4)
    faces = torch.arange(n * 3, device=device).reshape(n, 3)
    face_colors = torch.tensor(colors, dtype=torch.float64).reshape(1, n, 3).div(255.0).to(dtype=dtype, device=device)
    return TriangleBatch(verts, faces, face_colors=face_colors)


def scene_to_raster_batch(scene, camera, settings, *, wire_width: float = 1.5) -> RasterBatch:
    """py_gpu 0.0.1's call: the scene projected to a screen-space ``RasterBatch`` (seed format).

    Triangles are clipped against the near plane first (0.0.1 dropped any triangle with a vertex
    behind the camera). Lines become two-triangle quads ``wire_width`` pixels wide.
    """
    batch = scene_to_triangle_batch(scene, camera, settings, dtype=torch.float64)
    result = near_clip(batch, (settings.height, settings.width))
    clipped = result.batch
    screen = clipped.screen_vertices((settings.height, settings.width))[0].numpy()
    cam_depth = clipped.vertices[0, :, 3].numpy()  # seed depth is camera-space distance, as in 0.0.1
    rgb = np.floor(clipped.face_colors[0].numpy() * 255.0 + 0.5).astype(int).tolist()
    tris = []
    for (i0, i1, i2), color in zip(clipped.faces.tolist(), rgb):
        a, b, c = (ScreenVertex(float(screen[i, 0]), float(screen[i, 1]), float(cam_depth[i])) for i in (i0, i1, i2))
        tris.append(ScreenTriangle(a, b, c, tuple(color)))
    view = _View.of(camera, settings.width, settings.height)
    for obj in scene.objects:
        if _is_line(obj):
            tris.extend(_line_quad(view, obj, settings, wire_width))
    return RasterBatch(tris)


@dataclass
class Py3DRasterRenderer:
    """Renderer-compatible adapter for py_3d's ``RenderEngine`` (py_gpu 0.0.1 API).

    With ``reference_compatible=True`` (the default, as in 0.0.1) it delegates to py_3d's own
    reference renderer for exact visual parity. With ``False`` it renders through a py_gpu
    backend (``prefer_backend``, default ``"auto"``): flat per-face lighting, near-plane clipping,
    the exact raster rule.
    """

    backend_impl: object | None = None
    reference_compatible: bool = True
    prefer_backend: str = "auto"
    name: str = "py_gpu py_3d batch renderer"
    backend: str = "py_gpu"

    def __post_init__(self) -> None:
        if self.backend_impl is None and not self.reference_compatible:
            self.backend_impl = select_backend(self.prefer_backend)

    def render(self, scene, camera, settings, target=None):
        py_3d = _py3d()
        if self.reference_compatible:
            return py_3d.CPURenderer(cache_static_geometry=False).render(scene, camera, settings, target)
        if self.backend_impl is None:
            self.backend_impl = select_backend(self.prefer_backend)
        background = tuple(c / 255.0 for c in _rgb(settings.background))
        lines = [obj for obj in scene.objects if _is_line(obj)]
        if lines:  # lines need the seed path's screen-space quads
            fb = self.backend_impl.render(scene_to_raster_batch(scene, camera, settings), settings.width, settings.height,
                                          background=_rgb(settings.background))
        else:
            batch = scene_to_triangle_batch(scene, camera, settings)
            frame = render(batch, (settings.height, settings.width), backend=self.backend_impl, background=background)
            fb = FrameBuffer.from_frame(frame)
        return frame_to_py3d_pixel_buffer(fb, target)


def frame_to_py3d_pixel_buffer(frame: FrameBuffer, target=None):
    """A py_gpu ``FrameBuffer`` as a py_3d ``PixelBuffer`` (written into ``target`` when given)."""
    PixelBuffer = _py3d().PixelBuffer
    if target is not None:
        if target.width != frame.width or target.height != frame.height:
            raise ValueError("target buffer dimensions must match rendered frame")
        target.pixels = PixelBuffer.from_rgb_bytes(frame.width, frame.height, frame.pixels).pixels
        return target
    return PixelBuffer.from_rgb_bytes(frame.width, frame.height, frame.pixels)


# ---- py_3d scene walking and its material model -----------------------------------------------
def _triangles_of(obj, settings):
    py_3d = _py3d()
    if isinstance(obj, py_3d.Triangle):
        return (obj,)
    if isinstance(obj, py_3d.Mesh):
        return obj.to_triangles()
    if isinstance(obj, (py_3d.BlobSurface, py_3d.Bowl, py_3d.Capsule, py_3d.Sphere)):
        return obj.to_triangles(segments=settings.sphere_segments, rings=settings.sphere_rings)
    to_triangles = getattr(obj, "to_triangles", None)
    return tuple(to_triangles()) if callable(to_triangles) else ()


def _is_line(obj) -> bool:
    try:
        from py_3d import Line3
    except ImportError:
        return False
    return isinstance(obj, Line3)


def _too_far(tri, camera, settings) -> bool:
    limit = getattr(settings, "max_render_distance", None)
    return limit is not None and tri.center().distance_to(camera.position) > limit


def _facing_away(tri, camera, settings) -> bool:
    if not getattr(settings, "cull_backfaces", False):
        return False
    center = tri.center()
    return tri.normal().dot((camera.position - center).normalized()) <= 0.0


def _rgb(color) -> tuple[int, int, int]:
    color = getattr(color, "color", color)
    if callable(getattr(color, "to_tuple", None)):
        return tuple(color.to_tuple())
    if all(hasattr(color, k) for k in "rgb"):
        return (color.r, color.g, color.b)
    return (int(color[0]), int(color[1]), int(color[2]))


def _gamma(rgb, gamma: float):
    gamma = max(0.01, float(gamma))
    if abs(gamma - 1.0) < 1e-9:
        return tuple(rgb)
    return tuple(max(0, min(255, int(round((c / 255.0) ** (1.0 / gamma) * 255.0)))) for c in rgb)


def _mean_uv(tri):
    uvs = [uv or (0.0, 0.0) for uv in (tri.uv_a, tri.uv_b, tri.uv_c)]
    return (sum(u for u, _ in uvs) / 3.0, sum(v for _, v in uvs) / 3.0)


def _flat_color(tri, settings):
    material = tri.material
    if getattr(material, "texture", None) is not None and tri.has_texture_coordinates():
        return _gamma(_rgb(material.color_at(_mean_uv(tri))), settings.gamma)
    rgb = _rgb(material.color)
    emission = getattr(material, "emission", None)
    if emission is not None:
        rgb = tuple(min(255, a + b) for a, b in zip(rgb, _rgb(emission)))
    return _gamma(rgb, getattr(settings, "gamma", 1.0))


def _lit_color(scene, tri, camera, settings):
    """Lambert + Blinn-Phong at the face center with py_3d's lights and ``Material.shade``."""
    material = tri.material
    center, normal = tri.center(), tri.normal()
    to_eye = (camera.position - center).normalized(normal)
    if getattr(settings, "two_sided_lighting", True) and normal.dot(to_eye) < 0.0:
        normal = -normal
    diffuse, specular = [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]
    shiny = getattr(material, "specular", 0.0) > 0.0 or getattr(material, "reflectivity", 0.0) > 0.0
    for light in getattr(scene, "lights", ()):
        if not callable(getattr(light, "sample", None)):
            continue
        s = light.sample(center)
        to_light = s.direction.normalized()
        lambert = max(0.0, normal.dot(to_light)) * s.intensity
        rgb = s.color.to_floats()
        for k in range(3):
            diffuse[k] += rgb[k] * lambert
        if shiny and lambert > 0.0:
            half = (to_light + to_eye).normalized(to_light)
            spec = max(0.0, normal.dot(half)) ** getattr(material, "shininess", 32.0) * s.intensity
            for k in range(3):
                specular[k] += rgb[k] * spec
    base = None
    if getattr(material, "texture", None) is not None and tri.has_texture_coordinates():
        base = material.color_at(_mean_uv(tri))
    color = material.shade(tuple(diffuse), ambient=getattr(settings, "ambient", 0.0), base_color=base,
                           specular_light=tuple(specular))
    return _gamma(_rgb(color), getattr(settings, "gamma", 1.0))


def _line_quad(view: _View, line, settings, width: float):
    ends = np.array([[line.start.x, line.start.y, line.start.z], [line.end.x, line.end.y, line.end.z]])
    clip = view.to_clip(ends)
    if (clip[:, 3] <= view.near).any():
        return ()
    sx = (clip[:, 0] / clip[:, 3] + 1.0) * settings.width / 2.0
    sy = (1.0 - clip[:, 1] / clip[:, 3]) * settings.height / 2.0
    dx, dy = sx[1] - sx[0], sy[1] - sy[0]
    length = math.hypot(dx, dy)
    if length <= 1e-9:
        return ()
    half = max(0.5, width * 0.5)
    nx, ny = -dy / length * half, dx / length * half
    z0, z1 = float(clip[0, 3]), float(clip[1, 3])
    a = ScreenVertex(sx[0] + nx, sy[0] + ny, z0)
    b = ScreenVertex(sx[0] - nx, sy[0] - ny, z0)
    c = ScreenVertex(sx[1] + nx, sy[1] + ny, z1)
    d = ScreenVertex(sx[1] - nx, sy[1] - ny, z1)
    color = _rgb(getattr(line, "material", line).color if hasattr(line, "material") else (255, 255, 255))
    return (ScreenTriangle(a, b, c, color), ScreenTriangle(c, b, d, color))


__all__ = ["Py3DRasterRenderer", "frame_to_py3d_pixel_buffer", "scene_to_raster_batch", "scene_to_triangle_batch"]
