"""GL shading: vertex colors, textures, lights and gamma in GLSL over a ``GLMesh``, one readback.

The Renderer's plain frames (nothing needs a gradient) are shaded here instead of in torch. The
formulas are py_gpu's own, written again in GLSL so that the two paths agree to float32
rounding:

- interpolation: GL's perspective-correct varyings of world position, normal, UV and color;
- textures (:mod:`py_gpu.shading.texture`): row 0 at the top, v up, texel centers sampled
  exactly; nearest and bilinear through GL's own filters (the same formulas); trilinear on the
  same box-filtered pyramid (``build_mipmaps``, uploaded level by level) with the same level of
  detail ``log2(max(|d uv/dx|, |d uv/dy|) * size)`` and the same blend of two bilinear levels;
  one texture, an atlas with per-material rects, or one texture per material id;
- lights (:mod:`py_gpu.shading.lights`): ambient, directional and point lights, Lambert or
  Blinn-Phong, two-sided normals, then ``clamp(c, 0, 1) ** (1 / gamma)``.

Per frame only matrices and uniforms reach GL; the mesh's vertex attributes (positions, normals,
UVs, colors, indexed) and per-face material ids live in GL buffers next to the ``GLMesh`` and
are sent again only when the tensors they came from change. A frame is one draw per view into a
float RGBA colour attachment. Depth comes one of two ways (``DEPTH_OUT_FACES``): for meshes of up
to 40k faces (times instances) the fragment shader writes py_gpu's z/w into alpha, cleared to
+inf, so there is nothing more to read or decode; for larger ones, whose many small triangles run
the fragment shader on many more (partly covered) quads, reading ``gl_FragCoord.z`` measured 5-8%
of the draw, and the depth buffer is read back instead (0.25 ms at 640x360). Face ids are a
second, lazy pass (:func:`shade_faces`) drawn the first time a frame's ``face_index`` is read: an
int32 attachment of each face's id from a flat varying of its own provoking corner (see
``provoking_layout``). A caller who never reads them never pays for the varying, which measured
2-10% of a draw on llvmpipe, nor for the vertex copies it needs.
Rows are flipped in the projection, so each reads back top row first, into host arrays that
torch wraps without a copy (see :class:`Recycler`).
"""

from __future__ import annotations

import sys
import weakref
from collections import OrderedDict
from dataclasses import dataclass, replace

import numpy as np
import torch

from .._check import BackendUnavailableError
from .moderngl import MAX_LIGHTS, MAX_RECTS, MAX_TEXTURES, GLMesh, ModernGLBackend, _Target, _depth_scales

__all__ = ["MAX_FACES", "MAX_LIGHTS", "MAX_RECTS", "MAX_TEXTURES", "Recycler", "ShadeSpec", "ShadeInputs",
           "coverage", "decode_depth", "decode_faces", "ensure_attributes", "shade_faces", "shade_geometry"]
#: Textures kept in GL between frames (least recently used ones are released).
MAX_CACHED_TEXTURES = 32
#: Width of the per-face material-id texture.
_MATERIAL_WIDTH = 4096
#: Faces (times instances) the int32 id attachment holds: face ``f`` is stored as ``f + 1``, and the
#: cleared 0 is empty.
MAX_FACES = 2**31 - 2
#: Largest face count (times instances) whose shading pass writes depth into the colour readback's
#: alpha; larger meshes read the depth buffer. At 640x360 on llvmpipe the shader's depth cost 0.07
#: ms at 20k faces and 1.1 ms at 80k, against 0.25-0.3 ms to read and decode the depth buffer.
DEPTH_OUT_FACES = 40_000
#: The texture samplers' uniform names, by slot.
_TEX_NAMES = tuple(f"u_tex{k}" for k in range(MAX_TEXTURES))
#: Texture unit of the UV pre-pass image (the frame's textures take units 1..MAX_TEXTURES).
_UV_UNIT = MAX_TEXTURES + 1

_VERTEX = """
#version 330
invariant gl_Position;        // the UV pre-pass, the shading pass and the id pass cover the same fragments
in vec3 in_position;
in vec3 in_normal;
in vec2 in_uv;
in vec3 in_color;
in int in_face;               // the face whose provoking (last) corner this vertex is
#ifdef INSTANCED
in mat4 in_instance;
flat out int v_instance;
#endif
uniform mat4 u_clip;          // GL clip from object space: camera, scene transform, flip, depth remap
uniform mat4 u_model;         // world from object (the scene transform)
uniform mat3 u_normal_matrix; // inverse transpose of u_model's 3x3
out vec3 v_world;
out vec3 v_normal;
out vec2 v_uv;
out vec3 v_color;
#ifdef FACE_IDS
flat out int v_face;          // from the provoking vertex: the face id, without gl_PrimitiveID
#endif
void main() {
    vec4 p = vec4(in_position, 1.0);
    vec3 n = in_normal;
#ifdef INSTANCED
    p = in_instance * p;
    n = transpose(inverse(mat3(in_instance))) * n;
    v_instance = gl_InstanceID;
#endif
    gl_Position = u_clip * p;
#ifdef MODEL
    v_world = (u_model * p).xyz;
    v_normal = u_normal_matrix * n;
#else
    v_world = p.xyz;  // no scene transform: world space is object space
    v_normal = n;
#endif
    v_uv = in_uv;
    v_color = in_color;
#ifdef FACE_IDS
    v_face = in_face;
#endif
}
"""

