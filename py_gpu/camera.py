"""Differentiable, batched cameras: view and projection matrices, rotations, world -> clip -> screen.

Conventions (see docs/pipeline.md):

- World and view space are right-handed. The camera looks down its -Z axis, +Y is up, +X right.
- Projections map view space to clip space ``(x, y, z, w)``; NDC is ``(x, y, z) / w`` with
  x right in ``[-1, 1]``, **y up** in ``[-1, 1]`` and **z in [0, 1]**: 0 on the near plane,
  1 on the far plane (the Direct3D / Vulkan / "reversed-GL" depth range). So ``depth = z/w`` is
  already in RasterSettings' default soft-blend range ``[znear, zfar] = [0, 1]``.
- The near plane in clip space is ``z = 0``: a point is in front of it when ``z >= 0``;
  :func:`py_gpu.raster.clip.clip_near` cuts triangles there.
- Clip -> screen is the raster rule's mapping: ``x_px = (x/w + 1) W/2``, ``y_px = (1 - y/w) H/2``
  (rows go down), ``depth = z/w``.
- Front faces are counter-clockwise in NDC (y up), as in OpenGL; culling drops clockwise ones.

Every function is plain torch (no in-place writes on inputs), accepts a leading batch dimension
``B`` (or none, taken as ``B = 1`` where the result is a camera), and works in float32 and float64.
Matrices act on column vectors: ``p_clip = P @ V @ p_world``; points are stored as rows, so the
code computes ``p @ M.T``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ._check import PyGpuTypeError, PyGpuValueError, check_finite, check_float, check_shape

__all__ = [
    "Camera",
    "look_at",
    "view_from_pose",
    "perspective",
    "orthographic",
    "axis_angle_to_matrix",
    "quaternion_to_matrix",
    "matrix_to_quaternion",
    "rotation_angle",
    "transform_points",
    "clip_to_screen",
]


def _vec(where: str, name: str, value, *, dims: int, dtype=None, device=None) -> torch.Tensor:
    """``value`` as a float tensor ``[B, dims]`` (a ``[dims]`` input becomes ``B = 1``)."""
    t = value if isinstance(value, torch.Tensor) else torch.as_tensor(value, dtype=dtype or torch.float32, device=device)
    check_float(where, name, t)
    if t.dim() == 1:
        t = t.unsqueeze(0)
    check_shape(where, name, t, (None, dims), f"[B, {dims}] or [{dims}]")
    check_finite(where, name, t)
    return t


def _scalar(where: str, name: str, value, *, like: torch.Tensor) -> torch.Tensor:
    """A python number or a tensor ``[]``/``[B]`` as a float tensor ``[B or 1]`` on ``like``'s device."""
    if isinstance(value, torch.Tensor):
        check_float(where, name, value)
        t = value.to(like.dtype).reshape(-1)
    else:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PyGpuTypeError(f"{where}: `{name}` must be a number or a float tensor, got {value!r}")
        t = torch.tensor([float(value)], dtype=like.dtype, device=like.device)
    check_finite(where, name, t)
    return t


