"""MeshBatch, normals, OBJ round trips, trimesh interop (the shapes: tests/test_shapes.py)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from py_gpu import PyGpuTypeError, PyGpuValueError
from py_gpu.mesh import MeshBatch, concat_meshes, from_trimesh, load_obj, save_obj, to_trimesh, vertex_normals
from py_gpu.shapes import cube, icosphere, plane, torus

def test_smooth_normals_computed_and_differentiable():
    base = icosphere(1, dtype=torch.float64)
    computed = MeshBatch(base.positions, base.faces)
    assert (computed.normals - base.normals).norm(dim=-1).max() < 0.05
    pos = (base.positions * 1.3).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda p: vertex_normals(p, base.faces), (pos,))


def test_meshbatch_validation():
    with pytest.raises(PyGpuValueError):
        MeshBatch(torch.zeros(3, 2), torch.zeros(1, 3, dtype=torch.int64))
    with pytest.raises(PyGpuValueError):
        MeshBatch(torch.zeros(3, 3), torch.tensor([[0, 1, 3]]))
    with pytest.raises(PyGpuTypeError):
        MeshBatch(torch.zeros(3, 3), torch.tensor([[0.0, 1.0, 2.0]]))
    with pytest.raises(PyGpuValueError):
        MeshBatch(torch.zeros(3, 3), torch.tensor([[0, 1, 2]]), uvs=torch.zeros(4, 2))


def test_concat_and_transform():
    a, b = cube(1.0).with_material(0), plane(1.0).with_material(1)
    m = concat_meshes([a, b])
    assert m.num_vertices == a.num_vertices + b.num_vertices
    assert m.num_faces == a.num_faces + b.num_faces
    assert int(m.faces[a.num_faces:].min()) == a.num_vertices
    assert m.material_ids.tolist() == [0] * a.num_faces + [1] * b.num_faces
    t = torch.eye(4)
    t[:3, 3] = torch.tensor([1.0, 2.0, 3.0])
    t[0, 0] = 2.0
    moved = a.transformed(t)
    assert torch.allclose(moved.positions.mean(0), torch.tensor([1.0, 2.0, 3.0]), atol=1e-6)
    assert torch.allclose(moved.normals.norm(dim=-1), torch.ones(a.num_vertices))


def test_obj_round_trip(tmp_path):
    mesh = torus(1.0, 0.3, 10, 6, dtype=torch.float64)
    path = tmp_path / "t.obj"
    save_obj(path, mesh)
    back = load_obj(path, dtype=torch.float64)
    assert back.num_faces == mesh.num_faces
    assert torch.allclose(back.positions[back.faces], mesh.positions[mesh.faces], atol=1e-8)
    assert torch.allclose(back.uvs[back.faces], mesh.uvs[mesh.faces], atol=1e-8)
    assert torch.allclose(back.normals[back.faces], mesh.normals[mesh.faces], atol=1e-8)


def test_obj_polygons_negative_indices_and_materials(tmp_path):
    text = """# a quad and a pentagon
v 0 0 0
v 1 0 0
v 1 1 0
v 0 1 0
v -1 0.5 0
vt 0 0
vt 1 0
vt 1 1
vt 0 1
usemtl red
f 1/1 2/2 3/3 4/4
usemtl blue
f -5 -4 -3 -2 -1
"""
    path = tmp_path / "poly.obj"
    path.write_text(text)
    mesh = load_obj(path)
    assert mesh.num_faces == 2 + 3
    assert mesh.material_ids.tolist() == [0, 0, 1, 1, 1]
    area = 0.5 * mesh.face_normals().shape[0]
    assert area > 0
    # the quad has UVs; the pentagon has none, so uvs are dropped for the whole mesh
    assert mesh.uvs is None
    assert torch.allclose(mesh.normals[:, 2].abs(), torch.ones(mesh.num_vertices))
    bad = tmp_path / "bad.obj"
    bad.write_text("v 0 0 0\nf 1 2 3\n")
    with pytest.raises(PyGpuValueError, match="out of range"):
        load_obj(bad)


def test_trimesh_interop_or_clear_error():
    mesh = cube(1.0)
    if importlib.util.find_spec("trimesh") is None:
        with pytest.raises(ImportError, match=r'pip install "py_gpu\[mesh\]"'):
            to_trimesh(mesh)
        pytest.skip("trimesh is not installed (optional extra `mesh`)")
    back = from_trimesh(to_trimesh(mesh))
    assert torch.allclose(back.positions, mesh.positions)
    assert torch.equal(back.faces, mesh.faces)