_FRAGMENT_HEAD = """
#version 330
in vec3 v_world;
in vec3 v_normal;
in vec2 v_uv;
in vec3 v_color;
#ifdef FACE_IDS
flat in int v_face;
#endif
#ifdef INSTANCED
flat in int v_instance;
#endif
uniform float u_depth_scale;  // py_gpu depth z/w = gl_FragCoord.z * u_depth_scale
uniform vec3 u_eye;
uniform vec3 u_ambient;
uniform vec3 u_specular;
uniform float u_shininess;
uniform float u_inv_gamma;
#if N_DIR > 0
uniform vec3 u_dir_to_light[N_DIR];
uniform vec3 u_dir_radiance[N_DIR];
#endif
#if N_POINT > 0
uniform vec3 u_point_position[N_POINT];
uniform vec3 u_point_radiance[N_POINT];
uniform vec3 u_point_attenuation[N_POINT];
#endif
#ifdef MATERIALS
uniform isampler2D u_material;  // material id of face f at texel (f % width, f / width)
#endif
#if N_RECTS > 0
uniform vec4 u_rects[N_RECTS];
#endif
#ifdef UV_IMAGE
uniform sampler2D u_uv_image;  // the UV pre-pass: (u, v, covered, 0) per framebuffer pixel
uniform ivec4 u_rect;          // the image in framebuffer pixels (x, y, width, height)
#endif
layout(location = 0) out vec4 f_color;  // (r, g, b, depth) with DEPTH_OUT, else (r, g, b, 1)

vec3 unit(vec3 v) {
    return v * inversesqrt(max(dot(v, v), 1e-24));  // v / max(|v|, 1e-12), as the torch path
}

#ifdef UV_IMAGE
// uv_derivatives on the UV image: the difference to the next pixel along `step` when both are
// covered, else to the previous one, else 0
vec2 uv_step(ivec2 px, ivec2 step, vec2 here) {
    ivec2 lo = u_rect.xy, hi = u_rect.xy + u_rect.zw;
    ivec2 f = px + step, k = px - step;
    if (all(greaterThanEqual(f, lo)) && all(lessThan(f, hi))) {
        vec4 t = texelFetch(u_uv_image, f, 0);
        if (t.z > 0.5) return t.xy - here;
    }
    if (all(greaterThanEqual(k, lo)) && all(lessThan(k, hi))) {
        vec4 t = texelFetch(u_uv_image, k, 0);
        if (t.z > 0.5) return here - t.xy;
    }
    return vec2(0.0);
}
#endif

vec3 sample_level(sampler2D tex, vec2 uv, float level) {
    return textureLod(tex, vec2(uv.x, 1.0 - uv.y), level).rgb;  // texture row 0 is the image's top
}

vec3 sample_tex(sampler2D tex, vec2 uv, vec4 grad, float levels) {
#ifdef TRILINEAR
    vec2 size = vec2(textureSize(tex, 0));
    float dx = length(grad.xy * size);
    float dy = length(grad.zw * size);
    float level = clamp(log2(max(max(dx, dy), 1e-12)), 0.0, levels - 1.0);
    float lo = floor(level);
    float frac = level - lo;
    vec3 c = sample_level(tex, uv, lo) * (1.0 - frac);
    if (frac > 0.0) c += sample_level(tex, uv, lo + 1.0) * frac;
    return c;
#else
    return texture(tex, vec2(uv.x, 1.0 - uv.y)).rgb;  // no mip levels in use: GL's filter at level 0
#endif
}
"""

_FRAGMENT_MAIN = """
void main() {
#ifdef PREPASS
    f_color = vec4(v_uv, 1.0, 0.0);
    return;
#endif
#ifdef UV_IMAGE
    ivec2 px = ivec2(gl_FragCoord.xy);
    vec2 here = texelFetch(u_uv_image, px, 0).xy;
    vec4 grad = vec4(uv_step(px, ivec2(1, 0), here), uv_step(px, ivec2(0, 1), here));
#else
    vec4 grad = vec4(0.0);  // only trilinear filtering reads it
#endif
#ifdef MATERIALS
    int face = v_face;  // gl_PrimitiveID costs llvmpipe a primitive-assembly stage (~20% of a draw)
    int material = texelFetch(u_material, ivec2(face % MATERIAL_WIDTH, face / MATERIAL_WIDTH), 0).r;
#endif
#ifdef WHITE
    vec3 albedo = vec3(1.0);  // every vertex color is 1: no color varying to interpolate
#else
    vec3 albedo = v_color;
#endif
TEXTURE_CODE
    vec3 color = albedo;
#ifdef LIT
    vec3 n = unit(v_normal);
    vec3 view = unit(u_eye - v_world);
    if (dot(n, view) < 0.0) n = -n;  // two-sided
    vec3 diffuse = u_ambient;
    vec3 specular = vec3(0.0);
#if N_DIR > 0
    for (int i = 0; i < N_DIR; ++i) light(n, view, u_dir_to_light[i], u_dir_radiance[i], diffuse, specular);
#endif
#if N_POINT > 0
    for (int i = 0; i < N_POINT; ++i) {
        vec3 delta = u_point_position[i] - v_world;
        float dist = max(length(delta), 1e-12);
        vec3 att = u_point_attenuation[i];
        light(n, view, delta / dist, u_point_radiance[i] / (att.x + att.y * dist + att.z * dist * dist),
              diffuse, specular);
    }
#endif
    color = albedo * diffuse + specular;
#endif
#ifdef GAMMA
    color = clamp(color, 0.0, 1.0);
    color = vec3(color.r > 0.0 ? pow(color.r, u_inv_gamma) : 0.0, color.g > 0.0 ? pow(color.g, u_inv_gamma) : 0.0,
                 color.b > 0.0 ? pow(color.b, u_inv_gamma) : 0.0);
#endif
#ifdef DEPTH_OUT
    f_color = vec4(color, gl_FragCoord.z * u_depth_scale);  // as rasterize_geometry writes depth
#else
    f_color = vec4(color, 1.0);  // depth is read from the depth buffer
#endif
}
"""

