"""py_3d's example scripts, as they construct and call the bridge, run to a clean exit.

py_3d's examples (``gpu_render_benchmark.py --strict`` with and without ``--reference-compatible``,
``rocket_tube_demo.py``, ``fruit_bowl_demo.py``, ``render_fruit_bowl_video.py``) are not part of
py3dengine's package, so each is re-created here as a short script that constructs the renderer
with the same keywords and calls it the same way (``RenderEngine.render``, ``build_gpu_scene_batch``,
``PixelBuffer.to_png`` / ``to_ppm_bytes``, the capabilities the benchmark prints) on scenes built
from the same kinds of objects. Each runs in its own interpreter through
``python -m py_gpu.adapters.py3d`` (which applies the Linux import fix, as a user would run them)
and must exit with status 0.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("py_3d") is None, reason="py3dengine is not installed")

# The engine factory the fruit bowl, rocket tube and video scripts share (fruit_bowl_demo.make_engine).
COMMON = '''
from py_3d import CPURenderer, RenderEngine


def make_engine(renderer="cpu", *, fast=False):
    if renderer == "py_gpu":
        from py_gpu.adapters.py3d import Py3DRasterRenderer

        return RenderEngine(Py3DRasterRenderer(reference_compatible=not fast, fast_materials=fast))
    return RenderEngine(CPURenderer(cache_static_geometry=False))
'''

GPU_RENDER_BENCHMARK = '''
import argparse
from statistics import mean
from time import perf_counter

from py_3d import (Box, Camera, GPURenderer, Lamp, Material, RenderEngine, RenderSettings, Scene, Sphere, Sun,
                   build_gpu_scene_batch, detect_gpu_backends)


def make_scene():  # render_benchmark.make_scene: a sphere, a box, a sun and two lamps
    scene = Scene()
    scene.add(Sphere(center=(-0.8, 0.0, 0.0), radius=0.75, material=Material(color=(80, 145, 235), absorption=(0.05, 0.05, 0.02))),
              Box(center=(0.85, -0.05, 0.15), size=(1.05, 1.05, 1.05), material=Material(color=(225, 155, 70), absorption=(0.08, 0.16, 0.22))))
    scene.add_light(Sun(direction=(-0.4, -0.7, -1.0), color=(255, 244, 225), intensity=0.85))
    scene.add_light(Lamp(position=(-2.0, 1.7, -2.0), color=(80, 150, 255), intensity=2.6))
    scene.add_light(Lamp(position=(2.0, 1.2, -1.2), color=(255, 90, 120), intensity=1.8))
    return scene


parser = argparse.ArgumentParser()
parser.add_argument("--width", type=int, default=96)
parser.add_argument("--height", type=int, default=54)
parser.add_argument("--frames", type=int, default=4)
parser.add_argument("--renderer", choices=("scaffold", "py_gpu"), default="py_gpu")
parser.add_argument("--reference-compatible", action="store_true")
parser.add_argument("--fast-materials", action=argparse.BooleanOptionalAction, default=True)
parser.add_argument("--strict", action="store_true")
args = parser.parse_args()
scene = make_scene()
settings = RenderSettings(width=args.width, height=args.height, background=(7, 9, 14), ambient=0.06, sphere_segments=20, sphere_rings=10)
if args.renderer == "py_gpu":
    try:
        from py_gpu.adapters.py3d import Py3DRasterRenderer

        renderer = Py3DRasterRenderer(reference_compatible=args.reference_compatible,
                                      fast_materials=args.fast_materials and not args.reference_compatible)
    except Exception as exc:
        if args.strict:
            raise RuntimeError("py_gpu renderer bridge is not available") from exc
        renderer = GPURenderer(allow_cpu_fallback=True)
else:
    renderer = GPURenderer(allow_cpu_fallback=not args.strict)
engine = RenderEngine(renderer)
batch = build_gpu_scene_batch(scene, settings)
timings = []
for index in range(args.frames):
    camera = Camera(position=(1.4 * (index % 3 - 1), 0.6, -4.0), target=(0.0, 0.0, 0.0), fov_degrees=52)
    start = perf_counter()
    buffer = engine.render(scene, camera, settings)
    timings.append(perf_counter() - start)
    assert (buffer.width, buffer.height) == (args.width, args.height)
capabilities = getattr(getattr(renderer, "backend_impl", None), "capabilities", None)
accelerated = getattr(capabilities, "accelerated", getattr(renderer, "is_accelerated", False))
print(f"detected gpu packages: {', '.join(detect_gpu_backends()) or 'none'}")
print(f"renderer: {renderer.name}")
if capabilities is not None:
    print(f"backend: {capabilities.name}")
print(f"accelerated: {accelerated}")
print(f"fallback enabled: {getattr(renderer, 'allow_cpu_fallback', False)}")
print(f"triangles: {len(batch.indices)}")
print(f"avg frame: {mean(timings) * 1000:.2f} ms")
'''

ROCKET_TUBE_DEMO = '''
import argparse
from math import pi, sin
from pathlib import Path

from common import make_engine
from py_3d import Box, Camera, Color, Lamp, Line3, Material, Mesh, RenderSettings, Scene, Sun, TextBulletin, Triangle, Vec3


def rocket_at(time):
    return Vec3(-0.8 + 0.3 * time, 0.42 + 0.5 * time * time, 0.0)


def make_flag(time):
    material = Material(color=(220, 65, 55), emission=(24, 5, 5), roughness=0.48, fuzziness=0.08)
    origin, points = Vec3(0.45, 1.05, 0.0), []
    for row in range(6):
        points.append([origin + Vec3(col / 9 * 1.2, -row / 5 * 0.62 + sin(time * 7 + col) * 0.03, col * 0.01)
                       for col in range(10)])
    triangles = []
    for row in range(5):
        for col in range(9):
            a, b, c, d = points[row][col], points[row][col + 1], points[row + 1][col + 1], points[row + 1][col]
            triangles += [Triangle(a, d, b, material), Triangle(b, d, c, material)]
    return Mesh(triangles)


def make_scene(time):
    state = rocket_at(time)
    scene = Scene()
    metal = Material(color=(120, 126, 132), roughness=0.18, specular=0.45, shininess=48.0)
    flame = Material(color=(255, 134, 42), emission=(255, 118, 30), roughness=0.2, light_transmission=0.5)
    scene.add(Box(state + Vec3(-0.13, 0.0, 0.0), (0.24, 0.62, 0.58), metal))
    scene.add(Box(state + Vec3(0.12, -0.05, 0.0), (0.52, 0.18, 0.54), metal))
    scene.add(Box(state + Vec3(0.25, -0.3, 0.0), (0.22, 0.2, 0.36), flame))
    scene.add(Box((0.0, -0.05, 0.0), (4.4, 0.1, 2.2), Material(color=(42, 54, 58), roughness=0.6)))
    scene.add(Box((0.42, 0.55, 0.0), (0.06, 1.35, 0.06), Material(color=(85, 70, 52), roughness=0.4)))
    scene.add(make_flag(time))
    for index in range(11):
        start = state + Vec3(0.05 + index * 0.09, -0.36 - index * 0.16, 0.0)
        scene.add(Line3(start, start + Vec3(0.04, -0.07, 0.0), Material(color=(125, 190, 255), emission=(18, 35, 55))))
    lamp = state + Vec3(0.25, 1.05 + sin(time * 2.0) * 0.08, -0.65)
    scene.add(Box(lamp, (0.16, 0.16, 0.16), Material(color=(255, 210, 120), emission=(255, 190, 90))))
    scene.add_light(Lamp(position=lamp, color=(255, 195, 115), intensity=5.2))
    scene.add_light(Sun(direction=(-0.25, -0.85, -0.4), color=(210, 225, 255), intensity=0.25))
    scene.add_bulletin(TextBulletin("ROCKET TUBE\\nGAS FIELD AND FLAG", position=(10, 10), color=(245, 248, 255),
                                    background=(4, 6, 10), padding=5))
    return scene


def make_camera(time):
    state = rocket_at(time)
    target = Vec3((state.x + 0.55) * 0.5, 0.46 + state.y * 0.35, 0.0)
    return Camera(position=target + Vec3(-2.55, 1.2, -3.0), target=target, fov_degrees=58)


parser = argparse.ArgumentParser()
parser.add_argument("--output", type=Path, required=True)
parser.add_argument("--frames", type=int, default=3)
parser.add_argument("--fps", type=int, default=24)
parser.add_argument("--renderer", choices=("cpu", "py_gpu"), default="py_gpu")
parser.add_argument("--gpu-fast-render", action=argparse.BooleanOptionalAction, default=True)
args = parser.parse_args()
settings = RenderSettings(width=120, height=68, background=Color(7, 9, 13), ambient=0.0, gamma=1.12, max_render_distance=8.0)
make_engine(args.renderer, fast=args.gpu_fast_render).render(make_scene(1.0), make_camera(1.0), settings).to_png(args.output)
engine = make_engine(args.renderer, fast=args.gpu_fast_render)
with open(args.output.with_suffix(".ppm-stream"), "wb") as stream:  # what the script pipes to ffmpeg
    for frame in range(args.frames):
        time = frame / args.fps
        stream.write(engine.render(make_scene(time), make_camera(time), settings).to_ppm_bytes())
print(f"Wrote {args.output}")
'''

FRUIT_BOWL = '''
import argparse
from math import sin, tau
from pathlib import Path

from common import make_engine
from py_3d import (Box, Camera, FloatingTextBulletin, KinematicBowl, Lamp, LampPrimitive, Line3, Material, Mesh, PhysicsWorld,
                   PixelBuffer, RenderSettings, Scene, Sphere, SphereBody, StaticPlane, Sun, SurfacePerturbation, TextBulletin,
                   Triangle, Vec3, draw)


def texture(width, height, texel):
    from py_3d import Color

    return PixelBuffer(width, height, [Color(*texel(x, y)) for y in range(height) for x in range(width)])


def sign_texture(label):
    buffer = PixelBuffer.new(96, 48, (38, 30, 22))
    draw.text(buffer, (4, 4), label[:14], (240, 230, 200))
    return buffer


class FruitBowlSimulation:
    def __init__(self):
        self.time = 0.0
        self.world = PhysicsWorld(gravity=(0.0, -9.81, 0.0))
        self.bowl = KinematicBowl(center=(0.0, 0.0, 0.0), radius=1.35, depth=0.96, restitution=0.18, friction=0.48,
                                  material=Material(color=(255, 255, 255), texture=texture(32, 16, lambda x, y: (150 + x, 100, 60)),
                                                    roughness=0.5, fuzziness=0.05, specular=0.2), visual_thickness=0.075)
        self.floor = StaticPlane(point=(0.0, -1.75, 0.0), normal=(0.0, 1.0, 0.0), size=6.0,
                                 material=Material(color=(255, 255, 255), roughness=0.64, fuzziness=0.12, specular=0.04,
                                                   texture=texture(32, 32, lambda x, y: (200, 190, 170) if (x // 4 + y // 4) % 2 else (90, 70, 60))))
        self.fruits = [
            SphereBody(position=(-0.42, -0.12, 0.08), radius=0.23, velocity=(0.6, 0.0, 0.12), mass=0.85,
                       material=Material(color=(230, 40, 40), roughness=0.2, fuzziness=0.05, specular=0.28),
                       visual_perturbation=SurfacePerturbation(magnitude=0.012, scale=3.2, seed=12)),
            SphereBody(position=(0.28, -0.2, -0.1), radius=0.27, velocity=(-0.35, 0.12, -0.22), mass=1.05,
                       material=Material(color=(250, 150, 30), roughness=0.48, fuzziness=0.2, specular=0.1)),
            SphereBody(position=(-0.32, -0.08, -0.34), radius=0.42, velocity=(-0.08, 0.0, 0.22), mass=4.25,
                       material=Material(color=(50, 142, 78), roughness=0.18, specular=0.12, reflectivity=0.03)),
        ]
        self.world.add_bowl(self.bowl)
        self.world.add_plane(self.floor)
        for body in self.fruits:
            self.world.add_sphere(body)

    def step(self, dt):
        self.time += dt
        self.bowl.set_center((0.1 * sin(self.time * 1.7), 0.05 * sin(self.time * tau * 0.72), 0.0), dt=dt)
        self.world.step(dt, substeps=3)

    def scene(self, *, label="KINEMATIC FRUIT BOWL"):
        scene = Scene()
        scene.add(self.floor.to_primitive(), self.bowl.to_primitive())
        board = Material(color=(255, 255, 255), texture=sign_texture(label), roughness=0.5, fuzziness=0.08)
        scene.add(Box((-1.77, -0.86, -1.18), (1.34, 0.66, 0.06), Material(color=(8, 9, 10), roughness=0.55)),
                  Mesh((Triangle((-2.36, -1.13, -1.214), (-1.18, -0.58, -1.214), (-1.18, -1.13, -1.214), board, (0.0, 1.0), (1.0, 0.0), (1.0, 1.0)),
                        Triangle((-2.36, -1.13, -1.214), (-2.36, -0.58, -1.214), (-1.18, -0.58, -1.214), board, (0.0, 1.0), (0.0, 0.0), (1.0, 0.0)))))
        for body in self.fruits:
            top = body.position + Vec3(0.0, body.radius * 1.03, 0.0)
            scene.add(body.to_primitive(), Line3(top - Vec3(0.1, 0.1, 0.0), top, Material(color=(40, 30, 25), emission=(12, 10, 8))))
        lights = (Lamp(position=(-1.55, 1.7, -1.25), color=(255, 222, 186), intensity=2.1),
                  Sun(direction=(-0.35, -0.72, 0.58), color=(255, 244, 225), intensity=0.7))
        scene.add(LampPrimitive(lights[0].position, color=lights[0].color, segments=8),
                  Line3(Vec3(-2.15, 2.0, -2.2), Vec3(-2.0, 2.3, -2.4), Material(color=lights[1].color, emission=(255, 255, 255))),
                  Sphere(Vec3(-2.15, 2.0, -2.2), 0.045, Material(color=lights[1].color, emission=(255, 255, 255), diffuse=0.1)))
        for light in lights:
            scene.add_light(light)
        scene.add_bulletin(FloatingTextBulletin("FLOATING BULLETIN", position=(0.0, 1.24, 0.04), screen_offset=(0, -20),
                                                color=(250, 244, 224), background=(15, 9, 5), padding=5))
        return scene


def make_settings(args):
    return RenderSettings(width=args.width, height=args.height, background=(8, 11, 15), gamma=args.gamma,
                          smooth_shading=args.smooth_shading, two_sided_lighting=False, sphere_segments=10, sphere_rings=5,
                          max_render_distance=6.0)


def make_camera():
    return Camera(position=(0.0, 2.937, -2.979), target=(0.0, -0.28, 0.0), fov_degrees=48)


def parse_args(video=False):
    parser = argparse.ArgumentParser()
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--frames", type=int, default=3)
    parser.add_argument("--fps", type=int, default=12)
    parser.add_argument("--width", type=int, default=120)
    parser.add_argument("--height", type=int, default=68)
    parser.add_argument("--gamma", type=float, default=1.0)
    parser.add_argument("--label", default="FRUIT BOWL")
    parser.add_argument("--renderer", choices=("cpu", "py_gpu"), default="py_gpu" if video else "cpu")
    parser.add_argument("--gpu-fast-render", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--smooth-shading", action=argparse.BooleanOptionalAction, default=True)
    return parser.parse_args()


def render_still(args):
    simulation = FruitBowlSimulation()
    simulation.step(1.0 / args.fps)
    make_engine(args.renderer, fast=args.gpu_fast_render).render(simulation.scene(label=args.label), make_camera(),
                                                                 make_settings(args)).to_png(args.output)
    print(f"Wrote {args.output}")


def render_video(args):  # without ffmpeg: one PNG per frame, as the demo falls back to
    simulation = FruitBowlSimulation()
    engine = make_engine(args.renderer, fast=args.gpu_fast_render)
    settings = make_settings(args)
    frames_dir = args.output.with_suffix("")
    frames_dir.mkdir(parents=True, exist_ok=True)
    for frame in range(args.frames):
        simulation.step(1.0 / args.fps)
        buffer = engine.render(simulation.scene(label=f"{args.label} FRAME {frame:03d}"), make_camera(), settings)
        buffer.to_png(frames_dir / f"frame_{frame:04d}.png")
    print(f"Wrote PNG frames to {frames_dir}.")
'''

FRUIT_BOWL_DEMO = '''
from fruit_bowl import parse_args, render_still

render_still(parse_args())
'''

RENDER_FRUIT_BOWL_VIDEO = '''
from fruit_bowl import parse_args, render_video

render_video(parse_args(video=True))
'''

SCRIPTS = {"gpu_render_benchmark.py": GPU_RENDER_BENCHMARK, "rocket_tube_demo.py": ROCKET_TUBE_DEMO,
           "fruit_bowl_demo.py": FRUIT_BOWL_DEMO, "render_fruit_bowl_video.py": RENDER_FRUIT_BOWL_VIDEO}


@pytest.fixture
def examples(tmp_path):
    (tmp_path / "common.py").write_text(textwrap.dedent(COMMON))
    (tmp_path / "fruit_bowl.py").write_text(textwrap.dedent(FRUIT_BOWL))
    for name, code in SCRIPTS.items():
        (tmp_path / name).write_text(textwrap.dedent(code))
    return tmp_path


def _run(examples, script, *args) -> str:
    proc = subprocess.run([sys.executable, "-m", "py_gpu.adapters.py3d", str(examples / script), *args],
                          capture_output=True, text=True, cwd=examples, timeout=300)
    assert proc.returncode == 0, f"{script} {' '.join(args)} exited with {proc.returncode}:\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc.stdout


def test_gpu_render_benchmark_strict(examples):
    out = _run(examples, "gpu_render_benchmark.py", "--strict")
    assert "renderer: py_gpu py_3d batch renderer" in out
    assert "accelerated: True" in out and "backend: " in out


def test_gpu_render_benchmark_strict_reference_compatible(examples):
    out = _run(examples, "gpu_render_benchmark.py", "--strict", "--reference-compatible")
    assert "renderer: py_gpu py_3d batch renderer" in out
    assert "accelerated: False" in out  # CPURenderer draws these frames, and the script is told so


def test_rocket_tube_demo(examples):
    _run(examples, "rocket_tube_demo.py", "--output", str(examples / "rocket.png"))
    assert (examples / "rocket.png").stat().st_size > 0
    assert (examples / "rocket.ppm-stream").read_bytes().count(b"P6\n120 68\n255\n") == 3


@pytest.mark.parametrize("fast", ["--gpu-fast-render", "--no-gpu-fast-render"])
def test_fruit_bowl_demo(examples, fast):
    _run(examples, "fruit_bowl_demo.py", "--renderer", "py_gpu", fast, "--output", str(examples / "bowl.png"))
    assert (examples / "bowl.png").stat().st_size > 0


def test_render_fruit_bowl_video(examples):
    _run(examples, "render_fruit_bowl_video.py", "--output", str(examples / "bowl.mp4"))
    assert sorted(p.name for p in (examples / "bowl").iterdir()) == [f"frame_{i:04d}.png" for i in range(3)]
