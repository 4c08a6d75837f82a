"""ModernGL backend: full ``render()`` against a bare moderngl loop, py_gpu 0.0.1's approach, and NumPy.

Seed fixture (1k and 10k faces) at 640x360, background (6, 8, 12):

- ``render()``: this backend's seed-protocol call on the ``RasterBatch`` (conversion, upload,
  draw, readback, FrameBuffer);
- bare loop: the same numpy vertex array (already in NDC) written to a persistent buffer, one draw,
  one RGB readback; the floor for any wrapper;
- 0.0.1 re-created: per-vertex ``struct.pack``, a new buffer and vertex array per frame, rows
  flipped in a Python loop, the ``2/(W-1)`` mapping, on the same EGL context;
- numpy: the exact CPU backend.
"""

from __future__ import annotations

import struct

import numpy as np

from common import Report, fmt_ms, fmt_ratio, time_call

_VS = """
#version 330
in vec3 in_position;
in vec3 in_color;
out vec3 v_color;
void main() { gl_Position = vec4(in_position, 1.0); v_color = in_color; }
"""
_FS = """
#version 330
in vec3 v_color;
out vec4 frag_color;
void main() { frag_color = vec4(v_color, 1.0); }
"""


class _Legacy:
    """py_gpu 0.0.1's per-frame behaviour, on an EGL context (what 0.0.1 needed to run headless)."""

    def __init__(self, ctx, moderngl, width, height):
        self.ctx, self.mgl = ctx, moderngl
        self.prog = ctx.program(vertex_shader=_VS, fragment_shader=_FS)
        self.color = ctx.texture((width, height), 3)
        self.depth = ctx.depth_renderbuffer((width, height))
        self.fbo = ctx.framebuffer([self.color], self.depth)

    def render(self, batch, width, height, background):
        ctx = self.ctx
        ctx.enable(self.mgl.DEPTH_TEST)
        self.fbo.use()
        self.fbo.clear(*(c / 255.0 for c in background), 1.0, depth=1.0)
        zs = [v.z for t in batch.triangles for v in (t.a, t.b, t.c)]
        near, far = min(zs), max(zs)
        span = max(1e-9, far - near)
        sx, sy = 2.0 / max(1.0, width - 1), 2.0 / max(1.0, height - 1)
        payload = bytearray(len(batch.triangles) * 72)
        off = 0
        for t in batch.triangles:
            col = tuple(c / 255.0 for c in t.color)
            for v in (t.a, t.b, t.c):
                payload[off : off + 24] = struct.pack(
                    "ffffff", v.x * sx - 1.0, 1.0 - v.y * sy, -1.0 + 2.0 * ((v.z - near) / span), *col
                )
                off += 24
        vbo = ctx.buffer(bytes(payload))
        vao = ctx.vertex_array(self.prog, [(vbo, "3f 3f", "in_position", "in_color")])
        vao.render()
        vao.release()
        vbo.release()
        data = self.fbo.read(components=3, alignment=1)
        row = width * 3
        out = bytearray(len(data))
        for y in range(height):
            out[y * row : (y + 1) * row] = data[(height - 1 - y) * row : (height - y) * row]
        return bytes(out)

    def release(self):
        for obj in (self.fbo, self.color, self.depth, self.prog):
            obj.release()


class _Bare:
    """The least a moderngl program can do per frame: write, draw, read."""

    def __init__(self, ctx, moderngl, vertices: np.ndarray, width, height):
        self.ctx, self.mgl = ctx, moderngl
        self.prog = ctx.program(vertex_shader=_VS, fragment_shader=_FS)
        self.vbo = ctx.buffer(reserve=vertices.nbytes, dynamic=True)
        self.vao = ctx.vertex_array(self.prog, [(self.vbo, "3f 3f", "in_position", "in_color")])
        self.color = ctx.texture((width, height), 3)
        self.depth = ctx.depth_renderbuffer((width, height))
        self.fbo = ctx.framebuffer([self.color], self.depth)
        self.vertices = vertices

    def render(self):
        self.ctx.enable(self.mgl.DEPTH_TEST)
        self.fbo.use()
        self.fbo.clear(6 / 255, 8 / 255, 12 / 255, 1.0, depth=1.0)
        self.vbo.write(self.vertices)
        self.vao.render()
        return np.frombuffer(self.fbo.read(components=3, alignment=1), np.uint8)

    def release(self):
        for obj in (self.vao, self.vbo, self.fbo, self.color, self.depth, self.prog):
            obj.release()


