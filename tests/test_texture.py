"""Texture sampling: conventions, filters against torch's grid_sample (values and gradients), wrap
modes, mipmaps, atlases, gradients; on every test device."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from py_gpu import PyGpuValueError
from py_gpu.shading.texture import Texture, atlas_uv, build_mipmaps, sample_texture, uv_derivatives
from helpers import compare_impls, float64_on

CPU = torch.device("cpu")


def _tex(h=6, w=8, c=3, seed=0, dtype=torch.float64, device=CPU):
    """A seeded random texture, drawn on the CPU (the same on every device), then moved."""
    return torch.rand(h, w, c, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(device, dtype)


def _uv(n=200, seed=1, lo=-0.3, hi=1.3, dtype=torch.float64, device=CPU):
    uv = lo + (hi - lo) * torch.rand(n, 2, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return uv.to(device, dtype)


def test_texel_centers_and_v_up(device, dtype):
    tex = _tex(dtype=dtype, device=device)
    H, W = tex.shape[:2]
    on = dict(dtype=dtype, device=device)
    i, j = torch.meshgrid(torch.arange(H, **on), torch.arange(W, **on), indexing="ij")
    uv = torch.stack([(j + 0.5) / W, 1 - (i + 0.5) / H], -1)
    atol = 1e-12 if dtype == torch.float64 else 1e-6
    for filt in ("nearest", "bilinear", "trilinear"):
        kw = {"lod": torch.zeros(H, W, device=device)} if filt == "trilinear" else {}
        out = sample_texture(tex, uv, filter=filt, **kw)
        assert out.device.type == device.type and out.dtype == dtype
        assert torch.allclose(out, tex, atol=atol), filt
    # v = 1 - tiny is the top row
    assert torch.allclose(sample_texture(tex, torch.tensor([[0.01, 0.99]], **on), filter="nearest")[0], tex[0, 0])


def _grid_sample(tex: torch.Tensor, uv: torch.Tensor, mode: str) -> torch.Tensor:
    """torch's grid_sample with py_gpu's conventions: v up, texel centers, edge texels extend."""
    grid = torch.stack([2 * uv[:, 0] - 1, 1 - 2 * uv[:, 1]], -1)[None, None]  # [1, 1, N, 2]
    out = F.grid_sample(tex.permute(2, 0, 1)[None], grid, mode=mode, padding_mode="border", align_corners=False)
    return out[0, :, 0].T


def test_bilinear_clamp_matches_grid_sample(device, dtype):
    """Values and the gradients to the texture and to the UVs."""
    tex, uv = _tex(dtype=dtype, device=device), _uv(dtype=dtype, device=device)
    result = compare_impls(lambda t, u: sample_texture(t, u, filter="bilinear", wrap="clamp"),
                           lambda t, u: _grid_sample(t.cpu(), u.cpu(), "bilinear"),
                           (tex.requires_grad_(True), uv.requires_grad_(True)), seed=2, label="bilinear vs grid_sample")
    g_tex, g_uv = result.grads
    assert g_tex.device.type == device.type and float(g_tex.abs().sum()) > 0
    assert float(g_uv.abs().sum()) > 0
    f64 = float64_on(device)
    tex, uv = tex.detach().to(f64), uv.detach().to(f64)
    ref_n = _grid_sample(tex.cpu(), uv.cpu().clamp(0, 1 - 1e-9), "nearest")
    ours_n = sample_texture(tex, uv.clamp(0, 1 - 1e-9), filter="nearest", wrap="clamp")
    assert (ours_n.cpu() - ref_n).abs().max() < 1e-12


@pytest.mark.parametrize("filt", ["nearest", "bilinear"])
def test_repeat_is_periodic(filt, device):
    f64 = float64_on(device)
    tex, uv = _tex(device=device), _uv(device=device)
    a = sample_texture(tex, uv, filter=filt)
    b = sample_texture(tex, uv + torch.tensor([2.0, -3.0], dtype=f64, device=device), filter=filt)
    assert torch.allclose(a, b, atol=1e-9)


def test_mipmaps_and_trilinear(device):
    f64 = float64_on(device)
    tex = _tex(8, 8, device=device)
    mips = build_mipmaps(tex[None])
    assert [m.shape[1:3] for m in mips] == [(8, 8), (4, 4), (2, 2), (1, 1)]
    assert all(m.device.type == device.type for m in mips)
    assert torch.allclose(mips[1][0, 0, 0], tex[:2, :2].mean((0, 1)))
    assert torch.allclose(mips[-1][0, 0, 0], tex.mean((0, 1)))
    uv = _uv(50, device=device)
    lvl1 = sample_texture(mips[1][0], uv, filter="bilinear")
    assert torch.allclose(sample_texture(tex, uv, filter="trilinear", lod=torch.ones(50, device=device)), lvl1, atol=1e-12)
    half = sample_texture(tex, uv, filter="trilinear", lod=torch.full((50,), 0.5, device=device))
    assert torch.allclose(half, 0.5 * sample_texture(tex, uv) + 0.5 * lvl1, atol=1e-12)
    # derivatives of 8 texels per pixel -> level 3 (the mean)
    grad = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=f64, device=device).expand(50, 4)
    assert torch.allclose(sample_texture(tex, uv, filter="trilinear", uv_grad=grad), tex.mean((0, 1)).expand(50, 3))


def test_minified_checkerboard_turns_gray_with_trilinear(device):
    f64 = float64_on(device)
    n = 64
    i, j = torch.meshgrid(torch.arange(n, device=device), torch.arange(n, device=device), indexing="ij")
    checker = ((i + j) % 2).to(f64)[..., None].expand(n, n, 3)
    s = torch.linspace(0, 1, 9, dtype=f64, device=device)[:-1] + 1 / 16  # an 8x8 screen showing 64x64 texels
    vv, uu = torch.meshgrid(s, s, indexing="ij")
    uv = torch.stack([uu, vv], -1)[None]  # [1, 8, 8, 2] image of UVs
    tri = sample_texture(checker, uv, filter="trilinear")
    assert tri.device.type == device.type
    assert torch.allclose(tri, torch.full_like(tri, 0.5), atol=1e-9)
    near = sample_texture(checker, uv, filter="nearest")
    assert float((near - 0.5).abs().min()) == 0.5  # aliasing without mipmaps
    d = uv_derivatives(uv).cpu()
    assert torch.allclose(d[..., 0], torch.full((1, 8, 8), 1 / 8, dtype=torch.float64))
    assert torch.allclose(d[..., 3], torch.full((1, 8, 8), 1 / 8, dtype=torch.float64))


def test_texture_object_caches_pyramid(device):
    t = Texture(_tex(8, 8, dtype=torch.float32, device=device), filter="trilinear")
    uv = _uv(10, dtype=torch.float32, device=device)
    lod = torch.ones(10, device=device)
    a = t.sample(uv, lod=lod)
    b = t.sample(uv, lod=lod)
    assert torch.equal(a, b) and t.builds == 1
    assert a.device.type == device.type
    t.image.mul_(0.5)
    c = t.sample(uv, lod=lod)
    assert t.builds == 2
    assert torch.allclose(c, 0.5 * a)


def test_batched_texture(device):
    tex = torch.stack([_tex(seed=0, dtype=torch.float32, device=device), _tex(seed=1, dtype=torch.float32, device=device)])
    uv = _uv(20, dtype=torch.float32, device=device).reshape(2, 10, 2)
    out = sample_texture(tex, uv)
    assert torch.allclose(out[1], sample_texture(tex[1], uv[1]))
    assert not torch.allclose(out[0], sample_texture(tex[1], uv[0]))
    with pytest.raises(PyGpuValueError):
        sample_texture(tex, _uv(3, dtype=torch.float32, device=device).reshape(3, 1, 2))


@pytest.mark.parametrize("filt", ["bilinear", "trilinear"])
def test_gradcheck_texture_and_uv(filt, device):
    f64 = float64_on(device)
    tex = _tex(4, 5, 2, device=device).requires_grad_(True)
    uv = torch.tensor([[0.13, 0.71], [0.52, 0.33], [1.37, -0.21]], dtype=f64, device=device, requires_grad=True)
    lod = torch.tensor([0.3, 1.2, 0.0], dtype=f64, device=device)
    kw = {"lod": lod} if filt == "trilinear" else {}
    assert torch.autograd.gradcheck(lambda t, u: sample_texture(t, u, filter=filt, **kw), (tex, uv))


def test_atlas_uv(device):
    on = dict(dtype=torch.float32, device=device)
    rects = torch.tensor([[0.0, 0.0, 0.5, 1.0], [0.5, 0.0, 1.0, 1.0]], **on)
    left = torch.zeros(4, 4, 3, **on)
    right = torch.ones(4, 4, 3, **on)
    atlas = torch.cat([left, right], 1)  # [4, 8, 3]
    uv = _uv(30, lo=0.0, hi=1.0, **on)
    mat = torch.arange(30, device=device) % 2
    auv = atlas_uv(uv, mat, rects)
    assert auv.device.type == device.type
    assert bool((auv[mat == 0, 0] <= 0.5).all()) and bool((auv[mat == 1, 0] >= 0.5).all())
    col = sample_texture(atlas, auv.clamp(0, 1), filter="nearest", wrap="clamp")
    assert torch.allclose(col[..., 0], mat.float())
    assert torch.allclose(atlas_uv(uv + 1.0, mat, rects), auv, atol=1e-6)
    with pytest.raises(PyGpuValueError):
        atlas_uv(uv, mat + 5, rects)


def test_bad_arguments(device):
    tex, uv = _tex(dtype=torch.float32, device=device), _uv(dtype=torch.float32, device=device)
    assert sample_texture(tex, uv).shape == (200, 3)  # the valid call works
    with pytest.raises(PyGpuValueError):
        sample_texture(tex, uv, filter="cubic")
    with pytest.raises(PyGpuValueError):
        sample_texture(tex, uv, wrap="mirror")
    with pytest.raises(PyGpuValueError):
        sample_texture(tex, uv, filter="trilinear")  # no derivatives for a flat uv list


def test_trilinear_samples_only_the_two_levels_it_blends():
    """Mixed levels of detail per point: the result is the written-out blend of the two levels
    around each point's level, with gradients to the texture and the UVs (gradcheck)."""
    from py_gpu.shading.texture import _sample_level, build_mipmaps

    g = torch.Generator().manual_seed(3)
    tex = torch.rand(16, 16, 3, generator=g, dtype=torch.float64)
    uv = torch.rand(40, 2, generator=g, dtype=torch.float64)
    lod = torch.rand(40, generator=g, dtype=torch.float64) * 5.0  # beyond the last level too: clamped
    got = sample_texture(tex, uv, filter="trilinear", lod=lod)
    mips = build_mipmaps(tex[None])
    level = lod.clamp(0, len(mips) - 1)
    lo = level.floor().long()
    want = torch.zeros(40, 3, dtype=torch.float64)
    for i in range(40):
        u, v = uv[i:i + 1, 0][None], uv[i:i + 1, 1][None]
        f = float(level[i] - lo[i])
        want[i] = (1 - f) * _sample_level(mips[lo[i]], u, v, "bilinear", "repeat")[0, 0]
        if f > 0:
            want[i] += f * _sample_level(mips[lo[i] + 1], u, v, "bilinear", "repeat")[0, 0]
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    t = tex[:4, :4].clone().requires_grad_(True)
    p = (torch.rand(6, 2, generator=g, dtype=torch.float64) * 0.8 + 0.1).requires_grad_(True)
    lods = torch.tensor([0.0, 0.3, 1.0, 1.7, 2.0, 0.5], dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda t, p: sample_texture(t, p, filter="trilinear", lod=lods), (t, p))
