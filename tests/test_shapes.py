"""Procedural shapes (py_gpu.shapes): outward counter-clockwise winding, unit normals, closed
surfaces where they should be, face counts, and the fixtures built from them."""

from __future__ import annotations

import math

import pytest
import torch

import py_gpu
from py_gpu import PyGpuValueError
from py_gpu.fixtures import mesh_fixture
from py_gpu.shapes import cube, icosphere, plane, torus, uv_sphere

SHAPES = {
    "cube": lambda: cube(2.0),
    "plane": lambda: plane(2.0, 3),
    "uv_sphere": lambda: uv_sphere(8, 12),
    "icosphere": lambda: icosphere(1),
    "torus": lambda: torus(1.0, 0.3, 12, 8),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_procedural_winding_is_outward_and_normals_unit(name):
    mesh = SHAPES[name]()
    fn = mesh.face_normals()
    vn = mesh.normals[mesh.faces].mean(1)
    assert bool(((fn * vn).sum(-1) > 0.5).all()), "faces must be counter-clockwise seen from outside"
    assert torch.allclose(mesh.normals.norm(dim=-1), torch.ones(mesh.num_vertices), atol=1e-5)
    if mesh.uvs is not None:
        assert float(mesh.uvs.min()) >= 0.0 and float(mesh.uvs.max()) <= 1.0


def test_closed_meshes_have_zero_signed_volume_error():
    # a closed outward mesh's divergence-theorem volume is positive and near the true one
    for mesh, volume in ((cube(2.0), 8.0), (icosphere(3), 4.18879)):
        tri = mesh.positions[mesh.faces].double()
        vol = (torch.cross(tri[:, 0], tri[:, 1], dim=-1) * tri[:, 2]).sum() / 6.0
        assert vol.item() == pytest.approx(volume, rel=0.02)



@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_icosphere_counts_radius_and_no_duplicate_vertices(level):
    mesh = icosphere(level, 2.0, dtype=torch.float64)
    assert mesh.num_faces == 20 * 4**level
    assert mesh.num_vertices == 10 * 4**level + 2  # Euler: V - E + F = 2 with E = 3F/2
    assert torch.allclose(mesh.positions.norm(dim=-1), torch.full((mesh.num_vertices,), 2.0, dtype=torch.float64))
    assert torch.unique(mesh.positions.round(decimals=9), dim=0).shape[0] == mesh.num_vertices


def _edge_uses(mesh) -> torch.Tensor:
    """How many faces use each undirected edge, with seam duplicates welded by position."""
    pos = mesh.positions.double().round(decimals=6)
    _, weld = torch.unique(pos, dim=0, return_inverse=True)
    f = weld[mesh.faces]
    edges = torch.cat([f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]]).sort(dim=1).values
    return torch.unique(edges, dim=0, return_counts=True)[1]


@pytest.mark.parametrize("make", [lambda: cube(1.0), lambda: icosphere(2), lambda: uv_sphere(6, 10),
                                  lambda: torus(1.0, 0.3, 10, 6)], ids=["cube", "icosphere", "uv_sphere", "torus"])
def test_closed_shapes_are_watertight(make):
    """Every edge of a closed shape is shared by exactly two faces (after welding UV seams)."""
    assert bool((_edge_uses(make()) == 2).all())


def test_plane_has_a_boundary_and_counts():
    mesh = plane(1.0, 4)
    assert mesh.num_faces == 2 * 16 and mesh.num_vertices == 25
    uses = _edge_uses(mesh)
    assert int((uses == 1).sum()) == 4 * 4 and bool((uses <= 2).all())


def test_torus_counts_and_radii():
    mesh = torus(1.0, 0.25, 12, 8, dtype=torch.float64)
    assert mesh.num_faces == 2 * 12 * 8
    p = mesh.positions
    ring = torch.sqrt(p[:, 0] ** 2 + p[:, 2] ** 2)  # around the +Y axis
    tube = torch.sqrt((ring - 1.0) ** 2 + p[:, 1] ** 2)
    assert torch.allclose(tube, torch.full_like(tube, 0.25), atol=1e-12)


def test_fixtures_are_built_from_the_shapes():
    ico = mesh_fixture("icosphere", 1280, 64, 64, tilt=0.0, colors="none")
    sphere = icosphere(3, dtype=torch.float64)
    assert torch.equal(ico.faces, sphere.faces) and ico.vertices.shape[1] == sphere.num_vertices
    # with no tilt, screen x is an affine map of the shape's x
    x = sphere.positions[:, 0]
    assert torch.allclose(ico.vertices[0, :, 0], 32 + x * 0.5 * 64 * 0.82, atol=1e-9)
    tor = mesh_fixture("torus", 1000, 64, 64, colors="none")
    assert tor.num_faces == 2 * 35 * 14  # n = round(sqrt(1000 / 5)) = 14 tube segments, round(2.5 n) around


@pytest.mark.parametrize("call,match", [(lambda: icosphere(9), "level"), (lambda: icosphere(1.5), "level"),
                                        (lambda: plane(1.0, 0), "subdivisions"), (lambda: uv_sphere(1, 8), "rings"),
                                        (lambda: torus(1.0, 0.3, 2, 8), "segments")])
def test_bad_shape_arguments_raise(call, match):
    with pytest.raises(PyGpuValueError, match=match):
        call()


def test_shapes_are_reachable_from_the_package():
    assert py_gpu.shapes.cube is cube
    assert math.isclose(float(cube(2.0).positions.abs().max()), 1.0)
