"""Cameras: conventions (right-handed, -Z forward, y up, NDC z in [0, 1]), rotations, gradients;
on every test device."""

from __future__ import annotations

import math

import pytest
import torch

from py_gpu import PyGpuValueError
from py_gpu.camera import (
    Camera,
    axis_angle_to_matrix,
    clip_to_screen,
    look_at,
    matrix_to_quaternion,
    orthographic,
    perspective,
    quaternion_to_matrix,
    rotation_angle,
    transform_points,
    view_from_pose,
)
from helpers import float64_on


def test_look_at_axes_and_position(device):
    on = dict(device=device)
    view = look_at(torch.tensor([0.0, 0.0, 5.0], **on), (0.0, 0.0, 0.0))
    assert view.device.type == device.type
    p = transform_points(view, torch.tensor([[0.0, 0.0, 0.0], [1.0, 2.0, 5.0]], **on)).cpu()
    assert torch.allclose(p[0, 0], torch.tensor([0.0, 0.0, -5.0, 1.0]))  # target straight ahead, -Z
    assert torch.allclose(p[0, 1], torch.tensor([1.0, 2.0, 0.0, 1.0]))  # x right, y up
    cam = Camera.perspective(torch.tensor([3.0, 4.0, 5.0], **on), (1.0, 0.0, 0.0))
    assert cam.device.type == device.type
    assert torch.allclose(cam.position.cpu(), torch.tensor([[3.0, 4.0, 5.0]]), atol=1e-5)
    r = cam.view[0, :3, :3].cpu()
    assert torch.allclose(r @ r.T, torch.eye(3), atol=1e-6)
    assert torch.det(r) > 0  # right-handed


def test_look_at_rejects_parallel_up():
    with pytest.raises(PyGpuValueError):
        look_at((0.0, 5.0, 0.0), (0.0, 0.0, 0.0), (0.0, 1.0, 0.0))
    with pytest.raises(PyGpuValueError):
        look_at((1.0, 1.0, 1.0), (1.0, 1.0, 1.0))


@pytest.mark.parametrize("far", [10.0, math.inf])
def test_perspective_depth_range_zero_to_one(far, device):
    near = 0.5
    f64 = dict(dtype=float64_on(device), device=device)
    proj = perspective(90.0, 2.0, near, far, **f64)
    pts = torch.tensor([[0.0, 0.0, -near], [0.0, 0.0, -(far if math.isfinite(far) else 1e12)], [1.0, 1.0, -1.0]], **f64)
    clip = transform_points(proj, pts)[0].cpu()
    ndc = clip[:, :3] / clip[:, 3:]
    assert ndc[0, 2].item() == pytest.approx(0.0, abs=1e-12)
    assert ndc[1, 2].item() == pytest.approx(1.0, abs=1e-9)
    assert clip[2, 3].item() == pytest.approx(1.0)  # w = distance along -Z
    assert ndc[2, 0].item() == pytest.approx(0.5)  # aspect 2 halves x at fov 90
    assert ndc[2, 1].item() == pytest.approx(1.0)  # y up: top edge of the view


def test_orthographic_maps_box_to_ndc(device):
    proj = orthographic(-2.0, 2.0, -1.0, 1.0, 1.0, 3.0, device=device)
    pts = torch.tensor([[-2.0, -1.0, -1.0], [2.0, 1.0, -3.0]], device=device)
    clip = transform_points(proj, pts)[0]
    assert clip.device.type == device.type
    assert torch.allclose(clip.cpu(), torch.tensor([[-1.0, -1.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]]))


def test_clip_to_screen_matches_raster_mapping(device):
    clip = torch.tensor([[[-1.0, 1.0, 0.0, 1.0], [2.0, -2.0, 1.0, 2.0]]], device=device)
    s = clip_to_screen(clip, (10, 20))
    assert torch.allclose(s.cpu(), torch.tensor([[[0.0, 0.0, 0.0], [20.0, 10.0, 0.5]]]))
    with pytest.raises(PyGpuValueError):
        clip_to_screen(torch.tensor([[[0.0, 0.0, 0.0, -1.0]]], device=device), (4, 4))


