"""World-space meshes: ``MeshBatch``, OBJ (+ MTL) input/output, trimesh interop (shapes: ``py_gpu.shapes``).

Winding: front faces are counter-clockwise seen from outside (right-handed), so their normals
``(v1 - v0) x (v2 - v0)`` point outward. UVs: ``(u, v)`` with u to the right and **v up**
(``v = 0`` is the bottom row of a texture image, as in OBJ files and OpenGL).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from ._check import PyGpuTypeError, PyGpuValueError, check_faces, check_finite, check_float, check_shape
from .image import srgb_to_linear

__all__ = [
    "MeshBatch",
    "vertex_normals",
    "face_normals",
    "concat_meshes",
    "ObjMaterial",
    "load_obj",
    "load_obj_with_materials",
    "save_obj",
    "from_trimesh",
    "to_trimesh",
]


def _t(value, dtype=None, device=None, *, name: str = "value") -> torch.Tensor | None:
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(np.ascontiguousarray(value))
    elif not isinstance(value, torch.Tensor):
        try:
            value = torch.as_tensor(value)
        except (TypeError, ValueError, RuntimeError):
            raise PyGpuTypeError(f"MeshBatch: `{name}` must be a tensor or array, got {type(value).__name__}") from None
    return value.to(device=device) if device is not None else value


def face_normals(positions: torch.Tensor, faces: torch.Tensor, *, normalize: bool = True) -> torch.Tensor:
    """float ``[..., F, 3]`` face normals ``(v1 - v0) x (v2 - v0)`` of ``positions [..., V, 3]``.

    Unnormalized, their length is twice the face area (the weights of :func:`vertex_normals`).
    """
    tri = positions[..., faces, :]  # [..., F, 3, 3]
    n = torch.cross(tri[..., 1, :] - tri[..., 0, :], tri[..., 2, :] - tri[..., 0, :], dim=-1)
    return n / n.norm(dim=-1, keepdim=True).clamp_min(1e-20) if normalize else n


def vertex_normals(positions: torch.Tensor, faces: torch.Tensor) -> torch.Tensor:
    """Smooth float ``[..., V, 3]`` unit vertex normals: area-weighted sums of adjacent face normals.

    Differentiable in ``positions``; vertices used by no face get ``(0, 0, 0)``.
    """
    fn = face_normals(positions, faces, normalize=False)  # [..., F, 3]
    out = torch.zeros_like(positions)
    for k in range(3):
        out = out.index_add(-2, faces[:, k], fn)
    return out / out.norm(dim=-1, keepdim=True).clamp_min(1e-20)


@dataclass(frozen=True, eq=False)
class MeshBatch:
    """One triangle mesh (or ``B`` meshes sharing a topology) in world space.

    Attributes:
        positions: float ``[V, 3]`` or ``[B, V, 3]`` vertex positions.
        faces: int64 ``[F, 3]`` vertex indices, counter-clockwise seen from the front.
        normals: float, same shape as ``positions``, unit vertex normals. Computed (smooth,
            area-weighted) when not given.
        uvs: optional float ``[V, 2]`` (or ``[B, V, 2]``) texture coordinates, v up.
        colors: optional float ``[V, C]`` (or ``[B, V, C]``) per-vertex colors in [0, 1].
        material_ids: optional int64 ``[F]`` per-face material index (0 when absent).

    Meshes with seams (a cube's sharp edges, a sphere's UV seam) duplicate their seam vertices.
    """

    positions: torch.Tensor
    faces: torch.Tensor
    normals: torch.Tensor | None = None
    uvs: torch.Tensor | None = None
    colors: torch.Tensor | None = None
    material_ids: torch.Tensor | None = None

    def __post_init__(self) -> None:
        where = "MeshBatch"
        if self.positions is None or self.faces is None:
            raise PyGpuTypeError(f"{where}: `positions` and `faces` are required tensors")
        pos = _t(self.positions, name="positions")
        if pos.dtype == torch.float16 or not pos.is_floating_point():
            pos = pos.to(torch.float32) if not pos.is_floating_point() else pos
        check_float(where, "positions", pos)
        check_shape(where, "positions", pos, (None, 3) if pos.dim() == 2 else (None, None, 3), "[V, 3] or [B, V, 3]")
        check_finite(where, "positions", pos)
        nv = pos.shape[-2]
        faces = check_faces(where, _t(self.faces, device=pos.device), nv)
        object.__setattr__(self, "positions", pos)
        object.__setattr__(self, "faces", faces)
        for name, channels in (("normals", 3), ("uvs", 2), ("colors", None)):
            value = getattr(self, name)
            if value is None:
                continue
            t = _t(value, device=pos.device)
            check_float(where, name, t)
            if t.dim() not in (2, 3) or t.shape[-2] != nv or (channels is not None and t.shape[-1] != channels):
                want = f"[V={nv}, {channels or 'C'}] or [B, V, {channels or 'C'}]"
                raise PyGpuValueError(f"{where}: `{name}` must have shape {want}, got {tuple(t.shape)}")
            batches = {pos.shape[0] if pos.dim() == 3 else 1, t.shape[0] if t.dim() == 3 else 1}
            if len(batches - {1}) > 1:
                raise PyGpuValueError(
                    f"{where}: `{name}` has batch size {t.shape[0]} but `positions` {pos.shape[0]}; "
                    "per-mesh attributes are [V, C] (shared) or [B, V, C] with the positions' B"
                )
            check_finite(where, name, t)
            object.__setattr__(self, name, t.to(pos.dtype))
        if self.normals is None:
            object.__setattr__(self, "normals", vertex_normals(pos, faces))
        if self.material_ids is not None:
            m = _t(self.material_ids, device=pos.device)
            if m.is_floating_point() or m.is_complex() or m.dtype == torch.bool:
                raise PyGpuTypeError(f"{where}: `material_ids` must be integers, got {m.dtype}")
            m = m.long()
            check_shape(where, "material_ids", m, (faces.shape[0],), f"[F={faces.shape[0]}]")
            if m.numel() and int(m.min()) < 0:
                raise PyGpuValueError(f"{where}: `material_ids` must be >= 0")
            object.__setattr__(self, "material_ids", m)

    # ---- facts -----------------------------------------------------------------------------------
    @property
    def num_vertices(self) -> int:
        return self.positions.shape[-2]

    @property
    def num_faces(self) -> int:
        return self.faces.shape[0]

    @property
    def device(self) -> torch.device:
        return self.positions.device

    @property
    def dtype(self) -> torch.dtype:
        return self.positions.dtype

    def face_normals(self) -> torch.Tensor:
        """float ``[F, 3]`` (or ``[B, F, 3]``) unit face normals."""
        return face_normals(self.positions, self.faces)

    # ---- transforms -----------------------------------------------------------------------------
    def to(self, device=None, dtype=None) -> "MeshBatch":
        """The mesh on ``device`` with float tensors in ``dtype`` (integers keep theirs)."""
        f = lambda t: None if t is None else t.to(device=device, dtype=dtype)  # noqa: E731
        i = lambda t: None if t is None else t.to(device=device)  # noqa: E731
        return MeshBatch(f(self.positions), i(self.faces), f(self.normals), f(self.uvs), f(self.colors), i(self.material_ids))

    def transformed(self, matrix: torch.Tensor) -> "MeshBatch":
        """The mesh moved by an affine float ``[4, 4]`` matrix; normals use its inverse transpose."""
        m = matrix.to(self.dtype)
        lin, t = m[:3, :3], m[:3, 3]
        pos = self.positions @ lin.T + t
        nrm = self.normals @ torch.linalg.inv(lin)
        nrm = nrm / nrm.norm(dim=-1, keepdim=True).clamp_min(1e-20)
        return replace(self, positions=pos, normals=nrm)

    def with_colors(self, colors) -> "MeshBatch":
        """The mesh with per-vertex ``colors`` ``[V, C]``, or one color ``[C]`` for every vertex."""
        c = _t(colors, device=self.device).to(self.dtype)
        if c.dim() == 1:
            c = c.expand(self.num_vertices, -1)
        return replace(self, colors=c)

    def with_material(self, material_id: int) -> "MeshBatch":
        """The mesh with every face assigned material ``material_id``."""
        return replace(self, material_ids=torch.full((self.num_faces,), int(material_id), dtype=torch.int64, device=self.device))


def concat_meshes(meshes: list[MeshBatch]) -> MeshBatch:
    """One mesh holding all of ``meshes`` (faces re-indexed). UVs/colors missing on some become 0;
    material ids missing become 0."""
    if not meshes:
        raise PyGpuValueError("concat_meshes: need at least one mesh")
    dtype, device = meshes[0].dtype, meshes[0].device
    offset, faces = 0, []
    for m in meshes:
        faces.append(m.faces.to(device) + offset)
        offset += m.num_vertices

    def cat(name, channels):
        vals = [getattr(m, name) for m in meshes]
        if all(v is None for v in vals):
            return None
        ch = channels or max(v.shape[-1] for v in vals if v is not None)
        return torch.cat([torch.zeros(m.num_vertices, ch, dtype=dtype, device=device) if v is None else v.to(device, dtype)
                          for m, v in zip(meshes, vals)])

    mats = None
    if any(m.material_ids is not None for m in meshes):
        mats = torch.cat([torch.zeros(m.num_faces, dtype=torch.int64, device=device) if m.material_ids is None
                          else m.material_ids.to(device) for m in meshes])
    return MeshBatch(torch.cat([m.positions.to(device, dtype) for m in meshes]), torch.cat(faces),
                     cat("normals", 3), cat("uvs", 2), cat("colors", None), mats)


def mesh_from_arrays(v, f, n=None, uv=None, dtype=torch.float32, device=None) -> MeshBatch:
    """A ``MeshBatch`` from array-likes (positions, faces, optional normals and UVs)."""
    def to(a):  # a copy (np.array): arrays from other libraries may be read-only, which torch cannot wrap
        return None if a is None else torch.from_numpy(np.array(a, dtype=np.float64)).to(dtype=dtype, device=device)

    return MeshBatch(to(v), torch.from_numpy(np.array(f, dtype=np.int64)).to(device), to(n), to(uv))


# ---- OBJ -------------------------------------------------------------------------------------------
def _obj_lines(path) -> list[str]:
    """The file's lines: UTF-8 (a byte-order mark is dropped), or Latin-1 when it is not UTF-8
    (OBJ numbers and keywords are ASCII; only comments and names can hold other bytes)."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    return text.splitlines()


