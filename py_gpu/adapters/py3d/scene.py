"""py_3d scene objects as cached tensors: one mesh per object, converted once and then reused.

A py_3d object (``Sphere``, ``Box``, ``Mesh``, ``Triangle`` ...) becomes an :class:`ObjectMesh`:
its triangles as float64 tensors on the scene device, corners face-major (rows ``3f, 3f+1,
3f+2`` are face ``f``'s corners ``a, b, c``). :class:`SceneCache` finds an object's mesh

1. by identity, with the key ``CPURenderer`` uses for its static-geometry cache
   ``(type, id, sphere_segments, sphere_rings)`` and a weak reference to the owner;
2. else by value: an equal object (py_3d objects are frozen dataclasses, so a scene rebuilt
   every frame repeats them) reuses the mesh, and one that differs only in its position field
   (``center``, ``point``, ``position``) and, for ``Sphere`` and ``TransformedMesh``, its
   ``rotation``, reuses it moved, without calling ``to_triangles``;
3. else it calls ``to_triangles`` once and converts the result.

Per frame :meth:`SceneCache.frame` assembles the meshes in draw order into one
:class:`FrameGeometry`; an unchanged scene reuses last frame's assembly as it is.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import torch

from . import _py3d

F64 = torch.float64
#: Classes (by py_3d name) that take sphere_segments / sphere_rings, as CPURenderer passes them.
_ROUND = ("BlobSurface", "Bowl", "Capsule", "Sphere")
#: Classes (by py_3d name) built around a position field and, for some, an Euler rotation field: an
#: object that differs from a cached one only there is that mesh moved (translated and rotated as
#: py_3d's ``center + _rotate_euler(v)`` does).
_TRANSFORM_FIELDS = {"BlobSurface": ("center", None), "Bowl": ("center", None), "Box": ("center", None),
                     "Capsule": ("center", None), "Sphere": ("center", "rotation"),
                     "TransformedMesh": ("center", "rotation"), "Plane": ("point", None),
                     "LampPrimitive": ("position", None)}
_LINE_TYPES = ("Point3", "Line3", "LineSet3")
_VALUE_CACHE_SIZE = 256


def vec_length(v: torch.Tensor) -> torch.Tensor:
    """``Vec3.length``: ``sqrt(x*x + y*y + z*z)`` over the last dim (summed in that order)."""
    return torch.sqrt(v[..., 0] * v[..., 0] + v[..., 1] * v[..., 1] + v[..., 2] * v[..., 2])


def vec_dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``Vec3.dot``: ``ax*bx + ay*by + az*bz`` over the last dim (summed in that order)."""
    return a[..., 0] * b[..., 0] + a[..., 1] * b[..., 1] + a[..., 2] * b[..., 2]


