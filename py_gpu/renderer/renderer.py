"""``Renderer``: meshes + camera + lights + textures in, ``Frame`` out.

A rasterizer composed with a shading pass, so every backend's output is comparable:

1. scene state (:mod:`.scene`): at :meth:`Renderer.upload` a ``MeshBatch`` is validated, given
   default normals/UVs/colors, converted to the renderer's device and dtype, and kept as a
   ``MeshHandle`` (with the backend's persistent copy when it keeps geometry, e.g. ModernGL);
2. per frame (:mod:`.geometry`): instance and object transforms, the camera, and the raster
   pass, which goes through the front end (clip once, rasterize, map back once) or the
   backend's persistent geometry, with the same ``Fragments`` contract;
3. the shading pass (:mod:`.shading`): interpolate, texture, light, gamma, composite (hard) or
   soft-blend (soft), attachments.

Steps 2 and 3 are plain torch, so with the torch backend the image is differentiable with
respect to camera matrices, object transforms, vertex data, textures, lights and materials.
"""

from __future__ import annotations

from typing import Sequence

import torch

from .._check import PyGpuTypeError, PyGpuValueError, check_rgb, check_size, resolve_device
from .._runtime import cpu_threads
from ..camera import Camera
from ..contracts import Frame
from ..frontend import resolve_backend
from ..mesh import MeshBatch
from ..settings import BlendSettings, RasterSettings, resolve_settings
from ..shading.lights import Material
from . import gl_path
from .geometry import frame_geometry, raster_pass
from .scene import MeshHandle, RenderStats, Scene
from .shading import ATTACHMENTS, gbuffer, surface_color
from .shading import composite as composite_frame  # `composite` is also a keyword of Renderer.render
from .shading import attachments as attachment_buffers

__all__ = ["Renderer"]

_MODELS = ("blinn_phong", "lambert", "unlit")



