"""Recover a cube's rotation from a target image with soft rasterization.

The cube has one color per side, so its image fixes the rotation. A differentiable axis-angle
rotation and a pinhole perspective projection (both written out below) map the cube to clip space;
soft mode blends faces by depth, so the gradient reaches the rotation through silhouettes,
colors and occlusion. The start is 40 degrees off; the edge width ``sigma`` and the depth
temperature ``gamma`` start wide and shrink (coarse to fine).

    python examples/fit_cube_pose.py [--steps 200] [--png docs/img/soft-fit-cube.png]
"""

from __future__ import annotations

import argparse
import math

import torch

from py_gpu import BlendSettings, RasterSettings, TriangleBatch
from py_gpu.image import save_png
from py_gpu.shading import render_soft

SIZE = (64, 64)  # (H, W)
DISTANCE = 3.0  # cube center on the +z axis, camera at the origin looking down +z
NEAR, FAR = 1.0, 5.0
FOCAL = 2.4  # 1 / tan(fov / 2), in NDC units

#: float64 [8, 3] cube corners, int64 [12, 3] faces, float64 [12, 3] one color per side
CORNERS = torch.tensor([[x, y, z] for x in (-0.5, 0.5) for y in (-0.5, 0.5) for z in (-0.5, 0.5)], dtype=torch.float64)
_QUADS = [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)]
FACES = torch.tensor([t for a, b, c, d in _QUADS for t in ((a, b, c), (a, c, d))], dtype=torch.int64)
_SIDE_COLORS = [(0.9, 0.2, 0.2), (0.2, 0.8, 0.3), (0.2, 0.3, 0.9), (0.9, 0.8, 0.2), (0.8, 0.3, 0.8), (0.2, 0.8, 0.8)]
COLORS = torch.tensor([c for c in _SIDE_COLORS for _ in range(2)], dtype=torch.float64)


def axis_angle_to_matrix(omega: torch.Tensor) -> torch.Tensor:
    """float ``[3, 3]`` rotation from an axis-angle float ``[3]`` (Rodrigues; smooth at 0)."""
    theta2 = (omega * omega).sum()
    theta = torch.sqrt(theta2 + 1e-20)
    kx, ky, kz = omega.unbind()
    zero = torch.zeros((), dtype=omega.dtype)
    skew = torch.stack([torch.stack([zero, -kz, ky]), torch.stack([kz, zero, -kx]), torch.stack([-ky, kx, zero])])
    # sin(t)/t and (1 - cos(t))/t^2, with their Taylor series near 0
    small = theta2 < 1e-8
    a = torch.where(small, 1.0 - theta2 / 6.0, torch.sin(theta) / theta)
    b = torch.where(small, 0.5 - theta2 / 24.0, (1.0 - torch.cos(theta)) / (theta2 + 1e-30))
    return torch.eye(3, dtype=omega.dtype) + a * skew + b * (skew @ skew)


def project(points: torch.Tensor) -> torch.Tensor:
    """Camera-space float ``[V, 3]`` (x right, y up, z forward) -> clip-space float ``[V, 4]``.

    ``z/w`` runs from 0 at ``NEAR`` to 1 at ``FAR``, matching ``RasterSettings`` znear=0, zfar=1.
    """
    x, y, z = points.unbind(-1)
    z_clip = (z - NEAR) * (FAR / (FAR - NEAR))
    return torch.stack((FOCAL * x, FOCAL * y, z_clip, z), dim=-1)


def render_pose(omega: torch.Tensor, sigma: float, gamma: float):
    """``Frame`` of the cube rotated by axis-angle ``omega`` (float ``[3]``)."""
    rot = axis_angle_to_matrix(omega)
    cam = CORNERS.to(omega.dtype) @ rot.T + torch.tensor([0.0, 0.0, DISTANCE], dtype=omega.dtype)
    batch = TriangleBatch(project(cam)[None], FACES, face_colors=COLORS.to(omega.dtype)[None])
    s = RasterSettings(mode="soft", sigma=sigma, faces_per_pixel=6)
    return render_soft(batch, SIZE, background=(0.0, 0.0, 0.0), settings=s, blend_settings=BlendSettings(gamma=gamma))