@dataclass(frozen=True, eq=False)
class ObjMaterial:
    """One material of an OBJ file, as its MTL file defines it.

    Attributes:
        name: the ``usemtl`` / ``newmtl`` name (``""`` for faces before any ``usemtl``).
        diffuse: ``Kd`` as float RGB (``(1, 1, 1)`` when the MTL gives none or the material is
            not defined in any MTL file).
        texture: the ``map_Kd`` image as float ``[Ht, Wt, 3]`` **linear** RGB (decoded from
            sRGB), row 0 at the top, on the mesh's device; None without ``map_Kd`` (or when the
            loader was asked not to decode images). ``Renderer.render(textures=[...])`` takes
            it as is; wrap it in ``py_gpu.shading.texture.Texture`` to cache its mip pyramid.
        texture_path: where ``map_Kd`` points (resolved against the MTL file's folder), or None.
    """

    name: str
    diffuse: tuple[float, float, float] = (1.0, 1.0, 1.0)
    texture: torch.Tensor | None = None
    texture_path: Path | None = None


#: ``map_Kd`` options and how many arguments each takes (``-o``/``-s``/``-t``: up to 3 numbers).
_MAP_OPTIONS = {"-blendu": 1, "-blendv": 1, "-bm": 1, "-boost": 1, "-cc": 1, "-clamp": 1, "-imfchan": 1,
                "-texres": 1, "-type": 1, "-mm": 2, "-o": 3, "-s": 3, "-t": 3}


