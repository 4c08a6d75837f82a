"""The world-space renderer: meshes + camera + lights + textures in, ``Frame`` out.

Deferred design, so every backend's output is comparable:

1. geometry (once, at :meth:`Renderer.upload`): a ``MeshBatch`` is validated, given default
   normals/UVs/colors, converted to the renderer's device and dtype, and kept as a ``MeshHandle``;
2. per frame: object/instance transforms and the camera give clip-space vertices;
   :func:`py_gpu.raster.clip.clip_batch` cuts them at the near plane;
3. any backend's ``rasterize()`` gives ``Fragments`` (hard: exact; soft: torch only), which
   :func:`~py_gpu.raster.clip.unclip_fragments` maps back onto the mesh's own faces. A backend
   with persistent geometry (``upload_geometry`` / ``rasterize_geometry``, e.g. ModernGL) instead
   keeps each handle's positions in its own buffers from upload on and gets only the matrices per
   frame; it clips at the near plane itself and returns fragments on the mesh's own faces;
4. one torch shading stage interpolates positions, normals, UVs and colors, samples textures,
   lights (Lambert / Blinn-Phong), applies gamma, and composites (hard) or soft-blends (soft).

Steps 2 and 4 are plain torch, so with the torch backend the image is differentiable with
respect to camera matrices, object transforms, vertex data, textures, lights and materials.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Sequence

import torch

from ._check import PyGpuTypeError, PyGpuValueError, check_rgb, check_size
from .camera import Camera
from .contracts import Fragments, Frame, TriangleBatch
from .mesh import MeshBatch, concat_meshes, face_normals
from .raster.clip import clip_batch
from .settings import RasterSettings
from .shading.lights import Material, gamma_encode, shade
from .shading.texture import Texture, atlas_uv, sample_texture

__all__ = ["Renderer", "MeshHandle", "RenderStats", "ATTACHMENTS"]

#: Extra buffers a caller may ask for (``Frame.extras``), each ``[B, H, W, C]``.
ATTACHMENTS = {
    "normal": "float [B, H, W, 3] unit world-space shading normal (0 where empty)",
    "position": "float [B, H, W, 3] world-space position (0 where empty)",
    "uv": "float [B, H, W, 2] texture coordinates (0 where empty)",
    "albedo": "float [B, H, W, 3] unlit surface color (0 where empty)",
    "object_id": "int64 [B, H, W, 1] index of the handle in the render call (-1 where empty)",
    "instance_id": "int64 [B, H, W, 1] instance index (-1 where empty)",
    "material_id": "int64 [B, H, W, 1] material id (-1 where empty)",
}
_MODELS = ("blinn_phong", "lambert", "unlit")
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
    """

    conversions: int = 0
    uploads: int = 0
    releases: int = 0
    frames: int = 0


