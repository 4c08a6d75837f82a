"""Deform an icosphere into a bumpy shape from 20 silhouettes (PyTorch3D's mesh-deformation tutorial).

The target is a 5,120-face sphere pushed out by twelve smooth bumps; the estimate is a
1,280-face icosphere (``py_gpu.shapes.icosphere(3)``) whose vertex offsets are optimized. Each
step compares the silhouettes of 4 of the 20 training views (``py_gpu.fit.orbit_camera``, spread
evenly over the sphere of directions) and adds the regularizers of ``py_gpu.fit``: edge length,
uniform Laplacian smoothing and normal consistency. Estimators:

- ``soft`` (default): the soft silhouette ``py_gpu.render(..., mode="soft").alpha``; target
  silhouettes are rendered with the same settings. ``--faces-per-pixel`` sets K (default 8; the
  silhouette does not depend on it);
- ``antialias``: the hard coverage mask passed through ``py_gpu.antialias``.

The metric is the silhouette IoU (hard renders) over 8 held-out views.

    python examples/fit_deform.py [--estimator soft|antialias] [--steps 300] [--size 64] [--out DIR]
"""

from __future__ import annotations

import math

import torch

import py_gpu
from py_gpu import fit
from py_gpu.shading.lights import AmbientLight, DirectionalLight

from _fitting import Recorder, main

TRAIN_VIEWS = 20
HELD_OUT_VIEWS = 8
VIEWS_PER_STEP = 4
DISTANCE = 4.2
FOV = 50.0
#: soft mode's K for this mesh: None keeps the default (8). Soft alpha is the product over every
#: face reaching a pixel, so K only limits the color blend, which a silhouette fit does not use.
SOFT_K = None
#: weights of the regularizers (PyTorch3D's tutorial uses the same kinds of terms)
W_EDGE, W_LAPLACIAN, W_NORMAL = 1.0, 1.0, 0.01


def bumpy_target(device) -> py_gpu.MeshBatch:
    """A 5,120-face unit sphere pushed out by 12 Gaussian bumps (fixed random directions, heights
    0.2-0.45, about 16 degrees wide)."""
    g = torch.Generator().manual_seed(1234)
    sphere = py_gpu.shapes.icosphere(4, device=device)
    d = sphere.positions / sphere.positions.norm(dim=-1, keepdim=True)  # [V, 3] unit directions
    centers = torch.nn.functional.normalize(torch.randn(12, 3, generator=g), dim=-1).to(device)
    heights = (0.2 + 0.25 * torch.rand(12, generator=g)).to(device)
    cos = d @ centers.T  # [V, 12]
    radius = 1.0 + (heights * torch.exp((cos - 1.0) / 0.04)).sum(-1)  # [V]
    return py_gpu.MeshBatch(d * radius[:, None], sphere.faces)