def _map_file(args: list[str]) -> str:
    """The file name of a ``map_Kd`` statement: options skipped, spaces inside the name kept."""
    k = 0
    while k < len(args) and args[k] in _MAP_OPTIONS:
        want, k = _MAP_OPTIONS[args[k]], k + 1
        for _ in range(want):
            if k >= len(args) - 1:  # the last token is the file name
                break
            if want == 3:
                try:
                    float(args[k])
                except ValueError:
                    break
            k += 1
    return " ".join(args[k:])


def _existing(folder: Path, name: str) -> Path:
    """``folder / name``, trying forward slashes for a path written with backslashes."""
    path = folder / name
    if not path.exists() and "\\" in name:
        alt = folder / name.replace("\\", "/")
        if alt.exists():
            return alt
    return path


def _read_mtl(path: Path, where: str, table: dict) -> None:
    """Add the materials of MTL file ``path`` to ``table`` (``name -> {"diffuse", "map", "line"}``);
    a name defined again replaces the earlier definition."""
    current = None
    for line_no, raw in enumerate(_obj_lines(path), 1):
        parts = raw.split("#", 1)[0].split()
        if not parts:
            continue
        tag, args = parts[0], parts[1:]
        if tag == "newmtl":
            current = table[" ".join(args)] = {"diffuse": (1.0, 1.0, 1.0), "map": None, "line": None}
        elif tag in ("Kd", "map_Kd") and current is None:
            raise PyGpuValueError(f"{where}: {path}:{line_no}: `{tag}` before any `newmtl`")
        elif tag == "Kd":
            try:
                rgb = [float(x) for x in args]
            except ValueError:
                rgb = []
            if len(rgb) not in (1, 3) or not all(math.isfinite(c) for c in rgb):
                raise PyGpuValueError(f"{where}: {path}:{line_no}: `Kd` needs 3 numbers (r g b), got {raw.strip()!r}")
            current["diffuse"] = tuple(rgb * 3 if len(rgb) == 1 else rgb)
        elif tag == "map_Kd":
            name = _map_file(args)
            if not name:
                raise PyGpuValueError(f"{where}: {path}:{line_no}: `map_Kd` names no file")
            current["map"], current["line"] = _existing(path.parent, name), f"{path}:{line_no}"


