"""Recover a cube's rotation from one image, for 10 random targets at once (nvdiffrast's ``pose``).

The cube's corners carry the colors of the RGB cube (corner ``(x, y, z)`` in ``[-1, 1]^3`` has
color ``((x, y, z) + 1) / 2``), so every rotation gives a different image. The 10 target
rotations are uniform random (seeded); each fit starts ``--start`` degrees (default 40) away from
its target about a random axis (``py_gpu.fit.random_rotation_near``). All fits run as one batch
of images, each with its own rotation (an axis-angle correction, optimized with Adam).

A plain fit from the start ends in a local minimum for one or two targets in ten, mostly where
the estimate or the target shows the cube nearly face-on: a side turning edge-on has no
silhouette left to pull on. So the fit runs in two phases. **Search** (half the steps, half the
image size): each target gets 6 starts, its own and 5 others 25 degrees from it, fitted together
coarse to fine; the one whose image matches the target best goes on. **Refine** (the other
half, full size): that pose alone. ``--hypotheses 1 --search 0`` gives the plain fit.
Estimators:

- ``antialias``: hard rasterization, interpolated colors, ``py_gpu.antialias`` of ``[color,
  coverage]``; the loss compares the two images blurred by a Gaussian whose width falls from
  8 px to 0, and their 2x and 4x downsampled copies (coarse to fine);
- ``soft``: ``py_gpu.render(..., mode="soft")``, the loss on ``[image, alpha]``; the edge
  width ``sigma`` falls from 16 px^2 to 0.5 px^2 (coarse to fine).

The metric is how many fits end within 2 degrees of their target.

    python examples/fit_pose.py [--estimator antialias|soft] [--start 40] [--steps 300] [--out DIR]
    python examples/fit_pose.py --hypotheses 1 --search 0      # the plain fit
"""

from __future__ import annotations

import math

import torch

import py_gpu
from py_gpu.camera import axis_angle_to_matrix, perspective, rotation_angle, transform_points

from _fitting import Recorder, blur, main, pyramid_mse
from fit_cube import CORNERS, FACES

TARGETS = 10
DISTANCE = 5.0
FOV = 45.0
SUCCESS_DEG = 2.0


def mvp_of(rotation: torch.Tensor) -> torch.Tensor:
    """float ``[B, 4, 4]`` model-view-projection of the cube turned by ``rotation [B, 3, 3]``."""
    model = torch.eye(4, dtype=rotation.dtype, device=rotation.device).repeat(rotation.shape[0], 1, 1)
    model[:, :3, :3] = rotation  # differentiable: autograd records the copy
    model[:, 2, 3] = -DISTANCE
    return perspective(FOV, 1.0, 1.0, 20.0, dtype=rotation.dtype, device=rotation.device) @ model


def render(rotation: torch.Tensor, size: int, estimator: str, faces, colors, positions, topology=None,
           sigma: float = 0.5) -> torch.Tensor:
    """float ``[B, H, W, 4]``: the RGB cube turned by ``rotation [B, 3, 3]`` over black, and its
    coverage (``image``, composited with ``alpha`` over black, and ``alpha`` in soft mode)."""
    clip = transform_points(mvp_of(rotation), positions)  # [B, 8, 4]
    cols = colors.expand(clip.shape[0], -1, -1)
    if estimator == "soft":
        frame = py_gpu.render(py_gpu.TriangleBatch(clip, faces, vertex_colors=cols), (size, size), mode="soft",
                              sigma=sigma)
        return torch.cat([frame.image, frame.alpha], -1)
    frags = py_gpu.rasterize(py_gpu.TriangleBatch(clip, faces), (size, size))
    covered = frags.face_index >= 0
    color = torch.where(covered, py_gpu.interpolate(cols, frags, faces)[..., 0, :], torch.zeros((), device=clip.device))
    return py_gpu.antialias(torch.cat([color, covered.to(color.dtype)], -1), frags, clip, faces, topology=topology)


