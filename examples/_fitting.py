"""What every fitting recipe (``examples/fit_*.py``) shares: its command line and its pictures.

A recipe defines ``run(steps, size, device, seed, out=None) -> dict`` (with at least ``metric``)
and calls :func:`main`. With ``out`` set, ``run`` writes three files there:

- ``before_after.png``: labelled panels side by side (start, result, target ...);
- ``fit.gif``: the fit as it converges (Pillow);
- ``loss.png``: the loss curve (matplotlib when installed, else a line plot drawn with Pillow).

Images are float ``[H, W, 3]`` tensors in [0, 1] (any device); everything here is plain
NumPy and Pillow after that.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

__all__ = ["main", "to_rgb8", "Recorder", "save_panels", "save_gif", "save_loss_curve", "blur", "pyramid_mse", "weld"]

LABEL_H = 14  # px of caption strip above each panel
PAD = 4  # px between panels


def to_rgb8(image: torch.Tensor) -> np.ndarray:
    """float ``[H, W, 3]`` (or ``[H, W, 1]``) in [0, 1] -> uint8 ``[H, W, 3]``."""
    img = image.detach().float().cpu().clamp(0.0, 1.0)
    if img.shape[-1] == 1:
        img = img.expand(*img.shape[:-1], 3)
    return (img * 255.0 + 0.5).to(torch.uint8).numpy()


def _upscale(arr: np.ndarray, min_side: int = 192) -> np.ndarray:
    """Nearest-neighbour enlargement of small images (longer side below ``min_side``), so pixels stay visible."""
    k = max(1, math.ceil(min_side / max(arr.shape[0], arr.shape[1], 1)))
    return arr.repeat(k, axis=0).repeat(k, axis=1) if k > 1 else arr


def _strip(panels: Sequence[tuple[str, np.ndarray]], min_side: int = 192) -> Image.Image:
    """Labelled panels side by side on a dark grey canvas."""
    arrs = [_upscale(a, min_side) for _, a in panels]
    h = max(a.shape[0] for a in arrs)
    w = sum(a.shape[1] for a in arrs) + PAD * (len(arrs) + 1)
    canvas = Image.new("RGB", (w, h + LABEL_H + 2 * PAD), (40, 40, 40))
    draw = ImageDraw.Draw(canvas)
    font = ImageFont.load_default()
    x = PAD
    for (label, _), a in zip(panels, arrs):
        draw.text((x + 2, PAD), label, fill=(230, 230, 230), font=font)
        canvas.paste(Image.fromarray(a), (x, PAD + LABEL_H))
        x += a.shape[1] + PAD
    return canvas


def save_panels(path, panels: Sequence[tuple[str, torch.Tensor | np.ndarray]], min_side: int = 192) -> Path:
    """Write labelled panels (``(label, float [H, W, 3] tensor or uint8 array)``) side by side as a PNG."""
    arrs = [(label, img if isinstance(img, np.ndarray) else to_rgb8(img)) for label, img in panels]
    path = Path(path)
    _strip(arrs, min_side).save(path)
    return path


def save_gif(path, frames: Sequence[Sequence[tuple[str, np.ndarray]]], ms: int = 90, min_side: int = 128) -> Path:
    """Write an animated GIF; each frame is a list of labelled uint8 panels (as :func:`save_panels`)."""
    if not frames:
        raise ValueError("save_gif: no frames recorded")
    images = [_strip(f, min_side) for f in frames]
    path = Path(path)
    # hold the last frame a while, so the result is visible before the loop restarts
    durations = [ms] * (len(images) - 1) + [ms * 12]
    images[0].save(path, save_all=True, append_images=images[1:], duration=durations, loop=0, optimize=False)
    return path


def save_loss_curve(path, curves: dict[str, Sequence[float]], *, title: str, ylabel: str = "loss",
                    log: bool = True) -> Path:
    """Write loss curves (name -> values per step) as a PNG: matplotlib if installed, else Pillow."""
    path = Path(path)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        _pillow_plot(path, curves, title=title, ylabel=ylabel, log=log)
        return path
    fig, ax = plt.subplots(figsize=(5, 3.2), dpi=100)
    for name, ys in curves.items():
        ax.plot(np.arange(len(ys)), ys, label=name, linewidth=1)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if len(curves) > 1:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


_COLORS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75)]


def _pillow_plot(path: Path, curves: dict[str, Sequence[float]], *, title: str, ylabel: str, log: bool) -> None:
    """A plain line plot with axes, tick labels and a legend, drawn with Pillow."""
    W, H, left, right, top, bottom = 520, 320, 64, 14, 26, 36
    img = Image.new("RGB", (W, H), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    font = ImageFont.load_default()
    series = {k: np.asarray(v, dtype=np.float64) for k, v in curves.items() if len(v)}
    vals = np.concatenate(list(series.values())) if series else np.zeros(1)
    vals = vals[np.isfinite(vals)]
    if log:
        vals = vals[vals > 0]
    if vals.size == 0:
        vals = np.ones(1)
    f = np.log10 if log else (lambda a: a)
    lo, hi = float(f(vals.min())), float(f(vals.max()))
    if hi - lo < 1e-12:
        lo, hi = lo - 0.5, hi + 0.5
    n = max(len(v) for v in series.values()) if series else 1
    pw, ph = W - left - right, H - top - bottom

    def xy(i, y):
        return left + pw * i / max(n - 1, 1), top + ph * (1.0 - (y - lo) / (hi - lo))

    draw.rectangle([left, top, left + pw, top + ph], outline=(0, 0, 0))
    for k in range(5):  # y ticks
        y = lo + (hi - lo) * k / 4
        _, py = xy(0, y)
        draw.line([left - 4, py, left, py], fill=(0, 0, 0))
        draw.text((4, py - 6), f"{10 ** y:.2g}" if log else f"{y:.3g}", fill=(0, 0, 0), font=font)
    for k in range(5):  # x ticks
        i = (n - 1) * k / 4
        px, _ = xy(i, lo)
        draw.line([px, top + ph, px, top + ph + 4], fill=(0, 0, 0))
        draw.text((px - 8, top + ph + 6), f"{int(round(i))}", fill=(0, 0, 0), font=font)
    draw.text((left, 6), title, fill=(0, 0, 0), font=font)
    draw.text((left + pw // 2 - 10, H - 14), "step", fill=(0, 0, 0), font=font)
    draw.text((left + 4, top + 4), ylabel + (" (log)" if log else ""), fill=(90, 90, 90), font=font)
    for c, (name, ys) in enumerate(series.items()):
        color = _COLORS[c % len(_COLORS)]
        ok = np.isfinite(ys) & ((ys > 0) if log else True)
        pts = [xy(i, float(f(y))) for i, y in enumerate(ys) if ok[i]]
        if len(pts) > 1:
            draw.line(pts, fill=color, width=1)
        if len(series) > 1:
            draw.text((left + pw - 150, top + 6 + 12 * c), name, fill=color, font=font)
    img.save(path)


# ---- meshes ------------------------------------------------------------------------------------------
def weld(positions: torch.Tensor, faces: torch.Tensor, decimals: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge vertices at the same position (UV seams, split normals): ``(positions [V', 3], faces [F, 3])``.

    ``py_gpu.antialias`` finds silhouettes from shared edges, so a seam left open would read as
    an outline.
    """
    key = torch.round(positions.detach() * 10**decimals)
    unique, inverse = torch.unique(key, dim=0, return_inverse=True)
    first = torch.full((unique.shape[0],), positions.shape[0], dtype=torch.long, device=positions.device)
    first = first.scatter_reduce(0, inverse, torch.arange(positions.shape[0], device=positions.device), "amin")
    return positions[first], inverse[faces]