def _decode_texture(path: Path, line: str, where: str, dtype, device) -> torch.Tensor:
    """float ``[Ht, Wt, 3]`` linear RGB of an 8-bit image file (sRGB-decoded)."""
    try:
        from PIL import Image
    except ImportError:
        raise ImportError("load_obj: reading map_Kd textures needs Pillow: pip install pillow") from None
    try:
        with Image.open(path) as img:
            rgb = np.asarray(img.convert("RGB"), dtype=np.float64) / 255.0
    except OSError as exc:
        raise PyGpuValueError(f"{where}: {line}: cannot read texture {str(path)!r} ({exc})") from None
    return srgb_to_linear(torch.from_numpy(rgb)).to(dtype=dtype, device=device)


def _materials(names: list[str], table: dict, where: str, decode: bool, dtype, device) -> list[ObjMaterial]:
    """The used materials, by id; texture files must exist (and are decoded when ``decode``)."""
    out = []
    for name in names:
        spec = table.get(name)
        if spec is None:
            out.append(ObjMaterial(name))
            continue
        tex_path, texture = spec["map"], None
        if tex_path is not None:
            if not tex_path.is_file():
                raise PyGpuValueError(f"{where}: {spec['line']}: map_Kd texture {str(tex_path)!r} does not exist")
            if decode:
                texture = _decode_texture(tex_path, spec["line"], where, dtype, device)
        out.append(ObjMaterial(name, spec["diffuse"], texture, tex_path))
    return out


