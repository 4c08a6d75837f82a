"""Soft mode: forward + backward of a soft silhouette and a soft RGB image, float32, K = 8.

Cases: icosphere 20,480 faces at 256x256; torus 99,264 faces at 512x512 (``quick`` runs only
the first). Peak RSS is the process's high-water mark after the case, so the cases run smallest
first. Targets on a laptop-class CPU: 20k/256^2 under 1.5 s/iter and 2 GiB; 100k/512^2 under 8 GiB.

    python -c "from benchmarks import suite_soft, common; r = common.Report(); suite_soft.run(r, quick=True)"
"""

from __future__ import annotations

import torch

from py_gpu import RasterSettings, TriangleBatch
from py_gpu.fixtures import mesh_fixture
from py_gpu.raster.torch_soft import rasterize_soft
from py_gpu.shading import render_soft, silhouette

try:  # run as part of the package ``benchmarks`` or as a plain script directory
    from .common import Report, fmt_ms, peak_rss_mib, time_call
except ImportError:  # pragma: no cover
    from common import Report, fmt_ms, peak_rss_mib, time_call

CASES = [("icosphere", 20_000, 256, 3), ("torus", 100_000, 512, 1)]


def _case(report: Report, table, kind: str, faces: int, side: int, repeat: int, device=None) -> None:
    device = torch.device(device or "cpu")
    base = mesh_fixture(kind, faces, side, side, dtype=torch.float32).to(device)
    verts = base.vertices.detach().clone().requires_grad_(True)
    colors = base.vertex_colors.detach().clone().requires_grad_(True)
    s = RasterSettings(mode="soft", faces_per_pixel=8)
    size = (side, side)
    g = torch.Generator().manual_seed(0)
    up_alpha = torch.rand(1, side, side, 1, generator=g).to(device)
    up_rgb = torch.rand(1, side, side, 3, generator=g).to(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    kept = {}

    def sil_forward():
        frags = rasterize_soft(TriangleBatch(verts, base.faces), size, s)
        kept["n"] = int(frags.mask.sum())
        return silhouette(frags, s)

    def sil_step():
        verts.grad = None
        (sil_forward() * up_alpha).sum().backward()

    def rgb_forward():
        return render_soft(TriangleBatch(verts, base.faces, vertex_colors=colors), size, settings=s)

    def rgb_step():
        verts.grad = colors.grad = None
        (rgb_forward().image * up_rgb).sum().backward()

    def no_grad(fn):
        def run():
            with torch.no_grad():
                fn()
        return run

    rows = [("silhouette", sil_forward, sil_step), ("rgb", rgb_forward, rgb_step)]
    for label, fwd, step in rows:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        fwd_ms = time_call(no_grad(fwd), repeat=repeat, warmup=1, sync=sync)
        step_ms = time_call(step, repeat=repeat, warmup=1 if device.type == "cuda" else 0, sync=sync)
        memory = (f"{torch.cuda.max_memory_allocated() / 2**20:,.0f}" if device.type == "cuda"
                  else f"{peak_rss_mib():,.0f}")
        report.add_row(table, [f"{kind} {base.num_faces:,}", f"{side}x{side}", label, fmt_ms(fwd_ms), fmt_ms(step_ms),
                               f"{kept['n'] / (side * side):.2f}" if "n" in kept else "-", memory])


def run(report: Report, quick: bool) -> None:
    table = report.table(
        "Soft mode (torch CPU, float32, K=8, sigma=1 px^2): forward and forward+backward per iteration",
        ["mesh", "size", "output", "forward ms", "fwd+bwd ms", "faces kept / px", "peak RSS MiB"],
    )
    table.notes.append("peak RSS is the process high-water mark after the row (cases run smallest first)")
    table.notes.append(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for kind, faces, side, repeat in CASES[:1] if quick else CASES:
        _case(report, table, kind, faces, side, repeat)
    if torch.cuda.is_available():
        cuda = report.table(
            f"Soft mode on CUDA ({torch.cuda.get_device_name(0)}, float32, K=8, sigma=1 px^2): forward and "
            "forward+backward per iteration",
            ["mesh", "size", "output", "forward ms", "fwd+bwd ms", "faces kept / px", "peak CUDA memory MiB"],
        )
        cuda.notes.append("peak CUDA memory is torch.cuda.max_memory_allocated() during the row")
        for kind, faces, side, repeat in CASES[:1] if quick else CASES:
            _case(report, cuda, kind, faces, side, max(repeat, 5), device="cuda")


if __name__ == "__main__":  # pragma: no cover
    import sys

    r = Report()
    run(r, quick="--quick" in sys.argv)
    for t in r.tables:
        print(t.text())
