"""Busy cores: py_gpu's frame times with 1 intra-op thread and with torch's default, on a quiet
machine and with one competing busy process (started and stopped by this script).

    python benchmarks/busy_cores.py [--frames 8] [--output docs/benchmarks-threads.md]

Scenes: the ``py-gpu demo`` frame (360x240, lit, trilinear textures, torch backend) and the seed
fixture (1,000 triangles at 640x360, torch hard mode). Each configuration runs in a fresh process.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, math, sys, time, torch
threads, frames = int(sys.argv[1]), int(sys.argv[2])
if threads > 0:
    torch.set_num_threads(threads)
import py_gpu
from py_gpu.demo import demo_scene, rotation_y
from py_gpu.fixtures import seed_fixture
from py_gpu.shading.lights import Material
H, W = 240, 360
r = py_gpu.Renderer((H, W), backend="torch", background=(0.06, 0.07, 0.1))
scene, textures, lights, camera = demo_scene(r)
seed = seed_fixture(1000).to_triangle_batch(dtype=torch.float32)

def demo(k):
    r.render(scene, camera, lights=lights, textures=textures, material=Material(0.35, 48.0),
             transforms=rotation_y(2 * math.pi * k / 24), texture_filter="trilinear", gamma=2.2)

def seed_render(k):
    py_gpu.render(seed, (360, 640), backend="torch")

out = {"threads": torch.get_num_threads()}
with torch.no_grad():
    for name, fn in (("demo", demo), ("seed", seed_render)):
        fn(0)
        ts = []
        for k in range(frames):
            t0 = time.perf_counter(); fn(k); ts.append((time.perf_counter() - t0) * 1000)
        out[name] = sorted(ts)[len(ts) // 2]
out["threads_after"] = torch.get_num_threads()
print(json.dumps(out))
"""


def _busy(stop_after: float) -> None:
    end = time.monotonic() + stop_after
    while time.monotonic() < end:
        pass


def run(threads: int, frames: int, busy: bool) -> dict:
    hog = None
    if busy:
        hog = multiprocessing.get_context("spawn").Process(target=_busy, args=(600.0,), daemon=True)
        hog.start()
        time.sleep(0.5)
    try:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        res = subprocess.run([sys.executable, "-c", CHILD, str(threads), str(frames)], capture_output=True, text=True,
                             env=env, timeout=900, check=True)
        return json.loads(res.stdout.strip().splitlines()[-1])
    finally:
        if hog is not None:
            hog.terminate()
            hog.join(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--output", default=str(ROOT / "docs" / "benchmarks-threads.md"))
    args = parser.parse_args()
    rows = []
    for busy in (False, True):
        for threads in (1, 0):
            got = run(threads, args.frames, busy)
            rows.append((busy, threads, got))
            label = "1" if threads == 1 else f"default ({got['threads']})"
            print(f"busy={busy!s:5} threads={label:12} demo {got['demo']:7.1f} ms  seed {got['seed']:7.1f} ms", flush=True)
    lines = ["# Busy cores", "",
             f"Written by `python benchmarks/busy_cores.py` on {datetime.date.today()}; {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} cores, load average before the run {os.getloadavg()[0]:.1f}. Median ms per frame over "
             f"{args.frames} frames, each configuration in a fresh process; the busy process is one spinning Python "
             "process started and stopped by the script. py_gpu runs its own calls of up to 2^21 pixels on one "
             "intra-op thread whatever torch's setting (`py_gpu.set_threads`, docs/reliability.md).", "",
             "| competing busy process | torch threads | demo frame (360x240, torch) ms | seed fixture (1,000 tris, 640x360) ms |",
             "|---|---|---|---|"]
    for busy, threads, got in rows:
        label = "1" if threads == 1 else f"default ({got['threads']})"
        lines.append(f"| {'yes' if busy else 'no'} | {label} | {got['demo']:.1f} | {got['seed']:.1f} |")
    for busy in (False, True):
        one = next(g for b, t, g in rows if b == busy and t == 1)
        dflt = next(g for b, t, g in rows if b == busy and t == 0)
        lines.append("")
        lines.append(f"{'With' if busy else 'Without'} the busy process, default threads / 1 thread: demo "
                     f"{dflt['demo'] / one['demo']:.2f}x, seed {dflt['seed'] / one['seed']:.2f}x.")
    quiet = next(g for b, t, g in rows if not b and t == 1)
    loaded = next(g for b, t, g in rows if b and t == 0)
    ratio = {name: loaded[name] / quiet[name] for name in ("demo", "seed")}
    verdict = "within" if max(ratio.values()) <= 1.5 else "NOT within"
    summary = (f"Default threads with the busy process against 1 thread on quiet cores (target <= 1.5x): demo "
               f"{ratio['demo']:.2f}x, seed {ratio['seed']:.2f}x, {verdict} the target. torch's own setting after "
               f"each py_gpu call: {'unchanged' if all(g['threads_after'] == g['threads'] for _, _, g in rows) else 'CHANGED'}.")
    print(summary)
    lines += ["", summary, "",
              "On a shared machine: leave `py_gpu.set_threads` at its default (\"auto\": py_gpu's own calls of up "
              "to 2^21 pixels run on one thread, larger ones with torch's setting), or set `PY_GPU_THREADS=1` to "
              "keep every py_gpu call on one thread; `torch.set_num_threads` then only affects your own torch work."]
    Path(args.output).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