def _parse_obj(path, where: str, read_mtl: bool):
    """One pass over an OBJ file: ``(pos, tex, nrm, corners, faces, face materials, material
    names by id, MTL table or None when no MTL file was read)``."""
    pos, tex, nrm = [], [], []
    corners: dict[tuple, int] = {}
    faces: list[tuple[int, int, int]] = []
    mats: list[int] = []
    mat_names: dict[str, int] = {}
    table: dict | None = None
    current = None
    saw_usemtl = False

    def resolve(i: str, n: int, what: str, line_no: int) -> int:
        k = int(i)
        k = k - 1 if k > 0 else n + k
        if not 0 <= k < n:
            raise PyGpuValueError(f"{where}: {path}:{line_no}: {what} index {i} out of range (have {n})")
        return k

    def numbers(args: list[str], need: int, what: str, line_no: int, least: int | None = None) -> list[float]:
        """``need`` numbers; with ``least``, missing ones after the first ``least`` are 0."""
        if len(args) < (need if least is None else least):
            raise PyGpuValueError(f"{where}: {path}:{line_no}: `{what}` needs {need} numbers, got {len(args)}")
        return [float(x) for x in (args + ["0"] * need)[:need]]

    for line_no, raw in enumerate(_obj_lines(path), 1):
        parts = raw.split("#", 1)[0].split()
        if not parts:
            continue
        tag, args = parts[0], parts[1:]
        try:
            if tag == "v":
                pos.append(numbers(args, 3, "v", line_no))
            elif tag == "vt":
                tex.append(numbers(args, 2, "vt", line_no, least=1))
            elif tag == "vn":
                nrm.append(numbers(args, 3, "vn", line_no))
            elif tag == "usemtl":
                current = mat_names.setdefault(" ".join(args), len(mat_names))
                saw_usemtl = True
            elif tag == "mtllib" and read_mtl:
                folder = Path(path).parent
                whole = _existing(folder, " ".join(args))
                files = [whole] if len(args) > 1 and whole.is_file() else [_existing(folder, a) for a in args]
                table = {} if table is None else table
                for mtl in files:
                    if not mtl.is_file():
                        raise PyGpuValueError(f"{where}: {path}:{line_no}: MTL file {str(mtl)!r} does not exist "
                                              "(pass mtl=False to load the geometry only)")
                    _read_mtl(mtl, where, table)
            elif tag == "f":
                ids = []
                for corner in args:
                    bits = (corner.split("/") + ["", ""])[:3]
                    key = (resolve(bits[0], len(pos), "v", line_no),
                           resolve(bits[1], len(tex), "vt", line_no) if bits[1] else -1,
                           resolve(bits[2], len(nrm), "vn", line_no) if bits[2] else -1)
                    ids.append(corners.setdefault(key, len(corners)))
                if len(ids) < 3:
                    raise PyGpuValueError(f"{where}: {path}:{line_no}: a face needs at least 3 corners")
                if current is None:  # faces before any usemtl: the unnamed default material
                    current = mat_names.setdefault("", len(mat_names))
                for k in range(1, len(ids) - 1):
                    faces.append((ids[0], ids[k], ids[k + 1]))
                    mats.append(current)
        except (ValueError, IndexError) as exc:
            if isinstance(exc, PyGpuValueError):
                raise
            raise PyGpuValueError(f"{where}: {path}:{line_no}: cannot parse {raw.strip()!r}") from None
    names = list(mat_names) if saw_usemtl else []
    return pos, tex, nrm, list(corners), faces, mats, names, table