#: The id pass: each covered pixel's face (instance-major with instances) plus one; 0 is empty.
_ID_FRAGMENT = """
#version 330
flat in int v_face;
#ifdef INSTANCED
flat in int v_instance;
#endif
uniform int u_faces;          // faces per instance
layout(location = 0) out int f_face;
void main() {
    int face = v_face;
#ifdef INSTANCED
    face += v_instance * u_faces;
#endif
    f_face = face + 1;
}
"""

_LIGHT = """
void light(vec3 n, vec3 view, vec3 to_light, vec3 radiance, inout vec3 diffuse, inout vec3 specular) {
    float ndl = dot(n, to_light);
    diffuse += radiance * max(ndl, 0.0);
#ifdef BLINN_PHONG
    vec3 h = unit(to_light + view);
    float ndh = max(dot(n, h), 0.0);
    specular += radiance * u_specular * (ndl > 0.0 ? pow(max(ndh, 1e-12), u_shininess) : 0.0);
#endif
}
"""


@dataclass(frozen=True)
class ShadeSpec:
    """What selects a shading program (one compiled program per distinct spec).

    Attributes:
        instanced: per-instance transforms.
        n_dir, n_point: directional and point lights (ambient lights are summed into one uniform).
        model: ``"unlit"``, ``"lambert"`` or ``"blinn_phong"``.
        textures: ``"none"``, ``"single"`` (one texture for every face), ``"atlas"`` (one texture,
            per-material rects) or ``"materials"`` (slot ``m`` textures material ``m``).
        slots: for ``"materials"``, which material ids have a texture (``True``) or none (1).
        n_rects: atlas rects.
        filter: ``"nearest"``, ``"bilinear"`` or ``"trilinear"``.
        wrap: ``"repeat"`` or ``"clamp"``.
        gamma: display encoding applied.
    """

    instanced: bool
    n_dir: int
    n_point: int
    model: str
    textures: str = "none"
    slots: tuple = ()
    n_rects: int = 0
    filter: str = "bilinear"
    wrap: str = "repeat"
    gamma: bool = False
    prepass: bool = False  # the UV pre-pass program of a trilinear spec
    ids: bool = False  # the id pass program (see ``shade_faces``)
    depth_out: bool = False  # the shading pass writes py_gpu's depth into alpha (see ``DEPTH_OUT_FACES``)
    white: bool = False  # every vertex color is (1, 1, 1)
    transformed: bool = False  # a scene transform (else world space is object space)

    @property
    def uv_image(self) -> bool:
        """Trilinear texturing takes UV derivatives from a pre-pass UV image, as the torch path does."""
        return self.filter == "trilinear" and self.textures != "none"

    @property
    def needs_materials(self) -> bool:
        return self.textures in ("atlas", "materials")

    @property
    def face_ids(self) -> bool:
        """The program reads each face's id: the id pass, and per-material textures or rects."""
        return self.ids or self.needs_materials

    def id_pass(self) -> "ShadeSpec":
        """The spec of this one's id pass: only what places the fragments (instancing) matters."""
        return ShadeSpec(instanced=self.instanced, n_dir=0, n_point=0, model="unlit", ids=True)


@dataclass
class ShadeInputs:
    """Per-frame values of one shaded draw (numpy float64 unless said otherwise).

    Attributes:
        clip: ``[B, 4, 4]`` py_gpu clip from object (camera @ transforms); model: ``[B|1, 4, 4]`` world
        from object (the transforms; identity without);
        instances: ``[B|1, N, 4, 4]`` or None; eye: ``[B, 3]``; ambient: ``[B, 3]``;
        dir_to_light, dir_radiance: ``[B, n_dir, 3]``; point_position, point_radiance:
        ``[B, n_point, 3]``; point_attenuation: ``[n_point, 3]``; specular: ``[B, 3]``;
        shininess: ``[B]``; gamma: float or None; textures: one ``(source, mipmapped, levels)``
        entry per texture slot (None: untextured): ``source`` the tensor whose identity and
        version key the GL copy, ``levels()`` the float ``[1, Ht, Wt, C]`` levels, level 0 first
        (all of them when ``mipmapped``); rects: ``[M, 4]`` or None; background: RGB floats.
    """

    clip: np.ndarray
    model: np.ndarray
    instances: np.ndarray | None
    eye: np.ndarray
    ambient: np.ndarray
    dir_to_light: np.ndarray
    dir_radiance: np.ndarray
    point_position: np.ndarray
    point_radiance: np.ndarray
    point_attenuation: np.ndarray
    specular: np.ndarray
    shininess: np.ndarray
    gamma: float | None
    textures: list
    rects: np.ndarray | None
    background: tuple


def _texture_code(spec: ShadeSpec) -> str:
    """GLSL that multiplies ``albedo`` by the frame's texture factor."""
    if spec.textures == "none":
        return ""
    if spec.textures == "single":
        return "    albedo *= sample_tex(u_tex0, v_uv, grad, u_levels[0]);"
    if spec.textures == "atlas":
        local = "fract(v_uv)" if spec.wrap == "repeat" else "clamp(v_uv, 0.0, 1.0)"
        return ("    vec4 rect = u_rects[clamp(material, 0, N_RECTS - 1)];\n"
                f"    albedo *= sample_tex(u_tex0, rect.xy + {local} * (rect.zw - rect.xy), grad, u_levels[0]);")
    lines, slot = [], 0
    for m, has in enumerate(spec.slots):
        if has:
            lines.append(f"    {'else ' if slot else ''}if (material == {m}) "
                         f"albedo *= sample_tex(u_tex{slot}, v_uv, grad, u_levels[{slot}]);")
            slot += 1
    return "\n".join(lines)