def test_rotations_agree_and_round_trip(device):
    f64 = dict(dtype=float64_on(device), device=device)
    g = torch.Generator().manual_seed(0)
    aa = torch.randn(16, 3, generator=g, dtype=torch.float64).to(device)
    r = axis_angle_to_matrix(aa)
    assert r.device.type == device.type
    assert torch.allclose(r @ r.transpose(1, 2), torch.eye(3, **f64).expand(16, 3, 3), atol=1e-12)
    angle = aa.norm(dim=-1)
    axis = aa / angle[:, None]
    half = (angle / 2)[:, None]
    q = torch.cat([torch.cos(half), axis * torch.sin(half)], -1)
    assert torch.allclose(quaternion_to_matrix(q), r, atol=1e-12)
    assert torch.allclose(quaternion_to_matrix(matrix_to_quaternion(r)), r, atol=1e-10)
    wrapped = torch.remainder(angle + math.pi, 2 * math.pi) - math.pi
    assert torch.allclose(rotation_angle(r), wrapped.abs(), atol=1e-7)
    # a rotation about +Z by 90 degrees takes +X to +Y (right-handed)
    rz = axis_angle_to_matrix(torch.tensor([0.0, 0.0, math.pi / 2], **f64))
    assert torch.allclose(rz @ torch.tensor([1.0, 0.0, 0.0], **f64), torch.tensor([0.0, 1.0, 0.0], **f64), atol=1e-12)


def test_axis_angle_gradcheck_including_zero(device):
    f64 = dict(dtype=float64_on(device), device=device)
    aa = torch.tensor([[0.3, -0.2, 0.5], [0.0, 0.0, 0.0], [1e-6, 0.0, -2e-6]], **f64, requires_grad=True)
    assert torch.autograd.gradcheck(axis_angle_to_matrix, (aa,))
    q = torch.tensor([[0.9, 0.1, -0.3, 0.2]], **f64, requires_grad=True)
    assert torch.autograd.gradcheck(quaternion_to_matrix, (q,))


def test_camera_world_to_clip_gradcheck(device):
    f64 = dict(dtype=float64_on(device), device=device)
    eye = torch.tensor([[0.5, 1.0, 4.0]], **f64, requires_grad=True)
    fov = torch.tensor([50.0], **f64, requires_grad=True)
    pts = torch.tensor([[0.1, 0.2, 0.3], [-1.0, 0.5, 0.0]], **f64)

    def f(eye, fov):
        cam = Camera(look_at(eye, (0.0, 0.0, 0.0)), perspective(fov, 1.5, 0.1, 10.0))
        return cam.world_to_clip(pts)

    assert torch.autograd.gradcheck(f, (eye, fov))


def test_view_from_pose_batched_and_inverse(device):
    f64 = dict(dtype=float64_on(device), device=device)
    g = torch.Generator().manual_seed(1)
    r = axis_angle_to_matrix(torch.randn(3, 3, generator=g, dtype=torch.float64).to(device))
    pos = torch.randn(3, 3, generator=g, dtype=torch.float64).to(device)
    view = view_from_pose(r, pos)
    assert view.shape == (3, 4, 4) and view.device.type == device.type
    cam = Camera(view, perspective(60.0, 1.0, **f64))
    assert cam.batch_size == 3
    assert torch.allclose(cam.position, pos, atol=1e-12)
    assert torch.allclose(cam.world_to_view(pos[:, None, :]), torch.zeros(3, 1, 3, **f64), atol=1e-12)


def test_bad_inputs_raise():
    with pytest.raises(PyGpuValueError):
        perspective(0.0)
    with pytest.raises(PyGpuValueError):
        perspective(60.0, 1.0, near=1.0, far=0.5)
    with pytest.raises(PyGpuValueError):
        orthographic(1.0, -1.0, -1.0, 1.0)
    with pytest.raises(PyGpuValueError):
        Camera(torch.eye(4).expand(2, 4, 4), perspective(60.0).expand(3, 4, 4))
    with pytest.raises(PyGpuValueError):
        transform_points(torch.eye(4), torch.zeros(5, 2))
