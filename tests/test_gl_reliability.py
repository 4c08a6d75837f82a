"""GL reliability: fork(), threads, and large triangles that must never be dropped.

- fork(): a child forked after its parent made a GL context (even one released before the fork)
  renders with a context of its own, or raises the clear fork error; it never hangs.
- Threads: two threads sharing one GL backend (or the cached one behind ``py_gpu.render``) both
  get correct images.
- Large triangles: GL coverage equals the reference's exactly for triangles thousands of pixels
  long around small images (llvmpipe dropped some whose bounding box, cut at the framebuffer's
  left and bottom sides, fell in its first 64 x 64 tile).

Everything that could hang runs in a fresh interpreter under a timeout (``_run``), and those
scripts kill their own children after a deadline, so a hang fails the test and leaves nothing
behind.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from hypothesis import given, seed, settings

import py_gpu
from py_gpu import _gl
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


@pytest.mark.parametrize("size", [(128, 128), (256, 256), (512, 512), (96, 512), (512, 96)])
def test_corner_in_the_bottom_left_tile_of_any_image(gl, size):
    # The bottom-left 64 x 64 px of the image is GL's first tile (GL's origin is the bottom left);
    # the framebuffer's margin runs along x for wide and square images, along y for tall ones.
    batch = _right_triangle(32.0, size[0] - 32.0, 3000.0, "+y-x")
    got = gl.rasterize(batch, size)
    want = py_gpu.NumpyBackend().rasterize(batch, size)  # bit-identical to the reference
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


# -- fork() and threads: scripts run in a fresh interpreter ---------------------------------------

_COMMON = r"""
import os, signal, sys, threading, time
import torch
import py_gpu
from py_gpu.contracts import TriangleBatch

SIZE = (30, 40)
DEADLINE = time.monotonic() + 40  # every process kills its hung children by then (inherited by fork)


def batch(k):
    g = torch.Generator().manual_seed(k)
    v = torch.rand(1, 30, 3, generator=g, dtype=torch.float64) * torch.tensor([40.0, 30.0, 1.0], dtype=torch.float64)
    return TriangleBatch(v, torch.arange(30).reshape(10, 3))


WANT = {k: py_gpu.render(batch(k), SIZE, backend="numpy").face_index >= 0 for k in range(40)}


def outcome(render, k):
    # 'image' (coverage equal to numpy's), 'fork-error' (the clear error), or what went wrong
    try:
        frame = render(batch(k))
    except py_gpu.BackendUnavailableError as exc:
        return "fork-error" if "fork()" in str(exc) else "other error: " + str(exc).replace(chr(10), " ")
    except Exception as exc:
        return "other error: %s: %s" % (type(exc).__name__, exc)
    return "image" if torch.equal(frame.face_index >= 0, WANT[k]) else "wrong image"


def wait(pid, early=0.0):
    # the child's exit code, or 'hung' after killing it at DEADLINE - early
    while time.monotonic() < DEADLINE - early:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "hung"
"""


def _run(script: str) -> dict[str, str]:
    """Run ``_COMMON + script`` in a fresh interpreter, under a timeout; its ``key: value`` lines.

    The script's processes kill their own hung children before the timeout (``DEADLINE``)."""
    try:
        done = subprocess.run([sys.executable, "-c", _COMMON + script], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"hung: killed after {exc.timeout} s; output so far:\n{exc.stdout}\n{exc.stderr}")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line]
    return {key: value for key, value in lines}


