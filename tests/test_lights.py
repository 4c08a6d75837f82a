"""Lighting: Lambert's cosine law, point-light falloff, Blinn-Phong highlight, two-sided, gamma,
gradients; on every test device (float64; MPS, without float64, skips)."""

from __future__ import annotations

import math

import pytest
import torch

from py_gpu import PyGpuTypeError, PyGpuValueError
from py_gpu.shading.lights import (
    AmbientLight,
    DirectionalLight,
    Material,
    PointLight,
    gamma_decode,
    gamma_encode,
    shade,
)
from helpers import float64_on

D = torch.float64


@pytest.fixture
def on(device) -> dict:
    """Tensor keywords of the test device: ``torch.tensor(..., **on)``."""
    return dict(dtype=float64_on(device), device=device)


def _pts(on, n=5):
    """Random albedo, unit normals and positions, drawn on the CPU and moved to the device."""
    g = torch.Generator().manual_seed(0)
    pos = torch.randn(1, n, 3, generator=g, dtype=D) * 0.3
    nrm = torch.randn(1, n, 3, generator=g, dtype=D)
    nrm = nrm / nrm.norm(dim=-1, keepdim=True)
    alb = torch.rand(1, n, 3, generator=g, dtype=D)
    return alb.to(**on), nrm.to(**on), pos.to(**on)


def test_lambert_cosine_law_and_ambient(on):
    up = torch.tensor([[[0.0, 1.0, 0.0]]], **on)
    alb = torch.tensor([[[0.5, 0.25, 1.0]]], **on)
    pos = torch.zeros(1, 1, 3, **on)
    eye = torch.tensor([0.0, 5.0, 0.0], **on)
    for angle in (0.0, 30.0, 60.0, 100.0):
        a = math.radians(angle)
        light = DirectionalLight(direction=(math.sin(a), -math.cos(a), 0.0), color=(1.0, 0.5, 1.0), intensity=2.0)
        out = shade(alb, up, pos, eye, [light, AmbientLight((1.0, 1.0, 1.0), 0.1)], model="lambert")
        assert out.device == alb.device and out.dtype == alb.dtype
        expected = alb * (torch.tensor([1.0, 0.5, 1.0], **on) * 2.0 * max(0.0, math.cos(a)) + 0.1)
        assert torch.allclose(out, expected, atol=1e-12)


def test_point_light_inverse_square(on):
    up = torch.tensor([[[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]]], **on)
    pos = torch.tensor([[[0.0, 0.0, 0.0], [0.0, -1.0, 0.0]]], **on)
    alb = torch.ones(1, 2, 3, **on)
    light = PointLight(position=(0.0, 1.0, 0.0), intensity=4.0, attenuation=(0.0, 0.0, 1.0))
    out = shade(alb, up, pos, torch.tensor([0.0, 3.0, 0.0], **on), [light], model="lambert")
    assert torch.allclose(out[0, :, 0], torch.tensor([4.0, 1.0], **on))


def test_blinn_phong_highlight_peaks_at_mirror_direction(on):
    n = torch.tensor([[[0.0, 1.0, 0.0]]], **on)
    pos = torch.zeros(1, 1, 3, **on)
    alb = torch.zeros(1, 1, 3, **on)
    light = DirectionalLight(direction=(-1.0, -1.0, 0.0))
    vals = []
    for ex in (-4.0, -3.0, -2.0, -1.0, 0.0, 2.0):
        eye = torch.tensor([ex, 2.0, 0.0], **on)
        vals.append(shade(alb, n, pos, eye, [light], material=Material(specular=1.0, shininess=16.0))[0, 0, 0].item())
    assert vals.index(max(vals)) == 2  # eye at (-2, 2): the mirror direction of the light
    assert vals[2] == pytest.approx(1.0)
    lam = shade(alb, n, pos, torch.tensor([-2.0, 2.0, 0.0], **on), [light], model="lambert")
    assert float(lam.abs().max()) == 0.0


def test_two_sided_flips_normals_facing_away(on):
    n = torch.tensor([[[0.0, -1.0, 0.0]]], **on)  # facing down, away from the camera above
    pos = torch.zeros(1, 1, 3, **on)
    alb = torch.ones(1, 1, 3, **on)
    eye = torch.tensor([0.0, 2.0, 0.0], **on)
    light = [DirectionalLight(direction=(0.0, -1.0, 0.0))]
    assert shade(alb, n, pos, eye, light, model="lambert")[0, 0, 0].item() == pytest.approx(1.0)
    assert shade(alb, n, pos, eye, light, model="lambert", two_sided=False)[0, 0, 0].item() == 0.0


def test_batched_light_parameters(on):
    alb, nrm, pos = _pts(on)
    alb2, nrm2, pos2 = (t.expand(2, -1, -1) for t in (alb, nrm, pos))
    eye = torch.tensor([[0.0, 0.0, 3.0], [1.0, 1.0, 3.0]], **on)
    colors = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], **on)
    out = shade(alb2, nrm2, pos2, eye, [PointLight((0.0, 1.0, 2.0), colors, 1.0)])
    assert not torch.allclose(out[0], out[1])
    for b in range(2):
        one = shade(alb, nrm, pos, eye[b], [PointLight((0.0, 1.0, 2.0), colors[b], 1.0)])
        assert torch.allclose(out[b], one[0])


def test_shade_gradcheck(on):
    alb, nrm, pos = _pts(on, 4)
    eye = torch.tensor([0.2, 0.5, 3.0], **on)
    lp = torch.tensor([0.5, 1.5, 1.0], **on, requires_grad=True)
    ld = torch.tensor([0.3, -1.0, -0.4], **on, requires_grad=True)
    alb.requires_grad_(True)
    nrm.requires_grad_(True)

    def f(alb, nrm, lp, ld):
        lights = [AmbientLight(intensity=0.1), PointLight(lp, intensity=2.0, attenuation=(1.0, 0.1, 0.1)),
                  DirectionalLight(ld)]
        return shade(alb, nrm, pos, eye, lights, material=Material(0.5, 8.0))

    assert torch.autograd.gradcheck(f, (alb, nrm, lp, ld))


def test_gamma(on):
    c = torch.tensor([0.0, 0.25, 1.0, 1.5], **on)
    assert torch.allclose(gamma_encode(c, 2.0), torch.tensor([0.0, 0.5, 1.0, 1.0], **on))
    assert torch.allclose(gamma_decode(gamma_encode(c[:3])), c[:3])
    x = torch.tensor([0.0, 0.3], **on, requires_grad=True)
    gamma_encode(x).sum().backward()
    assert torch.isfinite(x.grad).all()


def test_bad_arguments(on):
    alb, nrm, pos = _pts(on)
    with pytest.raises(PyGpuValueError):
        shade(alb, nrm, pos, torch.zeros(3, **on), [], model="phong")
    with pytest.raises(PyGpuTypeError):
        shade(alb, nrm, pos, torch.zeros(3, **on), ["sun"])
    with pytest.raises(PyGpuValueError):
        shade(alb, nrm, pos, torch.zeros(3, **on), [DirectionalLight(direction=(1.0, 0.0))])
