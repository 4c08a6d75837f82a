"""Torch backend (exact hard mode) against py_gpu 0.0.1's NumPy backend, the exact NumPy backend and
ModernGL, side by side in one process.

- Seed fixture (1k and 10k triangles) at 640x360 through the seed protocol
  (``render(batch, width, height, background=...)`` -> ``FrameBuffer``), plus the torch
  ``rasterize`` alone on a prepared ``TriangleBatch``.
- Mesh fixtures (icosphere 10k, 100k, 1M faces, per-vertex colors) at 512x512 through
  ``render_frame``.
- The 1M-face icosphere at 1920x1080 in a fresh process, for its peak RSS.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import torch

import py_gpu
from py_gpu.fixtures import SEED_BACKGROUND, mesh_fixture, seed_fixture

try:  # run through benchmarks/run.py (its folder on sys.path) or as the package
    from baseline_v001 import render_v001_numpy
    from common import Report, fmt_ms, fmt_ratio, time_call
except ImportError:  # pragma: no cover
    from benchmarks.baseline_v001 import render_v001_numpy
    from benchmarks.common import Report, fmt_ms, fmt_ratio, time_call


def _moderngl():
    """The ModernGL backend, or None and the reason it cannot run here."""
    try:
        return py_gpu.select_backend("moderngl"), ""
    except Exception as exc:  # unavailable here: record why
        return None, str(exc).splitlines()[0]


def _sync(device: torch.device):
    if device.type == "cuda":
        return torch.cuda.synchronize
    return None


def run(report: Report, quick: bool) -> None:
    threads = torch.get_num_threads()
    try:
        _run(report, quick, threads)
    finally:
        torch.set_num_threads(threads)


def _run(report: Report, quick: bool, threads: int) -> None:
    dev = torch.device("cpu")
    torch_backend = py_gpu.select_backend("torch", device=dev)
    numpy_backend = py_gpu.select_backend("numpy")
    gl, gl_reason = _moderngl()

    t = report.table(
        "Torch backend, exact hard mode: seed fixture at 640x360, full seed-protocol render (ms/frame)",
        ["scene", "0.0.1 numpy", "numpy", "moderngl", "torch render", "torch rasterize",
         f"torch render, {threads} threads", "torch vs 0.0.1", "torch vs numpy", "torch vs moderngl"],
    )
    for n in (1000,) if quick else (1000, 10000):
        rb = seed_fixture(n)
        tb = rb.to_triangle_batch()
        ms_old = time_call(lambda: render_v001_numpy(rb, 640, 360, SEED_BACKGROUND), repeat=5 if n <= 1000 else 3)
        ms_np = time_call(lambda: numpy_backend.render(rb, 640, 360, background=SEED_BACKGROUND), repeat=5)
        ms_gl = time_call(lambda: gl.render(rb, 640, 360, background=SEED_BACKGROUND), repeat=5) if gl else None
        ms_many = None
        if threads > 1:
            torch.set_num_threads(threads)
            ms_many = time_call(lambda: torch_backend.render(rb, 640, 360, background=SEED_BACKGROUND), repeat=3)
        torch.set_num_threads(1)
        ms_t = time_call(lambda: torch_backend.render(rb, 640, 360, background=SEED_BACKGROUND), repeat=7)
        ms_r = time_call(lambda: py_gpu.rasterize(tb, (360, 640), backend=torch_backend), repeat=7)
        report.add_row(t, [f"seed {n // 1000}k tris", fmt_ms(ms_old), fmt_ms(ms_np), fmt_ms(ms_gl), fmt_ms(ms_t),
                           fmt_ms(ms_r), fmt_ms(ms_many), fmt_ratio(ms_old, ms_t), fmt_ratio(ms_np, ms_t),
                           fmt_ratio(ms_gl, ms_t)])
    t.notes.append("CPU. torch columns run with torch.set_num_threads(1), like numpy's single-threaded loops, "
                   f"except 'torch render, {threads} threads' (torch's default here). On a machine whose cores are "
                   "busy with other work, torch's multi-threaded ops stall waiting for descheduled threads.")
    t.notes.append("'torch vs X' is X's time / torch's (> 1: torch is faster).")
    t.notes.append("0.0.1 numpy is py_gpu 0.0.1's per-triangle bounding-box loop, re-created in "
                   "benchmarks/baseline_v001.py; torch and numpy frames are bit-identical to the reference.")
    if not gl:
        t.notes.append(f"moderngl: n/a ({gl_reason})")

    _demo_table(report, quick)

    m = report.table(
        "Torch backend (1 thread), exact hard mode: icosphere mesh fixtures at 512x512, vertex colors, "
        "render_frame (ms/frame)",
        ["faces", "numpy", "moderngl", "torch", "torch vs numpy", "torch vs moderngl"],
    )
    for faces in (10_000,) if quick else (10_000, 100_000, 1_000_000):
        batch = mesh_fixture("icosphere", faces, 512, 512)
        big = faces >= 1_000_000
        ms_np = time_call(lambda: numpy_backend.render_frame(batch, (512, 512)), repeat=1 if big else 3)
        ms_gl = time_call(lambda: gl.render_frame(batch, (512, 512)), repeat=3) if gl else None
        ms_t = time_call(lambda: torch_backend.render_frame(batch, (512, 512)), repeat=3 if big else 5)
        report.add_row(m, [f"{batch.num_faces:,}", fmt_ms(ms_np), fmt_ms(ms_gl), fmt_ms(ms_t),
                           fmt_ratio(ms_np, ms_t), fmt_ratio(ms_gl, ms_t)])
    m.notes.append("mesh_fixture('icosphere', n) has 20 * 4**level faces, the level nearest to n.")

    if torch.cuda.is_available():
        _cuda_table(report, quick)

    if not quick:
        r = report.table("Torch backend (1 thread): 1M-face icosphere at 1920x1080 on CPU, fresh process",
                         ["faces", "ms/frame", "peak RSS (MiB)"])
        faces, ms, rss = _big_frame_in_subprocess()
        report.add_row(r, [faces, ms, rss])
        r.notes.append("peak RSS of a process that only builds the mesh (about 370 MiB) and renders it twice, "
                       "default memory_budget: /proc VmHWM; resource.getrusage in parentheses (on Linux it can "
                       "include the parent's peak, inherited across fork/exec)")


#: The demo frame's time at 1 thread before the Renderer shaded only covered fragments and
#: sampled only the mip levels each fragment blends (docs/benchmarks.md of that version).
DEMO_BEFORE_MS = "178-240"


def _demo_table(report: Report, quick: bool) -> None:
    """The ``py-gpu demo`` frame (360x240, lit, trilinear textures) on the torch Renderer, 1 thread."""
    import math

    from py_gpu.demo import demo_scene, rotation_y
    from py_gpu.shading.lights import Material

    H, W = 240, 360
    r = py_gpu.Renderer((H, W), backend="torch", background=(0.06, 0.07, 0.1))
    scene, textures, lights, camera = demo_scene(r)
    k = [0]

    def frame():
        k[0] += 1
        with torch.no_grad():
            r.render(scene, camera, lights=lights, textures=textures, material=Material(0.35, 48.0),
                     transforms=rotation_y(2 * math.pi * k[0] / 24), texture_filter="trilinear", gamma=2.2)

    torch.set_num_threads(1)
    ms = time_call(frame, repeat=5 if quick else 11)
    t = report.table("Torch Renderer (1 thread): the demo frame, 360x240, 3 lights, trilinear textures (ms/frame)",
                     ["scene", "faces", "before (ms)", "now (ms)", "target (ms)"])
    report.add_row(t, ["py-gpu demo", f"{scene.num_faces:,}",
                       DEMO_BEFORE_MS, fmt_ms(ms), "<= 50"])
    t.notes.append("median over rotating frames under torch.no_grad(); 'before' is the figure recorded before the "
                   "Renderer shaded only covered fragments and trilinear sampled only the two levels it blends")


def _cuda_table(report: Report, quick: bool) -> None:
    """Hard mode on CUDA: frame time, fragments-only time, peak memory, and face-index parity with CPU."""
    cuda = torch.device("cuda")
    backend = py_gpu.select_backend("torch", device=cuda)
    cpu_backend = py_gpu.select_backend("torch", device="cpu")
    t = report.table(
        f"Torch backend on CUDA ({torch.cuda.get_device_name(0)}), exact hard mode (ms/frame)",
        ["scene", "size", "render_frame", "rasterize", "peak CUDA memory MiB", "face index = CPU"],
    )
    cases = [("seed 1k tris", seed_fixture(1000).to_triangle_batch(), (360, 640))]
    if not quick:
        cases.append(("seed 10k tris", seed_fixture(10000).to_triangle_batch(), (360, 640)))
        for faces in (10_000, 100_000, 1_000_000):
            mesh = mesh_fixture("icosphere", faces, 512, 512)
            cases.append((f"icosphere {mesh.num_faces:,}", mesh, (512, 512)))
    for label, batch, size in cases:
        on_gpu = batch.to(cuda)
        torch.cuda.reset_peak_memory_stats()
        ms_frame = time_call(lambda: backend.render_frame(on_gpu, size), repeat=10, sync=torch.cuda.synchronize)
        ms_frags = time_call(lambda: backend.rasterize(on_gpu, size), repeat=10, sync=torch.cuda.synchronize)
        peak = torch.cuda.max_memory_allocated() / 2**20
        same = torch.equal(backend.rasterize(on_gpu, size).face_index.cpu(), cpu_backend.rasterize(batch, size).face_index)
        report.add_row(t, [label, f"{size[1]}x{size[0]}", fmt_ms(ms_frame), fmt_ms(ms_frags), f"{peak:,.0f}",
                           "yes" if same else "NO"])
    t.notes.append("target: 1M faces at 512x512 in under 10 ms; times include torch.cuda.synchronize()")


_BIG = textwrap.dedent(
    """
    import time, torch, py_gpu
    from py_gpu.fixtures import mesh_fixture
    from common import peak_rss_mib
    torch.set_num_threads(1)
    batch = mesh_fixture("icosphere", 1_000_000, 1920, 1080)
    backend = py_gpu.select_backend("torch", device="cpu")
    backend.render_frame(batch, (1080, 1920))
    t0 = time.perf_counter()
    frame = backend.render_frame(batch, (1080, 1920))
    ms = (time.perf_counter() - t0) * 1000
    try:  # this process's own high-water mark (getrusage can carry the parent's over fork/exec)
        hwm = float(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024
    except (OSError, IndexError, ValueError):
        hwm = peak_rss_mib()
    print(f"{batch.num_faces:,}|{ms:,.0f}|{hwm:,.0f} (getrusage {peak_rss_mib():,.0f})")
    """
)


def _big_frame_in_subprocess() -> tuple[str, str, str]:
    from pathlib import Path

    here = Path(__file__).resolve().parent
    out = subprocess.run([sys.executable, "-c", _BIG], cwd=here, capture_output=True, text=True, timeout=900,
                         env={**__import__("os").environ, "PYTHONPATH": f"{here}:{here.parent}"})
    if out.returncode != 0:
        return "n/a", "failed", out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "?"
    faces, ms, rss = out.stdout.strip().splitlines()[-1].split("|")
    return faces, ms, rss
