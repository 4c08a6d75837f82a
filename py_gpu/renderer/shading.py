"""The ``Renderer``'s shading pass: G-buffer, textures, lights, composite, attachments.

Built from the same :mod:`py_gpu.shading` functions as the tensor API: one interpolation
kernel, one hard composite, one soft blend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from .._check import PyGpuValueError
from ..contracts import Fragments, Frame
from ..mesh import face_normals
from ..settings import BlendSettings, RasterSettings
from ..shading.blend import depth_range
from ..shading.composite import at_slot, composite_hard, composite_soft
from ..shading.interpolate import gather_face, interpolate_vertex
from ..shading.lights import Material, gamma_encode, shade
from ..shading.texture import Texture, atlas_uv, sample_texture, uv_derivatives
from .geometry import FrameGeometry

__all__ = ["ATTACHMENTS", "Points", "GBuffer", "gbuffer", "surface_color", "composite", "attachments"]

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


@dataclass(frozen=True, eq=False)
class Points:
    """The covered fragments of a frame, packed: element ``b``'s first ``counts[b]`` entries of
    ``order [B, M]`` are its covered fragment positions (flat ``H * W * K`` indices, raster
    order); the rest, where ``valid`` is False, are uncovered positions used as padding.
    Shading works on these ``M`` points instead of every pixel of the frame."""

    order: torch.Tensor
    valid: torch.Tensor
    shape: tuple[int, int, int, int]

    @classmethod
    def of(cls, frags: Fragments) -> "Points":
        B, H, W, K = frags.face_index.shape
        covered = frags.mask.reshape(B, -1)
        M = int(covered.sum(1).max()) if covered.numel() else 0
        # a stable sort puts the covered positions first, in raster order; every row is a
        # permutation, so the M kept indices are distinct and scattering them back is exact
        order = torch.argsort((~covered).to(torch.int8), dim=1, stable=True)[:, :M]
        return cls(order, torch.gather(covered, 1, order), (B, H, W, K))

    def take(self, dense: torch.Tensor) -> torch.Tensor:
        """``[B, H, W, K, ...]`` -> ``[B, M, ...]`` at the points."""
        flat = dense.reshape(self.shape[0], -1, *dense.shape[4:])
        index = self.order.reshape(*self.order.shape, *([1] * (flat.dim() - 2))).expand(-1, -1, *flat.shape[2:])
        return torch.gather(flat, 1, index)

    def spread(self, values: torch.Tensor, fill=0) -> torch.Tensor:
        """``[B, M, C]`` -> ``[B, H, W, K, C]``, ``fill`` where no point is."""
        B, H, W, K = self.shape
        C = values.shape[-1]
        out = torch.full((B, H * W * K, C), fill, dtype=values.dtype, device=values.device)
        out = out.scatter(1, self.order[..., None].expand(-1, -1, C), values)
        return out.reshape(B, H, W, K, C)


@dataclass(frozen=True, eq=False)
class GBuffer:
    """Surface values at the covered fragments ``points``, each ``[B, M, C]`` (0 at padding);
    ``material`` int64 ``[B, M]`` (-1 at padding)."""

    frags: Fragments
    points: Points
    position: torch.Tensor
    normal: torch.Tensor
    albedo: torch.Tensor
    uv: torch.Tensor
    material: torch.Tensor


def gbuffer(frags: Fragments, geom: FrameGeometry, *, flat: bool) -> GBuffer:
    """Interpolate positions, normals (face normals when ``flat``), colors and UVs at the covered
    fragments of ``frags`` only."""
    pts, faces = Points.of(frags), geom.faces
    face = torch.where(pts.valid, pts.take(frags.face_index), -1)[:, :, None, None]  # [B, M, 1, 1]
    bary = pts.take(frags.bary)[:, :, None, None]  # [B, M, 1, 1, 3]

    def interp(values: torch.Tensor) -> torch.Tensor:
        v = values if values.dim() == 3 else values[None]
        return interpolate_vertex(v, faces, face, bary)[:, :, 0, 0]

    if flat:
        normal = gather_face(face_normals(geom.positions, faces), face)[:, :, 0, 0]
    else:
        normal = interp(geom.normals)
    normal = normal / normal.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    padded = torch.cat([geom.material_ids, geom.material_ids.new_full((1,), -1)])  # row F: padding
    material = padded[torch.where(face[:, :, 0, 0] >= 0, face[:, :, 0, 0], faces.shape[0])]
    return GBuffer(frags, pts, interp(geom.positions), normal, interp(geom.colors), interp(geom.uvs), material)


def surface_color(g: GBuffer, eye: torch.Tensor, *, lights: Sequence, textures, atlas_rects, has_uvs: bool,
                  material: Material | None, model: str, texture_filter: str, texture_wrap: str,
                  gamma: float | None) -> torch.Tensor:
    """float ``[B, H, W, K, 3]``: textured, lit, gamma-encoded color of every fragment (0 where
    empty), computed at the covered fragments only."""
    albedo = g.albedo
    if textures is not None:
        albedo = albedo * _texture_factor(g, textures, atlas_rects, has_uvs, texture_filter, texture_wrap)
    if model == "unlit" or not lights:
        color = albedo
    else:
        color = shade(albedo, g.normal, g.position, eye, lights, model=model, material=material)
    if gamma is not None:
        color = gamma_encode(color, gamma)
    color = torch.where(g.points.valid[..., None], color, torch.zeros((), dtype=color.dtype, device=color.device))
    return g.points.spread(color)


def _texture_factor(g: GBuffer, textures, atlas_rects, has_uvs: bool, filt: str, wrap: str) -> torch.Tensor:
    """float ``[B, M, 3]`` texture factor at the points."""
    where = "Renderer.render"
    if not has_uvs:
        raise PyGpuValueError(f"{where}: `textures` given but a mesh has no UVs")
    mask, uv, mat = g.frags.mask, g.uv, g.material
    kw = {}
    if filt == "trilinear":  # screen-space UV derivatives need the UV image
        image = g.points.spread(uv)
        dense = torch.stack([uv_derivatives(image[..., k, :], mask[..., k]) for k in range(mask.shape[-1])], 3)
        kw["uv_grad"] = g.points.take(dense)
    if isinstance(textures, (list, tuple)):
        return _per_material(textures, uv, mat, filt, wrap, kw)
    if atlas_rects is not None:
        rects = atlas_rects.to(uv.device, uv.dtype)
        uv = atlas_uv(uv, mat.clamp(min=0, max=rects.shape[0] - 1), rects, wrap=wrap)
        wrap = "clamp"
    return _sample(textures, uv, filt, wrap, kw)


def _per_material(textures, uv: torch.Tensor, mat: torch.Tensor, filt: str, wrap: str, kw: dict) -> torch.Tensor:
    """Texture factor with one texture per material id: each texture is sampled only at the
    fragments of its material (1 elsewhere)."""
    flat_uv, flat_mat = uv.reshape(-1, 2), mat.reshape(-1)
    flat_kw = {k: t.reshape(-1, t.shape[-1]) for k, t in kw.items()}
    out = torch.ones(flat_uv.shape[0], 3, dtype=uv.dtype, device=uv.device)
    for m_id, tex in enumerate(textures):
        if tex is None:
            continue
        if isinstance(tex, torch.Tensor) and tex.dim() == 4 and tex.shape[0] > 1:  # batched: dense
            sel = (mat == m_id)[..., None]
            out = torch.where(sel.reshape(-1, 1), _sample(tex, uv, filt, wrap, kw).reshape(-1, 3), out)
            continue
        idx = torch.nonzero(flat_mat == m_id).squeeze(1)
        if idx.numel():
            sub_kw = {k: t[idx] for k, t in flat_kw.items()}
            out = out.index_put((idx,), _sample(tex, flat_uv[idx], filt, wrap, sub_kw))
    return out.reshape(*mat.shape, 3)


def _sample(tex, uv: torch.Tensor, filt: str, wrap: str, kw: dict) -> torch.Tensor:
    img = tex if not isinstance(tex, torch.Tensor) else tex.to(uv.device)  # sample_texture checks it
    return sample_texture(img, uv, filter=filt, wrap=wrap, **kw)[..., :3]


def composite(color: torch.Tensor, frags: Fragments, background, settings: RasterSettings,
              blend: BlendSettings) -> tuple[Frame, torch.Tensor]:
    """The frame (hard: nearest fragment; soft: blended) and the slot each pixel's attachments come from."""
    if settings.mode == "soft":  # camera output is clip space: depth z/w (or the explicit range)
        zrange = depth_range(frags.depth, blend, clip_space=True)
        return composite_soft(color, frags, background, settings, blend, zrange)
    frame = composite_hard(color, frags, background)
    return frame, torch.zeros_like(frame.face_index)


def attachments(names: Sequence[str], g: GBuffer, geom: FrameGeometry, frame: Frame, slot: torch.Tensor) -> dict:
    """``Frame.extras``: each requested attachment at the pixel's front fragment."""
    covered = frame.face_index >= 0
    F = geom.faces.shape[0]
    top = torch.where(covered, frame.face_index, F)  # row F of each padded table: empty pixels
    values = {"normal": g.normal, "position": g.position, "uv": g.uv, "albedo": g.albedo}
    ids = {"object_id": geom.object_ids, "material_id": geom.material_ids, "instance_id": geom.instance_ids}
    extras = {}
    for name in names:
        if name in values:
            extras[name] = at_slot(g.points.spread(values[name]), slot, covered)
        else:
            table = ids[name]
            if table is None:  # no instancing: everything is instance 0
                table = torch.zeros(F, dtype=torch.int64, device=top.device)
            extras[name] = torch.cat([table, table.new_full((1,), -1)])[top][..., None]
    return extras
