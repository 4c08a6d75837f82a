"""One frame of the bridge: py_3d's camera, the raster pass through py_gpu, shading, lines, text.

:class:`FrameRenderer` renders a py_3d scene the way ``CPURenderer`` does, step by step:

1. geometry: :class:`~.scene.SceneCache` gives the scene's cached meshes in draw order;
2. camera: :class:`View` is py_3d's ``_CameraProjector`` on tensors: camera space, NDC and
   the ``(ndc + 1) * (W - 1) / 2`` pixel mapping, depth = distance along the view axis;
3. faces: py_3d's rules (a triangle with a corner beyond ``far`` is dropped; ``max_render_distance``,
   ``cull_backfaces`` by the face normal, zero-area faces). A triangle reaching behind ``near`` is
   clipped there (py_gpu's front end) instead of dropped: the one intended difference;
4. raster: one screen-space ``TriangleBatch`` (corners at py_3d's pixel positions, depth
   interpolated on screen as py_3d does, faces in draw order so equal depths go to the earlier
   face) through ``py_gpu.frontend.rasterize_batch`` on any exact backend;
5. shading (:mod:`.shading`), per pixel, with py_3d's screen-space weights of each covered pixel;
6. lines and points (:mod:`.lines`), depth-tested against the triangles;
7. text: py_3d's own bulletin routines draw onto the returned ``PixelBuffer``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from ...compat import RasterBatch, ScreenTriangle, ScreenVertex
from ...contracts import TriangleBatch
from ...frontend import guard_band, near_clip, rasterize_batch, render_rgb8, resolve_backend
from ...settings import RasterSettings
from ...shading.interpolate import interpolate_vertex
from . import _py3d
from . import lines as ln
from . import shading as sh
from .scene import F64, FrameGeometry, SceneCache, SceneStats, vec_dot, vec_length, vec_normalized

#: Faces identified through an 8-bit RGB render (ids 1 .. 2**24 - 1); more take the Fragments path.
_MAX_PICK = 2**24 - 1

__all__ = ["BridgeStats", "FrameRenderer", "View", "scene_to_raster_batch", "scene_to_triangle_batch"]


@dataclass
class BridgeStats:
    """Counters of a ``Py3DRasterRenderer``'s py_gpu path.

    Attributes:
        frames: frames rendered by py_gpu; cpu_frames: frames handed to ``CPURenderer``.
        scene: the scene cache's counters (``conversions``, ``moves``, ``value_hits``,
            ``assemblies``, ``texture_uploads``).
    """

    scene: SceneStats
    frames: int = 0
    cpu_frames: int = 0


class View:
    """py_3d's ``_CameraProjector`` for a ``width`` x ``height`` image, on tensors (float64)."""

    def __init__(self, camera, width: int, height: int, device) -> None:
        right, up, forward = camera.basis()
        self.axes = ((right.x, right.y, right.z), (up.x, up.y, up.z), (forward.x, forward.y, forward.z))
        p = camera.position
        self.position = (p.x, p.y, p.z)
        self.eye = torch.tensor(self.position, dtype=F64, device=device)
        self.aspect = width / height
        self.focal = 1.0 / math.tan(math.radians(camera.fov_degrees) / 2.0)
        self.half_width = 0.5 * (width - 1)
        self.half_height = 0.5 * (height - 1)
        self.near, self.far = float(camera.near), float(camera.far)
        self.size = (height, width)

    def camera_space(self, points: torch.Tensor) -> torch.Tensor:
        """``[N, 3]`` world points -> ``[N, 3]`` (right, up, forward) coordinates, as ``relative.dot(axis)``."""
        rx = points[:, 0] - self.position[0]
        ry = points[:, 1] - self.position[1]
        rz = points[:, 2] - self.position[2]
        return torch.stack([rx * a[0] + ry * a[1] + rz * a[2] for a in self.axes], -1)

    def ndc(self, cam: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """NDC ``(x, y)`` of camera-space points (meaningful where the depth is positive)."""
        return (cam[:, 0] * self.focal / self.aspect) / cam[:, 2], (cam[:, 1] * self.focal) / cam[:, 2]

    def pixels(self, ndc_x: torch.Tensor, ndc_y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """py_3d's pixel mapping: ``((ndc_x + 1) * (W - 1) / 2, (1 - ndc_y) * (H - 1) / 2)``."""
        return (ndc_x + 1.0) * self.half_width, (1.0 - ndc_y) * self.half_height

    def visible(self, depth: torch.Tensor) -> torch.Tensor:
        """Where ``project`` gives a point: ``near <= depth <= far``."""
        return (depth >= self.near) & (depth <= self.far)


@dataclass(frozen=True)
class _Corners:
    """The frame's triangle corners seen through a ``View`` (``[3F]`` each, F = faces)."""

    cam: torch.Tensor  # [3F, 3] camera space
    x: torch.Tensor  # [3F] py_3d pixel x (valid where visible)
    y: torch.Tensor
    visible: torch.Tensor  # [3F] near <= depth <= far
    guarded: torch.Tensor  # [3F] |ndc| within the front end's guard band


@dataclass(frozen=True)
class _Faces:
    """Per-face decisions of one frame (bool/float ``[F]``)."""

    drawn: torch.Tensor  # py_3d draws it (all corners project)
    shown: torch.Tensor  # kept by max_render_distance
    direct: torch.Tensor  # rasterized as py_3d would (corners at py_3d's pixels)
    clipped: torch.Tensor  # reaches behind near (or far off screen): clipped by the front end
    view: torch.Tensor  # [F, 3] unit direction from the face center to the eye
    normal: torch.Tensor  # [F, 3] face normal flipped toward the eye for two-sided lighting


class FrameRenderer:
    """The py_gpu path of ``Py3DRasterRenderer``: backend, scene cache, fallback and counters."""

    def __init__(self, backend_impl=None, prefer_backend: str = "auto", *, device=None, fast_materials: bool = False):
        where = "Py3DRasterRenderer"
        self.backend = resolve_backend(where, prefer_backend if backend_impl is None else backend_impl)
        if device is None:
            device = getattr(self.backend, "device", None) or "cpu"
        self.device = torch.device(device)
        self.fast = fast_materials
        self.cache = SceneCache(self.device)
        self.stats = BridgeStats(self.cache.stats)
        self._cpu = None
        self._warned: set[str] = set()
        self._faces_cache: dict[int, torch.Tensor] = {}

    def clear_cache(self) -> None:
        self.cache.clear()
        self._faces_cache.clear()

    # ---- one frame -------------------------------------------------------------------------------------
    def render(self, scene, camera, settings, target=None):
        py_3d = _py3d()
        width, height = settings.width, settings.height
        if target is not None and (target.width != width or target.height != height):
            raise ValueError("target buffer dimensions must match render settings")
        lights, unsupported = sh.scene_lights(scene.lights)
        if unsupported:
            return self._on_cpu(unsupported, scene, camera, settings, target)
        self.stats.frames += 1
        geometry, line_objects = self.cache.frame(scene.objects, settings)
        view = View(camera, width, height, self.device)
        bg = settings.background
        image = torch.tensor((bg.r, bg.g, bg.b), dtype=torch.uint8, device=self.device).repeat(width * height, 1)
        strokes: list[ln.Samples] = []
        triangles = None
        if geometry.num_faces:
            corners = self._corners(geometry, view)
            faces = self._faces(geometry, view, corners, settings)
            if settings.wireframe:
                strokes.append(self._wireframe(geometry, view, corners, faces, settings))
            else:
                need_depth = bool(line_objects) or settings.edge_highlight
                triangles = self._triangles(geometry, view, corners, faces, lights, settings, need_depth)
                image[triangles.pixel] = triangles.color.to(torch.uint8)
                if settings.edge_highlight:
                    strokes.append(self._highlights(geometry, view, settings))
        strokes += [self._line_object(index, obj, view, settings) for index, obj in line_objects]
        if strokes:
            ln.composite(image, triangles, ln.Samples.cat(strokes))
        rgb = image.cpu().numpy().tobytes()
        buffer = py_3d.PixelBuffer.from_rgb_bytes(width, height, rgb)
        if target is not None:
            target.pixels = buffer.pixels
            buffer = target
        _draw_bulletins(py_3d, buffer, camera, scene)
        return buffer

    def _on_cpu(self, reasons, scene, camera, settings, target):
        for reason in reasons:
            if reason not in self._warned:
                self._warned.add(reason)
                warnings.warn(f"Py3DRasterRenderer: the scene has a {reason}; frames with it are rendered by "
                              "py_3d's CPURenderer (listed in Py3DRasterRenderer.capabilities.cpu_fallback)",
                              RuntimeWarning, stacklevel=4)
        if self._cpu is None:
            self._cpu = _py3d().CPURenderer()
        self.stats.cpu_frames += 1
        return self._cpu.render(scene, camera, settings, target)

    # ---- geometry -----------------------------------------------------------------------------------------
    def _corners(self, geometry: FrameGeometry, view: View) -> _Corners:
        cam = view.camera_space(geometry.corners)
        nx, ny = view.ndc(cam)
        x, y = view.pixels(nx, ny)
        limit = guard_band(view.size)
        return _Corners(cam, x, y, view.visible(cam[:, 2]), (nx.abs() <= limit) & (ny.abs() <= limit))

    def _faces(self, geometry: FrameGeometry, view: View, corners: _Corners, settings) -> _Faces:
        depth = corners.cam[:, 2].reshape(-1, 3)
        drawn = corners.visible.reshape(-1, 3).all(1)
        beyond = (depth > view.far).any(1)
        shown = torch.ones_like(drawn)
        if settings.max_render_distance is not None:
            shown = ~(vec_length(geometry.center - view.eye) > settings.max_render_distance)
        to_eye = vec_normalized(view.eye - geometry.center, (0.0, 0.0, -1.0))
        facing = vec_dot(geometry.face_normal, to_eye)
        kept = shown & ~beyond
        if settings.cull_backfaces:
            kept &= facing > 0.0
        x, y = corners.x.reshape(-1, 3), corners.y.reshape(-1, 3)
        area = (x[:, 2] - x[:, 0]) * (y[:, 1] - y[:, 0]) - (y[:, 2] - y[:, 0]) * (x[:, 1] - x[:, 0])
        flat = area.abs() < 1e-12
        guarded = corners.guarded.reshape(-1, 3).all(1)
        direct = kept & drawn & ~flat & guarded
        clipped = kept & ((~drawn) | (~flat & ~guarded)) & ~direct
        normal = geometry.face_normal
        if settings.two_sided_lighting:
            normal = torch.where((facing < 0.0)[:, None], -normal, normal)
        return _Faces(drawn, shown, direct, clipped, to_eye, normal)

    def _face_list(self, count: int) -> torch.Tensor:
        """int64 ``[count, 3]`` faces ``(3f, 3f + 1, 3f + 2)`` (corners are stored face-major)."""
        faces = self._faces_cache.get(count)
        if faces is None:
            faces = self._faces_cache[count] = torch.arange(3 * count, device=self.device).reshape(count, 3)
            if len(self._faces_cache) > 8:
                self._faces_cache.pop(next(iter(self._faces_cache)))
        return faces

    # ---- raster pass ---------------------------------------------------------------------------------------
    def _raster(self, view: View, corners: _Corners, faces: _Faces) -> tuple[torch.Tensor, torch.Tensor]:
        """``(pixel [N], face [N])``: every covered pixel (flat index) and the face drawn there."""
        parts, sources = [], []
        direct = faces.direct.nonzero()[:, 0]
        if direct.numel():
            rows = (3 * direct[:, None] + torch.arange(3, device=self.device)).reshape(-1)
            parts.append(torch.stack([corners.x[rows], corners.y[rows], corners.cam[rows, 2]], -1))
            sources.append(direct)
        cut = faces.clipped.nonzero()[:, 0]
        if cut.numel():
            rows = (3 * cut[:, None] + torch.arange(3, device=self.device)).reshape(-1)
            cam = corners.cam[rows]
            clip = torch.stack([cam[:, 0] * view.focal / view.aspect, cam[:, 1] * view.focal, cam[:, 2] - view.near,
                                cam[:, 2]], -1)
            result = near_clip(TriangleBatch(clip[None], self._face_list(cut.numel())), view.size)
            pieces = result.batch.vertices[0]
            w = pieces[:, 3]
            px, py = view.pixels(pieces[:, 0] / w, pieces[:, 1] / w)
            screen = torch.stack([px, py, w], -1)
            parts.append(screen[result.batch.faces.reshape(-1)])
            sources.append(cut[result.face_map])
        if not parts:
            empty = torch.zeros(0, dtype=torch.int64, device=self.device)
            return empty, empty
        verts = torch.cat(parts).reshape(-1, 3, 3)
        source = torch.cat(sources)
        order = torch.argsort(source, stable=True)  # draw order: equal depths go to the earlier face
        verts, source = verts[order], source[order]
        count = source.numel()
        if count < _MAX_PICK:  # each face drawn in a color that spells its index: one 8-bit readback
            batch = TriangleBatch(verts.reshape(1, -1, 3), self._face_list(count), face_colors=self._pick_colors(count))
            rgb = render_rgb8(self.backend, batch, view.size, (0.0, 0.0, 0.0))[0].reshape(-1, 3).to(self.device)
            hit = ((rgb[:, 0].long() << 16) | (rgb[:, 1].long() << 8) | rgb[:, 2].long()) - 1
        else:
            batch = TriangleBatch(verts.reshape(1, -1, 3), self._face_list(count))
            frags = rasterize_batch(self.backend, batch, view.size, RasterSettings())
            hit = frags.face_index[0, :, :, 0].reshape(-1).to(self.device)
        pixel = (hit >= 0).nonzero()[:, 0]
        return pixel, source[hit[pixel]]

    def _pick_colors(self, count: int) -> torch.Tensor:
        """float64 ``[1, count, 3]``: face ``k``'s color spells ``k + 1`` in 8-bit RGB (0 is empty)."""
        colors = self._faces_cache.get(-count)
        if colors is None:
            ids = torch.arange(1, count + 1, device=self.device)
            colors = torch.stack([(ids >> 16) & 255, (ids >> 8) & 255, ids & 255], -1).to(F64)[None] / 255.0
            self._faces_cache[-count] = colors
        return colors

    def _weights(self, view: View, corners: _Corners, faces: _Faces, pixel: torch.Tensor, face: torch.Tensor):
        """float64 ``[N, 3]`` weights of the face's corners at each pixel center: py_3d's screen-space
        weights for faces py_3d draws; perspective-correct ones for faces that reach behind near."""
        width = view.size[1]
        px = (pixel % width).to(F64) + 0.5
        py = (pixel // width).to(F64) + 0.5
        rows = 3 * face[:, None] + torch.arange(3, device=self.device)
        x, y = corners.x[rows], corners.y[rows]  # [N, 3]
        ax, bx, cx = x.unbind(1)
        ay, by, cy = y.unbind(1)
        inv_area = 1.0 / ((cx - ax) * (by - ay) - (cy - ay) * (bx - ax))
        w0 = ((px - bx) * (cy - by) - (py - by) * (cx - bx)) * inv_area
        w1 = ((px - cx) * (ay - cy) - (py - cy) * (ax - cx)) * inv_area
        w2 = ((px - ax) * (by - ay) - (py - ay) * (bx - ax)) * inv_area
        weights = torch.stack([w0, w1, w2], -1)
        cut = ~faces.drawn[face]  # faces py_3d does not draw (they reach behind near): no py_3d weights
        if bool(cut.any()):
            cam = corners.cam[rows[cut]]  # [n, 3 corners, 3]
            ray = torch.stack([(px[cut] / max(view.half_width, 1e-30) - 1.0) * view.aspect / view.focal,
                               (1.0 - py[cut] / max(view.half_height, 1e-30)) / view.focal,
                               torch.ones_like(px[cut])], -1)
            parts = torch.stack([vec_dot(ray, torch.linalg.cross(cam[:, (k + 1) % 3], cam[:, (k + 2) % 3]))
                                 for k in range(3)], -1)
            weights[cut] = parts / parts.sum(-1, keepdim=True)
        return weights

    def _at(self, values: torch.Tensor, face: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Per-corner ``values`` ``[3F, C]`` at fragments on ``face`` ``[N]`` with ``weights`` ``[N, 3]``:
        ``w0 a + w1 b + w2 c`` (py_3d's order) through py_gpu's interpolation kernel; ``[N, C]``."""
        n = face.shape[0]
        out = interpolate_vertex(values[None], self._face_list(values.shape[0] // 3), face.reshape(1, n, 1, 1),
                                 weights.reshape(1, n, 1, 1, 3))
        return out.reshape(n, -1)

    # ---- shading ----------------------------------------------------------------------------------------------
    def _triangles(self, geometry: FrameGeometry, view: View, corners: _Corners, faces: _Faces, lights, settings,
                   need_depth: bool) -> ln.Samples:
        """The triangles' fragments: pixel, py_3d depth (NaN unless ``need_depth``, or needed for
        shading), draw-order key, final 0-255 color.

        Flat, untextured faces are shaded once per face, as py_3d does; smooth or textured pixels
        are shaded each with their own lighting and base color."""
        pixel, face = self._raster(view, corners, faces)
        if pixel.numel() == 0:
            return ln.Samples(pixel, torch.zeros(0, dtype=F64, device=self.device), pixel,
                              torch.zeros(0, 3, dtype=F64, device=self.device))
        table = geometry.table
        material = geometry.face_material[face]
        shadows = None
        if settings.ray_traced_shadows:
            shadows = sh.Shadows(geometry.corners, table.light_transmission[geometry.face_material], settings)
        # flat lighting at the centers of the faces that may show (only of those shown, with shadows)
        if shadows is None:
            used = (faces.direct | faces.clipped).nonzero()[:, 0]
            inverse = torch.zeros(geometry.num_faces, dtype=torch.int64, device=self.device)
            inverse[used] = torch.arange(used.numel(), device=self.device)
            inverse = inverse[face]
        else:
            used, inverse = torch.unique(face, return_inverse=True)
        used_material = geometry.face_material[used]
        diffuse_f, specular_f = sh.lighting(geometry.center[used], faces.normal[used], faces.view[used], used_material,
                                            table, lights, settings, shadows, used)
        color = sh.shade(diffuse_f, specular_f, table.color[used_material], used_material, table,
                         settings.ambient)[inverse]

        smooth = geometry.has_normals[face] if settings.smooth_shading else torch.zeros_like(face, dtype=torch.bool)
        textured = (table.texture[material] >= 0) & geometry.has_uv[face]
        any_smooth, any_textured = bool(smooth.any()), bool(textured.any())
        fuzzy = not self.fast and bool((table.fuzziness[material] != 0.0).any())
        weights = depth = None
        if need_depth or fuzzy or any_smooth or any_textured:
            weights = self._weights(view, corners, faces, pixel, face)
            depth = self._at(corners.cam[:, 2:3], face, weights)[:, 0]
        normal, to_eye = faces.normal[face], faces.view[face]
        if any_smooth or any_textured:
            own = smooth | textured  # pixels shaded with their own lighting or base color
            diffuse, specular = diffuse_f[inverse[own]], specular_f[inverse[own]]
            if any_smooth:
                lit = self._smooth(geometry, view, faces, face, weights, smooth, lights, settings, shadows)
                mine = smooth[own]
                diffuse[mine], specular[mine] = lit[0], lit[1]
                normal[smooth], to_eye[smooth] = lit[2], lit[3]
            base = table.color[material[own]]
            if any_textured:
                uv = self._at(geometry.uvs, face[textured], weights[textured])
                base[textured[own]] = _texels(table, table.texture[material[textured]], uv)
            color[own] = sh.shade(diffuse, specular, base, material[own], table, settings.ambient)
        color = sh.reflect(color, material, table, normal, to_eye, settings.reflection_bounces)
        if bool(((table.roughness != 0.0) | (table.fuzziness != 0.0)).any()):
            width = view.size[1]
            color = sh.surface(color, material, table, pixel % width, pixel // width, depth, noise=fuzzy)
        color = sh.gamma(color, settings.gamma)
        if depth is None:
            depth = torch.full((pixel.numel(),), math.nan, dtype=F64, device=self.device)
        order = ln.order_key(geometry.face_object[face], 0, face)
        return ln.Samples(pixel, depth, order, color)

    def _smooth(self, geometry, view, faces: _Faces, face, weights, smooth, lights, settings, shadows):
        """Smooth shading of the pixels ``smooth``: ``(diffuse, specular, normal, to_eye)`` there.

        Per pixel (py_3d): the interpolated world point and vertex normal (the flipped face
        normal where it is zero), flipped toward the eye for two-sided lighting, and lit there.
        With ``fast_materials`` the same is evaluated at the face's corners and interpolated.
        """
        f, w = face[smooth], weights[smooth]
        if self.fast:
            used, inverse = torch.unique(f, return_inverse=True)
            rows = (3 * used[:, None] + torch.arange(3, device=self.device)).reshape(-1)
            owner = used.repeat_interleave(3)
            lit = self._lit_points(geometry, geometry.corners[rows], geometry.normals[rows], owner, view, faces,
                                   lights, settings, shadows)
            local = inverse  # faces of `used`, whose corners are rows 3k .. 3k + 2 of the lit values
            diffuse, specular = (self._at(v, local, w) for v in lit[:2])
            normal, to_eye = (vec_normalized(self._at(v, local, w), faces.normal[f]) for v in lit[2:])
            return diffuse, specular, normal, to_eye
        point = self._at(geometry.corners, f, w)
        return self._lit_points(geometry, point, self._at(geometry.normals, f, w), f, view, faces, lights, settings,
                                shadows)

    def _lit_points(self, geometry, point, vertex_normal, face, view, faces: _Faces, lights, settings, shadows):
        """Lighting at world points on ``face`` with vertex normals (the flipped face normal where zero)."""
        normal = vec_normalized(vertex_normal, faces.normal[face])
        to_eye = vec_normalized(view.eye - point, faces.view[face])
        if settings.two_sided_lighting:
            normal = torch.where((vec_dot(normal, to_eye) < 0.0)[:, None], -normal, normal)
        diffuse, specular = sh.lighting(point, normal, to_eye, geometry.face_material[face], geometry.table, lights,
                                        settings, shadows, face)
        return diffuse, specular, normal, to_eye

    # ---- lines ------------------------------------------------------------------------------------------------
    def _wireframe(self, geometry: FrameGeometry, view: View, corners: _Corners, faces: _Faces, settings) -> ln.Samples:
        """``_draw_triangle_wireframe`` for every face py_3d draws: its three edges in its color."""
        ids = (faces.drawn & faces.shown).nonzero()[:, 0]
        color = sh.gamma(geometry.table.color[geometry.face_material[ids]], settings.gamma)
        start = (3 * ids[:, None] + torch.arange(3, device=self.device)).reshape(-1)  # a, b, c
        end = (3 * ids[:, None] + torch.tensor([1, 2, 0], device=self.device)).reshape(-1)  # b, c, a
        seq = torch.arange(start.numel(), device=self.device) << ln._SAMPLE_BITS
        order = ln.order_key(geometry.face_object[ids].repeat_interleave(3), 0, seq)
        return ln.segment_samples(corners.x[start], corners.y[start], corners.cam[start, 2], corners.x[end],
                                  corners.y[end], corners.cam[end, 2], color.repeat_interleave(3, 0), order, view.size)

    def _highlights(self, geometry: FrameGeometry, view: View, settings) -> ln.Samples:
        """``_draw_edge_highlights``: each mesh's sharp edges in the highlight color, depth-biased."""
        parts = []
        c = settings.edge_highlight_color
        for index, mesh, first in geometry.meshes:
            edges = mesh.sharp_edges(settings.edge_highlight_threshold_degrees) + 3 * first
            if edges.numel() == 0:
                continue
            color = torch.tensor((c.r, c.g, c.b), dtype=F64, device=self.device).expand(edges.shape[0], 3)
            seq = torch.arange(edges.shape[0], device=self.device) << ln._SAMPLE_BITS
            order = ln.order_key(torch.full_like(seq, index), 1, seq)
            parts.append(self._segments(view, geometry.corners[edges[:, 0]], geometry.corners[edges[:, 1]], color,
                                        order, settings.edge_highlight_depth_bias))
        return ln.Samples.cat(parts) if parts else ln._empty(self.device)

    def _line_object(self, index: int, obj, view: View, settings) -> ln.Samples:
        m = obj.material.color
        color = sh.gamma(torch.tensor([[m.r, m.g, m.b]], dtype=F64, device=self.device), settings.gamma)
        if obj.kind == "Point3":
            cam = view.camera_space(obj.points)
            ok = view.visible(cam[:, 2])
            x, y = view.pixels(*view.ndc(cam))
            order = ln.order_key(torch.tensor([index], device=self.device), 0, torch.zeros(1, dtype=torch.int64,
                                                                                              device=self.device))
            return ln.point_samples(x[ok], y[ok], cam[ok, 2], color[ok], order[ok], view.size)
        seg = obj.points  # [S, 2, 3]
        seq = torch.arange(seg.shape[0], device=self.device) << ln._SAMPLE_BITS
        order = ln.order_key(torch.full_like(seq, index), 0, seq)
        return self._segments(view, seg[:, 0], seg[:, 1], color.expand(seg.shape[0], 3), order, 0.0)

    def _segments(self, view: View, start, end, color, order, bias: float) -> ln.Samples:
        """Segments between world points ``start``/``end`` ``[S, 3]``; skipped unless both ends project."""
        a, b = view.camera_space(start), view.camera_space(end)
        ok = view.visible(a[:, 2]) & view.visible(b[:, 2])
        a, b = a[ok], b[ok]
        ax, ay = view.pixels(*view.ndc(a))
        bx, by = view.pixels(*view.ndc(b))
        return ln.segment_samples(ax, ay, a[:, 2], bx, by, b[:, 2], color[ok], order[ok], view.size, bias=bias)


def _texels(table, texture: torch.Tensor, uv: torch.Tensor) -> torch.Tensor:
    """``PixelBuffer.sample_nearest(u, v, wrap=False)`` of each fragment's texture, as 0-255 floats."""
    size = table.texture_size[texture].to(F64)  # [n, 2] (width, height)
    u = torch.nan_to_num(uv[:, 0], nan=1.0).clamp(0.0, 1.0)
    v = torch.nan_to_num(uv[:, 1], nan=1.0).clamp(0.0, 1.0)
    x = torch.minimum(size[:, 0] - 1.0, torch.floor(u * size[:, 0]).clamp_min(0.0)).to(torch.int64)
    y = torch.minimum(size[:, 1] - 1.0, torch.floor(v * size[:, 1]).clamp_min(0.0)).to(torch.int64)
    index = table.texture_offset[texture] + y * table.texture_size[texture, 0] + x
    return table.texels[index].to(F64)


def _draw_bulletins(py_3d, buffer, camera, scene) -> None:
    """``TextBulletin`` and ``FloatingTextBulletin`` drawn by py_3d's own routines, last, as
    ``CPURenderer`` does."""
    render = py_3d.render
    for bulletin in getattr(scene, "bulletins", ()):
        if isinstance(bulletin, py_3d.TextBulletin):
            render._draw_text_bulletin(buffer, bulletin)
        elif isinstance(bulletin, py_3d.FloatingTextBulletin):
            render._draw_floating_text_bulletin(buffer, camera, bulletin)


# ---- py_gpu 0.0.1's calls -------------------------------------------------------------------------------------
def _flat_faces(scene, camera, settings):
    """The faces py_gpu draws or clips, their clip-space corners (py_3d's pixel mapping folded in,
    NDC z in [0, 1] from near to far) and flat lit 0-255 colors (lit at the center, textured faces
    at the texel of their mean UV)."""
    cache = SceneCache(torch.device("cpu"))
    geometry, lines = cache.frame(scene.objects, settings)
    view = View(camera, settings.width, settings.height, torch.device("cpu"))
    if geometry.num_faces == 0:
        return torch.zeros(0, 4, dtype=F64), torch.zeros(0, 3, dtype=F64), view, lines
    renderer = FrameRenderer.__new__(FrameRenderer)
    renderer.device = torch.device("cpu")
    corners = renderer._corners(geometry, view)
    faces = renderer._faces(geometry, view, corners, settings)
    ids = (faces.direct | faces.clipped).nonzero()[:, 0]
    lights, _ = sh.scene_lights(scene.lights)
    table, material = geometry.table, geometry.face_material[ids]
    if settings.wireframe:
        color = table.color[material]
    else:
        diffuse, specular = sh.lighting(geometry.center[ids], faces.normal[ids], faces.view[ids], material, table,
                                        lights, settings)
        base = table.color[material]
        textured = (table.texture[material] >= 0) & geometry.has_uv[ids]
        if bool(textured.any()):
            uv = geometry.uvs.reshape(-1, 3, 2)[ids[textured]].mean(1)
            base[textured] = _texels(table, table.texture[material[textured]], uv)
        color = sh.shade(diffuse, specular, base, material, table, settings.ambient)
    color = sh.gamma(color, settings.gamma)
    rows = (3 * ids[:, None] + torch.arange(3)).reshape(-1)
    cam = corners.cam[rows]
    width, height = settings.width, settings.height
    x = cam[:, 0] * view.focal / view.aspect
    y = cam[:, 1] * view.focal
    w = cam[:, 2]
    # screen x = (x'/w + 1) W / 2 equals py_3d's (x/w + 1)(W - 1) / 2 for x' = x (W - 1)/W - w/W (and y alike)
    clip = torch.stack([x * (width - 1) / width - w / width, y * (height - 1) / height + w / height,
                        view.far * (w - view.near) / (view.far - view.near), w], -1)
    return clip, color, view, lines


def scene_to_triangle_batch(scene, camera, settings, *, dtype=None, device=None) -> TriangleBatch:
    """See :func:`py_gpu.adapters.py3d.scene_to_triangle_batch`."""
    clip, color, _, _ = _flat_faces(scene, camera, settings)
    dtype = dtype or torch.float32
    n = color.shape[0]
    faces = torch.arange(3 * n, device=device).reshape(n, 3)
    return TriangleBatch(clip.to(device=device, dtype=dtype)[None], faces,
                         face_colors=(color / 255.0).to(device=device, dtype=dtype)[None])


def scene_to_raster_batch(scene, camera, settings, *, wire_width: float = 1.5) -> RasterBatch:
    """See :func:`py_gpu.adapters.py3d.scene_to_raster_batch`."""
    clip, color, view, lines = _flat_faces(scene, camera, settings)
    size = (settings.height, settings.width)
    n = color.shape[0]
    batch = TriangleBatch(clip[None], torch.arange(3 * n).reshape(n, 3), face_colors=(color / 255.0)[None])
    clipped = near_clip(batch, size).batch
    screen = clipped.screen_vertices(size)[0].tolist()
    depth = clipped.vertices[0, :, 3].tolist()  # seed depth is the camera-space distance, as in 0.0.1
    rgb = np.floor(clipped.face_colors[0].numpy() * 255.0 + 0.5).astype(int).tolist()
    tris = []
    for (i0, i1, i2), c in zip(clipped.faces.tolist(), rgb):
        a, b, d = (ScreenVertex(screen[i][0], screen[i][1], depth[i]) for i in (i0, i1, i2))
        tris.append(ScreenTriangle(a, b, d, tuple(c)))
    for _, line in lines:
        if line.kind != "Point3":
            tris.extend(_line_quads(view, line, settings, wire_width))
    return RasterBatch(tris)


def _line_quads(view: View, line, settings, width: float) -> list:
    """Each segment of a ``Line3``/``LineSet3`` as a two-triangle quad ``width`` px wide (0.0.1)."""
    m = line.material.color
    color = tuple(int(c) for c in sh.gamma(torch.tensor([[m.r, m.g, m.b]], dtype=F64), settings.gamma)[0].tolist())
    out = []
    for start, end in line.points.tolist():
        cam = view.camera_space(torch.tensor([start, end], dtype=F64))
        if not bool(view.visible(cam[:, 2]).all()):
            continue
        (x0, x1), (y0, y1) = (t.tolist() for t in view.pixels(*view.ndc(cam)))
        dx, dy = x1 - x0, y1 - y0
        length = math.hypot(dx, dy)
        if length <= 1e-9:
            continue
        half = max(0.5, width * 0.5)
        nx, ny = -dy / length * half, dx / length * half
        z0, z1 = cam[:, 2].tolist()
        a, b = ScreenVertex(x0 + nx, y0 + ny, z0), ScreenVertex(x0 - nx, y0 - ny, z0)
        c, d = ScreenVertex(x1 + nx, y1 + ny, z1), ScreenVertex(x1 - nx, y1 - ny, z1)
        out += [ScreenTriangle(a, b, c, color), ScreenTriangle(c, b, d, color)]
    return out