def vec_cross(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``Vec3.cross`` over the last dim."""
    ax, ay, az = a.unbind(-1)
    bx, by, bz = b.unbind(-1)
    return torch.stack([ay * bz - az * by, az * bx - ax * bz, ax * by - ay * bx], -1)


def vec_normalized(v: torch.Tensor, fallback) -> torch.Tensor:
    """``Vec3.normalized(fallback)``: ``v / |v|``, or ``fallback`` (a ``[..., 3]`` tensor or a
    3-tuple; None means zero) where ``|v| == 0``."""
    size = vec_length(v)
    zero = size == 0
    if not bool(zero.any()):
        return v / size[..., None]
    out = v / torch.where(zero, torch.ones_like(size), size)[..., None]
    if fallback is None:
        fallback = (0.0, 0.0, 0.0)
    if not isinstance(fallback, torch.Tensor):
        fallback = torch.tensor(fallback, dtype=v.dtype, device=v.device)
    return torch.where(zero[..., None], fallback.expand_as(v), out)


def rotate_euler(v: torch.Tensor, rotation: tuple) -> torch.Tensor:
    """py_3d's ``_rotate_euler`` of ``[N, 3]`` vectors: about x, then y, then z (same operations)."""
    cx, sx, cy, sy, cz, sz = (f(a) for a in rotation for f in (math.cos, math.sin))
    x, y, z = v.unbind(-1)
    y1 = y * cx - z * sx
    z1 = y * sx + z * cx
    x2 = x * cy + z1 * sy
    z2 = -x * sy + z1 * cy
    return torch.stack([x2 * cz - y1 * sz, x2 * sz + y1 * cz, z2], -1)


def face_frames(corners: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """py_3d's prepared values of ``[3F, 3]`` corners: ``(normal [F, 3], center [F, 3])`` with
    ``Triangle.normal()`` = ``(b - a) x (c - a)`` normalized (zero when degenerate) and
    ``Triangle.center()`` = ``(a + b + c) / 3``."""
    tri = corners.reshape(-1, 3, 3)
    a, b, c = tri[:, 0], tri[:, 1], tri[:, 2]
    normal = vec_normalized(vec_cross(b - a, c - a), None)
    return normal, (a + b + c) / 3.0


@dataclass(eq=False)
class ObjectMesh:
    """One py_3d object's triangles (``F`` faces) as float64 tensors.

    Attributes:
        corners: ``[3F, 3]`` world positions; uvs ``[3F, 2]`` (0 where absent); normals ``[3F, 3]``
            vertex normals (0 where absent).
        has_uv, has_normals: bool ``[F]``: the face has all three UVs / vertex normals.
        face_material: int64 ``[F]`` index into ``materials`` (py_3d ``Material`` objects).
        face_normal, center: ``[F, 3]`` py_3d's ``Triangle.normal()`` and ``Triangle.center()``.
        template: the shared per-shape data (sharp edges ...); ``offset`` the translation applied.
    """

    corners: torch.Tensor
    uvs: torch.Tensor
    normals: torch.Tensor
    has_uv: torch.Tensor
    has_normals: torch.Tensor
    face_material: torch.Tensor
    materials: tuple
    face_normal: torch.Tensor
    center: torch.Tensor
    template: "_Template"
    offset: tuple = (0.0, 0.0, 0.0)

    @property
    def num_faces(self) -> int:
        return self.face_material.shape[0]

    def moved(self, offset: tuple, rotation: tuple | None = None) -> "ObjectMesh":
        """This shape (the template's, at the origin) rotated by the Euler angles ``rotation`` and
        translated by ``offset``, as py_3d places a ``Sphere`` or ``TransformedMesh``: corners,
        vertex normals and centers change, nothing is converted again."""
        base = self.template.mesh
        corners, normals = base.corners, base.normals
        if rotation is not None and any(rotation):
            corners, normals = rotate_euler(corners, rotation), rotate_euler(normals, rotation)
        corners = corners + torch.tensor(offset, dtype=F64, device=corners.device)
        normal, center = face_frames(corners)
        return dataclasses.replace(base, corners=corners, normals=normals, face_normal=normal, center=center,
                                   offset=tuple(offset))

    def sharp_edges(self, threshold_degrees: float) -> torch.Tensor:
        """int64 ``[E, 2]`` corner rows of the edges ``edge_highlight`` draws (py_3d's
        ``_sharp_edges_for``: boundary edges and edges whose faces meet at more than the threshold)."""
        edges = self.template.edges.get(threshold_degrees)
        if edges is None:
            edges = self.template.edges[threshold_degrees] = _sharp_edges(self, threshold_degrees)
        return edges


@dataclass(eq=False)
class _Template:
    """What copies of one shape share: the mesh at the shape's origin, its placed copies (by
    offset, the few most recent) and its sharp edges."""

    mesh: ObjectMesh | None = None
    keep: tuple = ()  # objects whose ids are part of the value key (kept alive so ids stay unique)
    edges: dict = field(default_factory=dict)
    placed: OrderedDict = field(default_factory=OrderedDict)


@dataclass(eq=False)
class LineObject:
    """A ``Point3`` (``points`` ``[1, 3]``), ``Line3`` or ``LineSet3`` (``segments`` ``[S, 2, 3]``) and its
    py_3d ``Material``."""

    kind: str
    points: torch.Tensor
    material: object


@dataclass(eq=False)
class FrameGeometry:
    """The scene's triangles in draw order (``F`` faces over all meshes).

    Attributes:
        corners, uvs, normals, has_uv, has_normals, face_normal, center: as in ``ObjectMesh``,
            concatenated.
        face_material: int64 ``[F]`` index into ``materials``; face_object int64 ``[F]`` index of
            the object in ``scene.objects`` (draw order).
        meshes: ``(object index, ObjectMesh, first face)`` per mesh.
        materials: every face's py_3d ``Material`` (``MaterialTable`` holds them as tensors).
    """

    corners: torch.Tensor
    uvs: torch.Tensor
    normals: torch.Tensor
    has_uv: torch.Tensor
    has_normals: torch.Tensor
    face_normal: torch.Tensor
    center: torch.Tensor
    face_material: torch.Tensor
    face_object: torch.Tensor
    meshes: tuple
    materials: tuple
    table: "MaterialTable"

    @property
    def num_faces(self) -> int:
        return self.face_material.shape[0]


@dataclass(eq=False)
class MaterialTable:
    """py_3d ``Material`` fields as tensors, one row per material (``M``), plus their textures.

    ``color``/``emission`` are 0-255 integers as float64 ``[M, 3]``; ``absorption`` ``[M, 3]``;
    ``diffuse``, ``roughness``, ``fuzziness``, ``specular``, ``shininess``, ``reflectivity``,
    ``light_transmission`` ``[M]``; ``texture`` int64 ``[M]`` (-1: none) into ``textures``, whose
    texels lie in ``texels`` uint8 ``[sum(Ht * Wt), 3]`` from ``texture_offset`` ``[T]`` with sizes
    ``texture_size`` int64 ``[T, 2]`` (width, height).
    """

    color: torch.Tensor
    absorption: torch.Tensor
    diffuse: torch.Tensor
    emission: torch.Tensor
    roughness: torch.Tensor
    fuzziness: torch.Tensor
    specular: torch.Tensor
    shininess: torch.Tensor
    reflectivity: torch.Tensor
    light_transmission: torch.Tensor
    texture: torch.Tensor
    texels: torch.Tensor
    texture_offset: torch.Tensor
    texture_size: torch.Tensor
    sources: tuple = ()  # (PixelBuffer, its pixel list) of each texture, as converted

    def stale(self) -> bool:
        """Whether a texture's pixel list was replaced since the table was made."""
        return any(tex.pixels is not pixels for tex, pixels in self.sources)


@dataclass
class SceneStats:
    """Counters of the scene cache.

    Attributes:
        conversions: objects converted from py_3d triangles (one ``to_triangles`` call each).
        moves: objects found as a cached shape at a new position (translated, not converted).
        value_hits: new objects equal to a cached one (reused as they are).
        assemblies: frames whose set of meshes changed, so the frame's geometry was concatenated.
        texture_uploads: textures converted to tensors.
    """

    conversions: int = 0
    moves: int = 0
    value_hits: int = 0
    assemblies: int = 0
    texture_uploads: int = 0


class SceneCache:
    """Meshes, line objects, textures and the last frame's assembly of one renderer."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stats = SceneStats()
        self._by_id: dict[tuple, tuple] = {}
        self._by_value: OrderedDict[tuple, _Template] = OrderedDict()
        self._lines: dict[int, tuple] = {}
        self._line_values: OrderedDict[tuple, tuple] = OrderedDict()
        self._textures: dict[int, tuple] = {}
        self._last_key: tuple | None = None
        self._last: FrameGeometry | None = None

    def clear(self) -> None:
        self._by_id.clear()
        self._by_value.clear()
        self._lines.clear()
        self._line_values.clear()
        self._textures.clear()
        self._last_key, self._last = None, None

    # ---- per frame -------------------------------------------------------------------------------
    def frame(self, objects, settings) -> tuple[FrameGeometry, tuple]:
        """The ``FrameGeometry`` of ``objects`` (``scene.objects``) under ``settings``, and the
        ``(object index, LineObject)`` of its points and lines."""
        py_3d = _py3d()
        line_types = tuple(getattr(py_3d, n) for n in _LINE_TYPES)
        meshes, lines = [], []
        for index, obj in enumerate(objects):
            if isinstance(obj, line_types):
                lines.append((index, self._line(obj)))
            else:
                mesh = self._mesh(obj, settings)
                if mesh.num_faces:
                    meshes.append((index, mesh))
        key = tuple((i, id(m)) for i, m in meshes)
        if key != self._last_key:
            self.stats.assemblies += 1
            self._last_key, self._last = key, self._assemble(meshes)
            self._forget_dead(len(objects))
        elif self._last.table.stale():
            self._last = dataclasses.replace(self._last, table=self._table(self._last.materials))
        return self._last, tuple(lines)

    def _assemble(self, meshes) -> FrameGeometry:
        dev = self.device
        if not meshes:
            empty = torch.zeros(0, 3, dtype=F64, device=dev)
            none = torch.zeros(0, dtype=torch.bool, device=dev)
            idx = torch.zeros(0, dtype=torch.int64, device=dev)
            return FrameGeometry(empty, torch.zeros(0, 2, dtype=F64, device=dev), empty, none, none, empty, empty,
                                 idx, idx, (), (), self._table(()))
        cat = lambda name: torch.cat([getattr(m, name) for _, m in meshes])  # noqa: E731
        materials, face_material, face_object, spans, first = [], [], [], [], 0
        for index, mesh in meshes:
            face_material.append(mesh.face_material + len(materials))
            materials.extend(mesh.materials)
            face_object.append(torch.full((mesh.num_faces,), index, dtype=torch.int64, device=dev))
            spans.append((index, mesh, first))
            first += mesh.num_faces
        return FrameGeometry(cat("corners"), cat("uvs"), cat("normals"), cat("has_uv"), cat("has_normals"),
                             cat("face_normal"), cat("center"), torch.cat(face_material), torch.cat(face_object),
                             tuple(spans), tuple(materials), self._table(materials))

    # ---- objects -----------------------------------------------------------------------------------
    def _mesh(self, obj, settings) -> ObjectMesh:
        rounds, fields = _type_info(type(obj))
        id_key = (type(obj), id(obj), settings.sphere_segments if rounds else 0, settings.sphere_rings if rounds else 0)
        hit = self._by_id.get(id_key)
        if hit is not None and hit[0]() is obj:
            return hit[1]
        mesh = self._by_value_or_convert(obj, settings, rounds, fields)
        try:
            self._by_id[id_key] = (weakref.ref(obj), mesh)
        except TypeError:  # not weak-referenceable: found by value (or converted) every frame
            pass
        return mesh

    def _by_value_or_convert(self, obj, settings, rounds: bool, fields: tuple) -> ObjectMesh:
        py_3d = _py3d()
        position_field, rotation_field = fields
        keep: list = []
        value = _object_key(obj, fields, keep)
        if value is None:  # not a frozen dataclass: converted as it is
            return self._convert(py_3d.render._triangles_for(obj, settings), _Template())
        key = (value, settings.sphere_segments, settings.sphere_rings) if rounds else (value,)
        origin = (0.0, 0.0, 0.0)
        offset = tuple(getattr(obj, position_field)) if position_field else origin
        rotation = tuple(getattr(obj, rotation_field)) if rotation_field else origin
        template = self._by_value.get(key)
        if template is None:
            template = _Template(keep=tuple(keep))
            source = obj
            if position_field is not None:
                reset = {position_field: py_3d.Vec3(*origin)}
                if rotation_field is not None:
                    reset[rotation_field] = py_3d.Vec3(*origin)
                source = dataclasses.replace(obj, **reset)
            template.mesh = self._convert(py_3d.render._triangles_for(source, settings), template)
            self._by_value[key] = template
            if len(self._by_value) > _VALUE_CACHE_SIZE:
                self._by_value.popitem(last=False)
            fresh = True
        else:
            self._by_value.move_to_end(key)
            fresh = False
        if offset == origin and rotation == origin:
            self.stats.value_hits += not fresh
            return template.mesh
        place = (offset, rotation)
        mesh = template.placed.get(place)
        if mesh is not None:
            template.placed.move_to_end(place)
            self.stats.value_hits += 1
            return mesh
        self.stats.moves += not fresh
        mesh = template.placed[place] = template.mesh.moved(offset, rotation)
        if len(template.placed) > 8:
            template.placed.popitem(last=False)
        return mesh

    def _convert(self, triangles, template: _Template) -> ObjectMesh:
        """One ``to_triangles`` result as an ``ObjectMesh`` (the only per-triangle Python loop, run
        once per converted object)."""
        self.stats.conversions += 1
        pos, uvs, nrm, has_uv, has_n, face_mat = [], [], [], [], [], []
        mat_index: dict[int, int] = {}
        materials: list = []
        zero_uv, zero_n = (0.0,) * 6, (0.0,) * 9
        for t in triangles:
            a, b, c = t.a, t.b, t.c
            pos += (a.x, a.y, a.z, b.x, b.y, b.z, c.x, c.y, c.z)
            ua, ub, uc = t.uv_a, t.uv_b, t.uv_c
            if ua is not None and ub is not None and uc is not None:
                uvs += (ua[0], ua[1], ub[0], ub[1], uc[0], uc[1])
                has_uv.append(True)
            else:
                uvs += zero_uv
                has_uv.append(False)
            na, nb, nc = t.normal_a, t.normal_b, t.normal_c
            if na is not None and nb is not None and nc is not None:
                nrm += (na.x, na.y, na.z, nb.x, nb.y, nb.z, nc.x, nc.y, nc.z)
                has_n.append(True)
            else:
                nrm += zero_n
                has_n.append(False)
            m = t.material
            k = mat_index.get(id(m))
            if k is None:
                k = mat_index[id(m)] = len(materials)
                materials.append(m)
            face_mat.append(k)
        dev = self.device
        corners = torch.tensor(pos, dtype=F64, device=dev).reshape(-1, 3)
        normal, center = face_frames(corners)
        return ObjectMesh(corners, torch.tensor(uvs, dtype=F64, device=dev).reshape(-1, 2),
                          torch.tensor(nrm, dtype=F64, device=dev).reshape(-1, 3),
                          torch.tensor(has_uv, dtype=torch.bool, device=dev),
                          torch.tensor(has_n, dtype=torch.bool, device=dev),
                          torch.tensor(face_mat, dtype=torch.int64, device=dev), tuple(materials), normal, center,
                          template)

    def _line(self, obj) -> LineObject:
        hit = self._lines.get(id(obj))
        if hit is not None and hit[0]() is obj:
            return hit[1]
        keep: list = []
        value = _object_key(obj, (), keep)
        if value is not None and value in self._line_values:
            self._line_values.move_to_end(value)
            line = self._line_values[value][1]
        else:
            line = self._line_object(obj)
            if value is not None:
                self._line_values[value] = (tuple(keep), line)
                if len(self._line_values) > _VALUE_CACHE_SIZE:
                    self._line_values.popitem(last=False)
        try:
            self._lines[id(obj)] = (weakref.ref(obj), line)
        except TypeError:
            pass
        return line

    def _line_object(self, obj) -> LineObject:
        kind = type(obj).__name__
        if kind == "Point3":
            pts = [tuple(obj.position)]
        elif kind == "Line3":
            pts = [tuple(obj.start), tuple(obj.end)]
        else:
            pts = [tuple(p) for seg in obj.segments for p in seg]
        points = torch.tensor(pts, dtype=F64, device=self.device).reshape(-1, 3)
        if kind != "Point3":
            points = points.reshape(-1, 2, 3)
        return LineObject(kind, points, obj.material)

    def _forget_dead(self, live: int) -> None:
        """Drop entries whose owner is gone once they outnumber the scene's objects."""
        if len(self._by_id) > 2 * live + 64:
            self._by_id = {k: v for k, v in self._by_id.items() if v[0]() is not None}
        if len(self._lines) > 2 * live + 64:
            self._lines = {k: v for k, v in self._lines.items() if v[0]() is not None}

    # ---- materials and textures ---------------------------------------------------------------------
    def _table(self, materials) -> MaterialTable:
        dev = self.device
        textures, tex_index = [], {}
        rows, tex_of = [], []
        for m in materials:
            rows.append((m.color.r, m.color.g, m.color.b, *m.absorption, m.diffuse, m.emission.r, m.emission.g,
                         m.emission.b, m.roughness, m.fuzziness, m.specular, m.shininess, m.reflectivity,
                         m.light_transmission))
            tex = getattr(m, "texture", None)
            if tex is None:
                tex_of.append(-1)
                continue
            k = tex_index.get(id(tex))
            if k is None:
                k = tex_index[id(tex)] = len(textures)
                textures.append(tex)
            tex_of.append(k)
        data = torch.tensor(rows, dtype=F64, device=dev).reshape(-1, 16)
        texels, offsets, sizes, start = [], [], [], 0
        for tex in textures:
            t = self._texture(tex)
            texels.append(t)
            offsets.append(start)
            sizes.append((tex.width, tex.height))
            start += t.shape[0]
        texel = torch.cat(texels) if texels else torch.zeros(0, 3, dtype=torch.uint8, device=dev)
        col = lambda i: data[:, i]  # noqa: E731
        return MaterialTable(data[:, 0:3], data[:, 3:6], col(6), data[:, 7:10], col(10), col(11), col(12), col(13),
                             col(14), col(15), torch.tensor(tex_of, dtype=torch.int64, device=dev), texel,
                             torch.tensor(offsets, dtype=torch.int64, device=dev),
                             torch.tensor(sizes, dtype=torch.int64, device=dev).reshape(-1, 2),
                             tuple((tex, tex.pixels) for tex in textures))

    def _texture(self, tex) -> torch.Tensor:
        """uint8 ``[Ht * Wt, 3]`` texels of a py_3d ``PixelBuffer`` (cached while the buffer and its
        pixel list are the same objects)."""
        hit = self._textures.get(id(tex))
        if hit is not None and hit[0]() is tex and hit[1] is tex.pixels:
            return hit[2]
        raw = getattr(tex.pixels, "raw_rgb_bytes", None)
        data = raw() if callable(raw) else tex.to_rgb_bytes()
        texels = torch.from_numpy(np.frombuffer(data, dtype=np.uint8).copy()).reshape(-1, 3).to(self.device)
        self.stats.texture_uploads += 1
        self._textures[id(tex)] = (weakref.ref(tex), tex.pixels, texels)
        return texels


_TYPE_INFO: dict[type, tuple] = {}


def _type_info(cls: type) -> tuple[bool, tuple]:
    """``(takes sphere segments and rings, (position field, rotation field))`` of an object class:
    py_3d's round primitives and their subclasses take segments and rings (as ``CPURenderer``
    passes them); only py_3d's own classes (not subclasses, which may build differently) are moved
    by value."""
    info = _TYPE_INFO.get(cls)
    if info is None:
        py_3d = _py3d()
        rounds = issubclass(cls, tuple(getattr(py_3d, n) for n in _ROUND))
        fields = next((f for n, f in _TRANSFORM_FIELDS.items() if getattr(py_3d, n, None) is cls), (None, None))
        info = _TYPE_INFO[cls] = (rounds, fields)
    return info


def _object_key(obj, skip: tuple, keep: list):
    """A hashable value of a frozen dataclass object without its ``skip`` fields, or None."""
    if not (dataclasses.is_dataclass(obj) and obj.__dataclass_params__.frozen):
        return None
    parts = [type(obj)]
    for f in dataclasses.fields(obj):
        if f.name not in skip:
            parts.append((f.name, _value_key(getattr(obj, f.name), keep, 0)))
    return tuple(parts)


def _value_key(value, keep: list, depth: int):
    """A hashable stand-in for ``value``: numbers and strings as they are, frozen dataclasses and
    short tuples field by field, anything else (textures, long triangle tuples, worlds) by identity
    (the object is kept alive in ``keep`` so its id cannot be reused)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if depth < 6 and isinstance(value, tuple) and len(value) <= 64:
        return ("t",) + tuple(_value_key(v, keep, depth + 1) for v in value)
    if depth < 6 and dataclasses.is_dataclass(value) and not isinstance(value, type) and \
            value.__dataclass_params__.frozen:
        return (type(value),) + tuple(_value_key(getattr(value, f.name), keep, depth + 1)
                                      for f in dataclasses.fields(value))
    keep.append(value)
    return ("id", id(value))


def _sharp_edges(mesh: ObjectMesh, threshold_degrees: float) -> torch.Tensor:
    """py_3d's ``_sharp_edges_for`` on a mesh (Python, once per shape and threshold)."""
    threshold_cos = math.cos(math.radians(threshold_degrees))
    corners = mesh.corners.tolist()
    normals = mesh.face_normal.tolist()
    edge_map: dict = {}
    for f in range(mesh.num_faces):
        for i, j in ((0, 1), (1, 2), (2, 0)):
            s, e = 3 * f + i, 3 * f + j
            sk, ek = tuple(round(v, 6) for v in corners[s]), tuple(round(v, 6) for v in corners[e])
            key = (sk, ek) if sk <= ek else (ek, sk)
            edge_map.setdefault(key, []).append((s, e, f))
    sharp = []
    for candidates in edge_map.values():
        s, e, f0 = candidates[0]
        n0 = normals[f0]
        if len(candidates) == 1 or any(n0[0] * normals[f][0] + n0[1] * normals[f][1] + n0[2] * normals[f][2]
                                       <= threshold_cos for _, _, f in candidates[1:]):
            sharp.append((s, e))
    return torch.tensor(sharp, dtype=torch.int64, device=mesh.corners.device).reshape(-1, 2)
