"""The py_3d bridge against py_3d's CPURenderer, in one process; writes docs/benchmarks-py3d.md.

    python benchmarks/py3d_bench.py              # 320x180 and 640x360, writes the doc and its picture
    python benchmarks/py3d_bench.py --quick --no-write

Scenes (``py_gpu.adapters.py3d.fixtures``): ``three_spheres`` (1,080 triangles, flat lighting,
Sun + Lamp) and ``fruit_bowl`` (1,248 triangles: textures, smooth shading, fuzz, gamma,
light_wrap, bounce_light, lines, text). Per scene and size: py_3d's ``CPURenderer`` (its static
geometry cache warm), the bridge on each exact backend, and ``fast_materials=True`` (what
``py_3d.GPURenderer`` asks for) on the default backend, all with warm caches (the scene is
unchanged between frames, the camera fixed). Times are medians of wall time per frame; torch runs
with one thread (``torch.set_num_threads(1)``, ``OMP_NUM_THREADS=1``), as CPURenderer uses one.
Also measured: the construction of ``py_3d.GPURenderer()`` and the bridge's first frame, in a
fresh interpreter. The fidelity of each timed frame (MAE and within3 against CPURenderer's frame)
is printed beside the speed.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from common import Report, fmt_ms  # noqa: E402

from py_gpu.adapters.py3d import Py3DRasterRenderer, _py3d, fixtures  # noqa: E402

torch.set_num_threads(1)

SCENES = ("three_spheres", "fruit_bowl")
BACKENDS = ("moderngl", "torch", "numpy")
TARGET = 15.0


def _pixels(pb) -> np.ndarray:
    return np.frombuffer(pb.to_rgb_bytes(), dtype=np.uint8).reshape(pb.height, pb.width, 3)


def _fidelity(ref: np.ndarray, ours: np.ndarray) -> str:
    d = np.abs(ours.astype(np.int64) - ref.astype(np.int64))
    return f"{d.mean():.3f} / {(d.max(-1) <= 3).mean():.4f}"


def machine_line() -> str:
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        from py_gpu._gl import create_context

        ctx = create_context()
        gl = ctx.info.get("GL_RENDERER", "?")
        ctx.release()
    except Exception as exc:  # pragma: no cover - no GL here
        gl = f"no GL ({exc})"
    return (f"{cpu}, {os.cpu_count()} cores (shared), torch {torch.__version__} with {torch.get_num_threads()} thread, "
            f"GL renderer {gl}, py3dengine {_version('py3dengine')}")


def _version(name: str) -> str:
    from importlib.metadata import version

    try:
        return version(name)
    except Exception:  # pragma: no cover
        return "?"


def construction_times() -> tuple[float, float]:
    """``(GPURenderer() construction, first frame)`` in ms, in a fresh interpreter."""
    code = (
        "import time\n"
        "import ctypes.wintypes as w\n"
        "w.HCURSOR = getattr(w, 'HCURSOR', w.HANDLE)\n"  # the import fix by hand: py_gpu is not imported yet
        "import py_3d\n"
        "t0 = time.perf_counter(); r = py_3d.GPURenderer(); t1 = time.perf_counter()\n"
        "s = py_3d.Scene(); s.add(py_3d.Sphere((0, 0, 0), 1.0)); s.add_light(py_3d.Sun((0, -1, 1)))\n"
        "r.render(s, py_3d.Camera(), py_3d.RenderSettings(width=320, height=180)); t2 = time.perf_counter()\n"
        "print((t1 - t0) * 1000, (t2 - t1) * 1000)\n"
    )
    runs = []
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
        runs.append((float(out[0]), float(out[1])))
    runs.sort()
    return runs[1]


def _frame_ms(fn, count: int) -> float:
    """Median wall time of ``count`` calls of ``fn``, in ms."""
    samples = []
    for _ in range(count):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(samples)


def bench(report: Report, sizes, rounds: int, frames: int) -> list[str]:
    """Each round times one CPURenderer frame and then ``frames`` frames of every bridge variant,
    so that all of them share the machine's load of that moment; a ratio is the median over the
    rounds of (CPURenderer's frame / the variant's median frame) of the same round."""
    p = _py3d()
    variants = [(f"bridge {b}", dict(prefer_backend=b)) for b in BACKENDS]
    variants.append(("fast_materials (moderngl)", dict(prefer_backend="moderngl", fast_materials=True)))
    columns = ["scene (triangles)", "size", "CPURenderer"] + [v for v, _ in variants]
    columns.append("fidelity, bridge moderngl (MAE / within3)")
    table = report.table("py_3d bridge vs CPURenderer (ms per frame; x = speed-up over CPURenderer)", columns)
    shortfalls = []
    for name in SCENES:
        scene, camera, kw = fixtures.build(name)
        triangles = sum(len(p.render._triangles_for(o, fixtures.settings(kw, 8, 8))) for o in scene.objects)
        for width, height in sizes:
            settings = fixtures.settings(kw, width, height)
            cpu = p.CPURenderer()
            ref = _pixels(cpu.render(scene, camera, settings))  # warms its static-geometry cache
            renderers = [Py3DRasterRenderer(reference_compatible=False, **kw_) for _, kw_ in variants]
            frames_of = [_pixels(r.render(scene, camera, settings)) for r in renderers]  # warm: converted once
            cpu_ms, times, ratios = [], [[] for _ in variants], [[] for _ in variants]
            for _ in range(rounds):
                c = _frame_ms(lambda: cpu.render(scene, camera, settings), 1)
                cpu_ms.append(c)
                for k, r in enumerate(renderers):
                    ms = _frame_ms(lambda: r.render(scene, camera, settings), frames)
                    times[k].append(ms)
                    ratios[k].append(c / ms)
            row = [f"{name} ({triangles:,})", f"{width}x{height}", fmt_ms(statistics.median(cpu_ms))]
            for k, (label, _) in enumerate(variants):
                ratio = statistics.median(ratios[k])
                row.append(f"{fmt_ms(statistics.median(times[k]))} x{ratio:.1f}")
                if label == "bridge moderngl" and ratio < TARGET:
                    shortfalls.append(f"{name} {width}x{height}: x{ratio:.1f}")
            row.append(_fidelity(ref, frames_of[0]))
            report.add_row(table, row)
    table.notes += [
        f"one process; {rounds} rounds, each one CPURenderer frame then {frames} frames of each bridge variant; "
        "medians; x = median over rounds of the same round's ratio; torch.set_num_threads(1)",
        "warm caches: unchanged scene, fixed camera (CPURenderer's static-geometry cache is on)",
        "bridge = Py3DRasterRenderer(reference_compatible=False, prefer_backend=...), fast_materials=False",
        "fast_materials=True: smooth surfaces lit at triangle corners, no fuzz noise (docs/py3d.md)",
        f"target: the default (moderngl) bridge >= {TARGET:.0f}x CPURenderer on both scenes at both sizes",
    ]
    return shortfalls


def picture(path: Path) -> None:
    """CPURenderer | bridge | difference x 20 of the fruit bowl at 320x180 (docs/py3d.md's picture)."""
    from PIL import Image

    p = _py3d()
    scene, camera, kw = fixtures.build("fruit_bowl")
    settings = fixtures.settings(kw, 320, 180)
    ref = _pixels(p.CPURenderer().render(scene, camera, settings))
    ours = _pixels(Py3DRasterRenderer(reference_compatible=False).render(scene, camera, settings))
    diff = np.clip(np.abs(ours.astype(np.int64) - ref.astype(np.int64)).max(-1, keepdims=True) * 20, 0, 255)
    gap = np.full((180, 4, 3), 255, dtype=np.uint8)
    strip = np.concatenate([ref, gap, ours, gap, np.repeat(diff, 3, -1).astype(np.uint8)], 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(strip).save(path)
    print(f"wrote {path} (fruit bowl fidelity: MAE / within3 = {_fidelity(ref, ours)})")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="320x180 only, fewer repeats")
    parser.add_argument("--no-write", action="store_true", help="print only; leave the docs alone")
    parser.add_argument("--output", default=str(ROOT / "docs" / "benchmarks-py3d.md"))
    args = parser.parse_args(argv)
    sizes = [(320, 180)] if args.quick else [(320, 180), (640, 360)]
    report = Report()
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    construct_ms, first_ms = construction_times()
    shortfalls = bench(report, sizes, rounds=3 if args.quick else 5, frames=5)
    t = report.table("Construction (fresh interpreter, median of 3)", ["step", "ms"])
    report.add_row(t, ["py_3d.GPURenderer() (imports py_gpu and its py_3d adapter, builds the bridge)",
                       fmt_ms(construct_ms)])
    report.add_row(t, ["its first frame, 320x180 (imports torch, creates the GL context, converts the scene)",
                       fmt_ms(first_ms)])
    t.notes.append("the py_3d import itself is not counted (it is the same for every renderer)")
    print()
    for table in report.tables:
        print(table.text() + "\n")
    load = f"load average {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    verdict = "every ratio meets the target" if not shortfalls else "below target: " + ", ".join(shortfalls)
    print(f"target {TARGET:.0f}x: {verdict}; {time.perf_counter() - started:.0f} s")
    if not args.no_write:
        picture(ROOT / "docs" / "img" / "py3d-fruit-bowl.png")
        body = [
            "# Benchmarks: the py_3d bridge",
            "",
            f"Written by `python benchmarks/py3d_bench.py` on {datetime.date.today().isoformat()}; "
            "docs/py3d.md describes the bridge.",
            "Everything runs in one process: CPURenderer and the bridge on each backend render the same scene "
            "objects side by side, and each ratio divides figures of that run.",
            "torch runs with one thread (`torch.set_num_threads(1)`, `OMP_NUM_THREADS=1`): CPURenderer is "
            "single-threaded Python.",
            "",
            f"Machine: {machine_line()}; {load} (the cores are shared with other work, which slows both "
            "renderers alike: each ratio divides frames timed in the same round).",
            "",
        ]
        body += [table.markdown() for table in report.tables]
        body += [f"Target ({TARGET:.0f}x for the default path on both scenes at both sizes): {verdict}.", ""]
        Path(args.output).write_text("\n".join(body))
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
