"""One texture per material: each texture is sampled only at its own material's fragments, and
the result equals rendering with that texture alone on those pixels."""

from __future__ import annotations

import pytest
import torch

from py_gpu import Camera, Renderer
from py_gpu.mesh import concat_meshes
from py_gpu.shading.lights import AmbientLight, DirectionalLight
from py_gpu.shading.texture import Texture
from py_gpu.shapes import cube, plane


@pytest.mark.parametrize("filt", ["nearest", "bilinear", "trilinear"])
def test_per_material_textures_match_single_texture_renders(filt):
    g = torch.Generator().manual_seed(5)
    tex_a = torch.rand(8, 8, 3, generator=g, dtype=torch.float64)
    tex_b = torch.rand(16, 16, 3, generator=g, dtype=torch.float64)
    box = cube(1.0, dtype=torch.float64).with_material(0)
    floor = plane(3.0, 2, dtype=torch.float64).transformed(
        torch.tensor([[1.0, 0, 0, 0], [0, 1, 0, -0.5], [0, 0, 1, 0], [0, 0, 0, 1]], dtype=torch.float64)).with_material(1)
    r = Renderer((24, 32), backend="torch", dtype=torch.float64)
    h = r.upload(concat_meshes([box, floor]))
    cam = Camera.perspective((1.5, 1.2, 2.5), (0.0, -0.2, 0.0), aspect=32 / 24)
    lights = [AmbientLight(0.3), DirectionalLight((-0.3, -1.0, -0.5), 0.8)]
    kw = dict(lights=lights, texture_filter=filt, attachments=("material_id",))
    both = r.render(h, cam, textures=[Texture(tex_a), tex_b], **kw)
    only_a = r.render(h, cam, textures=tex_a, **kw)
    only_b = r.render(h, cam, textures=Texture(tex_b), **kw)
    mat = both.extras["material_id"][..., 0]
    assert int((mat == 0).sum()) > 30 and int((mat == 1).sum()) > 30
    torch.testing.assert_close(both.image[mat == 0], only_a.image[mat == 0], rtol=0, atol=1e-12)
    torch.testing.assert_close(both.image[mat == 1], only_b.image[mat == 1], rtol=0, atol=1e-12)
    untextured = r.render(h, cam, textures=[None, tex_b], **kw)
    plain = r.render(h, cam, **{k: v for k, v in kw.items()})
    torch.testing.assert_close(untextured.image[mat == 0], plain.image[mat == 0], rtol=0, atol=1e-12)


def test_per_material_textures_carry_gradients():
    tex = torch.full((4, 4, 3), 0.5, dtype=torch.float64, requires_grad=True)
    r = Renderer((16, 16), backend="torch", dtype=torch.float64)
    h = r.upload(cube(1.0, dtype=torch.float64))
    frame = r.render(h, Camera.perspective((0.0, 0.0, 3.0)), textures=[tex])
    frame.image.sum().backward()
    assert float(tex.grad.abs().sum()) > 0