def image_loss(rotation, want, size: int, estimator: str, level: float, kw, cache: dict | None = None) -> torch.Tensor:
    """Per-image loss float ``[B]`` at schedule position ``level`` (1: coarsest, 0: finest).

    ``soft``: squared difference of ``[image, alpha]`` (the image composited over black), both at the edge width
    ``sigma = 0.5 * 32**level`` px^2 (``want`` is then the target rotations ``[T, 3, 3]``, ``B``
    a multiple of ``T``, rendered here; ``cache`` keeps the last such target image);
    ``antialias``: squared difference of the antialiased ``[color, coverage]`` images blurred by a
    Gaussian of ``8 * level`` px, summed over 3 levels of 2x downsampling (``want``: the images).
    Both widths are in pixels of a 64-pixel image and scale with ``size``.
    """
    scale = size / 64.0
    if estimator == "soft":
        sigma = 0.5 * 32.0**level * scale * scale
        if cache is None or cache.get("sigma") != sigma:
            with torch.no_grad():
                target = render(want, size, "soft", sigma=sigma, **kw)
            target = target.repeat_interleave(rotation.shape[0] // want.shape[0], 0)
            if cache is not None:
                cache.update(sigma=sigma, target=target)
        else:
            target = cache["target"]
        return ((render(rotation, size, "soft", sigma=sigma, **kw) - target) ** 2).mean(dim=(1, 2, 3))
    std = 8.0 * level * scale
    return pyramid_mse(blur(render(rotation, size, "antialias", **kw), std), blur(want, std), levels=3)


def optimize(base, want, size: int, estimator: str, steps: int, lr: float, level0: float, kw,
             step0: int = 0, report=None):
    """Adam on axis-angle corrections of the rotations ``base [N, 3, 3]``, ``steps`` steps, the
    schedule going from ``level0`` to 0 over the first 70 % and the learning rate falling 20x.
    Returns ``(rotations [N, 3, 3], final per-image loss [N])``."""
    omega = torch.zeros(base.shape[0], 3, device=base.device, requires_grad=True)
    opt = torch.optim.Adam([omega], lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda it: 0.05 ** min(1.0, it / max(0.8 * steps, 1)))
    cache: dict = {}
    for step in range(steps):
        level = level0 * max(0.0, 1.0 - step / max(0.7 * steps, 1))
        loss = image_loss(axis_angle_to_matrix(omega) @ base, want, size, estimator, level, kw, cache)
        opt.zero_grad()
        loss.sum().backward()
        opt.step()
        sched.step()
        if report is not None:
            report(step0 + step, loss.detach(), (axis_angle_to_matrix(omega) @ base).detach())
    with torch.no_grad():
        rot = axis_angle_to_matrix(omega) @ base
        return rot, image_loss(rot, want, size, estimator, 0.0, kw, cache)


def run(steps: int = 300, size: int = 64, device: str = "cpu", seed: int = 0, out=None,
        estimator: str = "antialias", start: float = 40.0, targets: int = TARGETS, hypotheses: int = 6,
        spread: float = 25.0, search: float = 0.5, lr: float = 0.03) -> dict:
    """Fit ``targets`` poses; ``metric`` is how many end within 2 degrees (target: 9 of 10).

    Two phases. **Search** (the first ``search`` fraction of the steps, at half the image size):
    each target gets ``hypotheses`` starts, its own start and ``hypotheses - 1`` rotations
    ``spread`` degrees from it about random axes, all fitted at once with the full coarse-to-fine
    schedule; the one whose image matches best is kept. **Refine** (the other steps, full size):
    that pose, from a gentler schedule and learning rate. With ``hypotheses=1, search=0`` it is a
    plain fit from the start.
    """
    if estimator not in ("antialias", "soft"):
        raise ValueError(f"estimator must be 'antialias' or 'soft', got {estimator!r}")
    g = torch.Generator().manual_seed(seed)
    faces = torch.tensor(FACES, device=device)
    kw = dict(faces=faces, colors=(torch.tensor(CORNERS, device=device) + 1.0) / 2.0,
              positions=torch.tensor(CORNERS, device=device), topology=py_gpu.shading.edge_topology(faces))
    r_true = py_gpu.fit.random_rotations(targets, generator=g, device=device)
    r_start = py_gpu.fit.random_rotation_near(start, targets, g, rotation=r_true)

    def errors(r: torch.Tensor) -> torch.Tensor:
        return torch.rad2deg(rotation_angle(r.detach().double(), r_true.double()))

    search_steps = int(round(search * steps)) if hypotheses > 1 or search > 0 else 0
    how = (f"{search_steps} of them searching {hypotheses} starts per target at {size // 2}x{size // 2}"
           if search_steps else "a plain fit from each start")
    print(f"pose ({estimator}): {targets} targets, start {start:g} degrees off, {steps} steps at {size}x{size} ({how})")
    rec = Recorder(out, steps)
    with torch.no_grad():
        want_full = render(r_true, size, "antialias", **kw)
    best = r_start
    if search_steps:
        H, small = hypotheses, size // 2
        around = r_start.repeat_interleave(H - 1, 0)  # [T (H - 1), 3, 3]
        others = py_gpu.fit.random_rotation_near(spread, targets * (H - 1), g, rotation=around)
        starts = torch.cat([r_start[:, None], others.reshape(targets, H - 1, 3, 3)], 1)  # [T, H, 3, 3]
        truth = r_true.repeat_interleave(H, 0)  # [T H, 3, 3]
        with torch.no_grad():
            want = r_true if estimator == "soft" else render(truth, small, "antialias", **kw)

        def report(step, loss, rot):
            err = torch.rad2deg(rotation_angle(rot.double(), truth.double())).reshape(targets, H)
            pick = loss.reshape(targets, H).argmin(1)
            chosen = err[torch.arange(targets), pick]
            rec.loss(step, "search (best start)", float(loss.reshape(targets, H).min(1).values.mean()),
                     median_error_deg=float(chosen.median()), within_2deg=int((chosen < SUCCESS_DEG).sum()))
            rec.frame(step, lambda: _panels(rot.reshape(targets, H, 3, 3)[torch.arange(targets), pick], r_true,
                                            size, kw))

        rot, loss = optimize(starts.reshape(-1, 3, 3), want, small, estimator, search_steps, lr, 1.0, kw,
                             report=report)
        pick = loss.reshape(targets, H).argmin(1)
        best = rot.reshape(targets, H, 3, 3)[torch.arange(targets), pick]
        print(f"search: kept start {pick.tolist()} (0: the given start); errors now "
              + " ".join(f"{e:.1f}" for e in errors(best).tolist()))

    def report_refine(step, loss, rot):
        err = errors(rot)
        rec.loss(step, "refine" if search_steps else "image loss", float(loss.mean()),
                 median_error_deg=float(err.median()), within_2deg=int((err < SUCCESS_DEG).sum()))
        rec.frame(step, lambda: _panels(rot, r_true, size, kw))

    refine_level, refine_lr = (0.25, lr / 3) if search_steps else (1.0, lr)
    final, _ = optimize(best, r_true if estimator == "soft" else want_full, size, estimator, steps - search_steps,
                        refine_lr, refine_level, kw, step0=search_steps, report=report_refine)
    end = errors(final)
    hits = int((end < SUCCESS_DEG).sum())
    print("end errors (degrees):", " ".join(f"{e:.2f}" for e in end.tolist()))
    print(f"within {SUCCESS_DEG:g} degrees: {hits} of {targets} (start {start:g} degrees off)")
    with torch.no_grad():
        pictures = [("start", _grid(render(r_start, size, "antialias", **kw))),
                    ("result", _grid(render(final, size, "antialias", **kw))), ("target", _grid(want_full))]
    rec.frame(steps, lambda: _panels(final, r_true, size, kw), force=True)
    files = rec.write(pictures, title=f"pose, {estimator}, {start:g} degrees off", ylabel="image loss")
    return dict(metric=hits, targets=targets, start_deg=start, estimator=estimator,
                median_error_deg=float(end.median()), errors_deg=end.tolist(), rotations=final.cpu(), files=files)


def _grid(images: torch.Tensor, columns: int = 5) -> torch.Tensor:
    """A batch of images in rows of ``columns``, float ``[rows H, columns W, 3]`` (color channels only)."""
    images = images[..., :3]
    n = images.shape[0]
    rows = -(-n // columns)
    pad = torch.zeros(rows * columns - n, *images.shape[1:], dtype=images.dtype, device=images.device)
    tiles = torch.cat([images, pad]).reshape(rows, columns, *images.shape[1:])  # [r, c, H, W, 3]
    return tiles.permute(0, 2, 1, 3, 4).reshape(rows * images.shape[1], columns * images.shape[2], 3)


def _panels(r_now, r_true, size, kw):
    with torch.no_grad():
        return [("estimate", _grid(render(r_now, size, "antialias", **kw))),
                ("target", _grid(render(r_true, size, "antialias", **kw)))]


def _options(parser) -> None:
    parser.add_argument("--estimator", choices=("antialias", "soft"), default="antialias")
    parser.add_argument("--start", type=float, default=40.0, help="start error in degrees (default: 40)")
    parser.add_argument("--targets", type=int, default=TARGETS, help="number of random targets (default: 10)")
    parser.add_argument("--hypotheses", type=int, default=6,
                        help="starts per target in the search phase (default: 6)")
    parser.add_argument("--search", type=float, default=0.5,
                        help="fraction of the steps spent searching (default: 0.5)")
    parser.add_argument("--spread", type=float, default=25.0,
                        help="degrees from the given start to the search's other starts (default: 25)")


if __name__ == "__main__":
    main("pose", run, steps=300, size=64, doc=__doc__, extra=_options)
