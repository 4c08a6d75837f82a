"""GL shading for ``Renderer.render``: which calls it covers (or why not), and the frame it makes.

A call is shaded in GL (:mod:`py_gpu.backends.gl_shading`) when the backend has GL shading
(ModernGL), the mode is hard, the handle's positions are unbatched, nothing needs a gradient
(``torch.no_grad()`` or no input requiring grad) and every option is one GL shading covers
(``ModernGLBackend.shading_capabilities``). Otherwise the call takes the torch shading pass, and
``RenderStats.shading`` / ``shading_reason`` say which ran and why.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
import torch

from ..backends import gl_shading
from ..backends.gl_shading import MAX_FACES, MAX_LIGHTS, MAX_RECTS, MAX_TEXTURES, ShadeInputs, ShadeSpec, coverage, \
    decode_depth, decode_faces, ensure_attributes, shade_faces, shade_geometry
from ..backends.moderngl import ModernGLBackend
from ..camera import Camera
from ..contracts import Frame
from ..shading.lights import AmbientLight, DirectionalLight, Material, PointLight
from ..shading.texture import Texture, _check_texture, build_mipmaps
from .geometry import matrices
from .scene import MeshHandle, Scene

__all__ = ["GLFrame", "GLPlan", "plan", "render"]

_ID_ATTACHMENTS = ("object_id", "instance_id", "material_id")


@dataclass
class GLPlan:
    """A call GL shading covers: its program spec and its textures' entries."""

    spec: object
    textures: list
    rects: np.ndarray | None


def _wants_grad(named: dict) -> str | None:
    """The name of the first tensor that requires grad (with grad mode on), or None."""
    if not torch.is_grad_enabled():
        return None
    for name, value in named.items():
        if isinstance(value, torch.Tensor) and value.requires_grad:
            return name
    return None


def _grad_inputs(h: MeshHandle, camera: Camera, lights, textures, material, transforms, instances, atlas_rects) -> dict:
    named = {"positions": h.positions, "normals": h.normals, "colors": h.colors, "uvs": h.uvs,
             "camera.view": camera.view, "camera.projection": camera.projection, "transforms": transforms,
             "instances": instances, "atlas_rects": atlas_rects}
    for k, light in enumerate(lights):
        for field in ("color", "intensity", "direction", "position"):
            named[f"lights[{k}].{field}"] = getattr(light, field, None)
    if material is not None:
        named["material.specular"], named["material.shininess"] = material.specular, material.shininess
    texs = textures if isinstance(textures, (list, tuple)) else [textures]
    for k, t in enumerate(texs):
        named[f"textures[{k}]"] = t.image if isinstance(t, Texture) else t
    return named


def plan(scene: Scene, h: MeshHandle, camera: Camera, *, lights: Sequence, textures, atlas_rects, material, model: str,
         flat: bool, transforms, instances, single_handle: bool, attachments: Sequence[str], gamma, texture_filter: str,
         texture_wrap: str, settings, shading: str) -> tuple[GLPlan | None, str]:
    """``(plan, "")`` when GL shading covers this call, else ``(None, why not)``."""
    if shading == "torch":
        return None, "shading='torch' was asked for"
    if not isinstance(scene.backend, ModernGLBackend):
        return None, f"the {scene.backend.capabilities.name} backend has no GL shading"
    if settings.mode != "hard":
        return None, f"{settings.mode} mode is shaded in torch"
    if h.positions.dim() != 2:
        return None, "batched positions [B, V, 3] are shaded in torch"
    if flat:
        return None, "flat shading (face normals) is shaded in torch"
    if instances is not None and not single_handle:
        return None, "instances of a merged scene"
    copies = instances.shape[-3] if isinstance(instances, torch.Tensor) and instances.dim() >= 3 else 1
    if h.num_faces * copies >= MAX_FACES:
        return None, f"{MAX_FACES} or more faces (instanced) do not fit GL shading's int32 face ids"
    extra = [a for a in attachments if a not in _ID_ATTACHMENTS]
    if extra:
        return None, f"attachments {extra} need the torch G-buffer"
    if texture_filter not in ("nearest", "bilinear", "trilinear") or texture_wrap not in ("repeat", "clamp"):
        return None, "texture filter or wrap not covered"
    needs = None if not torch.is_grad_enabled() else \
        _wants_grad(_grad_inputs(h, camera, lights, textures, material, transforms, instances, atlas_rects))
    if needs is not None:
        return None, f"gradients: `{needs}` requires grad"
    if gamma is not None and not (isinstance(gamma, (int, float)) and gamma > 0):
        return None, "gamma is not a positive number"  # the torch path says so in its error
    kinds = [type(light) for light in lights]
    if any(k not in (AmbientLight, DirectionalLight, PointLight) for k in kinds):
        return None, "a light kind GL shading does not know"
    n_dir, n_point = kinds.count(DirectionalLight), kinds.count(PointLight)
    if max(n_dir, n_point) > MAX_LIGHTS:
        return None, f"more than {MAX_LIGHTS} directional or point lights"
    lit = model if lights and model != "unlit" else "unlit"
    tex = _texture_plan(textures, atlas_rects, h.has_uvs, texture_filter)
    if isinstance(tex, str):
        return None, tex
    mode, slots, entries, rects = tex
    spec = ShadeSpec(instanced=instances is not None, n_dir=n_dir, n_point=n_point, model=lit, textures=mode,
                     slots=slots, n_rects=0 if rects is None else rects.shape[0], filter=texture_filter,
                     wrap=texture_wrap, gamma=gamma is not None, transformed=transforms is not None)
    return GLPlan(spec, entries, rects), ""