def _ndc_vertices(raster_batch, width, height) -> np.ndarray:
    """float32 ``[3F, 6]`` (x_ndc, y_ndc, z_ndc, r, g, b) from the seed batch, built once."""
    tb = raster_batch.to_triangle_batch()
    v = tb.vertices[0].numpy()  # [3F, 3]
    z = v[:, 2]
    out = np.empty((v.shape[0], 6), np.float32)
    out[:, 0] = 2.0 * v[:, 0] / width - 1.0
    out[:, 1] = 1.0 - 2.0 * v[:, 1] / height
    out[:, 2] = (z - z.min()) / max(1e-9, float(z.max() - z.min())) * 1.8 - 0.9
    out[:, 3:] = np.repeat(tb.face_colors[0].numpy(), 3, axis=0)
    return out


def run(report: Report, quick: bool) -> None:
    from py_gpu._gl import probe_gl

    reason = probe_gl()
    table = report.table(
        "ModernGL backend: seed fixture, 640x360, full render() (ms per frame)",
        ["faces", "moderngl render()", "bare moderngl loop", "0.0.1 re-created", "numpy", "vs bare", "0.0.1 / ours", "numpy / ours"],
    )
    if reason is not None:
        table.notes.append(f"skipped: no OpenGL context ({reason.splitlines()[0]})")
        print(f"  suite_moderngl skipped: {reason}")
        return
    from py_gpu._gl import create_context, import_moderngl
    from py_gpu import ModernGLRasterBackend, select_backend
    from py_gpu.fixtures import SEED_BACKGROUND, seed_fixture

    moderngl = import_moderngl()
    width, height = 640, 360
    repeat = 5 if quick else 20
    ctx = create_context()
    backend = ModernGLRasterBackend(context=ctx)  # one context for all three GL paths: no context switches
    numpy_backend = select_backend("numpy")
    try:
        for faces in (1000, 10000):
            batch = seed_fixture(faces, width, height)
            ours = time_call(lambda: backend.render(batch, width, height, background=SEED_BACKGROUND), repeat=repeat, warmup=2)
            with ctx:
                bare = _Bare(ctx, moderngl, _ndc_vertices(batch, width, height), width, height)
                legacy = _Legacy(ctx, moderngl, width, height)
                bare_ms = time_call(bare.render, repeat=repeat, warmup=2)
                legacy_ms = time_call(lambda: legacy.render(batch, width, height, SEED_BACKGROUND), repeat=repeat, warmup=2)
                bare.release()
                legacy.release()
            np_ms = time_call(lambda: numpy_backend.render(batch, width, height, background=SEED_BACKGROUND),
                              repeat=max(2, repeat // 5), warmup=1)
            report.add_row(table, [faces, fmt_ms(ours), fmt_ms(bare_ms), fmt_ms(legacy_ms), fmt_ms(np_ms),
                                   fmt_ratio(ours, bare_ms), fmt_ratio(legacy_ms, ours), fmt_ratio(np_ms, ours)])
        table.notes.append(f"GL renderer: {backend.ctx.info['GL_RENDERER']}")
        table.notes.append("render() includes the RasterBatch -> TriangleBatch conversion; the bare loop draws a prebuilt array")
    finally:
        backend.release()
        ctx.release()


if __name__ == "__main__":  # python benchmarks/suite_moderngl.py
    _report = Report()
    run(_report, quick=False)
    for _t in _report.tables:
        print(_t.text())
