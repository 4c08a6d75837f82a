"""Renderer suite: persistent geometry handles versus rebuilding the geometry every frame.

"rebuild" converts the mesh (validation, smooth normals, dtype/device) and uploads it before
every frame, as a renderer without handles must; "handle" uploads once and only renders.
"""

from __future__ import annotations

import torch

from common import Report, fmt_ms, fmt_ratio, time_call
from py_gpu.camera import Camera
from py_gpu.mesh import MeshBatch, icosphere, torus
from py_gpu.renderer import Renderer
from py_gpu.shading.lights import AmbientLight, DirectionalLight


def _meshes(level: int, segments: int) -> list[tuple]:
    """Raw numpy-like inputs (positions, faces, uvs) as a loader would hand them over."""
    a, b = icosphere(level), torus(1.0, 0.3, segments, segments // 2)
    return [(a.positions.numpy().copy(), a.faces.numpy().copy(), None),
            (b.positions.numpy().copy() + [2.5, 0.0, 0.0], b.faces.numpy().copy(), b.uvs.numpy().copy())]


def run(report: Report, quick: bool) -> None:
    size = (128, 128) if quick else (360, 640)
    cases = [(3, 48)] if quick else [(3, 48), (5, 160)]
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
