"""Recover where a camera stood from one image of a known object (PyTorch3D's camera-position tutorial).

The object is a colored torus with a cube beside it, so that one view fixes the camera. The
camera orbits the origin (``py_gpu.fit.orbit_camera``): the fit optimizes its distance (as a
logarithm), elevation and azimuth, starting 35 degrees of azimuth, 20 degrees of elevation and
25 % of the distance away from the truth. Estimators:

- ``soft`` (default): ``py_gpu.render(..., mode="soft")``, the loss on ``image`` and on
  ``alpha``; the edge width ``sigma`` shrinks from 30 px^2 to 0.5 px^2 (coarse to fine);
- ``antialias``: hard rasterization, interpolated colors and ``py_gpu.antialias``; both images
  are blurred by a Gaussian whose width shrinks from 8 px to 0 (the same coarse to fine).

The metrics are the angle between the fitted and the true camera directions (degrees) and the
relative distance error.

    python examples/fit_camera.py [--estimator soft|antialias] [--steps 250] [--size 64] [--out DIR]
"""

from __future__ import annotations

import math

import torch

import py_gpu
from py_gpu import fit

from _fitting import Recorder, blur, main, pyramid_mse, weld
from fit_cube import CORNERS, FACES

TRUE = (3.2, 25.0, 40.0)  # distance, elevation (degrees), azimuth (degrees)
START_OFFSET = (1.25, -20.0, 35.0)  # distance factor, elevation and azimuth offsets (degrees)
FOV = 50.0


