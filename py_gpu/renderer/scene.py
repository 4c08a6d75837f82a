"""Scene state of a ``Renderer``: uploaded meshes (handles), merged and instanced caches, stats."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Sequence

import torch

from .._check import PyGpuTypeError, PyGpuValueError
from ..mesh import MeshBatch, concat_meshes, vertex_normals

__all__ = ["MeshHandle", "RenderStats", "Scene"]

_ids = itertools.count(1)


@dataclass
class RenderStats:
    """Counters that show how much geometry work happened.

    Attributes:
        conversions: meshes validated / filled with defaults / converted to device tensors.
        uploads: geometry buffers placed on the device (one per upload or merged scene; with a
            persistent-geometry backend this includes its buffers, made at the same time, plus a
            new upload when a handle's positions or faces were modified in place).
        releases: handles released.
        frames: ``render`` calls.
        gl_frames: ``render`` calls shaded in GL (see :mod:`py_gpu.renderer.gl_path`).
        shading: how the last call was shaded: ``"gl"`` or ``"torch"`` ("" before the first).
        shading_reason: why the last call was shaded in torch ("" when it was shaded in GL).
    """

    conversions: int = 0
    uploads: int = 0
    releases: int = 0
    frames: int = 0
    gl_frames: int = 0
    shading: str = ""
    shading_reason: str = ""


@dataclass(eq=False)
class MeshHandle:
    """Geometry kept on the renderer's device between frames. Get one from ``Renderer.upload``.

    Attributes (all on the renderer's device, ``V`` vertices, ``F`` faces):
        positions: float ``[V, 3]`` (or ``[B, V, 3]``); normals likewise; uvs float ``[V, 2]``;
        colors float ``[V, 3]``; faces int64 ``[F, 3]``; material_ids int64 ``[F]``;
        object_ids int64 ``[F]`` (which uploaded mesh each face came from).
    """

    id: int
    positions: torch.Tensor
    normals: torch.Tensor
    uvs: torch.Tensor
    colors: torch.Tensor
    faces: torch.Tensor
    material_ids: torch.Tensor
    object_ids: torch.Tensor
    has_uvs: bool
    _instanced: dict = field(default_factory=dict)
    _gpu: object = None  # the backend's persistent copy of positions/faces (e.g. a GLMesh), or None
    _gpu_version: tuple = ()  # (positions._version, faces._version) when _gpu was made
    released: bool = False
    #: normals are the smooth normals of the positions (not given by the user): recomputed when
    #: the positions change in place
    auto_normals: bool = False
    _normals_version: int = -1

    @property
    def num_vertices(self) -> int:
        return self.positions.shape[-2]

    @property
    def num_faces(self) -> int:
        return self.faces.shape[0]

    def release(self) -> None:
        """Free the device tensors; safe to call twice. Rendering a released handle raises."""
        if self.released:
            return
        self.released = True
        self.drop_gpu()
        for name in ("positions", "normals", "uvs", "colors", "faces", "material_ids", "object_ids"):
            setattr(self, name, None)
        self._instanced.clear()

    def update_positions(self, positions: torch.Tensor, normals: torch.Tensor | None = None) -> None:
        """Replace the vertex positions (same shape), keeping faces, UVs and colors.

        ``normals`` replaces the normals too; without it, smooth normals are recomputed from the
        new positions. Writing into ``handle.positions`` in place works as well: computed normals
        follow on the next frame, and a backend's persistent copy is sent again.
        """
        if self.released:
            raise PyGpuValueError("MeshHandle.update_positions: this handle was released; upload the mesh again")
        if not isinstance(positions, torch.Tensor) or positions.shape != self.positions.shape:
            got = tuple(positions.shape) if isinstance(positions, torch.Tensor) else type(positions).__name__
            raise PyGpuValueError(f"MeshHandle.update_positions: need positions of shape {tuple(self.positions.shape)}, got {got}")
        self.positions = positions.to(self.positions.device, self.positions.dtype)
        if normals is not None:
            self.normals = normals.to(self.positions.device, self.positions.dtype).expand_as(self.positions)
            self.auto_normals = False
        self._normals_version = -1
        self._gpu_version = ()

    def current_normals(self) -> torch.Tensor:
        """The normals for this frame: recomputed from the positions when they changed."""
        if self.auto_normals and self._normals_version != self.positions._version:
            self.normals = vertex_normals(self.positions, self.faces)
            self._normals_version = self.positions._version
        return self.normals

    def drop_gpu(self) -> None:
        if self._gpu is not None:
            self._gpu.release()
            self._gpu = None
            self._gpu_version = ()


class Scene:
    """The handles of one renderer, on ``device`` in ``dtype``; keeps persistent backend copies.

    ``backend`` may keep geometry itself (``upload_geometry`` / ``rasterize_geometry``, e.g.
    ModernGL); then every unbatched handle gets its backend copy at upload.
    """

    def __init__(self, device: torch.device, dtype: torch.dtype, backend) -> None:
        self.device, self.dtype, self.backend = device, dtype, backend
        self.stats = RenderStats()
        self._handles: dict[int, MeshHandle] = {}
        self._merged: dict[tuple, MeshHandle] = {}

    @property
    def persistent(self) -> bool:
        """Whether the backend keeps geometry itself."""
        return hasattr(self.backend, "upload_geometry") and hasattr(self.backend, "rasterize_geometry")

    # ---- uploads ---------------------------------------------------------------------------------
    def upload(self, mesh: MeshBatch | Sequence[MeshBatch]) -> MeshHandle:
        """Convert ``mesh`` (or several, merged; each gets its own object id) once and keep it."""
        meshes = [mesh] if isinstance(mesh, MeshBatch) else list(mesh)
        if not meshes or not all(isinstance(m, MeshBatch) for m in meshes):
            raise PyGpuTypeError("Renderer.upload: `mesh` must be a MeshBatch or a non-empty sequence of them")
        self.stats.conversions += len(meshes)
        filled, obj = [], []
        for k, m in enumerate(meshes):
            m = m.to(self.device, self.dtype)
            if m.colors is None:
                m = m.with_colors(torch.ones(3, dtype=self.dtype))
            elif m.colors.shape[-1] != 3:
                raise PyGpuValueError(f"Renderer.upload: mesh {k} colors must be RGB [V, 3], got {tuple(m.colors.shape)}")
            filled.append(m)
            obj.append(torch.full((m.num_faces,), k, dtype=torch.int64, device=self.device))
        has_uvs = all(m.uvs is not None for m in filled)
        merged = filled[0] if len(filled) == 1 else concat_meshes(filled)
        return self._register(merged, torch.cat(obj), has_uvs)

    def _register(self, m: MeshBatch, object_ids: torch.Tensor, has_uvs: bool) -> MeshHandle:
        self.stats.uploads += 1
        uvs = m.uvs if m.uvs is not None else torch.zeros(*m.positions.shape[:-1], 2, dtype=self.dtype, device=self.device)
        mats = m.material_ids if m.material_ids is not None else torch.zeros(m.num_faces, dtype=torch.int64, device=self.device)
        pos = m.positions if m.positions.requires_grad else m.positions.detach()
        h = MeshHandle(next(_ids), pos, m.normals, uvs, m.colors, m.faces, mats, object_ids, has_uvs)
        h.auto_normals = bool(torch.allclose(m.normals, vertex_normals(m.positions.detach(), m.faces), atol=1e-6))
        h._normals_version = h.positions._version
        self._handles[h.id] = h
        if self.persistent and h.positions.dim() == 2:
            self._upload_gpu(h)
        return h

    def _upload_gpu(self, h: MeshHandle) -> None:
        h.drop_gpu()
        h._gpu = self.backend.upload_geometry(h.positions, h.faces)
        h._gpu_version = (h.positions._version, h.faces._version)

    def gpu_mesh(self, h: MeshHandle, mode: str):
        """The backend's persistent copy of ``h`` for this frame, or None to take the general path.

        Taken in hard mode for shared (unbatched) positions. Positions or faces modified in place
        since the upload, or a copy the backend lost (GL buffers do not survive fork()), are sent
        again (counted in ``stats.uploads``)."""
        if mode != "hard" or not self.persistent or h.positions.dim() != 2:
            return None
        stale = h._gpu is not None and getattr(h._gpu, "released", False)
        if h._gpu is None or stale or h._gpu_version != (h.positions._version, h.faces._version):
            if h._gpu is not None:
                self.stats.uploads += 1  # modified in place: sent again
            self._upload_gpu(h)
        return h._gpu

    # ---- lookups -----------------------------------------------------------------------------------
    def release(self, handle: MeshHandle) -> None:
        """Release ``handle`` (and any merged scene built from it); safe to call twice."""
        if not isinstance(handle, MeshHandle):
            raise PyGpuTypeError(f"Renderer.release: expected a MeshHandle, got {type(handle).__name__}")
        if not handle.released:
            self.stats.releases += 1
        handle.release()
        self._handles.pop(handle.id, None)
        for key in [k for k in self._merged if handle.id in k]:
            self._merged.pop(key).release()

    def resolve(self, handles) -> MeshHandle:
        """One handle for a handle or a list of them: merged once, then cached."""
        handles = [handles] if isinstance(handles, MeshHandle) else list(handles)
        for h in handles:
            if not isinstance(h, MeshHandle):
                raise PyGpuTypeError(f"Renderer.render: expected MeshHandle(s), got {type(h).__name__}")
            if h.released:
                raise PyGpuValueError("Renderer.render: this MeshHandle was released; upload the mesh again")
        if not handles:
            raise PyGpuValueError("Renderer.render: `handles` is empty")
        if len(handles) == 1:
            return handles[0]
        key = tuple(h.id for h in handles)
        scene = self._merged.get(key)
        if scene is None:
            scene = self._merged[key] = self._merge(handles)
        return scene

    def _merge(self, handles: list[MeshHandle]) -> MeshHandle:
        self.stats.conversions += 1
        offset, faces, objs = 0, [], []
        for k, h in enumerate(handles):
            faces.append(h.faces + offset)
            offset += h.num_vertices
            objs.append(torch.full((h.num_faces,), k, dtype=torch.int64, device=self.device))
        cat = lambda name: torch.cat([getattr(h, name) for h in handles], -2)  # noqa: E731
        m = MeshBatch(cat("positions"), torch.cat(faces), cat("normals"), cat("uvs"), cat("colors"),
                      torch.cat([h.material_ids for h in handles]))
        return self._register(m, torch.cat(objs), all(h.has_uvs for h in handles))

    def instances(self, h: MeshHandle, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Faces ``[N F, 3]`` and instance ids ``[N F]`` for ``count`` copies (cached per count)."""
        got = h._instanced.get(count)
        if got is None:
            self.stats.conversions += 1
            offs = (torch.arange(count, device=self.device) * h.num_vertices)[:, None, None]
            faces = (h.faces[None] + offs).reshape(-1, 3)
            inst = torch.arange(count, device=self.device).repeat_interleave(h.num_faces)
            got = h._instanced[count] = (faces, inst)
        return got
