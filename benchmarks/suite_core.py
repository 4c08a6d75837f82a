"""Exact CPU backends on the seed and mesh fixtures, against py_gpu 0.0.1's NumPy backend."""

from __future__ import annotations

import py_gpu
from py_gpu.fixtures import SEED_BACKGROUND, mesh_fixture, seed_fixture

from baseline_v001 import render_v001_numpy
from common import Report, fmt_ms, fmt_ratio, time_call


def run(report: Report, quick: bool) -> None:
    ref = py_gpu.select_backend("reference")
    fast = py_gpu.select_backend("numpy")
    t = report.table(
        "Exact CPU backends: seed fixture (640x360) and mesh fixture, full render (ms/frame)",
        ["scene", "reference", "0.0.1 numpy", "numpy", "numpy vs reference", "numpy vs 0.0.1 numpy"],
    )
    cases = [(1000, "seed 1k tris")] if quick else [(1000, "seed 1k tris"), (10000, "seed 10k tris")]
    for n, label in cases:
        batch = seed_fixture(n)
        ms_ref = time_call(lambda: ref.render(batch, 640, 360, background=SEED_BACKGROUND), repeat=1, warmup=0)
        ms_old = time_call(lambda: render_v001_numpy(batch, 640, 360, SEED_BACKGROUND), repeat=3 if n <= 1000 else 1)
        ms_np = time_call(lambda: fast.render(batch, 640, 360, background=SEED_BACKGROUND), repeat=7 if n <= 1000 else 3)
        report.add_row(t, [label, fmt_ms(ms_ref), fmt_ms(ms_old), fmt_ms(ms_np), fmt_ratio(ms_ref, ms_np), fmt_ratio(ms_old, ms_np)])
    if not quick:
        mesh = mesh_fixture("icosphere", 20480, 512, 512)
        ms_ref = time_call(lambda: ref.render_frame(mesh, (512, 512)), repeat=1, warmup=0)
        ms_np = time_call(lambda: fast.render_frame(mesh, (512, 512)), repeat=3)
        report.add_row(t, ["icosphere 20k faces 512x512 (vertex colors)", fmt_ms(ms_ref), "n/a", fmt_ms(ms_np), fmt_ratio(ms_ref, ms_np), "n/a"])
    t.notes.append("reference and numpy are bit-identical; 0.0.1 numpy is re-created in benchmarks/baseline_v001.py")