def _normalize(v: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    return v / v.norm(dim=-1, keepdim=True).clamp_min(eps)


# ---- rotations --------------------------------------------------------------------------------
def axis_angle_to_matrix(axis_angle: torch.Tensor) -> torch.Tensor:
    """Rodrigues' formula: float ``[..., 3]`` rotation vectors (axis * angle in radians) -> ``[..., 3, 3]``.

    Smooth and differentiable everywhere, including at the zero rotation (Taylor series there).
    """
    where = "axis_angle_to_matrix"
    check_float(where, "axis_angle", axis_angle)
    if axis_angle.shape[-1:] != (3,):
        raise PyGpuValueError(f"{where}: `axis_angle` must have shape [..., 3], got {tuple(axis_angle.shape)}")
    theta2 = (axis_angle * axis_angle).sum(-1, keepdim=True)[..., None]  # [..., 1, 1]
    small = theta2 < 1e-8
    safe2 = torch.where(small, torch.ones_like(theta2), theta2)
    theta = safe2.sqrt()
    a = torch.where(small, 1.0 - theta2 / 6.0, torch.sin(theta) / theta)  # sin(t)/t
    b = torch.where(small, 0.5 - theta2 / 24.0, (1.0 - torch.cos(theta)) / safe2)  # (1-cos t)/t^2
    x, y, z = axis_angle.unbind(-1)
    zero = torch.zeros_like(x)
    K = torch.stack([zero, -z, y, z, zero, -x, -y, x, zero], -1).reshape(*axis_angle.shape[:-1], 3, 3)
    eye = torch.eye(3, dtype=axis_angle.dtype, device=axis_angle.device).expand_as(K)
    return eye + a * K + b * (K @ K)


def quaternion_to_matrix(quaternion: torch.Tensor) -> torch.Tensor:
    """Unit quaternion(s) ``(w, x, y, z)`` float ``[..., 4]`` -> rotation matrices ``[..., 3, 3]``.

    The input is normalized first, so an unconstrained 4-vector can be optimized directly.
    """
    where = "quaternion_to_matrix"
    check_float(where, "quaternion", quaternion)
    if quaternion.shape[-1:] != (4,):
        raise PyGpuValueError(f"{where}: `quaternion` must have shape [..., 4] (w, x, y, z), got {tuple(quaternion.shape)}")
    w, x, y, z = _normalize(quaternion).unbind(-1)
    m = [
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
    ]
    return torch.stack(m, -1).reshape(*quaternion.shape[:-1], 3, 3)


def matrix_to_quaternion(matrix: torch.Tensor) -> torch.Tensor:
    """Rotation matrices ``[..., 3, 3]`` -> unit quaternions ``(w, x, y, z)`` ``[..., 4]`` with ``w >= 0``."""
    where = "matrix_to_quaternion"
    check_float(where, "matrix", matrix)
    if matrix.shape[-2:] != (3, 3):
        raise PyGpuValueError(f"{where}: `matrix` must have shape [..., 3, 3], got {tuple(matrix.shape)}")
    m = matrix
    m00, m11, m22 = m[..., 0, 0], m[..., 1, 1], m[..., 2, 2]
    # four candidate (un-normalized) quaternions; pick the best-conditioned one per matrix
    cands = torch.stack([
        torch.stack([1 + m00 + m11 + m22, m[..., 2, 1] - m[..., 1, 2], m[..., 0, 2] - m[..., 2, 0], m[..., 1, 0] - m[..., 0, 1]], -1),
        torch.stack([m[..., 2, 1] - m[..., 1, 2], 1 + m00 - m11 - m22, m[..., 0, 1] + m[..., 1, 0], m[..., 0, 2] + m[..., 2, 0]], -1),
        torch.stack([m[..., 0, 2] - m[..., 2, 0], m[..., 0, 1] + m[..., 1, 0], 1 - m00 + m11 - m22, m[..., 1, 2] + m[..., 2, 1]], -1),
        torch.stack([m[..., 1, 0] - m[..., 0, 1], m[..., 0, 2] + m[..., 2, 0], m[..., 1, 2] + m[..., 2, 1], 1 - m00 - m11 + m22], -1),
    ], -2)  # [..., 4, 4]
    diag = torch.stack([1 + m00 + m11 + m22, 1 + m00 - m11 - m22, 1 - m00 + m11 - m22, 1 - m00 - m11 + m22], -1)
    best = diag.argmax(-1)
    q = torch.gather(cands, -2, best[..., None, None].expand(*best.shape, 1, 4)).squeeze(-2)
    q = _normalize(q)
    return torch.where(q[..., :1] < 0, -q, q)


def rotation_angle(r1: torch.Tensor, r2: torch.Tensor | None = None) -> torch.Tensor:
    """Angle in radians of rotation ``r1`` (``[..., 3, 3]``), or of ``r1^T r2`` when ``r2`` is given."""
    r = r1 if r2 is None else r1.transpose(-1, -2) @ r2
    cos = ((r[..., 0, 0] + r[..., 1, 1] + r[..., 2, 2]) - 1.0) / 2.0
    return torch.acos(cos.clamp(-1.0, 1.0))


# ---- view matrices -----------------------------------------------------------------------------
def view_from_pose(rotation: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
    """World -> view matrix ``[B, 4, 4]`` of a camera whose camera-to-world rotation is ``rotation``
    (float ``[B, 3, 3]``: columns are the camera's +X right, +Y up, +Z back axes in world space) and
    whose center is ``position`` (float ``[B, 3]``). Differentiable in both.
    """
    where = "view_from_pose"
    check_float(where, "rotation", rotation)
    if rotation.dim() == 2:
        rotation = rotation.unsqueeze(0)
    check_shape(where, "rotation", rotation, (None, 3, 3), "[B, 3, 3] or [3, 3]")
    position = _vec(where, "position", position, dims=3, dtype=rotation.dtype, device=rotation.device)
    rt = rotation.transpose(-1, -2)  # world -> view rotation
    t = -(rt @ position.unsqueeze(-1))  # [B, 3, 1]
    B = max(rt.shape[0], t.shape[0])
    top = torch.cat([rt.expand(B, 3, 3), t.expand(B, 3, 1)], -1)
    bottom = torch.zeros(B, 1, 4, dtype=rt.dtype, device=rt.device)
    bottom = bottom + torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=rt.dtype, device=rt.device)
    return torch.cat([top, bottom], 1)


def look_at(eye, at=(0.0, 0.0, 0.0), up=(0.0, 1.0, 0.0)) -> torch.Tensor:
    """World -> view matrix ``[B, 4, 4]`` of a camera at ``eye`` looking at ``at`` with ``up`` roughly up.

    ``eye``, ``at``, ``up``: float ``[B, 3]`` or ``[3]`` (tensors or sequences). Differentiable in
    ``eye`` and ``at``. Raises when the view direction is parallel to ``up``.
    """
    where = "look_at"
    eye = _vec(where, "eye", eye, dims=3)
    at = _vec(where, "at", at, dims=3, dtype=eye.dtype, device=eye.device).to(eye.dtype)
    up = _vec(where, "up", up, dims=3, dtype=eye.dtype, device=eye.device).to(eye.dtype)
    back = eye - at  # camera +Z points away from the target
    if bool((back.detach().norm(dim=-1) == 0).any()):
        raise PyGpuValueError(f"{where}: `eye` and `at` coincide; the view direction is undefined")
    z = _normalize(back)
    x = torch.cross(up.expand_as(z), z, dim=-1)
    if bool((x.detach().norm(dim=-1) <= 1e-9 * up.detach().norm(dim=-1).clamp_min(1e-30)).any()):
        raise PyGpuValueError(f"{where}: the view direction is parallel to `up`; pass another `up` vector")
    x = _normalize(x)
    y = torch.cross(z, x, dim=-1)
    rotation = torch.stack([x, y, z], -1)  # columns: camera axes in world space
    return view_from_pose(rotation, eye)


# ---- projections -------------------------------------------------------------------------------
def perspective(fov_y: float | torch.Tensor = 60.0, aspect: float | torch.Tensor = 1.0, near: float = 0.1,
                far: float = 100.0, *, dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """View -> clip perspective matrix ``[B, 4, 4]`` (``B`` = 1 for scalar arguments).

    ``fov_y`` is the full vertical field of view in **degrees**; ``aspect`` = width / height.
    ``far`` may be ``math.inf``. NDC z is 0 on the near plane and 1 on the far plane; ``w`` is the
    view-space distance along the view axis (``-z_view``). Differentiable in tensor arguments.
    """
    where = "perspective"
    like = torch.empty(0, dtype=dtype, device=device)
    if isinstance(fov_y, torch.Tensor):
        like = torch.empty(0, dtype=fov_y.dtype, device=fov_y.device)
    fov = _scalar(where, "fov_y", fov_y, like=like)
    asp = _scalar(where, "aspect", aspect, like=like)
    if bool((fov.detach() <= 0).any() or (fov.detach() >= 180).any()):
        raise PyGpuValueError(f"{where}: `fov_y` is in degrees and must be in (0, 180), got {fov_y}")
    if bool((asp.detach() <= 0).any()):
        raise PyGpuValueError(f"{where}: `aspect` must be > 0, got {aspect}")
    near, far = float(near), float(far)
    if not (near > 0 and far > near):
        raise PyGpuValueError(f"{where}: need 0 < near < far, got near={near}, far={far}")
    f = 1.0 / torch.tan(fov * (math.pi / 360.0))
    B = max(f.shape[0], asp.shape[0])
    f, asp = f.expand(B), asp.expand(B)
    if math.isinf(far):
        a, b = -1.0, -near
    else:
        a, b = far / (near - far), far * near / (near - far)
    zero = torch.zeros_like(f)
    rows = [f / asp, zero, zero, zero,
            zero, f, zero, zero,
            zero, zero, zero + a, zero + b,
            zero, zero, zero - 1.0, zero]
    return torch.stack(rows, -1).reshape(B, 4, 4)


def orthographic(left: float, right: float, bottom: float, top: float, near: float = 0.1, far: float = 100.0,
                 *, dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """View -> clip orthographic matrix ``[1, 4, 4]`` of the view-space box
    ``[left, right] x [bottom, top] x [-far, -near]``; NDC z is 0 at ``near``, 1 at ``far``; ``w = 1``."""
    where = "orthographic"
    vals = [float(v) for v in (left, right, bottom, top, near, far)]
    if not all(math.isfinite(v) for v in vals):
        raise PyGpuValueError(f"{where}: bounds must be finite, got {vals}")
    if not (right > left and top > bottom and far > near):
        raise PyGpuValueError(f"{where}: need left < right, bottom < top, near < far, got {vals}")
    m = torch.zeros(1, 4, 4, dtype=dtype, device=device)
    m[0, 0, 0] = 2.0 / (right - left)
    m[0, 0, 3] = -(right + left) / (right - left)
    m[0, 1, 1] = 2.0 / (top - bottom)
    m[0, 1, 3] = -(top + bottom) / (top - bottom)
    m[0, 2, 2] = -1.0 / (far - near)
    m[0, 2, 3] = -near / (far - near)
    m[0, 3, 3] = 1.0
    return m


# ---- transforms ----------------------------------------------------------------------------------
def transform_points(matrix: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """Apply float ``[B, 4, 4]`` (or ``[4, 4]``) matrices to float ``[B, V, 3]`` (or ``[V, 3]``) points.

    Returns homogeneous float ``[B, V, 4]`` (``p @ M^T`` with ``p = (x, y, z, 1)``); batch sizes
    broadcast (1 against B).
    """
    where = "transform_points"
    check_float(where, "matrix", matrix)
    check_float(where, "points", points)
    if matrix.dim() == 2:
        matrix = matrix.unsqueeze(0)
    if points.dim() == 2:
        points = points.unsqueeze(0)
    check_shape(where, "matrix", matrix, (None, 4, 4), "[B, 4, 4] or [4, 4]")
    check_shape(where, "points", points, (None, None, 3), "[B, V, 3] or [V, 3]")
    if matrix.shape[0] != points.shape[0] and 1 not in (matrix.shape[0], points.shape[0]):
        raise PyGpuValueError(f"{where}: batch sizes {matrix.shape[0]} (matrix) and {points.shape[0]} (points) differ")
    matrix = matrix.to(points.dtype)
    return points @ matrix[:, :, :3].transpose(1, 2) + matrix[:, None, :, 3]


def clip_to_screen(clip: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Clip space float ``[B, V, 4]`` -> screen float ``[B, V, 3]`` ``(x_px, y_px, z/w)`` for ``size = (H, W)``.

    The raster rule's mapping (y down, pixel centers at +0.5). Every ``w`` must be > 0: clip first.
    """
    where = "clip_to_screen"
    check_float(where, "clip", clip)
    check_shape(where, "clip", clip, (None, None, 4), "[B, V, 4]")
    if clip.numel() and not bool((clip[..., 3] > 0).all()):
        raise PyGpuValueError(f"{where}: some w <= 0; clip against the near plane first (py_gpu.raster.clip.clip_near)")
    height, width = size
    w = clip[..., 3]
    x = (clip[..., 0] / w + 1.0) * (width / 2.0)
    y = (1.0 - clip[..., 1] / w) * (height / 2.0)
    return torch.stack((x, y, clip[..., 2] / w), -1)


@dataclass(frozen=True, eq=False)
class Camera:
    """A batch of ``B`` cameras: world -> view and view -> clip matrices.

    Attributes:
        view: float ``[B, 4, 4]`` world -> view (right-handed, looking down -Z).
        projection: float ``[B, 4, 4]`` view -> clip (NDC z in [0, 1]); ``B`` may be 1 for both
            and broadcasts against the other.
    """

    view: torch.Tensor
    projection: torch.Tensor

    def __post_init__(self) -> None:
        where = "Camera"
        for name in ("view", "projection"):
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor):
                raise PyGpuTypeError(f"{where}: `{name}` must be a tensor, got {type(t).__name__}")
            check_float(where, name, t)
            if t.dim() == 2:
                t = t.unsqueeze(0)
            check_shape(where, name, t, (None, 4, 4), "[B, 4, 4] or [4, 4]")
            check_finite(where, name, t)
            object.__setattr__(self, name, t)
        bv, bp = self.view.shape[0], self.projection.shape[0]
        if bv != bp and 1 not in (bv, bp):
            raise PyGpuValueError(f"{where}: batch sizes of `view` ({bv}) and `projection` ({bp}) differ")
        if self.view.device != self.projection.device:
            raise PyGpuValueError(f"{where}: `view` is on {self.view.device}, `projection` on {self.projection.device}")
        object.__setattr__(self, "projection", self.projection.to(self.view.dtype))

    @classmethod
    def perspective(cls, eye, at=(0.0, 0.0, 0.0), up=(0.0, 1.0, 0.0), *, fov_y=60.0, aspect=1.0, near=0.1,
                    far=100.0) -> "Camera":
        """A :func:`look_at` camera with a :func:`perspective` projection (degrees, width/height)."""
        view = look_at(eye, at, up)
        return cls(view, perspective(fov_y, aspect, near, far, dtype=view.dtype, device=view.device))

    @classmethod
    def orthographic(cls, eye, at=(0.0, 0.0, 0.0), up=(0.0, 1.0, 0.0), *, half_height=1.0, aspect=1.0,
                     near=0.1, far=100.0) -> "Camera":
        """A :func:`look_at` camera with a symmetric :func:`orthographic` box of height ``2 * half_height``."""
        view = look_at(eye, at, up)
        hw = half_height * aspect
        proj = orthographic(-hw, hw, -half_height, half_height, near, far, dtype=view.dtype, device=view.device)
        return cls(view, proj)

    @property
    def batch_size(self) -> int:
        return max(self.view.shape[0], self.projection.shape[0])

    @property
    def device(self) -> torch.device:
        return self.view.device

    @property
    def dtype(self) -> torch.dtype:
        return self.view.dtype

    @property
    def matrix(self) -> torch.Tensor:
        """float ``[B, 4, 4]`` world -> clip (``projection @ view``)."""
        return self.projection @ self.view

    @property
    def position(self) -> torch.Tensor:
        """float ``[B, 3]`` camera centers in world space."""
        r = self.view[:, :3, :3]
        t = self.view[:, :3, 3:]
        return -(r.transpose(1, 2) @ t).squeeze(-1)

    def world_to_view(self, points: torch.Tensor) -> torch.Tensor:
        """float ``[B, V, 3]`` view-space points (camera looks down -Z)."""
        return transform_points(self.view, points)[..., :3]

    def world_to_clip(self, points: torch.Tensor) -> torch.Tensor:
        """float ``[B, V, 4]`` clip-space points of world points ``[B, V, 3]`` or ``[V, 3]``."""
        return transform_points(self.matrix, points)

    def to(self, device=None, dtype=None) -> "Camera":
        return Camera(self.view.to(device=device, dtype=dtype), self.projection.to(device=device, dtype=dtype))