def _texture_plan(textures, atlas_rects, has_uvs: bool, filt: str):
    """``(mode, slots, entries, rects)`` for the textures of a call, or a string saying why GL can't."""
    if textures is None:
        return "none", (), [], None
    if not has_uvs:
        return "a mesh has no UVs"  # the torch path says so in its error
    mip = filt == "trilinear"
    if isinstance(textures, (list, tuple)):
        entries = [None if t is None else _entry(t, mip) for t in textures]
        if any(isinstance(e, str) for e in entries):
            return next(e for e in entries if isinstance(e, str))
        slots = tuple(e is not None for e in entries)
        if sum(slots) > MAX_TEXTURES:
            return f"more than {MAX_TEXTURES} textures"
        return "materials", slots, [e for e in entries if e is not None], None
    entry = _entry(textures, mip)
    if isinstance(entry, str):
        return entry
    if atlas_rects is None:
        return "single", (), [entry], None
    if not isinstance(atlas_rects, torch.Tensor) or atlas_rects.dim() != 2 or atlas_rects.shape[-1] != 4 \
            or not 0 < atlas_rects.shape[0] <= MAX_RECTS:
        return f"atlas_rects other than a float [M <= {MAX_RECTS}, 4] tensor"
    return "atlas", (), [entry], atlas_rects.detach().to("cpu", torch.float64).numpy()


def _entry(tex, mip: bool):
    """``(source, mipmapped, levels)`` of one texture (see ``gl_shading.ShadeInputs``), or why not."""
    if isinstance(tex, Texture):
        image, levels = tex.image, (tex.mipmaps if mip else (lambda: [tex.image]))
    elif isinstance(tex, torch.Tensor):
        image = tex

        def levels():
            checked = _check_texture("Renderer.render", tex)
            return build_mipmaps(checked) if mip else [checked]
    else:
        return "a texture that is neither a tensor nor a Texture"
    if image.dim() == 4 and image.shape[0] > 1:
        return "batched textures [B, Ht, Wt, C] are shaded in torch"
    if image.shape[-1] not in (1, 3, 4):
        return f"textures with {image.shape[-1]} channels are shaded in torch"
    return image, mip, levels


# ---- the frame -------------------------------------------------------------------------------------
_EYE4 = np.eye(4)[None]
_EYE4.flags.writeable = False


@functools.lru_cache(maxsize=64)
def _with_mesh(spec: ShadeSpec, white: bool, depth_out: bool) -> ShadeSpec:
    """``spec`` for a mesh whose colors are all 1 (``white``) or not, and whose shading pass writes
    depth (``depth_out``, small meshes) or leaves it in the depth buffer."""
    return replace(spec, white=white, depth_out=depth_out)


def _host(t: torch.Tensor) -> np.ndarray:
    """A tensor's values as a float64 host array (one copy; a host float64 tensor is not copied)."""
    return t.detach().cpu().numpy().astype(np.float64, copy=False)


def _numpy(value, B: int, channels: int | None) -> np.ndarray:
    """A light or material parameter as float64 ``[B|1, channels]`` (``[B|1]`` when ``channels`` is None)."""
    a = _host(value) if isinstance(value, torch.Tensor) else np.asarray(value, dtype=np.float64)
    if channels is None:
        return a.reshape(-1)
    return np.broadcast_to(a, (channels,)).reshape(1, channels) if a.ndim == 0 else a.reshape(-1, channels)


