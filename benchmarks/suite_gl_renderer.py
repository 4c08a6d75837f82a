"""GL renderer suite: lit, textured frames with colour + depth read back, against the machine's limit.

Every row renders one textured torus (5k, 80k and 500k faces) at 640x360 with an ambient and a
directional light, Blinn-Phong, bilinear texturing, and reads colour and depth back every frame:

- ``Renderer`` on the ModernGL backend (GL shading: ``stats.shading == "gl"``);
- ``Renderer`` on the torch backend (torch rasterizer and shading, ``torch.no_grad()``);
- a bare ModernGL loop: its own minimal GLSL program (the same lights and texture), a VBO and
  index buffer built once, and per frame only: set uniforms, clear, draw, read colour and depth
  into preallocated numpy arrays. This is what the machine's GL can do, with no library around it;
- pyrender (when installed): the same mesh, camera and directional light, ``OffscreenRenderer``
  render of colour and depth (its own PBR shading: the closest it offers).

All run in one process, frame by frame in turn (interleaved, so background load hits each the
same), each frame from a new camera on an orbit; the figure is the median per frame. The last
table times the ``py-gpu demo`` scene per frame on each backend.
"""

from __future__ import annotations

import math
import os
import statistics
import time

os.environ.setdefault("PYOPENGL_PLATFORM", "egl")  # pyrender, if installed, draws headless

import numpy as np
import torch

from common import Report, fmt_ms
from py_gpu.camera import Camera
from py_gpu.demo import checker, demo_scene, rotation_y
from py_gpu.renderer import Renderer
from py_gpu.shading.lights import AmbientLight, DirectionalLight, Material
from py_gpu.shading.texture import Texture
from py_gpu.shapes import torus

SIZE = (360, 640)
AMBIENT, SUN = (0.2, 0.2, 0.2), (-0.5, -1.0, -0.6)
SPECULAR, SHININESS = 0.25, 32.0

_BARE_VERTEX = """
#version 330
in vec3 in_position; in vec3 in_normal; in vec2 in_uv;
uniform mat4 u_mvp;
out vec3 v_world; out vec3 v_normal; out vec2 v_uv;
void main() { gl_Position = u_mvp * vec4(in_position, 1.0); v_world = in_position; v_normal = in_normal; v_uv = in_uv; }
"""
_BARE_FRAGMENT = """
#version 330
in vec3 v_world; in vec3 v_normal; in vec2 v_uv;
uniform sampler2D u_tex; uniform vec3 u_eye; uniform vec3 u_to_light; uniform vec3 u_ambient;
uniform float u_specular; uniform float u_shininess;
out vec4 f_color;
void main() {
    vec3 n = normalize(v_normal), view = normalize(u_eye - v_world);
    if (dot(n, view) < 0.0) n = -n;
    float ndl = dot(n, u_to_light);
    vec3 albedo = texture(u_tex, vec2(v_uv.x, 1.0 - v_uv.y)).rgb;
    float spec = ndl > 0.0 ? pow(max(dot(n, normalize(u_to_light + view)), 1e-12), u_shininess) : 0.0;
    f_color = vec4(albedo * (u_ambient + max(ndl, 0.0)) + u_specular * spec, 1.0);
}
"""


def _cameras(n: int) -> list[Camera]:
    """``n`` cameras on an orbit around the torus."""
    aspect = SIZE[1] / SIZE[0]
    return [Camera.perspective((3.2 * math.sin(2 * math.pi * k / n), 1.8, 3.2 * math.cos(2 * math.pi * k / n)),
                               fov_y=50.0, aspect=aspect, near=0.1, far=30.0) for k in range(n)]


class _Bare:
    """The bare ModernGL loop: a minimal shaded program over a VBO built once."""

    def __init__(self, mesh, texture: torch.Tensor):
        from py_gpu._gl import create_context

        self.ctx = ctx = create_context()
        ctx.__enter__()
        H, W = SIZE
        vertices = torch.cat([mesh.positions, mesh.normals, mesh.uvs], 1).to(torch.float32).numpy()
        self.prog = ctx.program(vertex_shader=_BARE_VERTEX, fragment_shader=_BARE_FRAGMENT)
        self.vao = ctx.vertex_array(self.prog, [(ctx.buffer(vertices.tobytes()), "3f 3f 2f", "in_position", "in_normal", "in_uv")],
                                    index_buffer=ctx.buffer(mesh.faces.to(torch.int32).numpy().tobytes()), index_element_size=4)
        tex = texture.numpy().astype(np.float32)
        self.tex = ctx.texture((tex.shape[1], tex.shape[0]), 3, tex.tobytes(), dtype="f4")
        self.fbo = ctx.framebuffer([ctx.texture((W, H), 4, dtype="f4")], ctx.depth_texture((W, H)))
        self.color = np.empty((H, W, 4), np.float32)
        self.depth = np.empty((H, W), np.float32)
        to_light = -np.asarray(SUN) / np.linalg.norm(SUN)
        self.prog["u_to_light"].value = tuple(to_light)
        self.prog["u_ambient"].value = AMBIENT
        self.prog["u_specular"].value = SPECULAR
        self.prog["u_shininess"].value = SHININESS
        self.prog["u_tex"].value = 0
        ctx.__exit__(None, None, None)

    def frame(self, cam: Camera) -> None:
        mvp = cam.matrix[0].T.contiguous().to(torch.float32).numpy().tobytes()
        eye = tuple(cam.position[0].tolist())
        with self.ctx as ctx:  # this loop's own context, current while it draws
            ctx.enable(ctx.DEPTH_TEST)
            self.fbo.use()
            self.prog["u_mvp"].write(mvp)
            self.prog["u_eye"].value = eye
            self.fbo.clear(0.0, 0.0, 0.0, 0.0)
            self.tex.use(0)
            self.vao.render()
            self.fbo.read_into(self.color, components=4, dtype="f4")
            self.fbo.read_into(self.depth, components=1, attachment=-1, dtype="f4")