def _load_obj(path, where: str, *, dtype, device, mtl: bool, decode: bool) -> tuple[MeshBatch, list[ObjMaterial]]:
    pos, tex, nrm, corner_list, faces, mats, names, table = _parse_obj(path, where, mtl)
    if not corner_list:  # a point cloud: keep the positions
        mesh = mesh_from_arrays(np.asarray(pos, float).reshape(-1, 3), np.zeros((0, 3), np.int64), None, None, dtype, device)
        return mesh, []
    materials = _materials(names, table or {}, where, decode, dtype, device)
    c = np.asarray(corner_list)
    P = np.asarray(pos, float)[c[:, 0]]
    has_uv = bool((c[:, 1] >= 0).all()) and len(tex) > 0
    has_n = bool((c[:, 2] >= 0).all()) and len(nrm) > 0
    uv = np.asarray(tex, float)[c[:, 1]] if has_uv else None
    n = np.asarray(nrm, float)[c[:, 2]] if has_n else None
    if n is not None:
        n = n / np.maximum(np.linalg.norm(n, axis=1, keepdims=True), 1e-20)
    F = np.asarray(faces, np.int64)
    colors = None
    if table is not None and materials:
        if n is None:  # smooth normals of the corners as written, kept through the split below
            n = vertex_normals(torch.as_tensor(P, dtype=dtype), torch.as_tensor(F)).double().numpy()
        # Kd per vertex; textured materials are white so the texture shows as authored.
        rows = np.asarray([(1.0, 1.0, 1.0) if m.texture_path is not None else m.diffuse for m in materials])
        palette, row_of = np.unique(rows, axis=0, return_inverse=True)
        face_row = row_of.reshape(-1)[np.asarray(mats)]  # [F]
        # split vertices shared by faces of different colors: one vertex per (corner, color)
        key = F * len(palette) + face_row[:, None]  # [F, 3]
        uniq, first, inverse = np.unique(key.reshape(-1), return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")  # vertices in order of first use
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        F = rank[inverse.reshape(-1)].reshape(-1, 3)
        src, row = uniq[order] // len(palette), uniq[order] % len(palette)
        P, n = P[src], n[src]
        uv = uv[src] if uv is not None else None
        colors = palette[row]
    mesh = mesh_from_arrays(P, F, n, uv, dtype, device)
    if colors is not None:
        mesh = replace(mesh, colors=torch.as_tensor(colors, dtype=dtype, device=device))
    if names:
        mesh = replace(mesh, material_ids=torch.tensor(mats, dtype=torch.int64, device=device))
    return mesh, materials


def load_obj(path: str | os.PathLike, *, dtype=torch.float32, device=None, mtl: bool = True) -> MeshBatch:
    """Read a Wavefront OBJ: ``v``, ``vt``, ``vn`` and ``f`` (polygons are fan-triangulated;
    negative indices allowed). Each distinct ``v/vt/vn`` corner becomes one vertex.

    Materials: ``usemtl`` names become ``material_ids`` in order of first use (all zeros, not
    None, for a single ``usemtl``; faces before any ``usemtl`` get the unnamed material ``""``).
    ``mtllib`` files (relative to the OBJ's folder; several allowed) are read for ``newmtl``,
    ``Kd`` and ``map_Kd``: when one is read, ``Kd`` becomes the per-vertex ``colors`` (white for
    textured materials, so their texture shows as authored), and vertices shared by faces of
    different colors are split. The textures themselves come from
    :func:`load_obj_with_materials`. Other statements are ignored.

    Args:
        mtl: False ignores ``mtllib`` (no colors; for an OBJ whose MTL file is missing).

    Raises:
        PyGpuValueError: a malformed line, an index out of range, a missing MTL file (the OBJ
            line is named) or a missing ``map_Kd`` file (the MTL line is named).
    """
    return _load_obj(path, "load_obj", dtype=dtype, device=device, mtl=mtl, decode=False)[0]


def load_obj_with_materials(path: str | os.PathLike, *, dtype=torch.float32, device=None,
                            mtl: bool = True) -> tuple[MeshBatch, list[ObjMaterial]]:
    """:func:`load_obj`, and the materials its ``material_ids`` index: ``(mesh, materials)``.

    ``materials[i]`` is the :class:`ObjMaterial` of material id ``i`` (its name, ``Kd`` and the
    ``map_Kd`` image decoded from sRGB to linear float ``[Ht, Wt, 3]``); a name that no MTL file
    defines gets a white, untextured material. Without ``usemtl`` or ``mtllib`` the list is empty.
    The materials stay beside the mesh rather than in ``MeshBatch``, whose merges
    (``concat_meshes``, ``Renderer.upload``) keep material ids as given. Render them with::

        mesh, materials = load_obj_with_materials("model.obj")
        frame = renderer.render(renderer.upload(mesh), camera, textures=[m.texture for m in materials])
    """
    return _load_obj(path, "load_obj_with_materials", dtype=dtype, device=device, mtl=mtl, decode=True)


def save_obj(path: str | os.PathLike, mesh: MeshBatch, *, index: int = 0) -> None:
    """Write ``mesh`` (batch element ``index``) as OBJ with positions, normals, UVs when present, and faces."""
    if not isinstance(mesh, MeshBatch):
        raise PyGpuTypeError(f"save_obj: `mesh` must be a MeshBatch, got {type(mesh).__name__}")
    pick = lambda t: None if t is None else (t[index] if t.dim() == 3 else t).detach().cpu().double().numpy()  # noqa: E731
    P, N, UV = pick(mesh.positions), pick(mesh.normals), pick(mesh.uvs)
    F = mesh.faces.cpu().numpy() + 1
    lines = ["# py_gpu save_obj"]
    lines += [f"v {x:.9g} {y:.9g} {z:.9g}" for x, y, z in P]
    if UV is not None:
        lines += [f"vt {u:.9g} {v:.9g}" for u, v in UV]
    if N is not None:
        lines += [f"vn {x:.9g} {y:.9g} {z:.9g}" for x, y, z in N]
    if UV is not None and N is not None:
        fmt = lambda i: f"{i}/{i}/{i}"  # noqa: E731
    elif UV is not None:
        fmt = lambda i: f"{i}/{i}"  # noqa: E731
    elif N is not None:
        fmt = lambda i: f"{i}//{i}"  # noqa: E731
    else:
        fmt = str
    lines += ["f " + " ".join(fmt(i) for i in tri) for tri in F]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


# ---- trimesh -------------------------------------------------------------------------------------
def _trimesh():
    try:
        import trimesh
    except ImportError:
        raise ImportError('trimesh interop needs the optional extra: pip install "py_gpu[mesh]"') from None
    return trimesh


def from_trimesh(tm, *, dtype=torch.float32, device=None) -> MeshBatch:
    """A ``MeshBatch`` from a ``trimesh.Trimesh`` (positions, faces, vertex normals, UVs when present)."""
    _trimesh()
    uv = getattr(getattr(tm, "visual", None), "uv", None)
    return mesh_from_arrays(np.asarray(tm.vertices), np.asarray(tm.faces), np.asarray(tm.vertex_normals),
                 None if uv is None else np.asarray(uv), dtype, device)


def to_trimesh(mesh: MeshBatch, *, index: int = 0):
    """A ``trimesh.Trimesh`` of ``mesh`` (batch element ``index``), without re-processing vertices."""
    trimesh = _trimesh()
    pick = lambda t: (t[index] if t.dim() == 3 else t).detach().cpu().double().numpy()  # noqa: E731
    visual = None
    if mesh.uvs is not None:
        visual = trimesh.visual.TextureVisuals(uv=pick(mesh.uvs))
    return trimesh.Trimesh(vertices=pick(mesh.positions), faces=mesh.faces.cpu().numpy(),
                           vertex_normals=pick(mesh.normals), visual=visual, process=False)