def _light_inputs(lights, B: int) -> dict:
    """Ambient sum, directions toward directional lights, point lights, each per view (the last
    call's result again when the lights are the same objects with the same values)."""
    key = _lights_key(lights, B)
    memo = _LIGHTS_MEMO[0]
    if key is not None and memo is not None and memo[0] == key:
        return memo[1]
    out = _light_arrays(lights, B)
    for a in out.values():
        a.flags.writeable = False
    _LIGHTS_MEMO[0] = None if key is None else (key, out)
    return out


#: ``(key, arrays)`` of the last ``_light_inputs`` call (one entry: a render loop passes the same lights).
_LIGHTS_MEMO: list = [None]


def _lights_key(lights, B: int):
    """What ``_light_inputs`` depends on: the lights themselves (frozen, compared by identity), the
    values of their number and tuple fields and the in-place versions of their tensor fields;
    None (no memo) for a field of any other type."""
    parts = [B]
    for light in lights:
        fields = []
        for v in light.__dict__.values():
            if isinstance(v, torch.Tensor):
                fields.append((id(v), v._version))  # the light, held by the key, holds the tensor
            elif isinstance(v, (int, float, tuple)) and all(isinstance(c, (int, float)) for c in (v if isinstance(v, tuple) else (v,))):
                fields.append(v)
            else:
                return None
        parts.append((light, tuple(fields)))
    return tuple(parts)


def _light_arrays(lights, B: int) -> dict:
    amb, dirs, drad, pos, prad, att = np.zeros((1, 3)), [], [], [], [], []
    for light in lights:
        radiance = _numpy(light.color, B, 3) * _numpy(light.intensity, B, None)[:, None]  # [B|1, 3]
        if isinstance(light, AmbientLight):
            amb = amb + radiance
        elif isinstance(light, DirectionalLight):
            d = _numpy(light.direction, B, 3)
            dirs.append(-d / np.maximum(np.linalg.norm(d, axis=-1, keepdims=True), 1e-12))
            drad.append(radiance)
        else:
            pos.append(_numpy(light.position, B, 3))
            prad.append(radiance)
            att.append(np.asarray(light.attenuation, dtype=np.float64))
    stack = lambda xs: (np.stack(np.broadcast_arrays(*xs), 1) if xs else np.zeros((1, 0, 3)))  # noqa: E731
    return {"ambient": amb, "dir_to_light": stack(dirs), "dir_radiance": stack(drad), "point_position": stack(pos),
            "point_radiance": stack(prad), "point_attenuation": np.asarray(att).reshape(-1, 3)}


def render(scene: Scene, h: MeshHandle, p: GLPlan, camera: Camera, size, settings, background, *, lights, material,
           transforms, instances, gamma, attachments: Sequence[str]) -> Frame:
    """The frame of a call that ``plan`` accepted, shaded in GL (one draw and readback per view)."""
    where, B = "Renderer.render", camera.batch_size
    view = _host(camera.view)
    cam = _host(camera.projection) @ view  # [B|1, 4, 4]
    eye = -(view[:, :3, :3].transpose(0, 2, 1) @ view[:, :3, 3:])[..., 0]  # [B|1, 3]
    kw = dict(device=scene.device, dtype=scene.dtype, batch_size=B)
    model = _EYE4 if transforms is None else _host(matrices(where, "transforms", transforms, batched_dim=3, **kw))
    inst = None if instances is None else \
        np.array(_host(matrices(where, "instances", instances, batched_dim=4, **kw)))  # own copy: the id pass may come later
    clip = np.broadcast_to(cam @ model, (B, 4, 4))
    mat = material or Material()
    x = ShadeInputs(clip=clip, model=model, instances=inst, eye=eye, specular=_numpy(mat.specular, B, 3),
                    shininess=_numpy(mat.shininess, B, None), gamma=gamma, textures=p.textures, rects=p.rects,
                    background=tuple(float(c) for c in background), **_light_inputs(lights, B))
    mesh = scene.gpu_mesh(h, settings.mode)
    attrs = ensure_attributes(scene.backend, mesh, h.positions, h.current_normals(), h.uvs, h.colors, h.faces,
                              h.material_ids)
    copies = 1 if inst is None else inst.shape[1]
    spec = _with_mesh(p.spec, attrs.white, mesh.num_faces * copies <= gl_shading.DEPTH_OUT_FACES)
    out, depth, scales, host = shade_geometry(scene.backend, mesh, attrs, spec, x, size, settings)
    readback = _Readback(out, depth, scales, host, scene.device, scene.dtype,
                         (scene.backend, mesh, attrs, spec, x, size, settings))
    with scene.backend._lock:
        readback.waiting = attrs.wait(readback)
    frame = GLFrame.lazy(readback.tensor(out[..., :3]), readback)
    if attachments:
        object.__setattr__(frame, "extras", _id_extras(scene, h, attachments, inst, frame.face_index))
    return frame


