"""Per-frame geometry of a ``Renderer``: transforms and instancing, then the raster pass.

The raster pass gives ``Fragments`` on the frame's own faces either way it runs: through the
front end (clip once, rasterize, map back once) or, for a backend that keeps geometry itself,
through its persistent copy (GL clips at the same near plane and returns the same contract).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._check import PyGpuTypeError, PyGpuValueError, check_finite
from ..camera import Camera
from ..contracts import Fragments, TriangleBatch
from ..frontend import rasterize_batch
from ..settings import RasterSettings
from .scene import MeshHandle, Scene

__all__ = ["FrameGeometry", "matrices", "frame_geometry", "raster_pass"]


@dataclass(frozen=True, eq=False)
class FrameGeometry:
    """World-space geometry of one frame (``B`` views, ``V`` vertices, ``F`` faces, instances included).

    Attributes:
        positions, normals: float ``[B, V, 3]``; uvs float ``[V, 2]``; colors float ``[V, 3]``.
        faces: int64 ``[F, 3]``; object_ids, material_ids: int64 ``[F]``;
        instance_ids: int64 ``[F]`` or None without instancing.
        transforms, instances: the validated matrices (``[B|1, 4, 4]``, ``[B|1, N, 4, 4]``) or None.
    """

    positions: torch.Tensor
    normals: torch.Tensor
    uvs: torch.Tensor
    colors: torch.Tensor
    faces: torch.Tensor
    object_ids: torch.Tensor
    material_ids: torch.Tensor
    instance_ids: torch.Tensor | None
    transforms: torch.Tensor | None
    instances: torch.Tensor | None


def matrices(where: str, name: str, m, *, batched_dim: int, device, dtype, batch_size: int) -> torch.Tensor:
    """A finite float ``[B|1, 4, 4]`` (``batched_dim`` 3) or ``[B|1, N, 4, 4]`` (4) matrix tensor on
    ``device``, whose batch matches the camera's ``batch_size`` views."""
    if not isinstance(m, torch.Tensor) or not m.is_floating_point():
        raise PyGpuTypeError(f"{where}: `{name}` must be a float tensor")
    m = m.to(device, dtype)
    if m.dim() == batched_dim - 1:
        m = m[None]
    if m.dim() != batched_dim or m.shape[-2:] != (4, 4):
        want = "[N, 4, 4] or [B, N, 4, 4]" if batched_dim == 4 else "[4, 4] or [B, 4, 4]"
        raise PyGpuValueError(f"{where}: `{name}` must have shape {want}, got {tuple(m.shape)}")
    if m.shape[0] not in (1, batch_size):
        raise PyGpuValueError(
            f"{where}: `{name}` has batch size {m.shape[0]} but the camera has {batch_size} views; "
            "give one matrix per view or one for all"
        )
    check_finite(where, name, m)
    return m


def frame_geometry(scene: Scene, h: MeshHandle, batch_size: int, *, transforms=None, instances=None,
                   single_handle: bool = True) -> FrameGeometry:
    """Apply ``instances`` (the handle drawn N times) and then ``transforms`` (the whole scene)."""
    where, dev, dt = "Renderer.render", scene.device, scene.dtype
    pos, nrm, faces = h.positions, h.current_normals(), h.faces
    uvs, cols, obj, mats, inst_ids = h.uvs, h.colors, h.object_ids, h.material_ids, None
    if pos.dim() == 2:
        pos, nrm = pos[None], nrm[None]
    inst = tf = None
    if instances is not None:
        if not single_handle:
            raise PyGpuValueError(f"{where}: `instances` draws one handle; pass a single MeshHandle")
        inst = matrices(where, "instances", instances, batched_dim=4, device=dev, dtype=dt,
                        batch_size=batch_size)  # [B|1, N, 4, 4]
        N = inst.shape[1]
        pos = (pos[:, None] @ inst[..., :3, :3].transpose(-1, -2) + inst[..., None, :3, 3]).flatten(1, 2)  # [B, N V, 3]
        nrm = (nrm[:, None] @ torch.linalg.inv(inst[..., :3, :3])).flatten(1, 2)
        faces, inst_ids = scene.instances(h, N)
        uvs, cols, obj, mats = uvs.repeat(N, 1), cols.repeat(N, 1), obj.repeat(N), mats.repeat(N)
    if transforms is not None:
        tf = matrices(where, "transforms", transforms, batched_dim=3, device=dev, dtype=dt,
                      batch_size=batch_size)  # [B|1, 4, 4]
        pos = pos @ tf[:, :3, :3].transpose(-1, -2) + tf[:, None, :3, 3]
        nrm = nrm @ torch.linalg.inv(tf[:, :3, :3])
    if pos.shape[0] not in (1, batch_size):
        raise PyGpuValueError(
            f"{where}: the mesh holds {pos.shape[0]} poses but the camera has {batch_size} views; "
            "use one camera per pose or a [V, 3] mesh"
        )
    if pos.shape[0] != batch_size:
        pos, nrm = pos.expand(batch_size, -1, -1), nrm.expand(batch_size, -1, -1)
    return FrameGeometry(pos, nrm, uvs, cols, faces, obj, mats, inst_ids, tf, inst)


def raster_pass(scene: Scene, h: MeshHandle, geom: FrameGeometry, camera: Camera, size,
                settings: RasterSettings) -> Fragments:
    """``Fragments`` of the frame on ``geom.faces``, on the scene's device and dtype."""
    B = camera.batch_size
    gpu = scene.gpu_mesh(h, settings.mode)
    if gpu is not None:  # persistent geometry: only matrices go to the backend, which clips on the GPU
        clip_from_world = camera.matrix if geom.transforms is None else camera.matrix @ geom.transforms
        inst = None if geom.instances is None else geom.instances.detach()
        frags = scene.backend.rasterize_geometry(gpu, clip_from_world.detach().expand(B, 4, 4), size,
                                                 instances=inst, settings=settings)
    else:
        clip = camera.world_to_clip(geom.positions)  # [B, V, 4]
        if clip.shape[0] != B:
            clip = clip.expand(B, -1, -1)
        frags = rasterize_batch(scene.backend, TriangleBatch(clip, geom.faces), size, settings)
    return _cast(frags, scene.device, scene.dtype)


def _cast(frags: Fragments, device, dtype) -> Fragments:
    """Fragments on ``device`` with float tensors in ``dtype`` (a no-op when already there)."""
    if frags.bary.device == device and frags.bary.dtype == dtype:
        return frags
    cast = lambda t: None if t is None else t.to(device=device, dtype=dtype)  # noqa: E731
    return Fragments(frags.face_index.to(device), cast(frags.bary), cast(frags.depth), cast(frags.dist),
                     cast(frags.screen_bary), cast(frags.alpha))
