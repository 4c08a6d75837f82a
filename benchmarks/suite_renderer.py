"""Renderer suite: persistent geometry handles versus rebuilding the geometry every frame.

"rebuild" converts the mesh (validation, smooth normals, dtype/device) and uploads it before
every frame, as a renderer without handles must; "handle" uploads once and only renders.

The ModernGL rows add a third column: the general path, where the handle's geometry stays in
torch but every frame is transformed and clipped on the CPU and its vertices are sent to GL.
With a handle the GL backend keeps the geometry in its own buffers and gets only matrices.
"""

from __future__ import annotations

import torch

from common import Report, fmt_ms, fmt_ratio, time_call
from py_gpu.camera import Camera
from py_gpu.contracts import TriangleBatch
from py_gpu.mesh import MeshBatch
from py_gpu.shapes import icosphere, torus
from py_gpu.frontend import rasterize_batch
from py_gpu.settings import RasterSettings
from py_gpu.renderer import Renderer
from py_gpu.shading.lights import AmbientLight, DirectionalLight


def _meshes(level: int, segments: int) -> list[tuple]:
    """Raw numpy-like inputs (positions, faces, uvs) as a loader would hand them over."""
    a, b = icosphere(level), torus(1.0, 0.3, segments, segments // 2)
    return [(a.positions.numpy().copy(), a.faces.numpy().copy(), None),
            (b.positions.numpy().copy() + [2.5, 0.0, 0.0], b.faces.numpy().copy(), b.uvs.numpy().copy())]


def run(report: Report, quick: bool) -> None:
    size = (128, 128) if quick else (360, 640)
    cases = [(3, 48)] if quick else [(3, 48), (5, 160), (7, 400)]
    cam = Camera.perspective((1.2, 1.5, 6.0), (1.2, 0.0, 0.0), fov_y=45.0, aspect=size[1] / size[0])
    lights = [AmbientLight(), DirectionalLight((-1.0, -1.0, -1.0))]
    table = report.table(f"Renderer: persistent handle vs rebuild per frame ({size[1]}x{size[0]}, torch backend)",
                         ["faces", "rebuild ms/frame", "handle ms/frame", "speedup", "conversions (handle, 10 frames)"])
    for level, seg in cases:
        raw = _meshes(level, seg)
        r = Renderer(size, backend="torch")

        def rebuild():
            h = r.upload([MeshBatch(torch.from_numpy(p), torch.from_numpy(f), uvs=None if uv is None else torch.from_numpy(uv))
                          for p, f, uv in raw])
            with torch.no_grad():
                r.render(h, cam, lights=lights)
            r.release(h)

        handle = r.upload([MeshBatch(torch.from_numpy(p), torch.from_numpy(f)) for p, f, _ in raw])

        def persistent():
            with torch.no_grad():
                r.render(handle, cam, lights=lights)

        t_rebuild = time_call(rebuild, repeat=3 if quick else 5)
        before = r.stats.conversions
        for _ in range(10):
            persistent()
        conversions = r.stats.conversions - before
        t_handle = time_call(persistent, repeat=3 if quick else 5)
        faces = sum(f.shape[0] for _, f, _ in raw)
        report.add_row(table, [f"{faces:,}", fmt_ms(t_rebuild), fmt_ms(t_handle), fmt_ratio(t_rebuild, t_handle), conversions])
    table.notes.append("rebuild = MeshBatch(...) (validation, smooth normals) + upload + render, every frame")
    table.notes.append("handle = Renderer.upload once, then render(handle, camera) per frame; conversions counted by RenderStats")
    _run_moderngl(report, quick, size, cases, cam, lights)


class _PerFrameVertices:
    """The ModernGL backend seen without its persistent-geometry methods: the Renderer transforms
    and clips on the CPU and sends the vertices to GL every frame."""

    def __init__(self, backend):
        self.capabilities = backend.capabilities
        for name in ("rasterize", "render_frame", "render_rgb8", "check_settings"):
            setattr(self, name, getattr(backend, name))


def _run_moderngl(report: Report, quick: bool, size, cases, cam, lights) -> None:
    from py_gpu._gl import probe_gl

    table = report.table(f"Renderer: persistent GL geometry vs per-frame uploads ({size[1]}x{size[0]}, moderngl backend)",
                         ["faces", "rebuild ms/frame", "CPU clip + vertex upload ms/frame", "handle ms/frame",
                          "rebuild / handle", "vertex upload / handle", "raster stage: clip + upload ms",
                          "raster stage: persistent ms", "GL uploads (handle, 10 frames)"])
    reason = probe_gl()
    if reason is not None:
        table.notes.append(f"skipped: no OpenGL context ({reason.splitlines()[0]})")
        print(f"  moderngl rows skipped: {reason}")
        return
    from py_gpu.backends.moderngl import ModernGLBackend

    for level, seg in cases:
        raw = _meshes(level, seg)
        gl = ModernGLBackend()
        r = Renderer(size, backend=gl)
        general = Renderer(size, backend=_PerFrameVertices(gl))

        def rebuild():
            h = r.upload([MeshBatch(torch.from_numpy(p), torch.from_numpy(f), uvs=None if uv is None else torch.from_numpy(uv))
                          for p, f, uv in raw])
            with torch.no_grad():
                r.render(h, cam, lights=lights)
            r.release(h)

        meshes = [MeshBatch(torch.from_numpy(p), torch.from_numpy(f)) for p, f, _ in raw]
        handle = r.upload(meshes)
        cpu_handle = general.upload(meshes)

        def persistent():
            with torch.no_grad():
                r.render(handle, cam, lights=lights)

        def per_frame_vertices():
            with torch.no_grad():
                general.render(cpu_handle, cam, lights=lights)

        t_rebuild = time_call(rebuild, repeat=3 if quick else 5)
        t_general = time_call(per_frame_vertices, repeat=3 if quick else 5)
        before = (gl.counters.geometry_uploads, gl.counters.vertex_uploads)
        for _ in range(10):
            persistent()
        uploads = (gl.counters.geometry_uploads - before[0]) + (gl.counters.vertex_uploads - before[1])
        t_handle = time_call(persistent, repeat=3 if quick else 5)

        # the stage that changed, alone: camera -> fragments on the mesh's own faces
        pos, faces_t = cpu_handle.positions, cpu_handle.faces

        def stage_general():
            rasterize_batch(gl, TriangleBatch(cam.world_to_clip(pos), faces_t), size, RasterSettings())

        def stage_persistent():
            gl.rasterize_geometry(handle._gpu, cam.matrix, size)

        t_stage_general = time_call(stage_general, repeat=5 if quick else 7)
        t_stage_persistent = time_call(stage_persistent, repeat=5 if quick else 7)
        faces = sum(f.shape[0] for _, f, _ in raw)
        report.add_row(table, [f"{faces:,}", fmt_ms(t_rebuild), fmt_ms(t_general), fmt_ms(t_handle),
                               fmt_ratio(t_rebuild, t_handle), fmt_ratio(t_general, t_handle),
                               fmt_ms(t_stage_general), fmt_ms(t_stage_persistent), uploads])
        gl.release()
    table.notes.append("rebuild = MeshBatch(...) + Renderer.upload (GL buffers created) + render + release, every frame")
    table.notes.append("CPU clip + vertex upload = a handle rendered through rasterize(): transform, clip_batch and a vertex "
                       "upload to GL every frame")
    table.notes.append("raster stage = camera to fragments on the mesh's own faces, without shading: world_to_clip + "
                       "clip_batch + rasterize + unclip, versus rasterize_geometry (shading, the same in both, dominates "
                       "the full frame at this size)")
    table.notes.append("handle = geometry in GL buffers since upload; per frame only the matrices (uniforms) reach GL; "
                       "GL uploads = geometry buffers created + vertex writes, counted by ModernGLBackend.counters")