class _Readback:
    """One GL-shaded readback (see ``shade_geometry``), decoded field by field when first asked for.

    ``ids`` are the arguments of its id pass (``shade_faces``), run when ``face_index`` is first
    read, or earlier by ``settle`` when the mesh's shading buffers are about to be released."""

    def __init__(self, out: np.ndarray, depth: np.ndarray, scales: np.ndarray, host, device: torch.device,
                 dtype: torch.dtype, ids: tuple):
        self.out, self.depth, self.scales, self.host, self.device, self.dtype = out, depth, scales, host, device, dtype
        self.ids, self.codes, self.waiting = ids, None, None

    def settle(self) -> None:
        """Draw the id pass now (once); the buffers it draws from may go after this."""
        if self.ids is None:
            return
        backend, mesh, attrs, spec, x, size, settings = self.ids
        with backend._lock:
            if self.ids is None:  # another thread drew it meanwhile
                return
            self.codes = shade_faces(backend, mesh, attrs, spec, x, size, settings, self.host)
            self.ids = None
            attrs.pending.discard(self.waiting)

    def tensor(self, a: np.ndarray, integer: bool = False) -> torch.Tensor:
        t = torch.from_numpy(a)  # no copy where the scene is float32 on the CPU
        if self.device.type != "cpu" or (not integer and self.dtype != torch.float32):
            t = t.to(self.device) if integer else t.to(self.device, self.dtype)
        return t

    def decode(self, name: str) -> dict:
        if self.depth is None:  # the shading pass wrote depth into alpha: nothing to decode
            self.depth, self.scales = self.out[..., 3], None
        elif self.scales is not None and name in ("depth", "alpha"):
            decode_depth(self.depth, self.scales)  # once, in place
            self.scales = None
        if name == "depth":
            return {"depth": self.tensor(self.depth)}
        if name == "alpha":
            return {"alpha": self.tensor(coverage(self.host, self.depth))}
        self.settle()
        face = decode_faces(self.host, self.codes)
        self.codes = None
        return {"face_index": self.tensor(face, integer=True)}


class GLFrame(Frame):
    """A GL-shaded ``Frame``: ``depth`` and ``alpha`` are decoded from the readback and
    ``face_index`` drawn by the id pass the first time each is read (a caller who reads only
    ``image`` never pays for them). It holds the readback arrays, so no later frame reuses their
    memory, and its id pass draws what it drew, even after later renders or changes to the mesh
    (which run pending id passes before the buffers go)."""

    @classmethod
    def lazy(cls, image: torch.Tensor, readback: _Readback) -> "GLFrame":
        frame = object.__new__(cls)
        object.__setattr__(frame, "image", image)
        object.__setattr__(frame, "extras", {})
        frame.__dict__["_readback"] = readback
        return frame


def _decoded(name: str) -> property:
    def get(self):
        d = self.__dict__
        if name not in d:
            d.update(d["_readback"].decode(name))
        return d[name]

    def put(self, value):  # Frame's own __init__ (dataclasses.replace) stores the fields here
        self.__dict__[name] = value
    return property(get, put, doc=f"``Frame.{name}``, decoded on first use.")


for _name in ("alpha", "depth", "face_index"):
    setattr(GLFrame, _name, _decoded(_name))


def _id_extras(scene: Scene, h: MeshHandle, names: Sequence[str], inst, face: torch.Tensor) -> dict:
    """The id attachments, int64 ``[B, H, W, 1]`` (-1 where empty), looked up by face id."""
    if not names:
        return {}
    N = 1 if inst is None else inst.shape[1]
    F = h.num_faces * N
    inst_ids = scene.instances(h, N)[1] if inst is not None and "instance_id" in names else None
    tables = {"object_id": h.object_ids.repeat(N), "material_id": h.material_ids.repeat(N),
              "instance_id": inst_ids if inst_ids is not None else torch.zeros(F, dtype=torch.int64)}
    top = torch.where(face >= 0, face, F)
    return {n: torch.cat([tables[n].to(face.device), face.new_full((1,), -1)])[top][..., None] for n in names}