class _Pyrender:
    """pyrender's OffscreenRenderer on the same mesh, camera and directional light."""

    def __init__(self, mesh, texture: torch.Tensor):
        import pyrender
        from PIL import Image

        image = Image.fromarray((texture.numpy() * 255).astype(np.uint8))
        material = pyrender.MetallicRoughnessMaterial(baseColorTexture=pyrender.Texture(source=image, source_channels="RGB"),
                                                      metallicFactor=0.0, roughnessFactor=0.6)
        prim = pyrender.Primitive(positions=mesh.positions.numpy(), normals=mesh.normals.numpy(),
                                  texcoord_0=mesh.uvs.numpy(), indices=mesh.faces.numpy(), material=material)
        self.scene = pyrender.Scene(ambient_light=AMBIENT, bg_color=(0, 0, 0, 0))
        self.scene.add(pyrender.Mesh([prim]))
        self.cam = self.scene.add(pyrender.PerspectiveCamera(yfov=math.radians(50.0), aspectRatio=SIZE[1] / SIZE[0],
                                                             znear=0.1, zfar=30.0))
        sun = np.eye(4)
        z = -np.asarray(SUN) / np.linalg.norm(SUN)  # a pyrender light shines down its -z
        x = np.cross((0.0, 1.0, 0.0), z)
        x /= np.linalg.norm(x)
        sun[:3, :3] = np.stack([x, np.cross(z, x), z], 1)
        self.scene.add(pyrender.DirectionalLight(intensity=3.0), pose=sun)
        self.renderer = pyrender.OffscreenRenderer(SIZE[1], SIZE[0])

    def frame(self, cam: Camera) -> None:
        self.scene.set_pose(self.cam, torch.linalg.inv(cam.view[0]).numpy())
        self.renderer.render(self.scene)  # colour and depth


def _pyrender_or_reason(mesh, texture):
    try:
        return _Pyrender(mesh, texture), ""
    except ImportError:
        return None, "pyrender is not installed (pip install pyrender)"
    except Exception as exc:  # no EGL for PyOpenGL, an old PyOpenGL ...
        return None, f"pyrender could not render here: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}"


