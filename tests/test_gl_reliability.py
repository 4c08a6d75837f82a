"""GL reliability: large triangles are never dropped.

Large triangles: GL coverage equals the reference's exactly for triangles thousands of pixels
long around small images (llvmpipe dropped some whose bounding box, cut at the framebuffer's
left and bottom sides, fell in its first 64 x 64 tile).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, seed, settings

import py_gpu
from py_gpu.contracts import TriangleBatch

from strategies import large_triangles

pytestmark = pytest.mark.gl


@pytest.fixture(scope="module")
def gl(gl_available):
    backend = py_gpu.ModernGLBackend()
    yield backend
    backend.release()


def _assert_same_coverage(got, want):
    """Coverage exactly equal; a face may differ only where the two faces are equally near."""
    assert torch.equal(got.face_index >= 0, want.face_index >= 0)
    differ = got.face_index != want.face_index
    torch.testing.assert_close(got.depth[differ].double(), want.depth[differ].double(), rtol=0, atol=1e-4)


# -- large triangles ------------------------------------------------------------------------------

_ORIENTATIONS = {"+y-x": (1.0, -1.0), "+y+x": (1.0, 1.0), "-y+x": (-1.0, 1.0), "-y-x": (-1.0, -1.0)}


def _right_triangle(cx: float, cy: float, leg: float, orientation: str) -> TriangleBatch:
    """The right triangle with its corner at ``(cx, cy)`` and legs ``leg`` px along y and x."""
    sy, sx = _ORIENTATIONS[orientation]
    v = torch.tensor([[[cx, cy, 0.5], [cx, cy + sy * leg, 0.5], [cx + sx * leg, cy, 0.5]]], dtype=torch.float64)
    return TriangleBatch(v, torch.tensor([[0, 1, 2]]))


@pytest.mark.parametrize("orientation", list(_ORIENTATIONS))
@pytest.mark.parametrize("leg", [3000.0, 3500.0, 4000.0, 5250.0, 5500.0, 5750.0])
def test_right_triangle_from_the_center_covers_a_quadrant(gl, leg, orientation):
    batch = _right_triangle(32.0, 32.0, leg, orientation)
    got = gl.render_frame(batch, (64, 64))
    want = py_gpu.ReferenceBackend().render_frame(batch, (64, 64))
    _assert_same_coverage(got, want)
    assert int((got.face_index >= 0).sum()) == 32 * 32


@pytest.mark.parametrize("side", [128, 256, 512])
def test_corner_in_the_bottom_left_tile_of_any_image(gl, side):
    # The bottom-left 64 x 64 px of the image is GL's first tile (GL's origin is the bottom left).
    batch = _right_triangle(32.0, side - 32.0, 3000.0, "+y-x")
    got = gl.rasterize(batch, (side, side))
    want = py_gpu.NumpyBackend().rasterize(batch, (side, side))  # bit-identical to the reference
    _assert_same_coverage(got, want)
    assert int((got.face_index >= 0).sum()) == 32 * 32


@seed(20240611)
@settings(deadline=None, max_examples=120)
@given(case=large_triangles())
def test_large_triangles_match_reference(gl, case):
    batch, size = case
    got = gl.rasterize(batch, size)
    want = py_gpu.ReferenceBackend().rasterize(batch, size)
    _assert_same_coverage(got, want)