def _sources(spec: ShadeSpec) -> tuple[str, str]:
    n_tex = _texture_count(spec)
    defines = {"N_DIR": spec.n_dir, "N_POINT": spec.n_point, "N_RECTS": spec.n_rects,
               "MATERIAL_WIDTH": _MATERIAL_WIDTH}
    flags = {"INSTANCED": spec.instanced, "LIT": spec.model != "unlit", "BLINN_PHONG": spec.model == "blinn_phong",
             "MATERIALS": spec.needs_materials, "TRILINEAR": spec.filter == "trilinear", "GAMMA": spec.gamma,
             "PREPASS": spec.prepass, "WHITE": spec.white, "MODEL": spec.transformed,
             "UV_IMAGE": spec.uv_image and not spec.prepass, "FACE_IDS": spec.face_ids,
             "DEPTH_OUT": spec.depth_out and not spec.prepass}
    head = "#version 330\n" + "".join(f"#define {k} {v}\n" for k, v in defines.items())
    head += "".join(f"#define {k} 1\n" for k, on in flags.items() if on)
    samplers = "".join(f"uniform sampler2D u_tex{k};\n" for k in range(n_tex))
    samplers += f"uniform float u_levels[{n_tex}];\n" if n_tex else ""
    frag = (head + _FRAGMENT_HEAD.split("\n", 2)[2].replace("vec3 unit(", samplers + "vec3 unit(", 1) + _LIGHT
            + _FRAGMENT_MAIN.replace("TEXTURE_CODE", _texture_code(spec)))
    if spec.ids:
        frag = head + _ID_FRAGMENT.split("\n", 2)[2]
    vert = head + _VERTEX.split("\n", 2)[2]
    return vert, frag


def _texture_count(spec: ShadeSpec) -> int:
    if spec.textures == "materials":
        return sum(1 for s in spec.slots if s)
    return 0 if spec.textures == "none" else 1


# ---- GL resources ----------------------------------------------------------------------------------
class ShadeTarget:
    """The shading framebuffer of one image size: the target's float RGBA texture (colour and
    depth) with its depth buffer, the id pass's framebuffer (the target's int32 face texture), and
    the host arrays its frames are read into."""

    def __init__(self, ctx, target: _Target):
        self.target = target
        self.fbo = ctx.framebuffer([target.color], target.depth)
        self.fbo.scissor = target.rect
        self.fbo_ids = None  # the id pass (made on first use)
        self.uv = self.fbo_uv = None  # the UV pre-pass image (trilinear), made on first use
        self.host = Recycler()  # the readback arrays of this size

    def id_pass(self, ctx):
        """The id pass framebuffer: int32 face id + 1, sharing the depth buffer."""
        if self.fbo_ids is None:
            self.fbo_ids = ctx.framebuffer([self.target.face], self.target.depth)
            self.fbo_ids.scissor = self.target.rect
        return self.fbo_ids

    def uv_pass(self, ctx):
        """The UV pre-pass framebuffer: float (u, v, covered, 0), sharing the depth buffer."""
        if self.fbo_uv is None:
            self.uv = ctx.texture(self.target.depth.size, 4, dtype="f4")
            self.fbo_uv = ctx.framebuffer([self.uv], self.target.depth)
            self.fbo_uv.scissor = self.target.rect
            self.fbo_uv.viewport = self.target.rect  # use() sets a framebuffer's own viewport
        return self.fbo_uv

    def objects(self) -> list:
        return [o for o in (self.fbo, self.fbo_ids, self.fbo_uv, self.uv) if o is not None]


class Recycler:
    """Host arrays handed out again once nothing but the recycler refers to them.

    A frame's tensors wrap the readback arrays without a copy (``torch.from_numpy``), so an array
    is busy while any tensor, view or array made from it lives, and free once its reference count
    is back to the recycler's own. Fresh arrays of a few MB per frame cost page faults (glibc hands
    freed blocks that large back to the kernel): about 2.5 ms of a 9 ms 640x360 frame on llvmpipe.
    Where reference counts cannot be read (not CPython), every array is fresh.
    """

    #: Arrays kept per shape and dtype (a caller holding more frames than this gets fresh ones).
    PER_KEY = 2
    #: Shapes and dtypes kept (least recently used ones are dropped).
    MAX_KEYS = 8

    def __init__(self):
        self._pools: OrderedDict = OrderedDict()
        probe = [np.empty(0)]
        self._idle = _refs(probe, 0) if hasattr(sys, "getrefcount") else None

    def take(self, shape: tuple, dtype) -> np.ndarray:
        """An uninitialized array of ``shape`` and ``dtype`` that no one else holds."""
        if self._idle is None:
            return np.empty(shape, dtype)
        key = (tuple(shape), np.dtype(dtype).str)
        pool = self._pools.setdefault(key, [])
        self._pools.move_to_end(key)
        while len(self._pools) > self.MAX_KEYS:
            self._pools.popitem(last=False)
        for k in range(len(pool)):
            if _refs(pool, k) <= self._idle:
                return pool[k]
        arr = np.empty(shape, dtype)
        if len(pool) < self.PER_KEY:
            pool.append(arr)
        return arr


def _refs(pool: list, k: int) -> int:
    """References to ``pool[k]`` as seen from here (the same expression calibrates and checks)."""
    return sys.getrefcount(pool[k])


