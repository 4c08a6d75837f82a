"""Texture sampling: conventions, filters against torch's grid_sample, wrap modes, mipmaps, atlases, gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from py_gpu import PyGpuValueError
from py_gpu.shading.texture import Texture, atlas_uv, build_mipmaps, sample_texture, uv_derivatives


def _tex(h=6, w=8, c=3, seed=0, dtype=torch.float64):
    return torch.rand(h, w, c, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _uv(n=200, seed=1, lo=-0.3, hi=1.3, dtype=torch.float64):
    return lo + (hi - lo) * torch.rand(n, 2, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def test_texel_centers_and_v_up():
    tex = _tex()
    H, W = tex.shape[:2]
    i, j = torch.meshgrid(torch.arange(H, dtype=torch.float64), torch.arange(W, dtype=torch.float64), indexing="ij")
    uv = torch.stack([(j + 0.5) / W, 1 - (i + 0.5) / H], -1)
    for filt in ("nearest", "bilinear", "trilinear"):
        kw = {"lod": torch.zeros(H, W)} if filt == "trilinear" else {}
        assert torch.allclose(sample_texture(tex, uv, filter=filt, **kw), tex, atol=1e-12)
    # v = 1 - tiny is the top row
    assert torch.allclose(sample_texture(tex, torch.tensor([[0.01, 0.99]], dtype=torch.float64), filter="nearest")[0], tex[0, 0])


def test_bilinear_clamp_matches_grid_sample():
    tex = _tex()
    uv = _uv()
    ours = sample_texture(tex, uv, filter="bilinear", wrap="clamp")
    grid = torch.stack([2 * uv[:, 0] - 1, 1 - 2 * uv[:, 1]], -1)[None, None]  # [1, 1, N, 2]
    ref = F.grid_sample(tex.permute(2, 0, 1)[None], grid, mode="bilinear", padding_mode="border", align_corners=False)
    assert torch.allclose(ours, ref[0, :, 0].T, atol=1e-12)
    ref_n = F.grid_sample(tex.permute(2, 0, 1)[None], grid.clamp(-1, 1 - 1e-9), mode="nearest", align_corners=False)
    ours_n = sample_texture(tex, uv.clamp(0, 1 - 1e-9), filter="nearest", wrap="clamp")
    assert (ours_n - ref_n[0, :, 0].T).abs().max() < 1e-12


@pytest.mark.parametrize("filt", ["nearest", "bilinear"])
def test_repeat_is_periodic(filt):
    tex, uv = _tex(), _uv()
    a = sample_texture(tex, uv, filter=filt)
    b = sample_texture(tex, uv + torch.tensor([2.0, -3.0], dtype=torch.float64), filter=filt)
    assert torch.allclose(a, b, atol=1e-9)


def test_mipmaps_and_trilinear():
    tex = _tex(8, 8)
    mips = build_mipmaps(tex[None])
    assert [m.shape[1:3] for m in mips] == [(8, 8), (4, 4), (2, 2), (1, 1)]
    assert torch.allclose(mips[1][0, 0, 0], tex[:2, :2].mean((0, 1)))
    assert torch.allclose(mips[-1][0, 0, 0], tex.mean((0, 1)))
    uv = _uv(50)
    lvl1 = sample_texture(mips[1][0], uv, filter="bilinear")
    assert torch.allclose(sample_texture(tex, uv, filter="trilinear", lod=torch.ones(50)), lvl1, atol=1e-12)
    half = sample_texture(tex, uv, filter="trilinear", lod=torch.full((50,), 0.5))
    assert torch.allclose(half, 0.5 * sample_texture(tex, uv) + 0.5 * lvl1, atol=1e-12)
    # derivatives of 8 texels per pixel -> level 3 (the mean)
    grad = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=torch.float64).expand(50, 4)
    assert torch.allclose(sample_texture(tex, uv, filter="trilinear", uv_grad=grad), tex.mean((0, 1)).expand(50, 3))


def test_minified_checkerboard_turns_gray_with_trilinear():
    n = 64
    i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    checker = ((i + j) % 2).double()[..., None].expand(n, n, 3)
    s = torch.linspace(0, 1, 9, dtype=torch.float64)[:-1] + 1 / 16  # an 8x8 screen showing 64x64 texels
    vv, uu = torch.meshgrid(s, s, indexing="ij")
    uv = torch.stack([uu, vv], -1)[None]  # [1, 8, 8, 2] image of UVs
    tri = sample_texture(checker, uv, filter="trilinear")
    assert torch.allclose(tri, torch.full_like(tri, 0.5), atol=1e-9)
    near = sample_texture(checker, uv, filter="nearest")
    assert float((near - 0.5).abs().min()) == 0.5  # aliasing without mipmaps
    d = uv_derivatives(uv)
    assert torch.allclose(d[..., 0], torch.full((1, 8, 8), 1 / 8, dtype=torch.float64))
    assert torch.allclose(d[..., 3], torch.full((1, 8, 8), 1 / 8, dtype=torch.float64))


def test_texture_object_caches_pyramid():
    t = Texture(_tex(8, 8), filter="trilinear")
    uv = _uv(10)
    a = t.sample(uv, lod=torch.ones(10))
    b = t.sample(uv, lod=torch.ones(10))
    assert torch.equal(a, b) and t.builds == 1
    t.image.mul_(0.5)
    t.sample(uv, lod=torch.ones(10))
    assert t.builds == 2


def test_batched_texture():
    tex = torch.stack([_tex(seed=0), _tex(seed=1)])
    uv = _uv(20).reshape(2, 10, 2)
    out = sample_texture(tex, uv)
    assert torch.allclose(out[1], sample_texture(tex[1], uv[1]))
    with pytest.raises(PyGpuValueError):
        sample_texture(tex, _uv(3).reshape(3, 1, 2))


@pytest.mark.parametrize("filt", ["bilinear", "trilinear"])
def test_gradcheck_texture_and_uv(filt):
    tex = _tex(4, 5, 2).requires_grad_(True)
    uv = torch.tensor([[0.13, 0.71], [0.52, 0.33], [1.37, -0.21]], dtype=torch.float64, requires_grad=True)
    lod = torch.tensor([0.3, 1.2, 0.0], dtype=torch.float64)
    kw = {"lod": lod} if filt == "trilinear" else {}
    assert torch.autograd.gradcheck(lambda t, u: sample_texture(t, u, filter=filt, **kw), (tex, uv))


def test_atlas_uv():
    rects = torch.tensor([[0.0, 0.0, 0.5, 1.0], [0.5, 0.0, 1.0, 1.0]], dtype=torch.float64)
    left = torch.zeros(4, 4, 3, dtype=torch.float64)
    right = torch.ones(4, 4, 3, dtype=torch.float64)
    atlas = torch.cat([left, right], 1)  # [4, 8, 3]
    uv = _uv(30, lo=0.0, hi=1.0)
    mat = torch.arange(30) % 2
    auv = atlas_uv(uv, mat, rects)
    assert bool((auv[mat == 0, 0] <= 0.5).all()) and bool((auv[mat == 1, 0] >= 0.5).all())
    col = sample_texture(atlas, auv.clamp(0, 1), filter="nearest", wrap="clamp")
    assert torch.allclose(col[..., 0], mat.double())
    assert torch.allclose(atlas_uv(uv + 1.0, mat, rects), auv, atol=1e-12)
    with pytest.raises(PyGpuValueError):
        atlas_uv(uv, mat + 5, rects)


def test_bad_arguments():
    with pytest.raises(PyGpuValueError):
        sample_texture(_tex(), _uv(), filter="cubic")
    with pytest.raises(PyGpuValueError):
        sample_texture(_tex(), _uv(), wrap="mirror")
    with pytest.raises(PyGpuValueError):
        sample_texture(_tex(), _uv(), filter="trilinear")  # no derivatives for a flat uv list


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