# ---- image losses ------------------------------------------------------------------------------------
def pyramid_mse(a: torch.Tensor, b: torch.Tensor, levels: int) -> torch.Tensor:
    """Sum over ``levels`` 2x-downsampled copies of the per-image mean squared error, ``[B]``."""
    a, b = a.permute(0, 3, 1, 2), b.permute(0, 3, 1, 2)
    total = 0.0
    for level in range(levels):
        total = total + ((a - b) ** 2).mean(dim=(1, 2, 3))
        if level + 1 < levels:
            a, b = torch.nn.functional.avg_pool2d(a, 2), torch.nn.functional.avg_pool2d(b, 2)
    return total


def blur(images: torch.Tensor, std: float) -> torch.Tensor:
    """float ``[B, H, W, C]`` images blurred by a Gaussian of ``std`` px (separable; none below 0.3 px)."""
    if std < 0.3:
        return images
    r = int(math.ceil(3 * std))
    x = torch.arange(-r, r + 1, dtype=images.dtype, device=images.device)
    k = torch.exp(-0.5 * (x / std) ** 2)
    k = k / k.sum()
    B, H, W, C = images.shape
    t = images.permute(0, 3, 1, 2).reshape(B * C, 1, H, W)
    t = torch.nn.functional.conv2d(torch.nn.functional.pad(t, (r, r, 0, 0), mode="replicate"), k.view(1, 1, 1, -1))
    t = torch.nn.functional.conv2d(torch.nn.functional.pad(t, (0, 0, r, r), mode="replicate"), k.view(1, 1, -1, 1))
    return t.reshape(B, C, H, W).permute(0, 2, 3, 1)