def _interleaved(contestants: dict, cams: list[Camera], frames: dict) -> dict:
    """Median ms per frame of each contestant, taking frames in turn (after one warm-up frame each).

    The order rotates from frame to frame, so that each contestant follows each other one equally
    often: a frame right after another GL context's (a context switch) or after the torch
    renderer's (a cold cache) measured up to 10% slower than the same frame after a light one.
    """
    times = {name: [] for name in contestants}
    for fn in contestants.values():
        fn(cams[0])
    names = list(contestants)
    for k, cam in enumerate(cams):
        for name in names[k % len(names):] + names[:k % len(names)]:
            fn = contestants[name]
            if k >= frames.get(name, len(cams)):
                continue
            t0 = time.perf_counter()
            fn(cam)
            times[name].append((time.perf_counter() - t0) * 1000.0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def _renderer_frame(r: Renderer, h, tex):
    lights = [AmbientLight(AMBIENT, 1.0), DirectionalLight(SUN)]
    material = Material(SPECULAR, SHININESS)

    def frame(cam):
        with torch.no_grad():
            f = r.render(h, cam, lights=lights, textures=tex, material=material)
        return f.image, f.depth
    return frame


def run(report: Report, quick: bool) -> None:
    from py_gpu._gl import probe_gl

    reason = probe_gl()
    cases = [(50, 50)] if quick else [(50, 50), (200, 200), (500, 500)]
    n = 6 if quick else 30
    table = report.table(f"GL renderer: lit, textured frames with colour + depth readback ({SIZE[1]}x{SIZE[0]}, ms/frame)",
                         ["faces", "Renderer moderngl (GL shading)", "bare ModernGL loop", "pyrender", "Renderer torch",
                          "GL shading / bare", "GL shading / pyrender", "torch / GL shading",
                          "GL shading / bare, the two alone"])
    if reason is not None:
        table.notes.append(f"skipped: no OpenGL context ({reason.splitlines()[0]})")
        return
    tex = checker(8, (0.9, 0.85, 0.8), (0.25, 0.3, 0.55))  # [64, 64, 3]
    cams = _cameras(n)
    why_not_pyrender = ""
    for seg, rings in cases:
        mesh = torus(1.0, 0.35, seg, rings)
        gl_r = Renderer(SIZE, backend="moderngl")
        t_r = Renderer(SIZE, backend="torch")
        contestants = {"gl": _renderer_frame(gl_r, gl_r.upload(mesh), Texture(tex)),
                       "bare": _Bare(mesh, tex).frame, "torch": _renderer_frame(t_r, t_r.upload(mesh), Texture(tex))}
        for fn in contestants.values():  # GL objects made before pyrender's context exists
            fn(cams[0])
        pyr, why_not_pyrender = _pyrender_or_reason(mesh, tex)
        if pyr is not None:
            contestants["pyrender"] = pyr.frame
        torch_frames = n if mesh.num_faces <= 100_000 else max(3, n // 5)
        ms = _interleaved(contestants, cams, {"torch": torch_frames})
        assert gl_r.stats.shading == "gl", gl_r.stats.shading_reason
        # the same two again, with nothing else taking turns between their frames
        pair = _interleaved({"gl": contestants["gl"], "bare": contestants["bare"]}, cams, {})
        py = ms.get("pyrender")
        report.add_row(table, [f"{mesh.num_faces:,}", fmt_ms(ms["gl"]), fmt_ms(ms["bare"]), fmt_ms(py), fmt_ms(ms["torch"]),
                               f"{ms['gl'] / ms['bare']:.2f}x", "n/a" if py is None else f"{ms['gl'] / py:.2f}x",
                               f"{ms['torch'] / ms['gl']:.1f}x", f"{pair['gl'] / pair['bare']:.2f}x"])
        gl_r.backend.release()
        if pyr is not None:
            pyr.renderer.delete()
    table.notes.append(f"{n} frames per contestant and size, taken in turn (in a rotating order) from an orbit of cameras; medians "
                       f"(the torch renderer takes the first {max(3, n // 5)} frames at 500k faces)")
    table.notes.append("every contestant reads colour and depth back each frame; the Renderer's frame also holds the "
                       "face index and alpha, as torch tensors")
    table.notes.append("bare ModernGL loop = a minimal GLSL program with the same lights and texture, VBO and index buffer "
                       "built once; per frame set uniforms, clear, draw, read colour and depth into preallocated arrays")
    table.notes.append("pyrender: " + (why_not_pyrender or "the same mesh, camera and directional light; its own PBR "
                                       "shading; OffscreenRenderer.render (colour + depth)"))
    table.notes.append("ratios below 1x mean the Renderer is faster; the machine is shared, so figures are noisy")
    table.notes.append("'the two alone': the Renderer and the bare loop timed again, taking turns only with each other "
                       "(in the full run, torch and pyrender frames between theirs change the caches and GL "
                       "contexts each one finds, which moved the 5k ratio between 0.9x and 1.2x across runs)")
    _demo(report, quick)


def _demo(report: Report, quick: bool) -> None:
    """The ``py-gpu demo`` turntable (py_gpu/demo.py's scene and options), per frame on each backend."""
    H, W = 240, 360
    frames = 6 if quick else 24
    table = report.table(f"py-gpu demo scene per frame ({W}x{H}, trilinear, 3 lights, gamma; ms/frame)",
                         ["backend", "ms/frame", "shading", "vs moderngl"])
    runs = {}
    for backend in ("moderngl", "torch", "numpy"):
        r = Renderer((H, W), backend=backend, background=(0.06, 0.07, 0.1))
        scene, textures, lights, cam = demo_scene(r)

        def frame(k, r=r, scene=scene, textures=textures, lights=lights, cam=cam):
            with torch.no_grad():
                r.render(scene, cam, lights=lights, textures=textures, material=Material(0.35, 48.0),
                         transforms=rotation_y(2 * math.pi * k / frames), texture_filter="trilinear", gamma=2.2)
        runs[backend] = (r, frame, scene.num_faces)
    times = {b: [] for b in runs}
    for b, (_, fn, _) in runs.items():
        fn(0)
    for k in range(frames):
        for b, (_, fn, _) in runs.items():
            t0 = time.perf_counter()
            fn(k)
            times[b].append((time.perf_counter() - t0) * 1000.0)
    base = statistics.median(times["moderngl"])
    for b, (r, _, _) in runs.items():
        ms = statistics.median(times[b])
        report.add_row(table, [b, fmt_ms(ms), r.stats.shading, f"{ms / base:.1f}x"])
    table.notes.append(f"{frames} turntable frames per backend, taken in turn; medians; the scene has "
                       f"{runs['moderngl'][2]:,} faces")
