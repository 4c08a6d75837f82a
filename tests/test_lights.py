"""Lighting: Lambert's cosine law, point-light falloff, Blinn-Phong highlight, two-sided, gamma, gradients."""

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

D = torch.float64


def _pts(n=5):
    g = torch.Generator().manual_seed(0)
    pos = torch.randn(1, n, 3, generator=g, dtype=D) * 0.3
    nrm = torch.randn(1, n, 3, generator=g, dtype=D)
    nrm = nrm / nrm.norm(dim=-1, keepdim=True)
    alb = torch.rand(1, n, 3, generator=g, dtype=D)
    return alb, nrm, pos


def test_lambert_cosine_law_and_ambient():
    up = torch.tensor([[[0.0, 1.0, 0.0]]], dtype=D)
    alb = torch.tensor([[[0.5, 0.25, 1.0]]], dtype=D)
    pos = torch.zeros(1, 1, 3, dtype=D)
    eye = torch.tensor([0.0, 5.0, 0.0], dtype=D)
    for angle in (0.0, 30.0, 60.0, 100.0):
        a = math.radians(angle)
        light = DirectionalLight(direction=(math.sin(a), -math.cos(a), 0.0), color=(1.0, 0.5, 1.0), intensity=2.0)
        out = shade(alb, up, pos, eye, [light, AmbientLight((1.0, 1.0, 1.0), 0.1)], model="lambert")
        expected = alb * (torch.tensor([1.0, 0.5, 1.0], dtype=D) * 2.0 * max(0.0, math.cos(a)) + 0.1)
        assert torch.allclose(out, expected, atol=1e-12)


def test_point_light_inverse_square():
    up = torch.tensor([[[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]]], dtype=D)
    pos = torch.tensor([[[0.0, 0.0, 0.0], [0.0, -1.0, 0.0]]], dtype=D)
    alb = torch.ones(1, 2, 3, dtype=D)
    light = PointLight(position=(0.0, 1.0, 0.0), intensity=4.0, attenuation=(0.0, 0.0, 1.0))
    out = shade(alb, up, pos, torch.tensor([0.0, 3.0, 0.0], dtype=D), [light], model="lambert")
    assert torch.allclose(out[0, :, 0], torch.tensor([4.0, 1.0], dtype=D))


def test_blinn_phong_highlight_peaks_at_mirror_direction():
    n = torch.tensor([[[0.0, 1.0, 0.0]]], dtype=D)
    pos = torch.zeros(1, 1, 3, dtype=D)
    alb = torch.zeros(1, 1, 3, dtype=D)
    light = DirectionalLight(direction=(-1.0, -1.0, 0.0))
    vals = []
    for ex in (-4.0, -3.0, -2.0, -1.0, 0.0, 2.0):
        eye = torch.tensor([ex, 2.0, 0.0], dtype=D)
        vals.append(shade(alb, n, pos, eye, [light], material=Material(specular=1.0, shininess=16.0))[0, 0, 0].item())
    assert vals.index(max(vals)) == 2  # eye at (-2, 2): the mirror direction of the light
    assert vals[2] == pytest.approx(1.0)
    lam = shade(alb, n, pos, torch.tensor([-2.0, 2.0, 0.0], dtype=D), [light], model="lambert")
    assert float(lam.abs().max()) == 0.0


def test_two_sided_flips_normals_facing_away():
    n = torch.tensor([[[0.0, -1.0, 0.0]]], dtype=D)  # facing down, away from the camera above
    pos = torch.zeros(1, 1, 3, dtype=D)
    alb = torch.ones(1, 1, 3, dtype=D)
    eye = torch.tensor([0.0, 2.0, 0.0], dtype=D)
    light = [DirectionalLight(direction=(0.0, -1.0, 0.0))]
    assert shade(alb, n, pos, eye, light, model="lambert")[0, 0, 0].item() == pytest.approx(1.0)
    assert shade(alb, n, pos, eye, light, model="lambert", two_sided=False)[0, 0, 0].item() == 0.0


def test_batched_light_parameters():
    alb, nrm, pos = _pts()
    alb2, nrm2, pos2 = (t.expand(2, -1, -1) for t in (alb, nrm, pos))
    eye = torch.tensor([[0.0, 0.0, 3.0], [1.0, 1.0, 3.0]], dtype=D)
    colors = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=D)
    out = shade(alb2, nrm2, pos2, eye, [PointLight((0.0, 1.0, 2.0), colors, 1.0)])
    for b in range(2):
        one = shade(alb, nrm, pos, eye[b], [PointLight((0.0, 1.0, 2.0), colors[b], 1.0)])
        assert torch.allclose(out[b], one[0])


def test_shade_gradcheck():
    alb, nrm, pos = _pts(4)
    eye = torch.tensor([0.2, 0.5, 3.0], dtype=D)
    lp = torch.tensor([0.5, 1.5, 1.0], dtype=D, requires_grad=True)
    ld = torch.tensor([0.3, -1.0, -0.4], dtype=D, requires_grad=True)
    alb.requires_grad_(True)
    nrm.requires_grad_(True)

    def f(alb, nrm, lp, ld):
        lights = [AmbientLight(intensity=0.1), PointLight(lp, intensity=2.0, attenuation=(1.0, 0.1, 0.1)),
                  DirectionalLight(ld)]
        return shade(alb, nrm, pos, eye, lights, material=Material(0.5, 8.0))

    assert torch.autograd.gradcheck(f, (alb, nrm, lp, ld))


def test_gamma():
    c = torch.tensor([0.0, 0.25, 1.0, 1.5], dtype=D)
    assert torch.allclose(gamma_encode(c, 2.0), torch.tensor([0.0, 0.5, 1.0, 1.0], dtype=D))
    assert torch.allclose(gamma_decode(gamma_encode(c[:3])), c[:3])
    x = torch.tensor([0.0, 0.3], dtype=D, requires_grad=True)
    gamma_encode(x).sum().backward()
    assert torch.isfinite(x.grad).all()


def test_bad_arguments():
    alb, nrm, pos = _pts()
    with pytest.raises(PyGpuValueError):
        shade(alb, nrm, pos, torch.zeros(3, dtype=D), [], model="phong")
    with pytest.raises(PyGpuTypeError):
        shade(alb, nrm, pos, torch.zeros(3, dtype=D), ["sun"])
    with pytest.raises(PyGpuValueError):
        shade(alb, nrm, pos, torch.zeros(3, dtype=D), [DirectionalLight(direction=(1.0, 0.0))])