def scene(device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(positions [V, 3], faces [F, 3], colors [V, 3])`` of a torus and a cube beside it, colored by
    a smooth field of position."""
    torus = py_gpu.shapes.torus(0.8, 0.3, 24, 12, device=device)
    torus_p, torus_f = weld(torus.positions, torus.faces)  # close the UV seams
    box_p = 0.3 * torch.tensor(CORNERS, device=device) + torch.tensor([0.9, 0.55, 0.4], device=device)
    positions = torch.cat([torus_p, box_p])
    faces = torch.cat([torus_f, torch.tensor(FACES, device=device) + torus_p.shape[0]])
    p = positions
    colors = torch.stack([0.55 + 0.4 * torch.sin(2.3 * p[:, 0] + 1.1 * p[:, 1]),
                          0.55 + 0.4 * torch.sin(1.7 * p[:, 1] - 2.1 * p[:, 2] + 1.0),
                          0.55 + 0.4 * torch.cos(2.0 * p[:, 2] + 1.4 * p[:, 0])], -1).clamp(0, 1)
    return positions, faces, colors


def camera_of(params: torch.Tensor):
    """``orbit_camera`` from float ``[3]`` parameters ``(log distance, elevation, azimuth)`` (radians)."""
    return fit.orbit_camera(params[0].exp(), params[1], params[2], degrees=False, fov_y=FOV, near=0.5, far=20.0)


def render(cam, size: int, estimator: str, positions, faces, colors, *, sigma: float = 0.5, topology=None):
    """``(image, alpha)``, float ``[B, H, W, 3]`` and ``[B, H, W, 1]``, over black."""
    clip = cam.world_to_clip(positions)
    cols = colors.expand(clip.shape[0], -1, -1)
    if estimator == "soft":
        frame = py_gpu.render(py_gpu.TriangleBatch(clip, faces, vertex_colors=cols), (size, size), mode="soft",
                              sigma=sigma)
        return frame.image, frame.alpha
    frags = py_gpu.rasterize(py_gpu.TriangleBatch(clip, faces), (size, size))
    covered = frags.face_index >= 0
    color = torch.where(covered, py_gpu.interpolate(cols, frags, faces)[..., 0, :], torch.zeros((), device=clip.device))
    both = py_gpu.antialias(torch.cat([color, covered.to(color.dtype)], -1), frags, clip, faces, topology=topology)
    return both[..., :3], both[..., 3:]


def errors(params: torch.Tensor) -> tuple[float, float]:
    """``(angle between camera directions in degrees, relative distance error)``."""
    with torch.no_grad():
        params = params.detach().double()
        d = float(params[0].exp())
        eye = fit.orbit_camera(1.0, params[1].cpu(), params[2].cpu(), degrees=False).position[0]
        true_eye = fit.orbit_camera(1.0, torch.tensor(TRUE[1], dtype=torch.float64), TRUE[2]).position[0]
        cos = float((eye @ true_eye) / (eye.norm() * true_eye.norm()))
    return math.degrees(math.acos(max(-1.0, min(1.0, cos)))), abs(d - TRUE[0]) / TRUE[0]


def run(steps: int = 250, size: int = 64, device: str = "cpu", seed: int = 0, out=None,
        estimator: str = "soft", lr: float = 0.03) -> dict:
    """Fit the camera; ``metric`` is the angle error in degrees (target < 1; distance error < 1 %).

    The task has nothing random: ``seed`` only seeds torch for symmetry with the other recipes."""
    if estimator not in ("soft", "antialias"):
        raise ValueError(f"estimator must be 'soft' or 'antialias', got {estimator!r}")
    torch.manual_seed(seed)
    positions, faces, colors = scene(device)
    topology = py_gpu.shading.edge_topology(faces)
    geo = dict(positions=positions, faces=faces, colors=colors, topology=topology)
    true = torch.tensor([math.log(TRUE[0]), math.radians(TRUE[1]), math.radians(TRUE[2])], device=device)
    start = torch.tensor([math.log(TRUE[0] * START_OFFSET[0]), math.radians(TRUE[1] + START_OFFSET[1]),
                          math.radians(TRUE[2] + START_OFFSET[2])], device=device)
    params = start.clone().requires_grad_(True)
    true_cam = camera_of(true)
    a0, d0 = errors(params)
    print(f"camera ({estimator}): {steps} steps at {size}x{size}; start {a0:.1f} degrees and {100 * d0:.0f} % off")
    opt = torch.optim.Adam([params], lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda it: 0.03 ** min(1.0, it / max(0.85 * steps, 1)))
    rec = Recorder(out, steps)
    for step in range(steps):
        frac = min(1.0, step / max(0.7 * steps, 1))
        if estimator == "soft":
            sigma = 30.0 * (0.5 / 30.0) ** frac
            with torch.no_grad():
                want_c, want_a = render(true_cam, size, "soft", sigma=sigma, **geo)
            got_c, got_a = render(camera_of(params), size, "soft", sigma=sigma, **geo)
            loss = ((got_c - want_c) ** 2).mean() + ((got_a - want_a) ** 2).mean()
        else:
            std = 8.0 * (1.0 - frac)
            with torch.no_grad():
                want = blur(torch.cat(render(true_cam, size, "antialias", **geo), -1), std)
            got = blur(torch.cat(render(camera_of(params), size, "antialias", **geo), -1), std)
            loss = pyramid_mse(got, want, levels=3).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        a, d = errors(params)
        rec.loss(step, "image loss", loss.item(), angle_deg=a, distance_pct=100 * d)
        rec.frame(step, lambda: _panels(params.detach(), true_cam, size, geo))
    angle, dist = errors(params)
    p = params.detach()
    deg = [float(p[0].exp()), math.degrees(float(p[1])), math.degrees(float(p[2]))]
    print(f"fitted distance {deg[0]:.4f}, elevation {deg[1]:.3f}, azimuth {deg[2]:.3f} "
          f"(true {TRUE[0]}, {TRUE[1]}, {TRUE[2]})")
    print(f"angle error {angle:.2e} degrees (target < 1), distance error {100 * dist:.2e} % (target < 1 %)")
    pictures = [("start", _image(start, size, geo)), ("result", _image(params.detach(), size, geo)),
                ("target", _image(true, size, geo))]
    rec.frame(steps, lambda: _panels(params.detach(), true_cam, size, geo), force=True)
    files = rec.write(pictures, title=f"camera, {estimator}", ylabel="image loss")
    return dict(metric=angle, distance_error=dist, start_angle=a0, start_distance_error=d0, estimator=estimator,
                fitted=deg, files=files)


def _image(params, size, geo):
    with torch.no_grad():
        return render(camera_of(params), size, "antialias", **geo)[0][0]


def _panels(params, true_cam, size, geo):
    with torch.no_grad():
        return [("estimate", _image(params, size, geo)), ("target", render(true_cam, size, "antialias", **geo)[0][0])]


def _options(parser) -> None:
    parser.add_argument("--estimator", choices=("soft", "antialias"), default="soft")
    parser.add_argument("--lr", type=float, default=0.03)


if __name__ == "__main__":
    main("camera", run, steps=250, size=64, doc=__doc__, extra=_options)