# ---- progress and pictures ---------------------------------------------------------------------------
class Recorder:
    """Collects the loss per step and, every ``every`` steps, one GIF frame (when ``out`` is set).

    ``frame(step, panels)`` takes a callable returning labelled panels, so nothing is rendered
    when no output was asked for.
    """

    def __init__(self, out, steps: int, frames: int = 40, print_every: int | None = None):
        self.out = Path(out) if out is not None else None
        if self.out is not None:
            self.out.mkdir(parents=True, exist_ok=True)
        self.every = max(1, steps // frames)
        self.print_every = print_every or max(1, steps // 10)
        self.steps = steps
        self.losses: dict[str, list[float]] = {}
        self.frames: list[list[tuple[str, np.ndarray]]] = []
        self.t0 = time.perf_counter()

    def loss(self, step: int, name: str = "loss", value: float | None = None, **info) -> None:
        """Record ``value`` under ``name``; print progress every ``print_every`` steps."""
        self.losses.setdefault(name, []).append(float(value))
        if step % self.print_every == 0 or step == self.steps - 1:
            extra = "".join(f"  {k} {v:.4g}" if isinstance(v, float) else f"  {k} {v}" for k, v in info.items())
            print(f"step {step:5d}  {name} {value:.4g}{extra}  ({time.perf_counter() - self.t0:.1f} s)", flush=True)

    def frame(self, step: int, panels: Callable[[], Sequence[tuple[str, torch.Tensor]]], force: bool = False) -> None:
        if self.out is None or not (force or step % self.every == 0):
            return
        self.frames.append([(label, to_rgb8(img)) for label, img in panels()])

    def write(self, before_after: Sequence[tuple[str, torch.Tensor]], *, title: str, ylabel: str = "loss",
              log: bool = True) -> dict[str, str]:
        """Write ``before_after.png``, ``fit.gif`` and ``loss.png``; returns their paths (none without ``out``)."""
        if self.out is None:
            return {}
        paths = {
            "before_after": save_panels(self.out / "before_after.png", before_after),
            "gif": save_gif(self.out / "fit.gif", self.frames) if self.frames else None,
            "loss_curve": save_loss_curve(self.out / "loss.png", self.losses, title=title, ylabel=ylabel, log=log),
        }
        return {k: str(v) for k, v in paths.items() if v is not None}


def main(name: str, run: Callable[..., dict], *, steps: int, size: int, doc: str | None = None,
         extra: Callable[[argparse.ArgumentParser], None] | None = None, argv=None) -> dict:
    """The common command line: ``--device``, ``--steps``, ``--size``, ``--seed``, ``--out``, and
    the recipe's own options (``extra`` adds them; they are passed to ``run`` as keywords)."""
    parser = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0] if doc else None)
    parser.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    parser.add_argument("--steps", type=int, default=steps, help=f"optimization steps (default: {steps})")
    parser.add_argument("--size", type=int, default=size, help=f"image side in pixels (default: {size})")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    parser.add_argument("--out", default=f"py_gpu-fit-{name}", help=f"output folder (default: py_gpu-fit-{name}/)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    if extra is not None:
        extra(parser)
    args = vars(parser.parse_args(argv))
    threads = args.pop("threads")
    if threads:
        torch.set_num_threads(threads)
    t0, c0 = time.perf_counter(), time.process_time()
    result = run(**args)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    keys = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in result.items()
                     if k not in ("files",) and isinstance(v, (int, float, str)))
    print(f"result: {keys}")
    print(f"time: {seconds:.1f} s ({cpu:.1f} s CPU) for {args['steps']} steps at {args['size']} px on {args['device']}")
    for path in result.get("files", {}).values():
        print(f"wrote {path}")
    return result
