"""The ModernGL (OpenGL) backend: exact offscreen rendering, the fast path and the GL-side oracle.

It draws the same ``TriangleBatch`` as the reference under the same raster rule
(docs/raster-rule.md), on whatever OpenGL 3.3 driver ``py_gpu._gl.create_context`` finds
(EGL first on a headless Linux machine):

- Vertex x, y are snapped to the 1/256 px grid on the CPU, with the rule's rounding (half to
  even), before they reach GL. Mesa's llvmpipe snaps to the same grid, so the float round trip
  through NDC cannot move a vertex across a rounding boundary.
- Pixels map by ``x_ndc = 2x/W - 1``, ``y_ndc = 1 - 2y/H``; rows are flipped on readback so that
  row 0 is the top. llvmpipe owns samples on left and bottom edges, as the rule does.
- The image lies ``IMAGE_MARGIN`` (64) px inside the framebuffer from its left and bottom sides,
  under a scissor: llvmpipe drops large triangles whose bounding box, cut at those sides, falls in
  its first 64 x 64 px tile (``_Target``), and no triangle covering the image can fall there.
- Faces are drawn in order, in one draw call, with a strictly-less depth test: on equal depth the
  lower face index wins. Screen depth is mapped affinely into GL's depth range with a margin, so
  the farthest face is never clipped; GL keeps depth with 24 bits, so two faces closer in depth
  than about ``(zmax - zmin) / 2**24`` at a pixel can resolve differently from the reference's
  float64 depth.
- Clip-space ``[B, V, 4]`` input is clipped against py_gpu's near plane (``z = 0``) before it
  reaches GL, exactly as for every other backend, then drawn with its ``w`` so GL interpolates
  attributes perspective-correctly; depth is remapped so GL's own near and far planes never cut.
- Persistent geometry (``upload_geometry`` / ``rasterize_geometry``, used by the Renderer): the
  mesh stays in a GL buffer and only matrices are sent per frame. The vertex shader computes clip
  positions in float32 (not snapped on the CPU), and GL itself clips at py_gpu's near plane
  (``z' = a z - w`` makes GL's near plane ``z = 0``; ``a`` keeps GL's far plane out of the way).

Differences from the reference: barycentrics, depth and interpolated colors are float32 values
computed by GL (the face index is exact; values agree to float32 rounding). Color attachments hold
at most 4 channels; wider per-vertex attributes are shaded on the CPU from GL's fragments.

Importing this module does not import moderngl; constructing the backend does.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from contextlib import contextmanager
from importlib.util import find_spec
from dataclasses import dataclass

import numpy as np
import torch

from .._check import (
    BackendUnavailableError,
    PyGpuTypeError,
    PyGpuValueError,
    check_finite,
    check_float,
    check_size,
    check_tensor,
)
from ..contracts import Fragments, Frame, TriangleBatch
from ..raster.rule import SUBPIXEL
from ..settings import RasterSettings
from .._gl import FORK_HINT, create_context, import_moderngl, probe_gl
from .base import Backend, BackendCapabilities
from .registry import register_backend

log = logging.getLogger("py_gpu")

#: Framebuffer sizes kept alive at once (least recently used ones are released).
MAX_CACHED_SIZES = 4
#: Depth is mapped to NDC ``[-1 + margin, 1 - margin]``: never on the near or far plane.
_DEPTH_MARGIN = 2.0**-10
_FLOAT32_MAX = float(np.finfo(np.float32).max)
#: Largest number of color channels GL renders directly (one RGBA attachment).
_MAX_GL_CHANNELS = 4
#: Framebuffer pixels left free left of and below the image: one llvmpipe tile (see ``_Target``).
IMAGE_MARGIN = 64

#: Most directional (and, separately, point) lights one GL shading program takes.
MAX_LIGHTS = 8
#: Most textures one GL-shaded frame binds (one per material id, or one atlas / shared texture).
MAX_TEXTURES = 8
#: Most atlas rects GL shading takes.
MAX_RECTS = 64
#: What GL shading covers (``ModernGLBackend.shading_capabilities``).
GL_SHADING = {
    "modes": ("hard",),
    "models": ("unlit", "lambert", "blinn_phong"),
    "lights": ("AmbientLight", f"DirectionalLight (up to {MAX_LIGHTS})", f"PointLight (up to {MAX_LIGHTS})"),
    "textures": ("one texture", f"one per material id (up to {MAX_TEXTURES} textured)",
                 f"atlas with per-material rects (up to {MAX_RECTS})"),
    "texture_channels": (1, 3, 4),
    "filters": ("nearest", "bilinear", "trilinear"),
    "wraps": ("repeat", "clamp"),
    "attachments": ("object_id", "instance_id", "material_id"),
    "other": ("vertex colors", "smooth normals", "transforms", "instances", "gamma", "cull_backfaces",
              "several views (B cameras)"),
    "falls_back_for": ("soft mode", "gradients needed", "flat shading", "batched positions [B, V, 3]",
                       "batched textures", "attachments normal / position / uv / albedo", "more lights or textures"),
}

_VERTEX_SHADER = """
#version 330
in vec4 in_position;        // clip-space position, x and y already on the 1/256 px grid
in float in_depth;          // screen depth (z, or z/w for clip-space input)
#ifdef HAS_COLOR
in vec4 in_color;
COLOR_QUALIFIER out vec4 v_color;
#endif
out vec3 v_bary;            // perspective-correct barycentrics of the face's three corners
noperspective out float v_depth;
void main() {
    gl_Position = in_position;
    int corner = gl_VertexID % 3;  // faces are drawn unindexed: corner k of face f is vertex 3f+k
    v_bary = vec3(corner == 0, corner == 1, corner == 2);
    v_depth = in_depth;
#ifdef HAS_COLOR
    v_color = in_color;
#endif
}
"""

_FRAGMENT_SHADER = """
#version 330
#ifdef HAS_COLOR
COLOR_QUALIFIER in vec4 v_color;
#endif
in vec3 v_bary;
noperspective in float v_depth;
#ifdef OUT_RGB8
layout(location = 0) out vec4 f_color;
#else
layout(location = 0) out vec4 f_color;
layout(location = 1) out int f_face;      // face index + 1; 0 is the cleared "empty"
layout(location = 2) out vec4 f_attr;     // (depth, b0, b1, b2)
#endif
void main() {
#ifdef HAS_COLOR
    f_color = v_color;
#else
    f_color = vec4(1.0);
#endif
#ifndef OUT_RGB8
    f_face = gl_PrimitiveID + 1;
    f_attr = vec4(v_depth, v_bary);
#endif
}
"""


_GEOMETRY_VERTEX_SHADER = """
#version 330
in vec3 in_position;        // object-space position; faces de-indexed: corner k of face f is vertex 3f+k
#ifdef INSTANCED
in mat4 in_instance;        // world from object, one per instance
flat out int v_instance;
#endif
uniform mat4 u_clip;        // GL clip from world: camera, guard band and depth remap folded in
out vec3 v_bary;            // perspective-correct barycentrics of the face's three corners
void main() {
#ifdef INSTANCED
    gl_Position = u_clip * (in_instance * vec4(in_position, 1.0));
    v_instance = gl_InstanceID;
#else
    gl_Position = u_clip * vec4(in_position, 1.0);
#endif
    int corner = gl_VertexID % 3;
    v_bary = vec3(corner == 0, corner == 1, corner == 2);
}
"""

_GEOMETRY_FRAGMENT_SHADER = """
#version 330
in vec3 v_bary;
#ifdef INSTANCED
flat in int v_instance;
#endif
uniform int u_faces;         // faces per instance
uniform float u_depth_scale; // py_gpu depth z/w = gl_FragCoord.z * u_depth_scale
layout(location = 0) out vec4 f_color;
layout(location = 1) out int f_face;      // face index + 1; 0 is the cleared "empty"
layout(location = 2) out vec4 f_attr;     // (depth, b0, b1, b2)
void main() {
    f_color = vec4(1.0);
#ifdef INSTANCED
    f_face = v_instance * u_faces + gl_PrimitiveID + 1;
#else
    f_face = gl_PrimitiveID + 1;
#endif
    f_attr = vec4(gl_FragCoord.z * u_depth_scale, v_bary);
}
"""


def _shader(source: str, defines: dict[str, str]) -> str:
    head, rest = source.split("\n", 2)[1], source.split("\n", 2)[2]
    lines = [head] + [f"#define {k} {v}" for k, v in defines.items()] + [rest]
    return "\n".join(lines)


def _guard_band(side: int, max_side: int) -> tuple[int, int, int]:
    """Viewport ``(origin, extent, center)`` along one axis for an image ``side`` px long.

    The extent is the largest power of two the driver allows (at least ``side``) and the image
    sits in its middle, so that ``ndc = (p - center) / (extent / 2)`` and GL's viewport transform
    ``ndc * extent / 2 + center`` are exact in float32 for on-grid positions.
    """
    extent = 1 << (max(max_side, side).bit_length() - 1)
    extent = max(extent, 1 << (side - 1).bit_length())
    origin = (side - extent) // 2
    return origin, extent, origin + extent // 2


def _margins(width: int, height: int, max_side: int) -> tuple[int, int]:
    """Framebuffer pixels ``(mx, my)`` kept free left of and below the image.

    One axis is enough: a triangle whose box, cut at the framebuffer's sides, lies in the first
    tile covers only margin pixels when the image starts ``IMAGE_MARGIN`` px in along either axis.
    The margin goes along the axis that adds fewer pixels (columns for a wide image), or along the
    other one where the driver's size limit leaves no room.
    """
    fits = lambda side: max_side - side >= IMAGE_MARGIN  # noqa: E731
    along_x = fits(width) and (height <= width or not fits(height))
    if along_x:
        return IMAGE_MARGIN, 0
    return (0, IMAGE_MARGIN) if fits(height) else (0, 0)


class _Target:
    """The GL textures and framebuffers of one image size, and its guard-band viewport.

    The image does not start at the framebuffer's origin but ``IMAGE_MARGIN`` px to the right or
    up (``rect``, see ``_margins``), and a scissor keeps GL from shading anything outside it. llvmpipe (Mesa 22.3.6)
    draws a triangle whose bounding box, cut at the framebuffer's left and bottom sides, lies in
    its first 64 x 64 px tile as a one-tile triangle; when its far edges lie thousands of pixels
    past those sides, their values at the tile overflow and the whole triangle is lost (for bands
    of edge lengths that repeat as the triangle grows). With the margin, a triangle that covers an
    image pixel always spans more than that tile.

    Attributes:
        size: ``(width, height)`` of the image.
        rect: ``(x, y, width, height)``, the image in framebuffer pixels (GL's origin: bottom left).
        x0, y0, vw, vh, cx, cy: the guard-band viewport (origin, extent, center) relative to the image.
    """

    def __init__(self, ctx, width: int, height: int):
        self.size = (width, height)
        max_w, max_h = ctx.info["GL_MAX_VIEWPORT_DIMS"]
        max_tex = int(ctx.info["GL_MAX_TEXTURE_SIZE"])
        self.x0, self.vw, self.cx = _guard_band(width, int(max_w))
        self.y0, self.vh, self.cy = _guard_band(height, int(max_h))
        mx, my = _margins(width, height, max_tex)
        self.rect = (mx, my, width, height)
        fb = (width + mx, height + my)
        self.depth = ctx.depth_renderbuffer(fb)
        self.rgb8 = ctx.texture(fb, 3)  # seed protocol: uint8 RGB
        self.color = ctx.texture(fb, 4, dtype="f4")  # float image
        self.face = ctx.texture(fb, 1, dtype="i4")  # face index + 1
        self.attr = ctx.texture(fb, 4, dtype="f4")  # depth, barycentrics
        self.fbo_rgb8 = ctx.framebuffer([self.rgb8], self.depth)
        self.fbo_full = ctx.framebuffer([self.color, self.face, self.attr], self.depth)
        for fbo in (self.fbo_rgb8, self.fbo_full):
            fbo.scissor = self.rect
        self.shade = None  # the GL shading framebuffers (py_gpu.backends.gl_shading), made on first use

    def clear(self, fbo, *rgba: float) -> None:
        """Clear ``fbo`` whole (color ``rgba``, depth 1), then scissor it to the image again: a
        whole-framebuffer clear is llvmpipe's fast path (a scissored one measured slower)."""
        fbo.scissor = None
        fbo.clear(*rgba, depth=1.0)
        fbo.scissor = self.rect

    @property
    def viewport(self) -> tuple[int, int, int, int]:
        """The guard-band viewport in framebuffer pixels."""
        return (self.rect[0] + self.x0, self.rect[1] + self.y0, self.vw, self.vh)

    def objects(self) -> list:
        shade = [] if self.shade is None else self.shade.objects()
        return shade + [self.fbo_rgb8, self.fbo_full, self.rgb8, self.color, self.face, self.attr, self.depth]

    def release(self) -> None:
        for obj in self.objects():
            obj.release()


@dataclass
class GLCounters:
    """How much data a ``ModernGLBackend`` has sent to GL (counts since it was created).

    Attributes:
        vertex_uploads: writes of per-frame vertex records (``rasterize``, ``render_frame``, ``render``).
        geometry_uploads: persistent geometry buffers created (:meth:`ModernGLBackend.upload_geometry`).
        geometry_releases: persistent geometry buffers freed.
        instance_uploads: writes of per-instance transforms (``rasterize_geometry`` with ``instances``).
        draws: draw calls.
        attribute_uploads: shading buffers (normals, UVs, colors, material ids) made for a ``GLMesh``.
        texture_uploads: textures placed in GL for GL shading.
    """

    vertex_uploads: int = 0
    geometry_uploads: int = 0
    geometry_releases: int = 0
    instance_uploads: int = 0
    draws: int = 0
    attribute_uploads: int = 0
    texture_uploads: int = 0


class GLMesh:
    """Triangle geometry kept in a GL buffer between frames; made by :meth:`ModernGLBackend.upload_geometry`.

    The buffer holds the faces de-indexed: float32 ``[3 F, 3]`` object-space positions, corner
    ``k`` of face ``f`` at row ``3 f + k``. ``release()`` frees the GL objects; safe to call twice,
    and after the backend itself was released.

    Attributes:
        num_faces: ``F``.
        bounds: float64 ``[2, 3]`` numpy array, the lower and upper corners of the positions'
            bounding box (used to keep GL's far plane from cutting anything).
        released: whether ``release()`` was called, or the mesh was uploaded in another process
            (``lost_to_fork``: GL buffers do not survive fork(); upload it again).
        lost_to_fork: whether this process was forked after the upload.
    """

    def __init__(self, backend: "ModernGLBackend", vbo, num_faces: int, bounds: np.ndarray):
        self._backend = backend
        self._vbo = vbo
        self._vaos: dict[bool, object] = {}
        self._instances = None  # per-instance transforms, float32 [N, 16] column-major
        self._instances_capacity = 0
        self._instances_source = None  # (array, row) whose transforms the instance buffer holds
        self._shading = None  # GL shading buffers (py_gpu.backends.gl_shading), made on first use
        self.num_faces = num_faces
        self.bounds = bounds
        self._released = False
        self._pid = os.getpid()

    @property
    def released(self) -> bool:
        return self._released or self.lost_to_fork

    @property
    def lost_to_fork(self) -> bool:
        return self._pid != os.getpid()

    def objects(self) -> list:
        """The GL objects this mesh holds now (vertex arrays and buffers)."""
        objs = list(self._vaos.values()) + ([] if self._shading is None else self._shading.objects())
        objs += [b for b in (self._vbo, self._instances) if b is not None]
        return objs

    def write_instances(self, inst: np.ndarray, b: int) -> None:
        """Write view ``b``'s transforms of ``inst`` (float ``[B|1, N, 4, 4]``) into the instance
        buffer (column-major ``[N, 16]``), unless it holds them already: every view sharing them,
        or GL shading's id pass right after its frame. Call with the context current."""
        row = min(b, inst.shape[0] - 1)
        held = self._instances_source
        if held is not None and held[0] is inst and held[1] == row:
            return
        cols = np.ascontiguousarray(inst[row].transpose(0, 2, 1), dtype=np.float32)
        self._instances.write(cols.tobytes())
        self._instances_source = (inst, row)
        self._backend.counters.instance_uploads += 1

    def release(self) -> None:
        """Free the GL buffers; safe to call twice. Frames still waiting for their face ids (GL
        shading's lazy id pass) draw them first (see ``ModernGLBackend._forget_mesh``)."""
        if self.released:
            return
        self._backend._forget_mesh(self)
        self._released = True
        self._drop()

    def _drop(self) -> None:
        """Forget the GL objects (without a GL call once they are freed, or lost to fork())."""
        self._vaos.clear()
        self._vbo = self._instances = self._shading = None
        self._instances_capacity = 0


class ModernGLBackend(Backend):
    """Offscreen OpenGL rasterizer through ModernGL; on Mesa's llvmpipe it agrees with the reference
    on coverage exactly, on the face at 99.99% of pixels or more, and on colors within 1/255
    (docs/raster-rule.md, section 8).

    Persistent resources: the context, the shader programs, one set of framebuffers per image
    size (the ``MAX_CACHED_SIZES`` most recent), one vertex buffer that grows and is reused, and
    the ``GLMesh`` objects made by :meth:`upload_geometry`. ``release()`` frees all of them and is
    safe to call twice. ``counters`` (a :class:`GLCounters`) counts the data sent to GL.

    Persistent geometry: ``mesh = upload_geometry(positions, faces)`` once, then
    ``rasterize_geometry(mesh, clip_from_world, size, instances=...)`` per frame; the camera and
    instance transforms are applied in the vertex shader, so a frame sends only matrices to GL.

    Threads: one backend may be shared; its calls take turns (a lock around every GL call, with
    the context made current in the calling thread). fork(): in a forked child the backend forgets
    the parent's GL objects without touching them and makes a new context of its own on first use
    (meshes uploaded before the fork are lost: upload them again); where no new context can be
    made, or the context was passed in, it raises ``BackendUnavailableError`` saying how to avoid
    fork(). See docs/reliability.md.

    Args:
        context: an existing moderngl context to draw with (not released by this backend);
            by default one is created with ``py_gpu._gl.create_context()``.

    Raises:
        BackendUnavailableError: moderngl is missing (install with ``pip install "py_gpu[gl]"``)
            or no OpenGL context can be created (the message lists each kind tried).
    """

    #: What GL shading covers (a ``Renderer`` on this backend, nothing needing gradients; see
    #: :mod:`py_gpu.backends.gl_shading`); anything else is shaded in torch.
    shading_capabilities = GL_SHADING

    capabilities = BackendCapabilities(
        name="moderngl (OpenGL)",
        accelerated=True,
        supports_depth=True,
        supports_textures=False,
        supports_vertex_attributes=True,
        differentiable=False,
        modes=("hard",),
        clip_space=True,
        devices=("cpu", "cuda", "mps"),
        exact=True,
    )

    def __init__(self, context=None):
        self._mgl = import_moderngl()
        self._owns_ctx = context is None
        self._lock = threading.RLock()  # held around every GL call (see _gl)
        self._depth = 0  # how deeply the holder of _lock has entered _gl
        self._pid = os.getpid()  # the process whose context this is
        self._unusable: str | None = None  # why this backend cannot draw in this process (after fork)
        self.ctx = create_context() if context is None else context
        if self._owns_ctx:
            self.ctx.__exit__(None, None, None)  # not current anywhere: any thread may take it
        self._programs: dict[tuple, object] = {}
        self._vaos: dict[tuple, object] = {}
        self._targets: OrderedDict[tuple[int, int], _Target] = OrderedDict()
        self._vbo = None
        self._vbo_capacity = 0
        self._meshes: dict[int, GLMesh] = {}
        self._shade_textures: OrderedDict = OrderedDict()  # GL shading's textures (gl_shading._texture)
        self.counters = GLCounters()
        self._released = False

    # -- resources -------------------------------------------------------------------------------
    def _check_live(self, where: str) -> None:
        if self._released:
            raise BackendUnavailableError(f"{where}: this ModernGLBackend was released; create a new one")
        if self._unusable is not None:
            raise BackendUnavailableError(f"{where}: {self._unusable}")

    def _follow_fork(self) -> None:
        """In a process forked after this backend was made: forget the parent's GL state and, for
        a context of this backend's own, make a new one here (or record why it cannot draw)."""
        if self._pid == os.getpid():
            return
        with _FORK_LOCK:
            if self._pid == os.getpid():
                return
            parent = self._pid
            self._forget_gl_state()
            self._lock, self._depth = threading.RLock(), 0  # the parent's lock may have been held
            if not self._owns_ctx:
                self._unusable = (f"this backend draws on an OpenGL context passed in (context=) in process "
                                  f"{parent}, which forked this one; {FORK_HINT}")
            elif not self._released:
                self.ctx = None  # the parent's: never released or made current here
                try:
                    self.ctx = create_context()
                    self.ctx.__exit__(None, None, None)
                except BackendUnavailableError as exc:
                    self._unusable = str(exc)
            self._pid = os.getpid()

    def _forget_gl_state(self) -> None:
        """Drop every GL object without a GL call (they belong to another process's context)."""
        for mesh in list(self._meshes.values()):
            mesh._drop()  # mesh.lost_to_fork says so
        self._meshes.clear()
        self._programs.clear()
        self._vaos.clear()
        self._targets.clear()
        self._shade_textures.clear()
        self._vbo = None
        self._vbo_capacity = 0

    @contextmanager
    def _gl(self, where: str):
        """Hold this backend's lock, with its context current in the calling thread, around GL calls.

        A context can be current in one thread at a time, so threads that share a backend take
        turns: the outermost ``_gl`` makes the context current and gives it up on leaving (it may
        be re-entered by the same thread). Yields the context.
        """
        self._follow_fork()
        with self._lock:
            self._check_live(where)
            outer = self._depth == 0
            if outer:
                self.ctx.__enter__()
            self._depth += 1
            try:
                yield self.ctx
            finally:
                self._depth -= 1
                if outer:
                    self.ctx.__exit__(None, None, None)

    def _program(self, color_mode: str, out: str):
        key = (color_mode, out)
        prog = self._programs.get(key)
        if prog is None:
            defines = {}
            if color_mode != "none":
                defines["HAS_COLOR"] = "1"
                defines["COLOR_QUALIFIER"] = "flat" if color_mode == "face" else "smooth"
            if out == "rgb8":
                defines["OUT_RGB8"] = "1"
            prog = self.ctx.program(
                vertex_shader=_shader(_VERTEX_SHADER, defines), fragment_shader=_shader(_FRAGMENT_SHADER, defines)
            )
            self._programs[key] = prog
        return prog

    def _target(self, width: int, height: int) -> _Target:
        key = (width, height)
        target = self._targets.get(key)
        if target is None:
            while len(self._targets) >= MAX_CACHED_SIZES:
                _, old = self._targets.popitem(last=False)
                old.release()
            target = _Target(self.ctx, width, height)
            self._targets[key] = target
        else:
            self._targets.move_to_end(key)
        return target

    def _upload(self, data: np.ndarray) -> None:
        """Write the float32 ``[N, K]`` vertex array into the shared buffer, growing it if needed."""
        nbytes = data.nbytes
        if nbytes > self._vbo_capacity:
            for vao in self._vaos.values():
                vao.release()
            self._vaos.clear()
            if self._vbo is not None:
                self._vbo.release()
            capacity = max(1 << 16, 1 << (nbytes - 1).bit_length())
            self._vbo = self.ctx.buffer(reserve=capacity, dynamic=True)
            self._vbo_capacity = capacity
        self._vbo.write(data)
        self.counters.vertex_uploads += 1

    def _vao(self, color_mode: str, out: str, channels: int):
        key = (color_mode, out, channels)
        vao = self._vaos.get(key)
        if vao is None:
            prog = self._program(color_mode, out)
            depth = "4x" if out == "rgb8" else "1f"  # the 8-bit color program has no depth output
            names = ("in_position",) + (() if out == "rgb8" else ("in_depth",))
            if color_mode == "none":
                layout = [(self._vbo, f"4f {depth}", *names)]
            else:
                layout = [(self._vbo, f"4f {depth} {channels}f", *names, "in_color")]
            vao = self.ctx.vertex_array(prog, layout)
            self._vaos[key] = vao
        return vao

    def gl_objects(self) -> list:
        """Every GL object this backend holds now (programs, buffers, arrays, textures, framebuffers)."""
        objs = list(self._programs.values()) + list(self._vaos.values())
        objs += [] if self._vbo is None else [self._vbo]
        for target in self._targets.values():
            objs += target.objects()
        for mesh in self._meshes.values():
            objs += mesh.objects()
        objs += [t.tex for t in self._shade_textures.values()]
        return objs

    def release(self) -> None:
        """Free every GL resource (and the context, when this backend created it). Safe to call twice.

        In a process forked after the backend was made, the parent's objects are only forgotten."""
        if self._released:
            return
        if self._pid != os.getpid():
            with _FORK_LOCK:
                self._released = True
                self._forget_gl_state()
                self.ctx = None
            return
        with self._lock:
            if self._released:
                return
            if self.ctx is not None and self._unusable is None:
                with self._gl(f"{type(self).__name__}.release"):
                    for mesh in list(self._meshes.values()):
                        if mesh._shading is not None:
                            mesh._shading.settle()  # frames still waiting for their face ids draw them first
                    for obj in self.gl_objects():
                        obj.release()
            self._released = True
            for mesh in list(self._meshes.values()):
                mesh.release()  # its GL objects are gone already; this marks it released
            self._programs.clear()
            self._vaos.clear()
            self._targets.clear()
            self._shade_textures.clear()
            self._vbo = None
            self._vbo_capacity = 0
            if self._owns_ctx and self.ctx is not None:
                self.ctx.release()
            self.ctx = None

    def __del__(self):  # pragma: no cover - best effort at interpreter shutdown
        try:
            self.release()
        except Exception:
            pass

    # -- persistent geometry -------------------------------------------------------------------------
    def upload_geometry(self, positions: torch.Tensor, faces: torch.Tensor) -> GLMesh:
        """Place a mesh in a GL buffer once, for :meth:`rasterize_geometry` to draw every frame.

        Args:
            positions: float ``[V, 3]`` object-space vertex positions (any device; stored as float32).
            faces: int ``[F, 3]`` vertex indices.

        Returns:
            a :class:`GLMesh`; release it with ``mesh.release()`` (or by releasing this backend).
        """
        where = f"{type(self).__name__}.upload_geometry"
        self._check_live(where)
        check_tensor(where, "positions", positions)
        check_float(where, "positions", positions)
        check_finite(where, "positions", positions)
        check_tensor(where, "faces", faces)
        if positions.dim() != 2 or positions.shape[1] != 3:
            raise PyGpuValueError(f"{where}: `positions` must have shape [V, 3], got {tuple(positions.shape)}")
        if faces.dim() != 2 or faces.shape[1] != 3 or faces.is_floating_point() or faces.dtype == torch.bool:
            raise PyGpuValueError(f"{where}: `faces` must be an integer tensor of shape [F, 3], got {tuple(faces.shape)} {faces.dtype}")
        V = positions.shape[0]
        f = faces.detach().to("cpu", torch.int64)
        if f.numel() and (int(f.min()) < 0 or int(f.max()) >= V):
            raise PyGpuValueError(f"{where}: `faces` index vertices 0..{V - 1}, got values in [{int(f.min())}, {int(f.max())}]")
        p = positions.detach().to("cpu", torch.float64).numpy()  # [V, 3]
        corners = np.ascontiguousarray(p[f.numpy().reshape(-1)], dtype=np.float32)  # [3F, 3] corner-major
        bounds = np.stack([p.min(0), p.max(0)]) if V else np.zeros((2, 3))
        bounds.flags.writeable = False  # fixed for the mesh's life (its box corners are kept)
        with self._gl(where) as ctx:
            vbo = ctx.buffer(corners.tobytes()) if corners.size else None
            mesh = GLMesh(self, vbo, f.shape[0], bounds)
            self._meshes[id(mesh)] = mesh
            self.counters.geometry_uploads += 1
        return mesh

    def _forget_mesh(self, mesh: GLMesh) -> None:
        """Drop ``mesh`` from this backend and free its GL objects (unless the backend already did)."""
        self._follow_fork()
        with self._lock:
            if self._meshes.pop(id(mesh), None) is None:
                return
            self.counters.geometry_releases += 1
            if not self._released and self.ctx is not None:
                with self._gl(f"{type(self).__name__}.release"):
                    if mesh._shading is not None:
                        mesh._shading.settle()  # frames still waiting for their face ids draw them first
                    for obj in mesh.objects():
                        obj.release()

    def _instance_buffer(self, mesh: GLMesh, count: int) -> None:
        """Grow ``mesh``'s instance buffer to hold ``count`` transforms (its instanced arrays go with it)."""
        if count > mesh._instances_capacity:
            old = mesh._vaos.pop(True, None)
            if old is not None:
                old.release()
            if mesh._instances is not None:
                mesh._instances.release()
            capacity = 1 << max(0, (count - 1).bit_length())
            mesh._instances = self.ctx.buffer(reserve=capacity * 64, dynamic=True)
            mesh._instances_capacity = capacity
            mesh._instances_source = None

    def _geometry_vao(self, mesh: GLMesh, instanced: bool, count: int):
        """The vertex array drawing ``mesh`` (with an instance buffer for ``count`` transforms)."""
        if instanced:
            self._instance_buffer(mesh, count)
        vao = mesh._vaos.get(instanced)
        if vao is None:
            key = ("geometry", instanced)
            prog = self._programs.get(key)
            if prog is None:
                defines = {"INSTANCED": "1"} if instanced else {}
                prog = self.ctx.program(vertex_shader=_shader(_GEOMETRY_VERTEX_SHADER, defines),
                                        fragment_shader=_shader(_GEOMETRY_FRAGMENT_SHADER, defines))
                self._programs[key] = prog
            layout = [(mesh._vbo, "3f", "in_position")]
            if instanced:
                layout.append((mesh._instances, "16f/i", "in_instance"))
            vao = self.ctx.vertex_array(prog, layout)
            mesh._vaos[instanced] = vao
        return vao

    def rasterize_geometry(self, mesh: GLMesh, clip_from_world: torch.Tensor, size, *, instances: torch.Tensor | None = None,
                           settings: RasterSettings | None = None) -> Fragments:
        """Hard-mode ``Fragments`` of an uploaded mesh; only the matrices are sent to GL.

        The vertex shader computes ``clip_from_world @ instance @ p`` in float32. GL's own near
        plane is py_gpu's ``z = 0`` (z is remapped to GL's ``z' = a z - w``), so GL clips the
        triangles that cross it; the pieces keep their face id (``gl_PrimitiveID``) and
        perspective-correct barycentrics of the face's own corners, as ``unclip_fragments`` gives.
        ``a`` is chosen per frame from the mesh's bounding box so that GL's far plane never cuts
        anything in front of the near plane. Vertex positions are computed by GL, not snapped on
        the CPU first, so samples exactly on an edge may resolve differently from the reference.

        Args:
            mesh: a live :class:`GLMesh` of this backend.
            clip_from_world: float ``[B, 4, 4]`` or ``[4, 4]``, py_gpu clip space (NDC z in [0, 1]);
                ``B = 1`` broadcasts against batched ``instances``.
            size: ``(H, W)``.
            instances: None, or float ``[N, 4, 4]`` / ``[B, N, 4, 4]`` world-from-object transforms:
                the mesh is drawn ``N`` times and face ids are ``n * F + f`` (instance-major).
            settings: ``RasterSettings`` (hard mode; ``cull_backfaces`` is honored).

        Returns:
            ``Fragments`` on the CPU: ``face_index`` int64 ``[B, H, W, 1]`` (-1 where empty),
            ``bary`` float32 ``[B, H, W, 1, 3]``, ``depth`` float32 ``[B, H, W, 1]`` (z/w, inf where empty).
        """
        where = f"{type(self).__name__}.rasterize_geometry"
        self._check_live(where)
        if not isinstance(mesh, GLMesh):
            raise PyGpuTypeError(f"{where}: `mesh` must be a GLMesh from upload_geometry, got {type(mesh).__name__}")
        if mesh.lost_to_fork:
            raise PyGpuValueError(f"{where}: `mesh` was uploaded before this process was forked, and GL objects "
                                  "do not survive fork(); upload it again in this process")
        if mesh.released or mesh._backend is not self:
            raise PyGpuValueError(f"{where}: `mesh` was released or belongs to another backend; upload it again")
        size = check_size(where, size)
        s = self.check_settings(where, settings)
        clip = _matrices(where, "clip_from_world", clip_from_world, 3)  # [B, 4, 4] float64
        inst = None if instances is None else _matrices(where, "instances", instances, 4)  # [B|1, N, 4, 4]
        if inst is not None and clip.shape[0] == 1 and inst.shape[0] > 1:
            clip = np.broadcast_to(clip, (inst.shape[0], 4, 4))
        B = clip.shape[0]
        if inst is not None and inst.shape[0] not in (1, B):
            raise PyGpuValueError(f"{where}: `instances` has batch size {inst.shape[0]}, `clip_from_world` {B}")
        N = 1 if inst is None else inst.shape[1]
        height, width = size
        face = np.zeros((B, height, width), dtype=np.int64)
        attr = np.zeros((B, height, width, 4), dtype=np.float32)
        draw = mesh.num_faces > 0 and N > 0
        with self._gl(where):
            target = self._target(width, height)
            fbo = target.fbo_full
            self._set_state(target, fbo, s)
            vao = self._geometry_vao(mesh, inst is not None, N) if draw else None
            depth_scales = _depth_scales(clip, inst, mesh.bounds)  # [B]
            gl_clip = _gl_from_py_clip(target, size) @ clip  # [B, 4, 4]
            for b in range(B):
                target.clear(fbo, 0.0, 0.0, 0.0, 0.0)
                if draw:
                    a = depth_scales[b]
                    m = gl_clip[b].copy()
                    m[2] = a * m[2] - m[3]  # z' = a z - w: GL's near plane is z = 0
                    prog = vao.program
                    prog["u_clip"].write(np.ascontiguousarray(m.T, dtype=np.float32).tobytes())  # column-major
                    prog["u_depth_scale"].value = 2.0 / a  # window z = a (z/w) / 2
                    if inst is not None:
                        prog["u_faces"].value = mesh.num_faces
                        mesh.write_instances(inst, b)
                        vao.render(self._mgl.TRIANGLES, vertices=3 * mesh.num_faces, instances=N)
                    else:
                        vao.render(self._mgl.TRIANGLES, vertices=3 * mesh.num_faces)
                    self.counters.draws += 1
                face[b] = self._read(fbo, 1, 1, "i4", target)[..., 0]
                attr[b] = self._read(fbo, 2, 4, "f4", target)
        face -= 1
        depth = np.where(face >= 0, attr[..., 0], np.float32(np.inf))
        return Fragments(
            face_index=torch.from_numpy(face)[..., None],
            bary=torch.from_numpy(np.ascontiguousarray(attr[..., 1:]))[..., None, :],
            depth=torch.from_numpy(depth)[..., None],
        )

    # -- drawing ---------------------------------------------------------------------------------
    def _set_state(self, target: _Target, fbo, settings: RasterSettings) -> None:
        """Depth test (strictly less), no blending, culling as asked, the guard-band viewport."""
        ctx, mgl = self.ctx, self._mgl
        ctx.enable(mgl.DEPTH_TEST)
        ctx.disable(mgl.BLEND)
        ctx.depth_func = "<"
        if settings.cull_backfaces:
            ctx.enable(mgl.CULL_FACE)
            ctx.front_face = "ccw"
            ctx.cull_face = "back"
        else:
            ctx.disable(mgl.CULL_FACE)
        fbo.use()
        ctx.viewport = target.viewport

    def _vertex_data(self, batch: TriangleBatch, screen: np.ndarray, b: int, faces_flat: np.ndarray, size, channels, target):
        """float32 ``[3F, 5 + C]`` per-corner vertex records: clip position, depth, color."""
        height, width = size
        sv = screen[b]  # [V, 3] float64 screen (x_px, y_px, depth)
        # Snap with the rule's rounding (np.rint: half to even), then to NDC.
        with np.errstate(all="ignore"):
            # window x = x_px, window y = H - y_px (GL's origin is the bottom left)
            x_ndc = (np.rint(sv[:, 0] * SUBPIXEL) / SUBPIXEL - target.cx) / (target.vw / 2)
            y_ndc = (height - np.rint(sv[:, 1] * SUBPIXEL) / SUBPIXEL - target.cy) / (target.vh / 2)
        depth = sv[:, 2]
        color_mode, colors = _color_mode(batch)
        k = 5 + (0 if color_mode == "none" else channels)
        per_vertex = np.empty((sv.shape[0], 5 if color_mode == "face" else k), dtype=np.float32)
        # Depth (z, or z/w for clip space) is mapped affinely into NDC [-1 + m, 1 - m], so GL's
        # near and far planes never cut anything: clip-space input arrives already clipped
        # against py_gpu's near plane by the front end (py_gpu.frontend), with every w > 0.
        used = depth[faces_flat] if faces_flat.size else depth[:0]
        zmin, zmax = (float(used.min()), float(used.max())) if used.size else (0.0, 0.0)
        if zmax > zmin:
            with np.errstate(over="ignore", invalid="ignore"):  # unused vertices may lie further out
                if np.isfinite(zmax - zmin):
                    z_ndc = (depth - zmin) * (2.0 * (1.0 - _DEPTH_MARGIN) / (zmax - zmin)) - (1.0 - _DEPTH_MARGIN)
                else:  # a range wider than float64 holds (huge extents): in halves, which do not overflow
                    z_ndc = (depth / 2 - zmin / 2) * (2.0 * (1.0 - _DEPTH_MARGIN) / (zmax / 2 - zmin / 2)) \
                        - (1.0 - _DEPTH_MARGIN)
        else:
            z_ndc = np.zeros_like(depth)
        w = batch.vertices[b, :, 3].detach().to("cpu", torch.float64).numpy() if batch.is_clip_space else 1.0
        per_vertex[:, 0] = x_ndc * w
        per_vertex[:, 1] = y_ndc * w
        # a vertex no face uses may lie far outside the used depth range (behind the camera, say):
        # clamped to float32's range, it is never drawn and casts without overflow
        per_vertex[:, 2] = np.clip(z_ndc * w, -_FLOAT32_MAX, _FLOAT32_MAX)
        per_vertex[:, 3] = w
        per_vertex[:, 4] = depth  # interpolated without perspective: screen depth is affine on screen
        if color_mode == "vertex":
            per_vertex[:, 5:] = colors[b].detach().to("cpu", torch.float32).numpy()
        data = per_vertex[faces_flat]  # [3F, K] one gather, corner-major
        if color_mode == "face":
            out = np.empty((faces_flat.size // 3, 3, k), dtype=np.float32)  # [F, 3 corners, K]
            out[:, :, :5] = data.reshape(-1, 3, 5)
            out[:, :, 5:] = colors[b].detach().to("cpu", torch.float32).numpy()[:, None, :]  # [F, 1, C]
            data = out.reshape(-1, k)
        return data, color_mode

    def _draw(self, batch: TriangleBatch, size, settings: RasterSettings, out: str, background=None):
        """Draw each batch element; yields ``(b, target)`` after each draw, before the next one.

        Called inside ``_gl`` (the caller reads each result back before the next draw)."""
        height, width = size
        mgl = self._mgl
        channels = batch.num_channels if batch.colors is not None else 3
        gl_channels = channels if channels <= _MAX_GL_CHANNELS else 0
        # clip-space input arrives already clipped (every w > 0), so this is the reference's own mapping
        screen = batch.screen_vertices(size).detach().to("cpu", torch.float64).numpy()  # [B, V, 3]
        faces_flat = batch.faces.detach().cpu().numpy().reshape(-1)  # [3F]
        target = self._target(width, height)
        fbo = target.fbo_rgb8 if out == "rgb8" else target.fbo_full
        self._set_state(target, fbo, settings)
        for b in range(batch.batch_size):
            if out == "rgb8":
                target.clear(fbo, *background, 1.0)
            else:
                target.clear(fbo, 0.0, 0.0, 0.0, 0.0)
            if faces_flat.size:
                data, color_mode = self._vertex_data(batch, screen, b, faces_flat, size, gl_channels or channels, target)
                if gl_channels == 0 and color_mode != "none":  # too wide for GL: colors are shaded on the CPU
                    data, color_mode = np.ascontiguousarray(data[:, :5]), "none"
                self._upload(data)
                vao = self._vao(color_mode, out, gl_channels)
                vao.render(mgl.TRIANGLES, vertices=faces_flat.size)
                self.counters.draws += 1
            yield b, target

    # -- readback ----------------------------------------------------------------------------------
    @staticmethod
    def _read(fbo, attachment: int, components: int, dtype: str, target: _Target) -> np.ndarray:
        width, height = target.size
        raw = fbo.read(viewport=target.rect, components=components, attachment=attachment, dtype=dtype, alignment=1)
        arr = np.frombuffer(raw, dtype=np.dtype(dtype.replace("f1", "u1"))).reshape(height, width, components)
        return arr[::-1]  # GL row 0 is the bottom

    def _fragments(self, batch: TriangleBatch, size, settings: RasterSettings) -> Fragments:
        height, width = size
        B = batch.batch_size
        face = np.empty((B, height, width), dtype=np.int64)
        attr = np.empty((B, height, width, 4), dtype=np.float32)
        with self._gl(f"{type(self).__name__}.rasterize"):
            for b, target in self._draw(batch, size, settings, "full"):
                face[b] = self._read(target.fbo_full, 1, 1, "i4", target)[..., 0]
                attr[b] = self._read(target.fbo_full, 2, 4, "f4", target)
        face -= 1
        covered = face >= 0
        depth = np.where(covered, attr[..., 0], np.float32(np.inf))
        bary = attr[..., 1:]
        dtype = batch.dtype
        return Fragments(
            face_index=torch.from_numpy(face)[..., None],
            bary=torch.from_numpy(bary).to(dtype)[..., None, :],
            depth=torch.from_numpy(depth).to(dtype)[..., None],
        )

    def _frame(self, batch: TriangleBatch, size, background, settings: RasterSettings, blend) -> Frame:
        channels = batch.num_channels
        if channels > _MAX_GL_CHANNELS:
            return super()._frame(batch, size, background, settings, blend)
        height, width = size
        B = batch.batch_size
        image = np.empty((B, height, width, channels), dtype=np.float32)
        face = np.empty((B, height, width), dtype=np.int64)
        depth = np.empty((B, height, width), dtype=np.float32)
        with self._gl(f"{type(self).__name__}.render_frame"):
            for b, target in self._draw(batch, size, settings, "full"):
                fbo = target.fbo_full
                face[b] = self._read(fbo, 1, 1, "i4", target)[..., 0]
                depth[b] = self._read(fbo, 2, 1, "f4", target)[..., 0]
                image[b] = self._read(fbo, 0, channels, "f4", target)
        face -= 1
        covered = face >= 0
        bg = np.zeros(channels, dtype=np.float32)
        bg[: min(3, channels)] = background[: min(3, channels)]
        image = np.where(covered[..., None], image, bg)
        depth[~covered] = np.inf
        dtype = batch.dtype
        return Frame(
            image=torch.from_numpy(image).to(dtype),
            alpha=torch.from_numpy(covered[..., None]).to(dtype),
            depth=torch.from_numpy(depth).to(dtype),
            face_index=torch.from_numpy(face),
        )

    def _rgb8(self, batch: TriangleBatch, size, background, settings: RasterSettings) -> torch.Tensor:
        """Drawn into an 8-bit RGB attachment cleared to the background, and only that is read
        back. Colors with other than 3 channels take the general path."""
        if batch.num_channels != 3:
            return super()._rgb8(batch, size, background, settings)
        height, width = size
        out = np.empty((batch.batch_size, height, width, 3), dtype=np.uint8)
        bg8 = tuple(float(np.floor(min(max(c, 0.0), 1.0) * 255.0 + 0.5)) / 255.0 for c in background)
        with self._gl(f"{type(self).__name__}.render_rgb8"):
            for b, gl_target in self._draw(batch, size, settings, "rgb8", background=bg8):
                out[b] = self._read(gl_target.fbo_rgb8, 0, 3, "f1", gl_target)
        return torch.from_numpy(out)


_FORK_LOCK = threading.Lock()  # serializes backends' first use in a forked child


def _after_fork_in_child() -> None:
    global _FORK_LOCK
    _FORK_LOCK = threading.Lock()  # another thread of the parent may have held it


os.register_at_fork(after_in_child=_after_fork_in_child)


def _matrices(where: str, name: str, m, dims: int) -> np.ndarray:
    """float64 numpy ``[B, 4, 4]`` (``dims`` 3) or ``[B, N, 4, 4]`` (``dims`` 4) from a float tensor."""
    check_tensor(where, name, m)
    check_float(where, name, m)
    if m.dim() == dims - 1:
        m = m[None]
    if m.dim() != dims or m.shape[-2:] != (4, 4) or m.shape[0] == 0:
        want = "[B, 4, 4] or [4, 4]" if dims == 3 else "[B, N, 4, 4] or [N, 4, 4]"
        raise PyGpuValueError(f"{where}: `{name}` must have shape {want}, got {tuple(m.shape)}")
    check_finite(where, name, m)
    return m.detach().to("cpu", torch.float64).numpy()


def _gl_from_py_clip(target: _Target, size) -> np.ndarray:
    """float64 ``[4, 4]``: py_gpu clip space -> GL clip space in the guard-band viewport (x, y only).

    Image pixel ``x_px = (x/w + 1) W/2`` sits at GL NDC ``(x_px - cx) / (vw/2)``; GL's window y is
    ``H - y_px = (y/w + 1) H/2``. Both are affine in ``x/w`` (``y/w``), so they fold into clip space.
    """
    height, width = size
    g = np.eye(4)
    g[0, 0], g[0, 3] = width / target.vw, (width - 2.0 * target.cx) / target.vw
    g[1, 1], g[1, 3] = height / target.vh, (height - 2.0 * target.cy) / target.vh
    return g


#: Which of ``(lo, hi)`` each box corner takes per axis (x slowest), and the axes.
_BOX_CORNERS = np.array([[i >> 2 & 1, i >> 1 & 1, i & 1] for i in range(8)])
_XYZ = np.arange(3)


def _corners(bounds: np.ndarray) -> np.ndarray:
    """The 8 homogeneous corners ``[8, 4]`` of the box ``bounds`` (kept with a GLMesh's own bounds,
    which never change)."""
    held = _CORNERS_OF.get(id(bounds))
    if held is not None and held[0] is bounds:
        return held[1]
    corners = np.ones((8, 4))
    corners[:, :3] = np.asarray(bounds, dtype=np.float64)[_BOX_CORNERS, _XYZ]
    corners.flags.writeable = False
    if isinstance(bounds, np.ndarray) and not bounds.flags.writeable:
        if len(_CORNERS_OF) >= 256:
            _CORNERS_OF.clear()
        _CORNERS_OF[id(bounds)] = (bounds, corners)
    return corners


#: id(bounds) -> (bounds, corners) for read-only bounds arrays (each GLMesh's).
_CORNERS_OF: dict = {}


def _depth_scales(clip: np.ndarray, inst: np.ndarray | None, bounds: np.ndarray) -> np.ndarray:
    """float64 ``[B]``: the ``a`` of ``z' = a z - w`` for each batch element.

    GL keeps ``z'/w <= 1``, i.e. ``z/w <= 2/a``. The largest ``z/w`` of a mesh in front of the near
    plane is reached at a corner of its bounding box (``z/w`` is linear-fractional, so its maximum
    over the convex box cut by ``z >= 0`` lies at a vertex of that polytope; the vertices on the
    plane itself have ``z/w = 0``). ``a = 1`` (the whole depth buffer holds ``z/w`` in [0, 2])
    unless some corner lies further, then ``a`` shrinks so that it stays inside with a margin.
    """
    corners = _corners(bounds)  # [8, 4]
    if inst is None:
        pts = np.einsum("bij,kj->bki", clip, corners)  # [B, 8, 4]
    else:
        world = np.einsum("bnij,kj->bnki", inst, corners)  # [B|1, N, 8, 4]
        pts = np.einsum("bij,bnkj->bnki", clip, np.broadcast_to(world, (clip.shape[0],) + world.shape[1:]))
        pts = pts.reshape(clip.shape[0], -1, 4)
    z, w = pts[..., 2], pts[..., 3]
    with np.errstate(all="ignore"):
        zw = np.where((z >= 0) & (w > 0), z / w, 0.0)
    zmax = zw.max(-1) if zw.shape[-1] else np.zeros(clip.shape[0])
    return np.minimum(1.0, 2.0 * (1.0 - _DEPTH_MARGIN) / np.maximum(zmax, 1e-300))


def _color_mode(batch: TriangleBatch) -> tuple[str, torch.Tensor | None]:
    if batch.vertex_colors is not None:
        return "vertex", batch.vertex_colors
    if batch.face_colors is not None:
        return "face", batch.face_colors
    return "none", None


def _probe() -> str | None:
    if find_spec("moderngl") is None:
        return 'moderngl is not installed; install it with: pip install "py_gpu[gl]"'
    return probe_gl()


def register() -> None:
    """Register the backend as ``"moderngl"`` (aliases ``"opengl"``, ``"gl"``, ``"gpu"``)."""
    register_backend(
        "moderngl",
        ModernGLBackend,
        probe=_probe,
        priority=100,
        aliases=("opengl", "gl", "gpu"),
        summary="offscreen OpenGL (EGL when headless), exact, fast",
    )