_FORK = r"""
inherited = py_gpu.ModernGLBackend()  # the parent's own backend, used again by its children
released = py_gpu.ModernGLBackend()
assert outcome(lambda b: released.render_frame(b, SIZE), 0) == "image"
released.release()  # released before the fork: its context must not matter either
assert outcome(lambda b: inherited.render_frame(b, SIZE), 0) == "image"
assert outcome(lambda b: py_gpu.render(b, SIZE, backend="moderngl"), 0) == "image"  # the cached backend
py_gpu.available_backends()  # the probe, made once per process
with inherited.ctx:
    print("renderer: " + inherited.ctx.info["GL_RENDERER"], flush=True)

# a Renderer keeps its mesh in a GL buffer (persistent geometry): a child must upload it again
scene = py_gpu.Renderer((24, 32), backend="moderngl")
mesh = scene.upload(py_gpu.shapes.cube(1.0))
camera = py_gpu.Camera.perspective((0.5, 1.0, 3.0), (0.0, 0.0, 0.0), aspect=32 / 24)
scene_want = scene.render(mesh, camera).face_index


def scene_outcome():
    try:
        frame = scene.render(mesh, camera)
    except py_gpu.BackendUnavailableError as exc:
        return "fork-error" if "fork()" in str(exc) else "other error: " + str(exc).replace(chr(10), " ")
    except Exception as exc:
        return "other error: %s: %s" % (type(exc).__name__, exc)
    return "image" if torch.equal(frame.face_index, scene_want) else "wrong image"


def report(gen, k):
    torch.set_num_threads(1)  # torch's own worker threads do not survive fork() (DataLoader does the same)
    print("%s render: %s" % (gen, outcome(lambda b: py_gpu.render(b, SIZE, backend="moderngl"), k)), flush=True)
    print("%s fresh: %s" % (gen, outcome(lambda b: py_gpu.ModernGLBackend().render_frame(b, SIZE), k + 1)), flush=True)
    print("%s inherited: %s" % (gen, outcome(lambda b: inherited.render_frame(b, SIZE), k + 2)), flush=True)
    print("%s scene: %s" % (gen, scene_outcome()), flush=True)


pid = os.fork()
if pid == 0:
    report("child", 1)
    grandchild = os.fork()
    if grandchild == 0:
        report("grandchild", 4)
        os._exit(0)
    print("grandchild exit: %s" % wait(grandchild, early=5.0), flush=True)
    os._exit(0)
print("child exit: %s" % wait(pid), flush=True)

import multiprocessing

process = multiprocessing.get_context("fork").Process(target=report, args=("mp child", 7))
process.start()
process.join(max(0.0, DEADLINE - time.monotonic()))
if process.is_alive():
    process.kill()
    process.join()
    print("mp child exit: hung", flush=True)
else:
    print("mp child exit: %s" % process.exitcode, flush=True)
print("parent: " + outcome(lambda b: inherited.render_frame(b, SIZE), 10), flush=True)
"""


def test_fork_children_render_or_raise_the_fork_error(gl_available):
    got = _run(_FORK)
    for key in ("child exit", "grandchild exit", "mp child exit"):
        assert got.get(key) == "0", (key, got)
    outcomes = {key: value for key, value in got.items() if key.split()[-1] in ("render", "fresh", "inherited", "scene")}
    assert len(outcomes) == 12, got
    for key, value in outcomes.items():
        assert value in ("image", "fork-error"), (key, value)
    assert got["parent"] == "image"  # the parent's context still works after its children
    if "llvmpipe" in got["renderer"] and _gl.surfaceless_offered():
        # Mesa: a first-generation child gets a fresh context on the surfaceless platform
        for key, value in outcomes.items():
            if not key.startswith("grandchild"):
                assert value == "image", (key, value)


_DATALOADER = r"""
from torch.utils.data import DataLoader, Dataset


class Frames(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, k):
        return py_gpu.render(batch(k), SIZE, backend="moderngl").face_index[0] >= 0


py_gpu.select_backend("auto").release()  # 'auto' probes and builds GL in the parent
py_gpu.render(batch(0), SIZE, backend="moderngl")
loader = DataLoader(Frames(), batch_size=2, num_workers=2, multiprocessing_context="fork",
                    timeout=max(1.0, DEADLINE - time.monotonic()))
try:
    got = torch.cat(list(loader))
except RuntimeError as exc:  # a worker failed or timed out
    print("loader: " + ("fork-error" if "fork()" in str(exc) else str(exc).replace(chr(10), " ")), flush=True)
else:
    want = torch.cat([WANT[k][0:1] for k in range(8)])
    print("loader: " + ("image" if torch.equal(got, want) else "wrong image"), flush=True)
"""


def test_dataloader_fork_workers(gl_available):
    got = _run(_DATALOADER)
    assert got.get("loader") in ("image", "fork-error"), got
    if _gl.surfaceless_offered():
        assert got["loader"] == "image"


def test_passed_in_context_after_fork_raises_the_fork_error(gl_available):
    ctx = _gl.create_context()
    try:
        backend = py_gpu.ModernGLBackend(context=ctx)
        backend._pid = -1  # as in a process forked after the backend was made
        with pytest.raises(py_gpu.BackendUnavailableError, match=r"fork\(\)") as info:
            backend.render_frame(_right_triangle(4.0, 4.0, 3.0, "+y+x"), (8, 8))
        assert "spawn" in str(info.value)
        backend.release()
    finally:
        ctx.release()


def test_every_kind_tried_before_fork_raises_the_fork_error(gl_available, monkeypatch):
    monkeypatch.setattr(_gl, "_tried_in", {label: -1 for label, _ in _gl.context_attempts()})
    with pytest.raises(py_gpu.BackendUnavailableError, match=r"do not survive fork\(\)") as info:
        py_gpu.ModernGLBackend()
    assert "spawn" in str(info.value)


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
