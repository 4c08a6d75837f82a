"""GL reliability: threads, and large triangles that must never be dropped.

- Threads: two threads sharing one GL backend (or the cached one behind ``py_gpu.render``) both
  get correct images.
- Large triangles: GL coverage equals the reference's exactly for triangles thousands of pixels
  long around small images (llvmpipe dropped some whose bounding box, cut at the framebuffer's
  left and bottom sides, fell in its first 64 x 64 tile).

Everything that could hang runs in a fresh interpreter under a timeout (``_run``), and those
scripts give up on their own threads after a deadline, so a hang fails the test.
"""

from __future__ import annotations

import subprocess
import sys

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


# -- threads: scripts run in a fresh interpreter ---------------------------------------

_COMMON = r"""
import threading, time
import torch
import py_gpu
from py_gpu.contracts import TriangleBatch

SIZE = (30, 40)
DEADLINE = time.monotonic() + 40  # the script gives up on hung threads by then


def batch(k):
    g = torch.Generator().manual_seed(k)
    v = torch.rand(1, 30, 3, generator=g, dtype=torch.float64) * torch.tensor([40.0, 30.0, 1.0], dtype=torch.float64)
    return TriangleBatch(v, torch.arange(30).reshape(10, 3))


WANT = {k: py_gpu.render(batch(k), SIZE, backend="numpy").face_index >= 0 for k in range(40)}


def outcome(render, k):
    # 'image' (coverage equal to numpy's), or what went wrong
    try:
        frame = render(batch(k))
    except Exception as exc:
        return "other error: %s: %s" % (type(exc).__name__, exc)
    return "image" if torch.equal(frame.face_index >= 0, WANT[k]) else "wrong image"

"""


def _run(script: str) -> dict[str, str]:
    """Run ``_COMMON + script`` in a fresh interpreter, under a timeout; its ``key: value`` lines.

    The script gives up on hung threads before the timeout (``DEADLINE``)."""
    try:
        done = subprocess.run([sys.executable, "-c", _COMMON + script], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"hung: killed after {exc.timeout} s; output so far:\n{exc.stdout}\n{exc.stderr}")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line]
    return {key: value for key, value in lines}


_THREADS = r"""
shared = py_gpu.ModernGLBackend()  # made in the main thread, used only by the workers


def run(label, render):
    errors, start = [], threading.Barrier(2)

    def work(t):
        try:
            start.wait()
            for i in range(20):
                result = outcome(render, 2 * i + t)
                if result != "image":
                    errors.append("frame %d: %s" % (2 * i + t, result))
        except BaseException as exc:
            errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, DEADLINE - time.monotonic()))
    hung = any(thread.is_alive() for thread in threads)
    print("%s: %s" % (label, "hung" if hung else (errors[:3] or "ok")), flush=True)


def rgb8_then_frame(b):  # the 8-bit path's own framebuffer and program, then the checked frame
    shared.render_rgb8(b, SIZE)
    return shared.render_frame(b, SIZE)


run("shared", lambda b: shared.render_frame(b, SIZE))
run("cached", lambda b: py_gpu.render(b, SIZE, backend="moderngl"))
run("rgb8", rgb8_then_frame)
"""


def test_two_threads_share_one_backend(gl_available):
    got = _run(_THREADS)
    assert got == {"shared": "ok", "cached": "ok", "rgb8": "ok"}, got
