"""OBJ + MTL input: material names and ids, Kd colors, sRGB-decoded map_Kd textures, missing files,
and an OBJ + MTL + PNG asset rendered through the Renderer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

import py_gpu
from py_gpu import PyGpuValueError
from py_gpu.image import linear_to_srgb, srgb_to_linear
from py_gpu.mesh import ObjMaterial, load_obj, load_obj_with_materials

QUADS = """v -1 -0.5 0
v 0 -0.5 0
v 0 0.5 0
v -1 0.5 0
v 1 -0.5 0
v 1 0.5 0
vt 0 0
vt 1 0
vt 1 1
vt 0 1
"""
#: left quad (corners 1-4) with material `a`, right quad (corners 2, 5, 6, 3) with material `b`;
#: the two share the edge 2-3 with the same UVs there
FACES = "usemtl {a}\nf 1/1 2/2 3/3 4/4\nusemtl {b}\nf 2/2 5/1 6/4 3/3\n"


def _png(path, pixels):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.asarray(pixels, np.uint8)).save(path)


def _asset(tmp_path, *, mtl="newmtl wood\nKd 0.8 0.8 0.8\nmap_Kd textures/wood.png\nnewmtl red\nKd 1 0 0\n",
           a="wood", b="red", header="mtllib scene.mtl\n"):
    """An OBJ (two quads), its MTL and a 4 x 4 PNG (sRGB 128 gray, except a red top-left texel)."""
    pixels = np.full((4, 4, 3), 128, np.uint8)
    pixels[0, 0] = (255, 0, 0)
    _png(tmp_path / "textures" / "wood.png", pixels)
    (tmp_path / "scene.mtl").write_text(mtl)
    obj = tmp_path / "scene.obj"
    obj.write_text(header + QUADS + FACES.format(a=a, b=b))
    return obj


# ---- sRGB -------------------------------------------------------------------------------------------
def test_srgb_transfer_functions_are_exact_and_inverse():
    x = torch.tensor([0.0, 0.04045, 128 / 255, 0.5, 1.0], dtype=torch.float64)
    want = torch.tensor([0.0, 0.04045 / 12.92, ((128 / 255 + 0.055) / 1.055) ** 2.4, ((0.5 + 0.055) / 1.055) ** 2.4, 1.0],
                        dtype=torch.float64)
    assert torch.allclose(srgb_to_linear(x), want, rtol=1e-15, atol=0)
    assert abs(float(srgb_to_linear(torch.tensor(128 / 255))) - 0.2158605) < 1e-6
    assert abs(float(linear_to_srgb(torch.tensor(0.5, dtype=torch.float64))) - 0.7353569830524495) < 1e-12
    grid = torch.linspace(0, 1, 4097, dtype=torch.float64)
    assert torch.allclose(linear_to_srgb(srgb_to_linear(grid)), grid, atol=1e-14)
    assert float((srgb_to_linear(grid)[1:] - srgb_to_linear(grid)[:-1]).min()) > 0  # monotonic, continuous
    t = torch.tensor([0.0, 0.003, 0.04045, 0.3, 1.0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: (srgb_to_linear(v + 0.001), linear_to_srgb(v + 0.001)), (t,))
    with pytest.raises(TypeError):
        srgb_to_linear(torch.tensor([1, 2]))


# ---- materials ----------------------------------------------------------------------------------------
def test_names_ids_kd_and_srgb_decoded_texture(tmp_path):
    mesh, materials = load_obj_with_materials(_asset(tmp_path))
    assert [m.name for m in materials] == ["wood", "red"]
    assert all(isinstance(m, ObjMaterial) for m in materials)
    assert mesh.material_ids.tolist() == [0, 0, 1, 1]
    assert materials[0].diffuse == (0.8, 0.8, 0.8) and materials[1].diffuse == (1.0, 0.0, 0.0)
    tex = materials[0].texture
    assert tex.shape == (4, 4, 3) and tex.dtype == torch.float32
    assert materials[0].texture_path == tmp_path / "textures" / "wood.png"
    assert torch.allclose(tex[1, 1], torch.full((3,), 0.2158605), atol=1e-6)  # sRGB 128 -> linear
    assert torch.equal(tex[0, 0], torch.tensor([1.0, 0.0, 0.0]))  # row 0 is the image's top row
    assert materials[1].texture is None and materials[1].texture_path is None
    # Kd becomes vertex colors; the textured material is white so its texture shows as authored
    face_colors = mesh.colors[mesh.faces]  # [F, 3 corners, 3]
    assert torch.equal(face_colors[:2], torch.ones(2, 3, 3))
    assert torch.equal(face_colors[2:], torch.tensor([1.0, 0.0, 0.0]).expand(2, 3, 3))
    # the shared edge is split by color, and the smooth normals stay those of the unsplit mesh
    assert mesh.num_vertices == 8
    assert torch.allclose(mesh.normals, torch.tensor([0.0, 0.0, 1.0]).expand(8, 3))
    # load_obj gives the same mesh without decoding images
    plain = load_obj(tmp_path / "scene.obj", dtype=torch.float64)
    assert torch.equal(plain.faces, mesh.faces) and torch.allclose(plain.colors, mesh.colors.double())
    assert torch.equal(plain.material_ids, mesh.material_ids)


def test_single_material_has_zero_ids_not_none(tmp_path):
    obj = _asset(tmp_path, a="red", b="red")
    mesh, materials = load_obj_with_materials(obj)
    assert [m.name for m in materials] == ["red"]
    assert mesh.material_ids is not None and mesh.material_ids.tolist() == [0, 0, 0, 0]
    assert mesh.num_vertices == 6  # one color: nothing to split
    assert torch.equal(mesh.colors, torch.tensor([1.0, 0.0, 0.0]).expand(6, 3))
    no_mtl = tmp_path / "plain.obj"
    no_mtl.write_text(QUADS + "usemtl only\nf 1 2 3\n")
    assert load_obj(no_mtl).material_ids.tolist() == [0]
    bare = tmp_path / "bare.obj"
    bare.write_text(QUADS + "f 1 2 3\n")
    mesh, materials = load_obj_with_materials(bare)
    assert mesh.material_ids is None and materials == [] and mesh.colors is None


def test_faces_before_usemtl_and_undefined_names_get_a_white_material(tmp_path):
    obj = tmp_path / "early.obj"
    (tmp_path / "m.mtl").write_text("newmtl red\nKd 1 0 0\n")
    obj.write_text("mtllib m.mtl\n" + QUADS + "f 1 2 3\nusemtl red\nf 1 3 4\nusemtl ghost\nf 2 5 6\n")
    mesh, materials = load_obj_with_materials(obj)
    assert [(m.name, m.diffuse) for m in materials] == [("", (1.0, 1.0, 1.0)), ("red", (1.0, 0.0, 0.0)),
                                                       ("ghost", (1.0, 1.0, 1.0))]
    assert mesh.material_ids.tolist() == [0, 1, 2]


def test_several_mtl_files_and_paths_relative_to_each_file(tmp_path):
    (tmp_path / "lib").mkdir()
    _png(tmp_path / "lib" / "maps" / "blue.png", [[[0, 0, 255]]])
    (tmp_path / "lib" / "one.mtl").write_text("newmtl tex\nmap_Kd -s 1 1 -bm 0.5 maps/blue.png\n")  # relative to lib/
    (tmp_path / "two.mtl").write_text("\ufeffnewmtl green\nKd 0 1 0\n")  # with a byte-order mark
    (tmp_path / "three.mtl").write_bytes(b"# caf\xe9\nnewmtl gray\nKd 0.5\n")  # Latin-1, one-number Kd
    obj = tmp_path / "multi.obj"
    obj.write_text("mtllib lib/one.mtl two.mtl\nmtllib three.mtl\n" + QUADS
                   + "usemtl tex\nf 1/1 2/2 3/3\nusemtl green\nf 1 3 4\nusemtl gray\nf 2 5 6\n")
    mesh, materials = load_obj_with_materials(obj)
    assert [m.name for m in materials] == ["tex", "green", "gray"]
    assert torch.equal(materials[0].texture, torch.tensor([[[0.0, 0.0, 1.0]]]))
    assert materials[1].diffuse == (0.0, 1.0, 0.0) and materials[2].diffuse == (0.5, 0.5, 0.5)


def test_missing_mtl_and_texture_files_name_the_line(tmp_path):
    obj = _asset(tmp_path, header="# header\nmtllib nowhere.mtl\n")
    with pytest.raises(PyGpuValueError, match=r"scene\.obj:2: MTL file .*nowhere\.mtl.* does not exist.*mtl=False"):
        load_obj(obj)
    assert load_obj(obj, mtl=False).colors is None  # the geometry alone still loads
    obj = _asset(tmp_path, mtl="newmtl wood\n\nmap_Kd textures/missing.png\nnewmtl red\nKd 1 0 0\n")
    for loader in (load_obj, load_obj_with_materials):
        with pytest.raises(PyGpuValueError, match=r"scene\.mtl:3: map_Kd texture .*missing\.png.* does not exist"):
            loader(obj)
    obj = _asset(tmp_path, mtl="newmtl wood\nKd 1 x 0\n")
    with pytest.raises(PyGpuValueError, match=r"scene\.mtl:2: `Kd` needs 3 numbers"):
        load_obj(obj)
    obj = _asset(tmp_path, mtl="Kd 1 0 0\n")
    with pytest.raises(PyGpuValueError, match=r"scene\.mtl:1: `Kd` before any `newmtl`"):
        load_obj(obj)
    (tmp_path / "textures" / "broken.png").write_bytes(b"not a png")
    obj = _asset(tmp_path, mtl="newmtl wood\nmap_Kd textures/broken.png\n")
    with pytest.raises(PyGpuValueError, match=r"scene\.mtl:2: cannot read texture"):
        load_obj_with_materials(obj)


def test_materials_follow_dtype_and_device(tmp_path, device):
    mesh, materials = load_obj_with_materials(_asset(tmp_path), dtype=torch.float64, device=device)
    assert mesh.device.type == device.type and materials[0].texture.device.type == device.type
    assert materials[0].texture.dtype == torch.float64 and mesh.colors.dtype == torch.float64


# ---- rendering -----------------------------------------------------------------------------------------
def test_obj_mtl_png_renders_through_the_renderer_in_four_lines(tmp_path):
    obj = _asset(tmp_path)  # scene.obj + scene.mtl + textures/wood.png, written above
    mesh, materials = load_obj_with_materials(obj)
    renderer = py_gpu.Renderer((32, 32))
    camera = py_gpu.Camera.perspective((0.0, 0.0, 2.0))
    frame = renderer.render(renderer.upload(mesh), camera, textures=[m.texture for m in materials])
    # the textured quad on the left shows the decoded gray texel, the Kd quad on the right is red
    gray = float(srgb_to_linear(torch.tensor(128 / 255)))
    left, right = frame.image[0, 16, 10], frame.image[0, 16, 22]
    assert torch.allclose(left, torch.full((3,), gray), atol=1e-4), left
    assert torch.allclose(right, torch.tensor([1.0, 0.0, 0.0]), atol=1e-6), right