def rotation_error_deg(omega_a: torch.Tensor, omega_b: torch.Tensor) -> float:
    """Angle (degrees) of the relative rotation between two axis-angle vectors."""
    r = axis_angle_to_matrix(omega_a).T @ axis_angle_to_matrix(omega_b)
    cos = ((torch.trace(r) - 1.0) / 2.0).clamp(-1.0, 1.0)
    return math.degrees(float(torch.arccos(cos)))


#: float64 [3] the target pose, and the start: the target turned 40 degrees about a tilted axis
TARGET = torch.tensor([0.5, -0.6, 0.25], dtype=torch.float64)


def start_pose(offset_deg: float = 40.0) -> torch.Tensor:
    axis = torch.tensor([0.3, 1.0, -0.5], dtype=torch.float64)
    off = axis / axis.norm() * math.radians(offset_deg)
    r = axis_angle_to_matrix(off) @ axis_angle_to_matrix(TARGET)
    # back to axis-angle (log map; the angle here is well below pi)
    angle = torch.arccos(((torch.trace(r) - 1) / 2).clamp(-1, 1))
    w = torch.stack((r[2, 1] - r[1, 2], r[0, 2] - r[2, 0], r[1, 0] - r[0, 1])) / (2 * torch.sin(angle))
    return w * angle


def fit(steps: int = 200, offset_deg: float = 40.0, snapshots: bool = False):
    """Returns ``(omega float64 [3], start error deg, end error deg, snapshots)``."""
    omega = start_pose(offset_deg).requires_grad_(True)
    start_err = rotation_error_deg(omega.detach(), TARGET)
    opt = torch.optim.Adam([omega], lr=0.05)
    shots = []
    for step in range(steps):
        frac = min(1.0, step / (0.75 * steps))
        sigma = 20.0 * (0.5 / 20.0) ** frac
        gamma = 3e-2 * (3e-3 / 3e-2) ** frac
        for group in opt.param_groups:
            group["lr"] = 0.05 * (0.1 ** frac)
        with torch.no_grad():
            want = render_pose(TARGET, sigma, gamma)
        got = render_pose(omega, sigma, gamma)
        loss = ((got.image - want.image) ** 2).sum() + ((got.alpha - want.alpha) ** 2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if snapshots and step % max(1, steps // 5) == 0:
            shots.append(omega.detach().clone())
    end_err = rotation_error_deg(omega.detach(), TARGET)
    if snapshots:
        shots.append(omega.detach().clone())
    return omega.detach(), start_err, end_err, shots


def save_strip(path: str, shots) -> None:
    """A strip: the fit's progress, then the target."""
    tiles = [render_pose(w, 0.3, 1e-3).image[0] for w in shots] + [render_pose(TARGET, 0.3, 1e-3).image[0]]
    tiles = [torch.nn.functional.pad(t, (0, 0, 2, 2, 2, 2), value=0.25) for t in tiles]
    strip = torch.cat(tiles, dim=1).repeat_interleave(3, dim=0).repeat_interleave(3, dim=1)  # 3x nearest
    strip = (strip.clamp(0, 1) * 255 + 0.5).to(torch.uint8).numpy()
    save_png(path, strip)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--offset", type=float, default=40.0, help="start error in degrees")
    parser.add_argument("--png", default=None, help="write a PNG strip of the fit")
    args = parser.parse_args()
    omega, start_err, end_err, shots = fit(args.steps, args.offset, snapshots=args.png is not None)
    print(f"rotation error: start {start_err:.1f} deg -> end {end_err:.3f} deg")
    print("fitted axis-angle:", [round(v, 4) for v in omega.tolist()], "target:", TARGET.tolist())
    if args.png:
        save_strip(args.png, shots)
        print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