def view_angles(n: int, offset: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Elevations and azimuths (degrees, float ``[n]``) of ``n`` directions spread evenly over the
    sphere (a Fibonacci lattice), turned by ``offset`` degrees of azimuth."""
    i = torch.arange(n, dtype=torch.float64) + 0.5
    elevation = torch.rad2deg(torch.asin(1.0 - 2.0 * i / n)) * 0.9  # stay off the poles
    azimuth = torch.remainder(i * 180.0 * (3.0 - math.sqrt(5.0)) + offset, 360.0)
    return elevation.float(), azimuth.float()


def silhouettes(positions: torch.Tensor, faces: torch.Tensor, camera, size: int, estimator: str, *,
                sigma: float = 1.0, faces_per_pixel: int | None = None, topology=None) -> torch.Tensor:
    """float ``[B, H, W]`` silhouettes of one mesh seen by ``camera`` (``B`` views)."""
    clip = camera.world_to_clip(positions)  # [B, V, 4]
    batch = py_gpu.TriangleBatch(clip, faces)
    if estimator == "soft":
        frame = py_gpu.render(batch, (size, size), mode="soft", sigma=sigma, faces_per_pixel=faces_per_pixel)
        return frame.alpha[..., 0]
    frags = py_gpu.rasterize(batch, (size, size))
    coverage = (frags.face_index >= 0).to(clip.dtype)  # [B, H, W, 1]
    if estimator == "hard":
        return coverage[..., 0]
    return py_gpu.antialias(coverage, frags, clip, faces, topology=topology)[..., 0]


def iou(a: torch.Tensor, b: torch.Tensor) -> float:
    """Intersection over union of two boolean masks."""
    return float((a & b).sum()) / max(float((a | b).sum()), 1.0)


def run(steps: int = 300, size: int = 64, device: str = "cpu", seed: int = 0, out=None,
        estimator: str = "soft", faces_per_pixel: int | None = SOFT_K, sigma: float = 1.0, lr: float = 0.01) -> dict:
    """Deform the sphere; ``metric`` is the held-out silhouette IoU (target >= 0.95)."""
    if estimator not in ("soft", "antialias"):
        raise ValueError(f"estimator must be 'soft' or 'antialias', got {estimator!r}")
    g = torch.Generator().manual_seed(seed)
    target = bumpy_target(device)
    source = py_gpu.shapes.icosphere(3, device=device)
    faces = source.faces
    topology = py_gpu.shading.edge_topology(faces)
    el, az = view_angles(TRAIN_VIEWS)
    train = fit.orbit_camera(DISTANCE, el.to(device), az.to(device), fov_y=FOV)
    el_h = (torch.rand(HELD_OUT_VIEWS, generator=g) * 120.0 - 60.0).to(device)  # held out: random, unseen
    az_h = (torch.rand(HELD_OUT_VIEWS, generator=g) * 360.0).to(device)
    held = fit.orbit_camera(DISTANCE, el_h, az_h, fov_y=FOV)
    with torch.no_grad():
        want_train = silhouettes(target.positions, target.faces, train, size, estimator, sigma=sigma,
                                 faces_per_pixel=faces_per_pixel, topology=py_gpu.shading.edge_topology(target.faces))
        want_held = silhouettes(target.positions, target.faces, held, size, "hard") > 0.5
    offsets = torch.zeros_like(source.positions, requires_grad=True)

    def held_out_iou(p: torch.Tensor) -> float:
        with torch.no_grad():
            return iou(silhouettes(p, faces, held, size, "hard") > 0.5, want_held)

    start_iou = held_out_iou(source.positions)
    k_text = f", K = {faces_per_pixel or py_gpu.RasterSettings().faces_per_pixel}" if estimator == "soft" else ""
    print(f"deform ({estimator}{k_text}): {faces.shape[0]} faces, {TRAIN_VIEWS} views ({VIEWS_PER_STEP} per step), "
          f"{steps} steps at {size}x{size}; held-out IoU at the start {start_iou:.3f}")
    opt = torch.optim.Adam([offsets], lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda it: 0.1 ** min(1.0, it / max(steps, 1)))
    show = fit.orbit_camera(DISTANCE, el_h[:1], az_h[:1], fov_y=FOV)
    rec = Recorder(out, steps)
    for step in range(steps):
        pick = torch.randperm(TRAIN_VIEWS, generator=g)[:VIEWS_PER_STEP].to(device)
        cams = py_gpu.Camera(train.view[pick], train.projection)
        p = source.positions + offsets
        got = silhouettes(p, faces, cams, size, estimator, sigma=sigma, faces_per_pixel=faces_per_pixel,
                          topology=topology)
        sil = ((got - want_train[pick]) ** 2).mean()
        reg = W_EDGE * fit.edge_loss(p, faces) + W_LAPLACIAN * fit.laplacian_loss(p, faces) + \
            W_NORMAL * fit.normal_consistency_loss(p, faces)
        loss = sil + reg
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        info = {"silhouette": sil.item()}
        if step % max(1, steps // 10) == 0 or step == steps - 1:
            info["held_out_iou"] = held_out_iou(p.detach())
        rec.loss(step, "loss", loss.item(), **info)
        rec.frame(step, lambda: _panels(p.detach(), faces, target, show, size))
    final = (source.positions + offsets).detach()
    end_iou = held_out_iou(final)
    print(f"held-out silhouette IoU: start {start_iou:.4f} -> end {end_iou:.4f} (target >= 0.95)")
    pictures = _panels(source.positions, faces, target, show, size, labels=("start",)) + \
        _panels(final, faces, target, show, size, labels=("result", "target"))
    rec.frame(steps, lambda: _panels(final, faces, target, show, size), force=True)
    files = rec.write(pictures, title=f"deform, {estimator}{k_text}")
    k = (faces_per_pixel or py_gpu.RasterSettings().faces_per_pixel) if estimator == "soft" else None
    return dict(metric=end_iou, start_iou=start_iou, estimator=estimator, faces_per_pixel=k, files=files)


def _shaded(positions: torch.Tensor, faces: torch.Tensor, camera, size: int) -> torch.Tensor:
    """float ``[H, W, 3]``: a lit hard render of a mesh, for the pictures."""
    r = py_gpu.Renderer((size * 2, size * 2), device=positions.device, background=(0.08, 0.08, 0.1))
    mesh = py_gpu.MeshBatch(positions, faces, colors=torch.full_like(positions, 0.75))
    eye = camera.position[0] / camera.position[0].norm()
    light = (-eye + torch.tensor([0.7, -0.9, 0.0], device=eye.device)).tolist()  # from the upper left of the camera
    lights = [AmbientLight(intensity=0.12), DirectionalLight(light, intensity=0.85)]
    return r.render(r.upload(mesh), camera, lights=lights, model="lambert", gamma=2.2).image[0]


def _panels(positions, faces, target, camera, size, labels=("estimate", "target")):
    with torch.no_grad():
        panels = [(labels[0], _shaded(positions, faces, camera, size))]
        if len(labels) > 1:
            panels.append((labels[1], _shaded(target.positions, target.faces, camera, size)))
    return panels


def _options(parser) -> None:
    parser.add_argument("--estimator", choices=("soft", "antialias"), default="soft")
    parser.add_argument("--faces-per-pixel", type=int, default=SOFT_K, help="soft mode's K (default: RasterSettings' default, 8)")
    parser.add_argument("--sigma", type=float, default=1.0, help="soft edge width, px^2 (default: 1)")
    parser.add_argument("--lr", type=float, default=0.01)


if __name__ == "__main__":
    main("deform", run, steps=300, size=64, doc=__doc__, extra=_options)
