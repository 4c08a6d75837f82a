"""Soft mode speed on the scenes of the fitting tasks, forward and forward + backward, one thread.

Every case renders through ``py_gpu.render(..., mode="soft")`` with default settings (K = 8,
sigma = 1 px^2) unless the row says otherwise, float32 on the CPU, with one intra-op thread.
"silhouette" backpropagates a loss on ``alpha``; "rgb" one on ``image`` (vertex colors);
the "silhouette()" columns time ``py_gpu.silhouette``, which computes that alpha alone. The
"before" column is the same case measured at d05c010 (an earlier version, same machine class)
and the "target" column the figure the case should reach.

    python benchmarks/suite_soft_speed.py      # writes docs/benchmarks-soft-speed.md
    python benchmarks/run.py --only soft_speed  # prints the tables only
"""

from __future__ import annotations

import math

import torch

import py_gpu
from py_gpu import TriangleBatch, shapes
from py_gpu.fixtures import mesh_fixture

try:  # run as part of the package ``benchmarks`` or as a plain script directory
    from .common import Report, fmt_ms, fmt_ratio, time_call
except ImportError:  # pragma: no cover
    from common import Report, fmt_ms, fmt_ratio, time_call


def random_triangles(n: int, side: int, spread: float = 40.0, seed: int = 0) -> TriangleBatch:
    """``n`` triangles whose corners lie within +-``spread`` px of a random center, depth in [0, 1]."""
    g = torch.Generator().manual_seed(seed)
    center = torch.rand(n, 1, 2, generator=g) * side
    corners = center + (torch.rand(n, 3, 2, generator=g) * 2 - 1) * spread
    depth = torch.rand(n, 1, 1, generator=g).expand(n, 3, 1)
    v = torch.cat([corners, depth], -1).reshape(1, 3 * n, 3)
    colors = torch.rand(1, 3 * n, 3, generator=g)
    return TriangleBatch(v, torch.arange(3 * n).reshape(n, 3), vertex_colors=colors)


def cube_batch(side: int) -> TriangleBatch:
    """The 12-face cube, rotated, in perspective (clip space), filling about half a ``side`` frame."""
    c = shapes.cube()
    cam = py_gpu.fit.orbit_camera(3.0, 25.0, 35.0, fov_y=45.0, near=1.0, far=6.0)
    clip = cam.world_to_clip(c.positions.float()[None])
    colors = (c.positions.float()[None] + 1) / 2
    return TriangleBatch(clip, c.faces, vertex_colors=colors)


def sphere_batch(side: int, views: int = 1, faces: int = 1280) -> TriangleBatch:
    """The ``faces``-face icosphere at ``side`` px (screen space), ``views`` copies slightly shifted."""
    base = mesh_fixture("icosphere", faces, side, side, dtype=torch.float32)
    v = torch.cat([base.vertices + torch.tensor([0.37 * i, 0.21 * i, 0.0]) for i in range(views)])
    cols = base.vertex_colors.expand(views, -1, -1).contiguous()
    return TriangleBatch(v, base.faces, vertex_colors=cols)


def _steps(batch: TriangleBatch, size, **kw):
    verts = batch.vertices.detach().clone().requires_grad_(True)
    colors = batch.vertex_colors.detach().clone().requires_grad_(True)
    g = torch.Generator().manual_seed(1)
    up_rgb = torch.rand(batch.batch_size, *size, 3, generator=g)
    up_alpha = torch.rand(batch.batch_size, *size, 1, generator=g)

    def frame():
        return py_gpu.render(TriangleBatch(verts, batch.faces, vertex_colors=colors), size, mode="soft", **kw)

    def forward():
        with torch.no_grad():
            frame()

    def silhouette():
        verts.grad = None
        (frame().alpha * up_alpha).sum().backward()

    def rgb():
        verts.grad = colors.grad = None
        (frame().image * up_rgb).sum().backward()

    return forward, silhouette, rgb