class Renderer:
    """Renders uploaded meshes through a camera, with lights and textures, on any backend.

    Args:
        size: ``(H, W)`` of the frames.
        backend: ``"torch"`` (differentiable; hard or soft), ``"numpy"``, ``"reference"``,
            ``"moderngl"``, or a backend instance.
        device, dtype: where and in what float type geometry lives and shading runs.
        settings: ``RasterSettings`` (mode, sigma, faces_per_pixel, cull_backfaces ...).
        blend: ``BlendSettings`` for soft mode (gamma, znear, zfar ...).
        background: float RGB in [0, 1].

    Raises:
        BackendUnavailableError: the backend or the device cannot run here (says why).

    Example::

        r = Renderer((128, 128))
        h = r.upload(py_gpu.shapes.cube())
        frame = r.render(h, Camera.perspective((2, 2, 3)), lights=[DirectionalLight()])
    """

    def __init__(self, size, *, backend="torch", device=None, dtype: torch.dtype = torch.float32,
                 settings: RasterSettings | None = None, blend: BlendSettings | None = None,
                 background=(0.0, 0.0, 0.0)):
        where = "Renderer"
        self.size = check_size(where, size)
        if dtype not in (torch.float32, torch.float64):
            raise PyGpuTypeError(f"{where}: `dtype` must be torch.float32 or torch.float64, got {dtype}")
        self.device = resolve_device(where, device) or torch.device("cpu")
        self.dtype = dtype
        self.settings, self.blend = resolve_settings(where, settings, blend)
        self.background = check_rgb(where, "background", background, scale=1.0)
        torch_named = isinstance(backend, str) and backend.strip().lower() == "torch"
        self.backend = resolve_backend(where, backend, device=self.device if torch_named else None, cached=False)
        self.backend.check_settings(where, self.settings)
        self._scene = Scene(self.device, dtype, self.backend)

    @property
    def stats(self) -> RenderStats:
        """Counters of conversions, uploads, releases and frames."""
        return self._scene.stats

    def upload(self, mesh: MeshBatch | Sequence[MeshBatch]) -> MeshHandle:
        """Convert ``mesh`` (or several, merged into one scene; each gets its own object id) once
        and keep it on the device. Counts one conversion per mesh and one upload."""
        return self._scene.upload(mesh)

    def release(self, handle: MeshHandle) -> None:
        """Release ``handle`` (and any merged scene built from it); safe to call twice."""
        self._scene.release(handle)

    def render(self, handles, camera: Camera, *, lights: Sequence = (), textures=None, atlas_rects=None,
               material: Material | None = None, model: str = "blinn_phong", flat: bool = False,
               transforms: torch.Tensor | None = None, instances: torch.Tensor | None = None,
               attachments: Sequence[str] = (), gamma: float | None = None, texture_filter: str = "bilinear",
               texture_wrap: str = "repeat", mode: str | None = None, cull_backfaces: bool | None = None,
               sigma: float | None = None, faces_per_pixel: int | None = None, memory_budget: int | None = None,
               znear: float | None = None, zfar: float | None = None, composite: str | None = None,
               settings: RasterSettings | None = None, blend: BlendSettings | None = None,
               background=None, shading: str = "auto") -> Frame:
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
            gamma: display encoding ``c ** (1/gamma)`` (e.g. 2.2); None leaves the result linear.
            texture_filter, texture_wrap: see :func:`py_gpu.shading.texture.sample_texture`.
            settings, blend: this call's ``RasterSettings`` / ``BlendSettings`` (default: the renderer's).
            mode, cull_backfaces, sigma, faces_per_pixel, memory_budget: override those fields of
                ``settings`` for this call (a coarse-to-fine schedule passes a new ``sigma`` each step).
            znear, zfar, composite: override those fields of ``blend``. The blend's own ``gamma``
                is set through ``blend=`` (``gamma=`` here is the display encoding).
            background: override the renderer's background (float RGB).
            shading: ``"auto"``: in GL when the backend can and nothing needs a gradient (see
                :mod:`.gl_path`; ``stats.shading`` / ``shading_reason`` say which ran, and why); ``"torch"``.

        Returns:
            ``Frame``: ``image`` float ``[B, H, W, 3]``; ``alpha`` ``[B, H, W, 1]``; ``depth``
            ``[B, H, W]`` (NDC z/w in [0, 1]); ``face_index`` int64 ``[B, H, W]`` into the scene's
            (instanced) faces; ``extras`` as requested.
        """
        s, b, bg = self._call_settings("Renderer.render", camera, model, attachments, settings, blend, background,
                                       mode=mode, cull_backfaces=cull_backfaces, sigma=sigma,
                                       faces_per_pixel=faces_per_pixel, memory_budget=memory_budget, znear=znear,
                                       zfar=zfar, composite=composite)
        self._scene.stats.frames += 1
        h = self._scene.resolve(handles)
        single = isinstance(handles, MeshHandle) or len(list(handles)) == 1
        gl = dict(lights=lights, material=material, transforms=transforms, instances=instances, gamma=gamma,
                  attachments=attachments)
        p = self._gl_plan(h, camera, s, single, shading, textures=textures, atlas_rects=atlas_rects, model=model,
                          flat=flat, texture_filter=texture_filter, texture_wrap=texture_wrap, **gl)
        if p is not None:
            return gl_path.render(self._scene, h, p, camera, self.size, s, bg, **gl)
        return self._torch_frame(h, camera, s, b, bg, single, textures=textures, atlas_rects=atlas_rects,
                                 model=model, flat=flat, texture_filter=texture_filter, texture_wrap=texture_wrap, **gl)

    def _torch_frame(self, h, camera, s, b, bg, single, *, lights, material, transforms, instances, gamma,
                     attachments, textures, atlas_rects, model, flat, texture_filter, texture_wrap) -> Frame:
        """:meth:`render`'s frame shaded in torch (differentiable), from its resolved options."""
        with cpu_threads(self.device, camera.batch_size * self.size[0] * self.size[1]):
            cam = camera.to(self.device, self.dtype)
            geom = frame_geometry(self._scene, h, cam.batch_size, transforms=transforms, instances=instances,
                                  single_handle=single)
            frags = raster_pass(self._scene, h, geom, cam, self.size, s)
            g = gbuffer(frags, geom, flat=flat)
            color = surface_color(g, cam.position, lights=lights, textures=textures, atlas_rects=atlas_rects,
                                  has_uvs=h.has_uvs, material=material, model=model, texture_filter=texture_filter,
                                  texture_wrap=texture_wrap, gamma=gamma)
            frame, slot = composite_frame(color, frags, bg, s, b)
            extras = attachment_buffers(attachments, g, geom, frame, slot)
            return Frame(frame.image, frame.alpha, frame.depth, frame.face_index, extras)

    def _gl_plan(self, h, camera, s, single, shading, **kw):
        """The GL shading plan of this call, or None; ``stats.shading`` / ``shading_reason`` say which and why."""
        if shading not in ("auto", "torch"):
            raise PyGpuValueError(f"Renderer.render: `shading` must be 'auto' or 'torch', got {shading!r}")
        stats = self._scene.stats
        p, why = gl_path.plan(self._scene, h, camera, single_handle=single, settings=s, shading=shading, **kw)
        stats.shading, stats.shading_reason = ("gl", "") if p is not None else ("torch", why)
        stats.gl_frames += p is not None
        return p

    def _call_settings(self, where, camera, model, names, settings, blend, background, **overrides):
        """Validate one call's options (``overrides``: settings fields, None for unset); returns its
        ``(RasterSettings, BlendSettings, background)``."""
        if not isinstance(camera, Camera):
            raise PyGpuTypeError(f"{where}: `camera` must be a py_gpu.camera.Camera, got {type(camera).__name__}")
        if model not in _MODELS:
            raise PyGpuValueError(f"{where}: `model` must be one of {_MODELS}, got {model!r}")
        bad = [a for a in names if a not in ATTACHMENTS]
        if bad:
            raise PyGpuValueError(f"{where}: unknown attachments {bad}; choose from {sorted(ATTACHMENTS)}")
        s, b = resolve_settings(where, settings or self.settings, blend or self.blend, **overrides)
        self.backend.check_settings(where, s)
        bg = self.background if background is None else check_rgb(where, "background", background, scale=1.0)
        return s, b, bg