@dataclass(eq=False)
class MeshHandle:
    """Geometry kept on the renderer's device between frames. Get one from :meth:`Renderer.upload`.

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
        self._drop_gpu()
        for name in ("positions", "normals", "uvs", "colors", "faces", "material_ids", "object_ids"):
            setattr(self, name, None)
        self._instanced.clear()

    def _drop_gpu(self) -> None:
        if self._gpu is not None:
            self._gpu.release()
            self._gpu = None
            self._gpu_version = ()


class _TorchRaster:
    """Direct use of the torch rasterizers when no ``"torch"`` backend is registered."""

    def rasterize(self, batch, size, *, settings: RasterSettings) -> Fragments:
        if settings.mode == "soft":
            from .raster.torch_soft import rasterize_soft

            return rasterize_soft(batch, size, settings)
        from .raster.torch_hard import rasterize_hard

        return rasterize_hard(batch, size, settings)


def _resolve_backend(backend, device):
    if not isinstance(backend, str):
        if not hasattr(backend, "rasterize"):
            raise PyGpuTypeError(f"Renderer: `backend` must be a name or have rasterize(), got {type(backend).__name__}")
        return backend
    from ._check import BackendUnavailableError
    from .backends import select_backend

    name = backend.strip().lower()
    try:
        return select_backend(name, **({"device": device} if name == "torch" and device is not None else {}))
    except BackendUnavailableError:
        if name == "torch":
            return _TorchRaster()
        raise
    except TypeError:
        if name == "torch":
            return _TorchRaster()
        raise


class Renderer:
    """Renders uploaded meshes through a camera, with lights and textures, on any backend.

    Args:
        size: ``(H, W)`` of the frames.
        backend: ``"torch"`` (differentiable; hard or soft), ``"numpy"``, ``"reference"``,
            ``"moderngl"``, or a backend instance with ``rasterize(batch, size, *, settings)``.
        device, dtype: where and in what float type geometry lives and shading runs.
        settings: ``RasterSettings`` (mode, sigma, gamma, faces_per_pixel, cull_backfaces ...).
        background: float RGB in [0, 1].

    Example::

        r = Renderer((128, 128))
        h = r.upload(py_gpu.mesh.cube())
        frame = r.render(h, Camera.perspective((2, 2, 3)), lights=[DirectionalLight()])
    """

    def __init__(self, size, *, backend="torch", device=None, dtype: torch.dtype = torch.float32,
                 settings: RasterSettings | None = None, background=(0.0, 0.0, 0.0)):
        self.size = check_size("Renderer", size)
        if dtype not in (torch.float32, torch.float64):
            raise PyGpuTypeError(f"Renderer: `dtype` must be torch.float32 or torch.float64, got {dtype}")
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.dtype = dtype
        self.settings = settings if settings is not None else RasterSettings()
        if not isinstance(self.settings, RasterSettings):
            raise PyGpuTypeError(f"Renderer: `settings` must be a RasterSettings, got {type(self.settings).__name__}")
        self.background = check_rgb("Renderer", "background", background, scale=1.0)
        self.backend = _resolve_backend(backend, self.device)
        self.stats = RenderStats()
        self._handles: dict[int, MeshHandle] = {}
        self._merged: dict[tuple, MeshHandle] = {}

    # ---- geometry ------------------------------------------------------------------------------
    def upload(self, mesh: MeshBatch | Sequence[MeshBatch]) -> MeshHandle:
        """Convert ``mesh`` (or several, merged into one scene; each gets its own object id) once
        and keep it on the device. Counts one conversion per mesh and one upload."""
        meshes = [mesh] if isinstance(mesh, MeshBatch) else list(mesh)
        if not meshes or not all(isinstance(m, MeshBatch) for m in meshes):
            raise PyGpuTypeError("Renderer.upload: `mesh` must be a MeshBatch or a non-empty sequence of them")
        self.stats.conversions += len(meshes)
        filled = []
        obj = []
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
        h = MeshHandle(next(_ids), m.positions.detach() if not m.positions.requires_grad else m.positions, m.normals, uvs,
                       m.colors, m.faces, mats, object_ids, has_uvs)
        self._handles[h.id] = h
        if self._persistent_backend() and h.positions.dim() == 2:
            self._upload_gpu(h)
        return h

    def _persistent_backend(self) -> bool:
        """Whether the backend keeps geometry itself (``upload_geometry`` / ``rasterize_geometry``)."""
        return hasattr(self.backend, "upload_geometry") and hasattr(self.backend, "rasterize_geometry")

    def _upload_gpu(self, h: MeshHandle) -> None:
        h._drop_gpu()
        h._gpu = self.backend.upload_geometry(h.positions, h.faces)
        h._gpu_version = (h.positions._version, h.faces._version)

    def _gpu_mesh(self, h: MeshHandle, settings: RasterSettings):
        """The backend's persistent copy of ``h`` for this frame, or None to take the general path.

        Taken for hard mode with shared (unbatched) positions. Positions or faces modified in place
        since the upload are sent again (counted in ``stats.uploads``)."""
        if settings.mode != "hard" or not self._persistent_backend() or h.positions.dim() != 2:
            return None
        if h._gpu is None or h._gpu_version != (h.positions._version, h.faces._version):
            if h._gpu is not None:
                self.stats.uploads += 1  # modified in place: sent again
            self._upload_gpu(h)
        return h._gpu

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

    def _scene(self, handles) -> MeshHandle:
        """One handle for a list of handles: merged once, then cached."""
        if isinstance(handles, MeshHandle):
            handles = [handles]
        handles = list(handles)
        for h in handles:
            if not isinstance(h, MeshHandle):
                raise PyGpuTypeError(f"Renderer.render: expected MeshHandle(s), got {type(h).__name__}")
            if h.released:
                raise PyGpuValueError("Renderer.render: this MeshHandle was released; upload the mesh again")
        if len(handles) == 1:
            return handles[0]
        key = tuple(h.id for h in handles)
        scene = self._merged.get(key)
        if scene is None:
            self.stats.conversions += 1
            offset, faces, objs = 0, [], []
            for k, h in enumerate(handles):
                faces.append(h.faces + offset)
                offset += h.num_vertices
                objs.append(torch.full((h.num_faces,), k, dtype=torch.int64, device=self.device))
            cat = lambda name: torch.cat([getattr(h, name) for h in handles], -2)  # noqa: E731
            m = MeshBatch(cat("positions"), torch.cat(faces), cat("normals"), cat("uvs"), cat("colors"),
                          torch.cat([h.material_ids for h in handles]))
            scene = self._register(m, torch.cat(objs), all(h.has_uvs for h in handles))
            self._merged[key] = scene
        return scene

    def _instances(self, h: MeshHandle, count: int):
        """Faces ``[N F, 3]`` and instance ids ``[N F]`` for ``count`` copies (cached per count)."""
        got = h._instanced.get(count)
        if got is None:
            self.stats.conversions += 1
            offs = (torch.arange(count, device=self.device) * h.num_vertices)[:, None, None]
            faces = (h.faces[None] + offs).reshape(-1, 3)
            inst = torch.arange(count, device=self.device).repeat_interleave(h.num_faces)
            got = (faces, inst)
            h._instanced[count] = got
        return got

    # ---- rendering -------------------------------------------------------------------------------
    def render(self, handles, camera: Camera, *, lights: Sequence = (), textures=None, atlas_rects=None,
               material: Material | None = None, model: str = "blinn_phong", flat: bool = False,
               transforms: torch.Tensor | None = None, instances: torch.Tensor | None = None,
               attachments: Sequence[str] = (), gamma: float | None = None, texture_filter: str = "bilinear",
               texture_wrap: str = "repeat", mode: str | None = None, cull_backfaces: bool | None = None,
               background=None) -> Frame:
        """Render one frame per camera in ``camera`` (``B`` = its batch size).

        Args:
            handles: a ``MeshHandle`` or a list of them (merged once and cached).
            camera: ``Camera`` with ``B`` views.
            lights: light objects; with none (or ``model="unlit"``) the albedo is shown as is.
            textures: a texture (tensor ``[Ht, Wt, 3]`` or ``Texture``) for every material, or a
                list indexed by material id (``None`` entries: untextured). Multiplies the colors.
            atlas_rects: float ``[M, 4]``: with one atlas texture, material ``m``'s UVs map into
                rect ``m`` (see :func:`py_gpu.shading.texture.atlas_uv`).
            material: Blinn-Phong specular strength and shininess.
            model: ``"blinn_phong"``, ``"lambert"`` or ``"unlit"``.
            flat: light with face normals instead of interpolated smooth normals.
            transforms: float ``[4, 4]`` or ``[B, 4, 4]`` object-to-world matrix for the whole scene.
            instances: float ``[N, 4, 4]`` or ``[B, N, 4, 4]``: draw the (single) handle N times in
                one call (instancing). Face ids then index ``N * F`` faces, instance-major.
            attachments: names from :data:`ATTACHMENTS` to return in ``Frame.extras``.
            gamma: encode the linear result with ``c ** (1/gamma)`` (e.g. 2.2); None leaves it linear.
            texture_filter, texture_wrap: see :func:`py_gpu.shading.texture.sample_texture`.
            mode, cull_backfaces: override the renderer's ``RasterSettings``.
            background: override the renderer's background (float RGB).

        Returns:
            ``Frame``: ``image`` float ``[B, H, W, 3]``; ``alpha`` ``[B, H, W, 1]``; ``depth``
            ``[B, H, W]`` (NDC z/w in [0, 1]); ``face_index`` int64 ``[B, H, W]`` into the scene's
            (instanced) faces; ``extras`` as requested.
        """
        where = "Renderer.render"
        self.stats.frames += 1
        if not isinstance(camera, Camera):
            raise PyGpuTypeError(f"{where}: `camera` must be a py_gpu.camera.Camera, got {type(camera).__name__}")
        if model not in _MODELS:
            raise PyGpuValueError(f"{where}: `model` must be one of {_MODELS}, got {model!r}")
        bad = [a for a in attachments if a not in ATTACHMENTS]
        if bad:
            raise PyGpuValueError(f"{where}: unknown attachments {bad}; choose from {sorted(ATTACHMENTS)}")
        settings = self.settings.with_(mode=mode, cull_backfaces=cull_backfaces)
        bg = self.background if background is None else check_rgb(where, "background", background, scale=1.0)
        h = self._scene(handles)
        cam = camera.to(self.device, self.dtype)
        B = cam.batch_size

        # -- world-space geometry (per frame: only the transforms) --
        pos, nrm, faces = h.positions, h.normals, h.faces
        uvs, cols = h.uvs, h.colors
        obj, mats, inst = h.object_ids, h.material_ids, None
        if pos.dim() == 2:
            pos, nrm = pos[None], nrm[None]
        if instances is not None:
            if not isinstance(handles, MeshHandle) and len(list(handles)) != 1:
                raise PyGpuValueError(f"{where}: `instances` draws one handle; pass a single MeshHandle")
            m = self._matrices(where, "instances", instances, batched_dim=4)  # [B|1, N, 4, 4]
            N = m.shape[1]
            pos = (pos[:, None] @ m[..., :3, :3].transpose(-1, -2) + m[..., None, :3, 3]).flatten(1, 2)  # [B, N V, 3]
            nrm = (nrm[:, None] @ torch.linalg.inv(m[..., :3, :3])).flatten(1, 2)
            faces, inst = self._instances(h, N)
            uvs, cols = uvs.repeat(N, 1), cols.repeat(N, 1)
            obj, mats = obj.repeat(N), mats.repeat(N)
        if transforms is not None:
            m = self._matrices(where, "transforms", transforms, batched_dim=3)  # [B|1, 4, 4]
            pos = pos @ m[:, :3, :3].transpose(-1, -2) + m[:, None, :3, 3]
            nrm = nrm @ torch.linalg.inv(m[:, :3, :3])
        if pos.shape[0] != B:
            pos, nrm = pos.expand(B, -1, -1), nrm.expand(B, -1, -1)

        gpu = self._gpu_mesh(h, settings)
        if gpu is not None:
            # -- persistent geometry: only matrices go to the backend; it clips at the near plane --
            clip_from_world = cam.matrix  # [B, 4, 4]
            if transforms is not None:
                clip_from_world = clip_from_world @ self._matrices(where, "transforms", transforms, batched_dim=3)
            inst_m = None if instances is None else self._matrices(where, "instances", instances, batched_dim=4)
            frags = self.backend.rasterize_geometry(gpu, clip_from_world.detach().expand(B, 4, 4), self.size,
                                                    instances=None if inst_m is None else inst_m.detach(),
                                                    settings=settings)
            frags = _to(frags, self.device, self.dtype)
        else:
            # -- clip, rasterize, map back --
            clip = cam.world_to_clip(pos)  # [B, V, 4]
            if clip.shape[0] != B:
                clip = clip.expand(B, -1, -1)
            res = clip_batch(TriangleBatch(clip, faces))
            frags = self.backend.rasterize(res.batch, self.size, settings=settings)
            frags = res.unclip(_to(frags, self.device, self.dtype))
        face = frags.face_index  # [B, H, W, K]
        mask = face >= 0
        safe = face.clamp(min=0)

        def interp(values: torch.Tensor) -> torch.Tensor:
            """Per-vertex [B|1, V, C] -> per-fragment [B, H, W, K, C] (0 where empty)."""
            values = values.expand(B, -1, -1) if values.dim() == 3 else values[None].expand(B, -1, -1)
            C = values.shape[-1]
            corner = faces[safe]  # [B, H, W, K, 3]
            got = torch.gather(values, 1, corner.reshape(B, -1, 1).expand(-1, -1, C)).reshape(*corner.shape, C)
            out = (frags.bary[..., None] * got).sum(-2)
            return torch.where(mask[..., None], out, torch.zeros_like(out))

        def per_face(values: torch.Tensor) -> torch.Tensor:
            return torch.where(mask, values[safe], torch.full_like(safe, -1))

        world = interp(pos)
        if flat:
            fn = face_normals(pos, faces)  # [B, F, 3]
            normal = torch.gather(fn, 1, safe.reshape(B, -1, 1).expand(-1, -1, 3)).reshape(*safe.shape, 3)
        else:
            normal = interp(nrm)
        normal = normal / normal.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        albedo = interp(cols)
        uv = interp(uvs)
        mat_px = per_face(mats)
        if textures is not None:
            albedo = albedo * self._texture_color(where, textures, atlas_rects, uv, mat_px, mask, h.has_uvs,
                                                  texture_filter, texture_wrap)
        if model == "unlit" or not lights:
            color = albedo
        else:
            color = shade(albedo, normal, world, cam.position, lights, model=model, material=material)
        if gamma is not None:
            color = gamma_encode(color, gamma)
        color = torch.where(mask[..., None], color, torch.zeros_like(color))

        # -- composite --
        if settings.mode == "soft":
            from .shading.blend import blend, nearest_covering, silhouette

            image = blend(color, frags, bg, settings)
            alpha = silhouette(frags, settings)
            top, depth = nearest_covering(frags)
            inside = (frags.dist >= 0) & mask  # the nearest slot whose face contains the pixel center
            first = torch.where(inside, torch.arange(face.shape[-1], device=self.device), face.shape[-1]).amin(-1)
            pick = first.clamp(max=face.shape[-1] - 1)[..., None]
            covered = top >= 0
        else:
            bgt = torch.tensor(bg, dtype=self.dtype, device=self.device)
            covered = mask[..., 0]
            image = torch.where(covered[..., None], color[..., 0, :], bgt)
            alpha = covered[..., None].to(self.dtype)
            depth = torch.where(covered, frags.depth[..., 0], torch.full_like(frags.depth[..., 0], float("inf")))
            top = face[..., 0]
            pick = torch.zeros_like(top)[..., None]

        def at_top(t: torch.Tensor) -> torch.Tensor:
            """[B, H, W, K, C] -> the value of the nearest covering fragment [B, H, W, C]."""
            got = torch.gather(t, 3, pick[..., None].expand(*pick.shape, t.shape[-1])).squeeze(3)
            return torch.where(covered[..., None], got, torch.zeros_like(got))

        extras = {}
        for name in attachments:
            if name == "normal":
                extras[name] = at_top(normal)
            elif name == "position":
                extras[name] = at_top(world)
            elif name == "uv":
                extras[name] = at_top(uv)
            elif name == "albedo":
                extras[name] = at_top(albedo)
            else:
                ids = {"object_id": obj, "material_id": mats, "instance_id": inst}[name]
                if ids is None:
                    ids = torch.zeros(faces.shape[0], dtype=torch.int64, device=self.device)
                val = ids[top.clamp(min=0)]
                extras[name] = torch.where(covered, val, torch.full_like(val, -1))[..., None]
        return Frame(image=image, alpha=alpha, depth=depth, face_index=torch.where(covered, top, -1), extras=extras)

    def _matrices(self, where: str, name: str, m, *, batched_dim: int) -> torch.Tensor:
        if not isinstance(m, torch.Tensor) or not m.is_floating_point():
            raise PyGpuTypeError(f"{where}: `{name}` must be a float tensor")
        m = m.to(self.device, self.dtype)
        if m.dim() == batched_dim - 1:
            m = m[None]
        if m.dim() != batched_dim or m.shape[-2:] != (4, 4):
            want = "[N, 4, 4] or [B, N, 4, 4]" if batched_dim == 4 else "[4, 4] or [B, 4, 4]"
            raise PyGpuValueError(f"{where}: `{name}` must have shape {want}, got {tuple(m.shape)}")
        return m

    def _texture_color(self, where, textures, atlas_rects, uv, mat_px, mask, has_uvs, filt, wrap) -> torch.Tensor:
        """float [B, H, W, K, 3] texture factor per fragment."""
        if not has_uvs:
            raise PyGpuValueError(f"{where}: `textures` given but a mesh has no UVs")
        B, H, W, K = mask.shape
        kw = {}
        if filt == "trilinear":
            from .shading.texture import uv_derivatives

            grads = torch.stack([uv_derivatives(uv[..., k, :], mask[..., k]) for k in range(K)], 3)
            kw["uv_grad"] = grads
        if isinstance(textures, (list, tuple)):
            out = torch.ones(B, H, W, K, 3, dtype=self.dtype, device=self.device)
            for m_id, tex in enumerate(textures):
                if tex is None:
                    continue
                sel = (mat_px == m_id)[..., None]
                if not bool(sel.any()):
                    continue
                out = torch.where(sel, self._sample(tex, uv, filt, wrap, kw), out)
            return out
        if atlas_rects is not None:
            rects = atlas_rects.to(self.device, self.dtype)
            uv = atlas_uv(uv, mat_px.clamp(min=0, max=rects.shape[0] - 1), rects, wrap=wrap)
            wrap = "clamp"
        return self._sample(textures, uv, filt, wrap, kw)

    def _sample(self, tex, uv, filt, wrap, kw) -> torch.Tensor:
        img = tex if isinstance(tex, Texture) else tex.to(self.device, self.dtype)
        return sample_texture(img, uv, filter=filt, wrap=wrap, **kw)[..., :3]


def _to(frags: Fragments, device, dtype) -> Fragments:
    """Fragments on ``device`` with float tensors in ``dtype`` (a no-op when already there)."""
    cast = lambda t: None if t is None else t.to(device=device, dtype=dtype)  # noqa: E731
    if frags.bary.device == device and frags.bary.dtype == dtype:
        return frags
    return Fragments(frags.face_index.to(device), cast(frags.bary), cast(frags.depth), cast(frags.dist),
                     cast(frags.screen_bary))