def _silhouette_steps(batch: TriangleBatch, size):
    """Forward, and forward + backward of a loss on ``py_gpu.silhouette`` (the same alpha)."""
    verts = batch.vertices.detach().clone().requires_grad_(True)
    up = torch.rand(batch.batch_size, *size, 1, generator=torch.Generator().manual_seed(1))

    def forward():
        with torch.no_grad():
            py_gpu.silhouette(TriangleBatch(verts, batch.faces), size)

    def step():
        verts.grad = None
        (py_gpu.silhouette(TriangleBatch(verts, batch.faces), size) * up).sum().backward()

    return forward, step


def run(report: Report, quick: bool = False) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _run(report, quick)
    finally:
        torch.set_num_threads(threads)


def _machine(report: Report, table, repeat: int, when: str) -> None:
    """How fast the machine is while the suite runs (it is shared, and its speed moves by tens of
    percent within minutes): a streaming float32 multiply, one small torch operation and a pure
    Python loop, timed before and after the scenes into ``table``. Records of different days
    compare only where these agree."""
    big, small = torch.rand(1 << 20), torch.rand(16)

    def ops():
        for _ in range(1000):
            small.mul(2.0)

    report.add_row(table, [when, fmt_ms(time_call(lambda: big.mul(2.0), repeat=5 * repeat)),
                           f"{time_call(ops, repeat=repeat):.2f}",
                           fmt_ms(time_call(lambda: sum(range(10 ** 6)), repeat=repeat))])


def _run(report: Report, quick: bool) -> None:
    repeat = 3 if quick else 7
    machine = report.table("Machine speed during the soft-speed run (1 thread)",
                           ["when", "1M float32 multiply, ms", "small torch op, us", "Python sum(range(1e6)), ms"])
    _machine(report, machine, repeat, "before the scenes")
    try:
        _scenes(report, quick, repeat)
    finally:
        _machine(report, machine, repeat, "after the scenes")


def _scenes(report: Report, quick: bool, repeat: int) -> None:
    t = report.table("Soft mode, fitting-task scenes (CPU, 1 thread, float32, ms per call)",
                     ["scene", "size", "forward", "fwd+bwd silhouette", "fwd+bwd rgb", "silhouette() fwd",
                      "silhouette() fwd+bwd", "before (d05c010)", "target"])
    cases = [
        ("icosphere 1,280 faces", sphere_batch(64), 64, "482 fwd+bwd at K=50", "fwd+bwd <= 50"),
        ("cube 12 faces (perspective)", cube_batch(96), 96, "~210 fwd+bwd", "fwd+bwd <= 20"),
    ]
    if not quick:
        torus = mesh_fixture("torus", 1000, 256, 256, dtype=torch.float32)
        cases += [
            ("torus 1k faces", torus, 256, "196 sil / 229 rgb", "fwd <= 60, fwd+bwd <= 150"),
            ("1k random triangles (+-40 px)", random_triangles(1000, 256), 256, "408 sil / 436 rgb",
             "fwd <= 60, fwd+bwd <= 150"),
            ("10k random triangles (+-40 px)", random_triangles(10_000, 256), 256, "1,701 sil / 1,742 rgb",
             "fwd <= 150, fwd+bwd <= 400"),
        ]
    for name, batch, side, before, target in cases:
        fwd, sil, rgb = _steps(batch, (side, side))
        sil_fwd, sil_step = _silhouette_steps(batch, (side, side))
        steps = (fwd, sil, rgb, sil_fwd, sil_step)
        row = [name, f"{side}x{side}"] + [fmt_ms(time_call(f, repeat=repeat)) for f in steps]
        report.add_row(t, row + [before, target])
    t.notes.append("silhouette(): py_gpu.silhouette, the same alpha as render's (bit for bit) without the K nearest "
                   "faces, colors or blend; its fwd+bwd backpropagates the same loss as 'fwd+bwd silhouette'")
    t.notes.append("before: the same scene at d05c010, 256x256 rows with 2 threads on a quiet box (the issue's "
                   "side-by-side run against PyTorch3D's CPU rasterizer, which took 7,395-20,890 ms)")

    b = report.table("Soft mode, batched views (CPU, 1 thread, float32): B = 8 in one call against 8 calls of B = 1",
                     ["scene", "B=8 one call fwd+bwd", "8 x (B=1) fwd+bwd", "ratio", "target"])
    views = 8
    batch = sphere_batch(64, views)
    _, _, rgb8 = _steps(batch, (64, 64))
    singles = [_steps(TriangleBatch(batch.vertices[i:i + 1], batch.faces, vertex_colors=batch.vertex_colors[i:i + 1]),
                      (64, 64))[2] for i in range(views)]

    def eight():
        for f in singles:
            f()

    one_call = time_call(rgb8, repeat=repeat)
    separate = time_call(eight, repeat=repeat)
    report.add_row(b, ["icosphere 1,280 faces, 64x64, rgb", fmt_ms(one_call), fmt_ms(separate),
                       f"{one_call / separate:.2f}x" if separate else "n/a", "<= 0.5x"])
    _batch_costs(report, repeat, separate / views)


