"""``py-gpu demo``: what py_gpu is for, in about half a minute on a laptop CPU.

1. **Backends.** The demo scene's geometry (lit, textured shapes) rendered by every exact backend
   available here, timed, and compared pixel for pixel with the reference rasterizer.
2. **Turntable.** The lit, textured scene rotating (``py_gpu.demo.render_demo``): PNG and GIF.
3. **Gradient fits.** A cube's pose recovered from one image, starting 40 degrees off (soft
   mode, coarse to fine), and a few steps of mesh deformation from soft silhouettes with
   ``py_gpu.fit``'s regularizers. Each writes a before/after PNG and an animated GIF.
4. **Loss curves** as a PNG plot when matplotlib is installed (``pip install "py_gpu[plot]"``).

Everything goes into one folder (``./py_gpu-demo`` by default). A progress bar (tqdm) shows on
stderr. No network is needed.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from PIL import Image

from ._runtime import get_threads, set_threads
from .backends import available_backends, torch_devices
from .camera import axis_angle_to_matrix, look_at, perspective, rotation_angle, transform_points
from .contracts import TriangleBatch
from .demo import render_demo
from .fit import edge_loss, laplacian_loss, normal_consistency_loss, orbit_camera
from .frontend import render, resolve_backend
from .shapes import cube, icosphere, torus, uv_sphere

__all__ = ["DemoResult", "run_demo", "backend_table", "fit_pose", "fit_deform"]


@dataclass
class DemoResult:
    """What ``run_demo`` measured and wrote."""

    table: list[tuple[str, float, float]] = field(default_factory=list)  # (backend, ms/frame, match %)
    pose_error_deg: tuple[float, float] = (math.nan, math.nan)  # start, end
    deform_iou: tuple[float, float] = (math.nan, math.nan)  # start, end
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class _Progress:
    """A tqdm bar when tqdm is installed, else a no-op."""

    def __init__(self, total: int, enabled: bool):
        self.bar = None
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                pass
            else:
                self.bar = tqdm(total=total, unit="step", leave=False, dynamic_ncols=True)

    def step(self, what: str, n: int = 1) -> None:
        if self.bar is not None:
            self.bar.set_description(what)
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# ---- 1. backends -------------------------------------------------------------------------------
def _scene_batch(size: tuple[int, int]) -> TriangleBatch:
    """The demo's shapes as one clip-space batch with per-vertex colors (no lights): the geometry
    every exact backend renders."""

    H, W = size
    parts = [(cube(1.1), (-1.7, -0.25, 0.0)), (uv_sphere(16, 32, 0.7), (0.0, -0.1, -0.6)),
             (torus(0.55, 0.2, 32, 16), (1.7, -0.1, 0.2))]
    pos, faces, cols, base = [], [], [], 0
    for mesh, (x, y, z) in parts:
        p = mesh.positions.float() + torch.tensor([x, y, z])
        pos.append(p)
        faces.append(mesh.faces + base)
        cols.append(0.25 + 0.75 * (p - p.min(0).values) / (p.max(0).values - p.min(0).values + 1e-6))
        base += p.shape[0]
    view = look_at((0.0, 1.6, 5.6), (0.0, -0.2, 0.0))
    clip = transform_points(perspective(50.0, W / H, 0.1, 50.0) @ view, torch.cat(pos)).reshape(1, -1, 4)
    return TriangleBatch(clip, torch.cat(faces), vertex_colors=torch.cat(cols)[None])


def backend_table(size: tuple[int, int] = (120, 180), repeat: int = 3) -> list[tuple[str, float, float]]:
    """``(backend, ms per frame, % of pixels equal to the reference)`` for every exact backend
    that runs here, and the torch backend on every other torch device present (CUDA, MPS). The
    reference is the pure-Python oracle (slow: hence the small frame)."""

    batch = _scene_batch(size)
    names = [s.name for s in available_backends() if s.available and not s.name.endswith("-test")]
    order = [n for n in ("reference", "numpy", "torch", "moderngl") if n in names]
    ref = render(batch, size, backend="reference").to_uint8()
    rows = []
    runs = [(name, name, batch) for name in order]
    runs += [(f"torch ({d})", "torch", batch.to(d)) for d in torch_devices() if d != "cpu"]  # cuda, mps
    for label, name, b in runs:
        render(b, size, backend=name)  # warm up (GL context, caches, device kernels)
        t0 = time.perf_counter()
        for _ in range(1 if name == "reference" else repeat):
            img = render(b, size, backend=name).to_uint8().cpu()
        ms = (time.perf_counter() - t0) * 1000 / (1 if name == "reference" else repeat)
        same = (img == ref).all(-1).float().mean().item() * 100
        rows.append((label, ms, same))
    return rows


# ---- 3. fits -------------------------------------------------------------------------------------
def _cube_mesh():

    c = cube(1.0)
    p = c.positions.float()
    return p, c.faces, (p - p.min(0).values) / (p.max(0).values - p.min(0).values)


def _pose_frame(rot: torch.Tensor, size: int, sigma: float) -> torch.Tensor:

    p, faces, colors = _cube_mesh()
    model = torch.eye(4).repeat(rot.shape[0], 1, 1)
    model[:, :3, :3] = rot
    model[:, 2, 3] = -5.0
    clip = transform_points(perspective(45.0, 1.0, 1.0, 20.0) @ model, p)
    frame = render(TriangleBatch(clip, faces, vertex_colors=colors.expand(rot.shape[0], -1, -1)), (size, size),
                   mode="soft", sigma=sigma)
    return torch.cat([frame.image, frame.alpha], -1)  # [B, H, W, 4]


def fit_pose(steps: int = 120, size: int = 48, start_deg: float = 40.0, tick: Callable[[], None] | None = None):
    """Recover a cube's rotation from one soft image, starting ``start_deg`` off. Returns
    ``(start error, end error, losses, frames)``; frames are uint8 ``[H, 2W, 3]`` (estimate | target)."""
    g = torch.Generator().manual_seed(4)
    axis = torch.nn.functional.normalize(torch.randn(3, generator=g), dim=0)
    target = axis_angle_to_matrix((torch.randn(3, generator=g) * 1.2)[None])
    start = axis_angle_to_matrix(axis[None] * math.radians(start_deg)) @ target
    omega = torch.zeros(1, 3, requires_grad=True)
    opt = torch.optim.Adam([omega], lr=0.05)
    losses, frames = [], []
    scale = (size / 64.0) ** 2
    for step in range(steps):
        level = max(0.0, 1.0 - step / (0.7 * steps))
        sigma = 0.5 * 32.0 ** level * scale
        rot = axis_angle_to_matrix(omega) @ start
        with torch.no_grad():
            want = _pose_frame(target, size, sigma)
        got = _pose_frame(rot, size, sigma)
        loss = ((got - want) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step % max(1, steps // 24) == 0 or step == steps - 1:
            frames.append(_side_by_side(got.detach()[0, ..., :3], want[0, ..., :3]))
        if tick:
            tick()
    end = axis_angle_to_matrix(omega.detach()) @ start
    err = lambda r: math.degrees(float(rotation_angle(r, target)[0]))  # noqa: E731
    return err(start), err(end), losses, frames


def _side_by_side(a: torch.Tensor, b: torch.Tensor) -> "torch.Tensor":
    both = torch.cat([a, b], 1).clamp(0, 1)
    return (both * 255 + 0.5).to(torch.uint8).numpy()


def _bumpy(level: int):

    s = icosphere(level)
    p = s.positions.float()
    g = torch.Generator().manual_seed(2)
    dirs = torch.nn.functional.normalize(torch.randn(6, 3, generator=g), dim=1)
    bump = torch.exp(-((1 - p @ dirs.T) / 0.08)).sum(1, keepdim=True)
    return p * (1 + 0.35 * bump), s.faces


def fit_deform(steps: int = 40, size: int = 48, tick: Callable[[], None] | None = None):
    """A few steps of PyTorch3D's mesh deformation: an icosphere pulled toward a bumpy shape by
    soft silhouettes from 8 views, with edge, Laplacian and normal-consistency regularizers.
    Returns ``(start IoU, end IoU, losses, frames)`` on the views."""

    target_p, target_f = _bumpy(3)
    src = icosphere(2)
    base, faces = src.positions.float(), src.faces
    el = torch.tensor([20.0, -20.0] * 4)
    az = torch.arange(8) * 45.0
    cams = orbit_camera(3.2, el, az, fov_y=50.0)

    def sil(p, f, sigma=1.0):
        clip = cams.world_to_clip(p[None].expand(8, -1, -1))
        return render(TriangleBatch(clip, f), (size, size), mode="soft", sigma=sigma).alpha[..., 0]

    with torch.no_grad():
        want = sil(target_p, target_f)
    offset = torch.zeros_like(base, requires_grad=True)
    opt = torch.optim.Adam([offset], lr=0.02)
    losses, frames = [], []

    def iou(p):
        with torch.no_grad():
            a, b = sil(p, faces, 1e-4) > 0.5, want > 0.5
            return float((a & b).sum() / (a | b).sum())

    start_iou = iou(base)
    for step in range(steps):
        p = base + offset
        got = sil(p, faces)
        loss = ((got - want) ** 2).mean() + 0.5 * edge_loss(p, faces) + 0.5 * laplacian_loss(p, faces) \
            + 0.01 * normal_consistency_loss(p, faces)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step % max(1, steps // 20) == 0 or step == steps - 1:
            frames.append(_side_by_side(got.detach()[0, ..., None].expand(-1, -1, 3), want[0, ..., None].expand(-1, -1, 3)))
        if tick:
            tick()
    return start_iou, iou(base + offset.detach()), losses, frames


# ---- outputs ----------------------------------------------------------------------------------------
def _save_gif(path: Path, frames) -> None:
    images = [Image.fromarray(f) for f in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=80, loop=0)


def _plot(path: Path, curves: dict) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, len(curves), figsize=(4 * len(curves), 3))
    for ax, (name, ys) in zip(axes if len(curves) > 1 else [axes], curves.items()):
        ax.semilogy(ys)
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def run_demo(out_dir: str | Path = "py_gpu-demo", *, quick: bool = False, progress: bool = True,
             backend: str = "torch", frames: int | None = None, size: tuple[int, int] | None = None,
             mp4: bool = False, say: Callable[[str], None] = print) -> DemoResult:
    """Run the whole demo into ``out_dir`` and return what it measured; ``quick`` shrinks every
    part (for tests). ``backend``, ``frames``, ``size = (H, W)`` and ``mp4`` are the turntable's."""

    resolve_backend("demo", backend)  # an unknown backend fails before any work

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    res = DemoResult()
    pose_steps, deform_steps, turns = (20, 6, 4) if quick else (120, 80, 24)
    turns = frames or turns
    size = size or ((120, 180) if quick else (240, 360))
    bar = _Progress(4 + pose_steps + deform_steps, progress)
    if mp4:
        try:
            import imageio_ffmpeg  # noqa: F401
        except ImportError:
            mp4 = False
            res.notes.append("MP4 skipped: it needs imageio-ffmpeg (pip install imageio imageio-ffmpeg)")
    threads = get_threads()
    set_threads(1)  # small ops: one thread is fastest, and robust on a busy machine
    try:
        res.table = backend_table((60, 90) if quick else (120, 180))
        bar.step("backends", 3)
        res.files += render_demo(out, frames=turns, size=size, backend=backend, mp4=mp4)
        bar.step("turntable")
        s0, s1, pose_losses, pose_frames = fit_pose(pose_steps, 32 if quick else 48,
                                                    tick=lambda: bar.step("pose fit"))
        res.pose_error_deg = (s0, s1)
        i0, i1, def_losses, def_frames = fit_deform(deform_steps, 32 if quick else 48,
                                                    tick=lambda: bar.step("deformation"))
        res.deform_iou = (i0, i1)
    finally:
        set_threads(threads)
        bar.close()
    for name, frames in (("pose", pose_frames), ("deform", def_frames)):
        Image.fromarray(np.concatenate([frames[0], frames[-1]], 0)).save(out / f"{name}_before_after.png")
        _save_gif(out / f"{name}_fit.gif", frames)
        res.files += [out / f"{name}_before_after.png", out / f"{name}_fit.gif"]
    if _plot(out / "loss_curves.png", {"pose fit": pose_losses, "deformation": def_losses}):
        res.files.append(out / "loss_curves.png")
    else:
        res.notes.append('loss plot skipped: matplotlib is not installed (pip install "py_gpu[plot]")')
    _report(res, say)
    return res


def _report(res: DemoResult, say: Callable[[str], None]) -> None:
    say("backend      ms/frame   pixels equal to the reference")
    for name, ms, same in res.table:
        say(f"{name:<12} {ms:>8.1f}   {same:6.2f} %")
    say(f"pose fit: {res.pose_error_deg[0]:.1f} degrees off -> {res.pose_error_deg[1]:.2f} degrees")
    say(f"deformation: silhouette IoU {res.deform_iou[0]:.3f} -> {res.deform_iou[1]:.3f}")
    for note in res.notes:
        say(note)