class _MeshAttributes:
    """A mesh's shading buffers: vertex records (float32 position, normal, uv, then color unless
    every color is 1, then the int32 face id; ``columns`` names them), two int32 ``[3F]`` index
    buffers, int32 per-face material ids (a texture), and their vertex arrays. The records are the
    mesh's vertices laid out by :func:`provoking_layout`: ``ibo`` gives every face a provoking
    corner of its own, for programs that read face ids; ``ibo_plain`` is the mesh's own faces,
    whose vertices come first in the records, for those that do not (the copies go unused, and
    the triangles are the same, corner for corner). A white mesh's records leave the color out
    (a 36 instead of a 48 byte stride measured 3-6% of an 80k-face draw on llvmpipe).

    ``pending`` holds weak references to the readbacks whose id pass (:func:`shade_faces`) has
    not run yet; they draw with these buffers, so :meth:`settle` runs them before the buffers are
    released. It is read and changed only under the backend's lock (plain references without
    callbacks, so that no collection changes it from another thread), and pruned as it grows."""

    def __init__(self, ctx, key, vertices: np.ndarray, faces: np.ndarray, materials: np.ndarray):
        self.key = key
        self.white = bool((vertices[:, 8:] == 1.0).all())  # the colors are all 1: a program without them
        indices, rows, face_of = provoking_layout(faces, vertices.shape[0])
        floats = 8 if self.white else 11
        self.columns = [("in_position", 3, "f"), ("in_normal", 3, "f"), ("in_uv", 2, "f")] + \
            ([] if self.white else [("in_color", 3, "f")]) + [("in_face", 1, "i")]
        records = np.empty((rows.shape[0], floats + 1), dtype=np.float32)
        records[:, :floats] = vertices[rows, :floats]
        records.view(np.int32)[:, floats] = face_of
        self.vbo = ctx.buffer(records.tobytes())
        self.ibo = ctx.buffer(indices.tobytes())
        self.ibo_plain = ctx.buffer(np.ascontiguousarray(faces, dtype=np.int32).tobytes())
        self.pending: set = set()
        F = materials.shape[0]
        rows = max(1, -(-F // _MATERIAL_WIDTH))
        table = np.zeros(rows * _MATERIAL_WIDTH, dtype=np.int32)
        table[:F] = materials
        self.materials = ctx.texture((_MATERIAL_WIDTH, rows), 1, table.tobytes(), dtype="i4")
        self.vaos: dict = {}

    def objects(self) -> list:
        return [vao for vao, _ in self.vaos.values()] + [self.vbo, self.ibo, self.ibo_plain, self.materials]

    def wait(self, readback) -> weakref.ref:
        """Note ``readback`` as waiting for its id pass (call with the backend's lock held)."""
        if len(self.pending) >= 64:
            self.pending = {r for r in self.pending if r() is not None}
        ref = weakref.ref(readback)
        self.pending.add(ref)
        return ref

    def settle(self) -> None:
        """Run the id pass of every frame still waiting for it, while these buffers live (call
        with the backend's lock held)."""
        for ref in list(self.pending):
            readback = ref()
            if readback is not None:
                readback.settle()
        self.pending.clear()


def provoking_layout(faces: np.ndarray, V: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vertices such that every face has a provoking (last) corner of its own, so that a flat
    varying carries its face id (``gl_PrimitiveID`` would cost llvmpipe a primitive-assembly stage).

    A face keeps its corners in order (the same triangle, drawn the same way). The first face whose
    last corner is vertex ``v`` owns ``v``; each later one gets a copy of ``v`` appended.

    Returns:
        ``(indices, rows, face_of)``: int32 ``[3F]`` indices into the new vertices, int64 ``[V']``
        the original vertex of each new vertex, int32 ``[V']`` the face it is the provoking corner
        of (0 for a vertex that is none's).
    """
    f = np.asarray(faces, dtype=np.int64).reshape(-1, 3)
    F = f.shape[0]
    last = f[:, 2]
    owner = np.zeros(F, dtype=bool)
    owner[np.unique(last, return_index=True)[1]] = True
    copies = np.flatnonzero(~owner)  # faces whose last corner another face owns
    out = f.copy()
    out[copies, 2] = V + np.arange(copies.size)
    rows = np.concatenate([np.arange(V), last[copies]])
    face_of = np.zeros(rows.shape[0], dtype=np.int32)
    face_of[out[:, 2]] = np.arange(F, dtype=np.int32)
    return np.ascontiguousarray(out.reshape(-1), dtype=np.int32), rows, face_of


def attributes_key(positions, normals, uvs, colors, faces, materials) -> tuple:
    """Identity and in-place versions of the tensors a mesh's shading buffers came from."""
    return tuple((id(t), t._version) for t in (positions, normals, uvs, colors, faces, materials))


def ensure_attributes(backend: ModernGLBackend, mesh: GLMesh, positions, normals, uvs, colors, faces,
                      materials) -> _MeshAttributes:
    """The shading buffers of ``mesh``, made (or made again, counted in ``attribute_uploads``) when
    the tensors changed since."""
    key = attributes_key(positions, normals, uvs, colors, faces, materials)
    got = mesh._shading
    if got is not None and got.key == key:
        return got
    cpu = lambda t: t.detach().to("cpu", torch.float32)  # noqa: E731
    vertices = torch.cat([cpu(positions), cpu(normals), cpu(uvs), cpu(colors)], 1).numpy()  # [V, 11]
    mats = materials.detach().to("cpu", torch.int32).numpy()
    with backend._gl("ModernGLBackend.shade_geometry") as ctx:
        if got is not None:
            got.settle()  # frames still waiting for their face ids draw them with the old buffers
            for obj in got.objects():
                obj.release()
        mesh._shading = _MeshAttributes(ctx, key, vertices, faces.detach().to("cpu").numpy(), mats)
        backend.counters.attribute_uploads += 1
    return mesh._shading


class _GLTexture:
    def __init__(self, ctx, source: torch.Tensor, mipmapped: bool, levels: list[torch.Tensor]):
        self.source, self.version = source, source._version  # the tensor is held: its id stays unique
        self.mipmapped = mipmapped
        self.sampling = None  # (filter, repeat) last set on the GL texture
        top = levels[0]
        Ht, Wt = top.shape[1], top.shape[2]
        self.tex = ctx.texture((Wt, Ht), 3, _rgb(top), dtype="f4")
        self.levels = len(levels)
        if self.levels > 1:
            self.tex.build_mipmaps(0, self.levels - 1)  # allocates the levels; py_gpu's own box filter fills them
            for k, level in enumerate(levels[1:], 1):
                self.tex.write(_rgb(level), level=k)


def _rgb(level: torch.Tensor) -> bytes:
    """float32 RGB bytes of a ``[1, Ht, Wt, C]`` level, row 0 first (C = 1 is gray, C >= 3 keeps RGB)."""
    t = level[0].detach().to("cpu", torch.float32)
    t = t.expand(-1, -1, 3) if t.shape[-1] == 1 else t[..., :3]
    return np.ascontiguousarray(t.numpy()).tobytes()


def _texture(backend: ModernGLBackend, entry) -> _GLTexture:
    source, mipmapped, levels = entry
    cache: OrderedDict = backend._shade_textures
    key = id(source)
    got = cache.get(key)
    if got is not None and got.source is source and got.version == source._version and (got.mipmapped or not mipmapped):
        cache.move_to_end(key)
        return got
    if got is not None:
        got.tex.release()
        cache.pop(key)
    while len(cache) >= MAX_CACHED_TEXTURES:
        cache.popitem(last=False)[1].tex.release()
    got = cache[key] = _GLTexture(backend.ctx, source, mipmapped, levels())
    backend.counters.texture_uploads += 1
    return got


def _shade_target(backend: ModernGLBackend, target: _Target) -> ShadeTarget:
    """``target``'s shading framebuffer, made on first use (released with the target)."""
    if target.shade is None:
        target.shade = ShadeTarget(backend.ctx, target)
    return target.shade


def _program(backend: ModernGLBackend, spec: ShadeSpec):
    key = ("shade", spec)
    prog = backend._programs.get(key)
    if prog is None:
        vert, frag = _sources(spec)
        prog = backend._programs[key] = backend.ctx.program(vertex_shader=vert, fragment_shader=frag)
    return prog


def _vao(backend: ModernGLBackend, mesh: GLMesh, attrs: _MeshAttributes, spec: ShadeSpec, prog, count: int):
    if spec.instanced:
        backend._instance_buffer(mesh, count)
    instances = mesh._instances if spec.instanced else None
    vao, made_with = attrs.vaos.get(spec, (None, None))
    if vao is not None and made_with is not instances:  # the instance buffer grew: a new array
        vao.release()
        vao = None
    if vao is None:
        parts, names = [], []
        for name, n, kind in attrs.columns:
            used = prog.get(name, None) is not None  # the compiler drops inputs a variant does not read
            parts.append(f"{n}{kind}" if used else f"{4 * n}x")
            names += [name] if used else []
        layout = [(attrs.vbo, " ".join(parts), *names)]
        if spec.instanced:
            layout.append((mesh._instances, "16f/i", "in_instance"))
        ibo = attrs.ibo if spec.face_ids else attrs.ibo_plain
        vao = backend.ctx.vertex_array(prog, layout, index_buffer=ibo, index_element_size=4)
        attrs.vaos[spec] = (vao, instances)
    return vao


# ---- one frame -------------------------------------------------------------------------------------
def shade_geometry(backend: ModernGLBackend, mesh: GLMesh, attrs: _MeshAttributes, spec: ShadeSpec,
                   inputs: ShadeInputs, size, settings) -> tuple[np.ndarray, np.ndarray, np.ndarray, Recycler]:
    """Draw and shade ``mesh`` for each of the ``B`` views; read colour and depth back.

    Returns:
        ``(color, depth, scales, host)``: float32 ``[B, H, W, 4]`` whose first three channels are
        the RGB color (the background where empty) and whose fourth, with ``spec.depth_out``, is
        py_gpu's depth z/w (``+inf`` where empty); float32 ``[B, H, W]`` depth buffer values (see
        :func:`decode_depth`), or None with ``depth_out``; the ``[B]`` depth scales, and the
        recycler the arrays came from.
        Row 0 is the image's top. Wrap the arrays (``torch.from_numpy``) and hold them as long as
        they are used, never keep a bare pointer to their memory. The face ids are
        :func:`shade_faces`.
    """
    where = "ModernGLBackend.shade_geometry"
    H, W = size
    clip, inst = inputs.clip, inputs.instances
    B = clip.shape[0]
    N = 1 if inst is None else inst.shape[1]
    with backend._gl(where):
        target = backend._target(W, H)
        st = _shade_target(backend, target)
        out = st.host.take((B, H, W, 4), np.float32)
        depth = None if spec.depth_out else st.host.take((B, H, W), np.float32)
        _begin(backend, target, st.fbo, settings)
        prog = _program(backend, spec)
        vao = _vao(backend, mesh, attrs, spec, prog, N) if mesh.num_faces and N else None
        _bind_textures(backend, prog, spec, inputs, attrs)
        pre = _prepass(backend, spec, mesh, attrs, st, prog, N) if spec.uv_image and vao is not None else None
        gl_clip, scales = _gl_clips(mesh, inputs)
        bg = inputs.background
        for b in range(B):
            target.clear(st.fbo, bg[0], bg[1], bg[2], np.inf)  # unscissored: llvmpipe's fast clear
            if vao is not None:
                if inst is not None:
                    mesh.write_instances(inst, b)
                if pre is not None:
                    _uv_prepass(backend, pre, spec, inputs, b, gl_clip[b], scales[b], st, N)
                _frame_uniforms(prog, spec, inputs, b, gl_clip[b], scales[b], mesh.num_faces)
                vao.render(backend._mgl.TRIANGLES, instances=N)
                backend.counters.draws += 1
                if pre is not None:
                    backend.ctx.depth_func = "<"
            st.fbo.read_into(out[b], viewport=target.rect, components=4, attachment=0, dtype="f4", alignment=1)
            if depth is not None:
                st.fbo.read_into(depth[b], viewport=target.rect, components=1, attachment=-1, dtype="f4", alignment=1)
        backend.ctx.front_face = "ccw"
    return out, depth, scales, st.host


def shade_faces(backend: ModernGLBackend, mesh: GLMesh, attrs: _MeshAttributes, spec: ShadeSpec,
                inputs: ShadeInputs, size, settings, host: Recycler) -> np.ndarray:
    """The id pass of a :func:`shade_geometry` call with the same arguments: int32 ``[B, H, W]``,
    each pixel's face id plus one (instance-major with instances), 0 where empty.

    It draws the same triangles in the same order, state and depth test (the pre-pass's ``<``
    then ``<=`` when the call had one, so that ties go to the same face), from the same vertex
    records through the same ``invariant`` position, so it covers exactly the pixels the
    shading pass covered and the same face wins each one.
    """
    where = "ModernGLBackend.shade_faces"
    H, W = size
    clip, inst = inputs.clip, inputs.instances
    B = clip.shape[0]
    N = 1 if inst is None else inst.shape[1]
    ids = spec.id_pass()
    codes = host.take((B, H, W), np.int32)
    with backend._gl(where):
        if mesh.released:
            raise BackendUnavailableError(f"{where}: the frame's mesh was released before its face ids were read")
        target = backend._target(W, H)
        fbo = _shade_target(backend, target).id_pass(backend.ctx)
        _begin(backend, target, fbo, settings)
        prog = _program(backend, ids)
        vao = _vao(backend, mesh, attrs, ids, prog, N) if mesh.num_faces and N else None
        gl_clip, scales = _gl_clips(mesh, inputs)
        for b in range(B):
            target.clear(fbo, 0.0, 0.0, 0.0, 0.0)
            if vao is not None:
                if inst is not None:
                    mesh.write_instances(inst, b)
                _frame_uniforms(prog, ids, inputs, b, gl_clip[b], scales[b], mesh.num_faces)
                for test in ("<", "<=") if spec.uv_image else ("<",):
                    backend.ctx.depth_func = test
                    vao.render(backend._mgl.TRIANGLES, instances=N)
                    backend.counters.draws += 1
                backend.ctx.depth_func = "<"
            fbo.read_into(codes[b], viewport=target.rect, components=1, attachment=0, dtype="i4", alignment=1)
        backend.ctx.front_face = "ccw"
    return codes


def _begin(backend: ModernGLBackend, target: _Target, fbo, settings) -> None:
    """The state both passes draw in: depth test and culling as asked, ``fbo`` bound, the image
    itself as the viewport (clip space is py_gpu's, rows flipped, which flips the winding too),
    and the last corner as the provoking one (flat face ids)."""
    backend._set_state(target, fbo, settings)
    backend.ctx.viewport = target.rect
    backend.ctx.front_face = "cw"
    backend.ctx.provoking_vertex = backend.ctx.LAST_VERTEX_CONVENTION


def _gl_clips(mesh: GLMesh, inputs: ShadeInputs) -> tuple[np.ndarray, np.ndarray]:
    """Per view, the GL clip matrix with rows flipped ``[B, 4, 4]`` and the depth scale ``[B]``
    (as ``rasterize_geometry`` chooses it)."""
    return _FLIP_ROWS @ inputs.clip, _depth_scales(inputs.clip, inputs.instances, mesh.bounds)


def decode_faces(host: Recycler, codes: np.ndarray) -> np.ndarray:
    """int64 ``[B, H, W]`` face ids (-1 where empty) from the id pass's codes (id + 1, 0 empty)."""
    face = host.take(codes.shape, np.int64)
    np.subtract(codes, 1, out=face)
    return face


def coverage(host: Recycler, depth: np.ndarray) -> np.ndarray:
    """float32 ``[B, H, W, 1]`` coverage (1 where a face was drawn) from the decoded depth."""
    alpha = host.take(depth.shape + (1,), np.float32)
    np.less(depth[..., None], np.inf, out=alpha, casting="unsafe")
    return alpha


def decode_depth(depth: np.ndarray, scales: np.ndarray) -> None:
    """Depth buffer values to py_gpu's z/w, +inf where empty, in place (window z times ``2 / a``).

    The depth test is strictly less against the cleared 1.0, so a pixel is covered exactly where
    its stored depth is below 1.0. The scaled depth is divided by that coverage (1 or 0), which
    leaves covered pixels' values as they are and makes empty ones ``scale / 0 = +inf``: branch
    free, where a masked copy over a random half-covered mask measured 12x slower (0.96 against
    0.08 ms at 640x360).
    """
    covered = depth < 1.0
    np.multiply(depth, (2.0 / scales).astype(np.float32)[:, None, None], out=depth)
    with np.errstate(divide="ignore"):
        np.divide(depth, covered, out=depth)


def _prepass(backend: ModernGLBackend, spec: ShadeSpec, mesh: GLMesh, attrs: _MeshAttributes, st: ShadeTarget,
             prog, N: int) -> tuple:
    """The UV pre-pass's framebuffer, program and vertex array; its image bound for the shading pass."""
    pre_spec = replace(spec, prepass=True)
    fbo, pre_prog = st.uv_pass(backend.ctx), _program(backend, pre_spec)
    pre = (fbo, pre_prog, _vao(backend, mesh, attrs, pre_spec, pre_prog, N))
    st.uv.use(_UV_UNIT)
    _set(prog, "u_uv_image", _UV_UNIT)
    _set(prog, "u_rect", st.target.rect)
    return pre


def _uv_prepass(backend: ModernGLBackend, pre, spec: ShadeSpec, x: ShadeInputs, b: int, gl_clip, a, st, N: int):
    """Draw the UV image (and the depth buffer), then leave the shading pass to draw the same
    fragments again with a ``<=`` depth test."""
    fbo, prog, vao = pre
    fbo.use()
    fbo.clear(0.0, 0.0, 0.0, 0.0, depth=1.0)
    _frame_uniforms(prog, replace(spec, model="unlit", gamma=False), x, b, gl_clip, a, 0)
    vao.render(backend._mgl.TRIANGLES, instances=N)
    backend.counters.draws += 1
    st.fbo.use()
    backend.ctx.depth_func = "<="


def _flip_rows(g: np.ndarray) -> np.ndarray:
    """Image row 0 drawn at GL's bottom row, so that a readback starts with the top row."""
    g = g.copy()
    g[1] = -g[1] + 2.0 * g[1, 3] * np.eye(4)[3]  # y' = -(s y) + c w, from y' = s y + c w
    return g


_FLIP_ROWS = _flip_rows(np.eye(4))
_FLIP_ROWS.flags.writeable = False


def _frame_uniforms(prog, spec: ShadeSpec, x: ShadeInputs, b: int, gl_clip: np.ndarray, a: float,
                    faces: int) -> None:
    """Every per-frame uniform of view ``b``: matrices, eye, lights, material, gamma."""
    m = gl_clip.copy()
    m[2] = a * m[2] - m[3]  # z' = a z - w: GL's near plane is py_gpu's z = 0
    f4 = lambda v: np.ascontiguousarray(v, dtype=np.float32).tobytes()  # noqa: E731
    prog["u_clip"].write(f4(m.T))  # column-major
    if spec.transformed:  # without a scene transform the program has no model matrix
        model = x.model[min(b, x.model.shape[0] - 1)]
        _set(prog, "u_model", f4(model.T))
        _set(prog, "u_normal_matrix", f4(np.linalg.inv(model[:3, :3])))  # (inv(M)^T)^T: column-major
    _set(prog, "u_faces", faces)
    _set(prog, "u_depth_scale", float(np.float32(2.0 / a)))  # window z to py_gpu's z/w (DEPTH_OUT)
    pick = lambda arr: arr[min(b, arr.shape[0] - 1)]  # noqa: E731
    if spec.model != "unlit":
        _set(prog, "u_eye", f4(pick(x.eye)))
        _set(prog, "u_ambient", f4(pick(x.ambient)))
        if spec.n_dir:
            _set(prog, "u_dir_to_light", f4(pick(x.dir_to_light)))
            _set(prog, "u_dir_radiance", f4(pick(x.dir_radiance)))
        if spec.n_point:
            _set(prog, "u_point_position", f4(pick(x.point_position)))
            _set(prog, "u_point_radiance", f4(pick(x.point_radiance)))
            _set(prog, "u_point_attenuation", f4(x.point_attenuation))
        if spec.model == "blinn_phong":
            _set(prog, "u_specular", f4(pick(x.specular)))
            _set(prog, "u_shininess", float(pick(x.shininess)))
    if spec.gamma:
        _set(prog, "u_inv_gamma", 1.0 / float(x.gamma))


def _set(prog, name: str, value) -> None:
    """Set a uniform the compiler kept (an unused one is optimized away)."""
    u = prog.get(name, None)
    if u is None:
        return
    if isinstance(value, bytes):
        u.write(value)
    else:
        u.value = value


def _bind_textures(backend: ModernGLBackend, prog, spec: ShadeSpec, x: ShadeInputs, attrs: _MeshAttributes) -> None:
    """Bind the frame's textures (units 1..), their filter and wrap, the material table (unit 0), the rects."""
    mgl = backend._mgl
    if spec.needs_materials:
        attrs.materials.use(0)
        _set(prog, "u_material", 0)
    if spec.n_rects:
        _set(prog, "u_rects", np.ascontiguousarray(x.rects, dtype=np.float32).tobytes())
    entries = [e for e in x.textures if e is not None]
    levels = []
    for k, entry in enumerate(entries):
        tex = _texture(backend, entry)
        gl_filter = {"nearest": (mgl.NEAREST, mgl.NEAREST), "bilinear": (mgl.LINEAR, mgl.LINEAR),
                     "trilinear": (mgl.LINEAR_MIPMAP_NEAREST, mgl.LINEAR)}[spec.filter]
        repeat = spec.wrap == "repeat" and spec.textures != "atlas"  # atlas UVs are sampled clamped
        if tex.sampling != (gl_filter, repeat):  # set on change only: the texture keeps them
            tex.tex.filter = gl_filter
            tex.tex.repeat_x = tex.tex.repeat_y = repeat
            tex.sampling = (gl_filter, repeat)
        tex.tex.use(k + 1)
        _set(prog, _TEX_NAMES[k], k + 1)
        levels.append(float(tex.levels))
    if levels:
        _set(prog, "u_levels", np.asarray(levels, dtype=np.float32).tobytes())