def _batch_costs(report: Report, repeat: int, view_ms: float) -> None:
    """Where the time of a batched call goes: a 20-face icosphere at 8x8 (almost no work per view)
    in one call of B = 1 and of B = 8 gives the fixed cost of a call and of each view in it; the
    icosphere view's own work is what its single call (``view_ms``) spends beyond both."""
    t = report.table("Soft mode, batched views: fixed and per-view costs (CPU, 1 thread, float32, rgb fwd+bwd, ms)",
                     ["scene", "B=1 one call", "B=8 one call", "each view beyond the first"])
    tiny = {}
    for views in (1, 8):
        _, _, rgb = _steps(sphere_batch(8, views, faces=20), (8, 8))
        tiny[views] = time_call(rgb, repeat=repeat)
    per_view = (tiny[8] - tiny[1]) / 7
    report.add_row(t, ["icosphere 20 faces, 8x8", fmt_ms(tiny[1]), fmt_ms(tiny[8]), fmt_ms(per_view)])
    call = max(0.0, tiny[1] - per_view)
    work = max(0.0, view_ms - call - per_view)
    shared = (call + per_view + 8 * work) / (8 * view_ms) if view_ms else float("nan")
    t.notes.append(f"a call costs {call:.1f} ms and each view in it {per_view:.1f} ms before any work; a 1,280-face "
                   f"64x64 view's own work is the rest of its single call ({view_ms:.1f} ms): {work:.1f} ms")
    t.notes.append(f"a batched call that paid the per-view cost once would take {shared:.2f}x the time of 8 single "
                   "calls; (F + 8 w) / (8 F + 8 w) is at most 0.5x only when a view's own work w is at most 3/4 of "
                   f"the fixed costs F of a single call (here {0.75 * (call + per_view):.1f} ms)")


if __name__ == "__main__":  # pragma: no cover
    import datetime
    import pathlib
    import platform

    r = Report()
    run(r, quick=False)
    for table in r.tables:
        print(table.text())
    out = pathlib.Path(__file__).resolve().parent.parent / "docs" / "benchmarks-soft-speed.md"
    head = (f"# Soft mode speed\n\nWritten by `python benchmarks/suite_soft_speed.py` on {datetime.date.today()} "
            f"({platform.processor() or platform.machine()}, torch {torch.__version__}). Medians in ms; the "
            "machine is shared, so figures move by tens of percent between runs. The first table times the "
            "machine itself before and after the scenes: compare records of different days only where it "
            "agrees.\n\n")
    out.write_text(head + "\n".join(t.markdown() for t in r.tables))
    print(f"wrote {out}")
