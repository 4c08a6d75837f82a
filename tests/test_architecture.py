"""The package's structure: one clip site, one interpolation kernel, layers that only import
downward, 0.0.1 names in ``py_gpu.compat`` only, errors that surface where the cause is."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
from pathlib import Path

import pytest
import torch

import py_gpu
from py_gpu import BlendSettings, Camera, MeshBatch, RasterSettings, Renderer, TriangleBatch
from py_gpu._check import BackendUnavailableError, PyGpuValueError

PACKAGE = Path(py_gpu.__file__).parent

ROOT = PACKAGE.parent


def _tool():
    """tools/architecture.py, the one list of layers (it also draws docs/architecture.md's picture)."""
    spec = importlib.util.spec_from_file_location("architecture_tool", ROOT / "tools" / "architecture.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


TOOL = _tool()
#: Layers from the bottom up; a module may import only from its own layer or lower ones.
LAYERS = [set(prefixes) for _, prefixes in TOOL.LAYERS]
#: Third-party modules that are optional, the only ones a function may import.
OPTIONAL = {"moderngl", "py_3d", "trimesh", "imageio", "imageio.v2", "PIL", "matplotlib", "matplotlib.pyplot",
            "ctypes.wintypes", "tqdm", "imageio_ffmpeg"}
#: Names py_gpu 0.0.1 defined; only py_gpu.compat may define them.
SEED_NAMES = {"ScreenVertex", "ScreenTriangle", "RasterBatch", "FrameBuffer", "DepthBuffer", "CPURasterBackend",
              "NumpyRasterBackend", "ModernGLRasterBackend", "RasterBackend", "select_backend", "detect_gpu_packages"}


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = (ast.parse(path.read_text()), path.name == "__init__.py")
    return out


def _imports(name: str, tree: ast.Module, is_package: bool, known: set[str]):
    """(imported py_gpu module, inside a function?) for every import statement of module ``name``."""
    base = name.split(".") if is_package else name.split(".")[:-1]
    funcs = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
             for n in ast.walk(f)}
    for node in ast.walk(tree):
        local = id(node) in funcs
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, local
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                mod = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                mod = node.module
            for alias in node.names:
                sub = f"{mod}.{alias.name}"
                yield (sub if sub in known else mod), local


def _layer(module: str) -> int:
    for rank, group in enumerate(LAYERS):
        for prefix in group:
            if module == prefix or (prefix != "py_gpu" and module.startswith(prefix + ".")):
                return rank
    raise AssertionError(f"module {module} is in no layer; add it to LAYERS")


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    graph = {}
    for name, (tree, is_package) in mods.items():
        graph[name] = {m for m, _ in _imports(name, tree, is_package, known) if m in known and m != name}
    return graph


def test_no_module_imports_a_layer_above_it():
    bad = [(a, b) for a, deps in _graph().items() for b in deps if _layer(b) > _layer(a)]
    assert not bad, f"imports that reach up a layer: {bad}"


def test_the_package_has_no_import_cycle():
    graph = _graph()
    # a package's __init__ importing its own modules is not a cycle through the package
    edges = {a: {b for b in deps if not a.startswith(b + ".")} for a, deps in graph.items()}
    state: dict[str, int] = {}

    def visit(node, path):
        state[node] = 1
        for nxt in edges.get(node, ()):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])


def test_imports_inside_functions_are_optional_dependencies_only():
    mods = _modules()
    known = set(mods)
    bad = [(name, m) for name, (tree, pkg) in mods.items() for m, local in _imports(name, tree, pkg, known)
           if local and m not in OPTIONAL]
    assert not bad, f"function-level imports of required modules: {bad}"


def test_only_compat_defines_the_0_0_1_names():
    offenders = []
    for name, (tree, _) in _modules().items():
        if name.startswith("py_gpu.compat"):
            continue
        for node in tree.body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name in SEED_NAMES:
                offenders.append((name, node.name))
            if isinstance(node, ast.Assign):
                offenders += [(name, t.id) for t in node.targets if isinstance(t, ast.Name) and t.id in SEED_NAMES]
    assert not offenders, offenders


def test_clip_batch_is_called_in_exactly_one_place():
    calls = []
    for path in PACKAGE.rglob("*.py"):
        if path.parent.name == "raster" and path.name == "clip.py":
            continue
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\bclip_(batch|near)\(", line) and not line.lstrip().startswith(("def ", "#", '"')):
                calls.append(f"{path.relative_to(PACKAGE)}:{lineno}")
    assert calls == ["frontend.py:" + calls[0].split(":")[1]] and len(calls) == 1, calls


def test_one_interpolation_kernel():
    """Barycentric weighting of gathered corner values happens only in shading/interpolate.py
    (the rasterizers compute barycentrics; the reference's pure-Python shading is its oracle)."""
    allowed = {"shading/interpolate.py", "raster/clip.py", "backends/cpu.py"}
    pattern = re.compile(r"bary[\w\[\]\.:, \-]*\*|\*\s*\w*bary\b|bary\w*\.unsqueeze\(-1\) \*")
    hits = []
    for path in PACKAGE.rglob("*.py"):
        rel = str(path.relative_to(PACKAGE))
        if rel in allowed or rel.startswith("raster/"):
            continue
        hits += [f"{rel}:{i}" for i, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert not hits, hits


def test_renderer_and_front_end_functions_stay_short():
    long = []
    for sub in ("renderer", "compat"):
        for path in (PACKAGE / sub).glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef) and node.end_lineno - node.lineno + 1 > 60:
                    long.append(f"{sub}/{path.name}:{node.name}")
    for node in ast.walk(ast.parse((PACKAGE / "frontend.py").read_text())):
        if isinstance(node, ast.FunctionDef) and node.end_lineno - node.lineno + 1 > 60:
            long.append(f"frontend.py:{node.name}")
    assert not long, long


# ---- 0.0.1 import paths --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "path, names",
    [
        ("py_gpu", ["RasterBatch", "ScreenTriangle", "ScreenVertex", "select_backend", "FrameBuffer", "DepthBuffer",
                    "CPURasterBackend", "NumpyRasterBackend", "ModernGLRasterBackend", "RasterBackend",
                    "BackendCapabilities", "detect_gpu_packages"]),
        ("py_gpu.backends", ["BackendCapabilities", "RasterBackend", "select_backend"]),
        ("py_gpu.buffers", ["DepthBuffer", "FrameBuffer"]),
        ("py_gpu.detect", ["detect_gpu_packages"]),
        ("py_gpu.geometry", ["RasterBatch", "ScreenTriangle", "ScreenVertex"]),
        ("py_gpu.raster", ["CPURasterBackend"]),
        ("py_gpu.numpy_raster", ["NumpyRasterBackend"]),
        ("py_gpu.moderngl_backend", ["ModernGLRasterBackend"]),
        ("py_gpu.adapters.py3d", ["Py3DRasterRenderer"]),
    ],
)
def test_every_0_0_1_import_path_works(path, names):
    module = importlib.import_module(path)
    for name in names:
        value = getattr(module, name)
        if name in SEED_NAMES:
            assert value is getattr(py_gpu.compat, name), f"{path}.{name} is not the compat object"


def test_seed_backends_are_the_core_backends_with_the_0_0_1_protocol():
    backend = py_gpu.select_backend("numpy")
    assert isinstance(backend, py_gpu.NumpyBackend) and isinstance(backend, py_gpu.RasterBackend)
    assert not hasattr(py_gpu.NumpyBackend(), "render")  # the core has no 0.0.1 protocol


# ---- one path from batch to frame ------------------------------------------------------------------
def _cut_scene():
    """A float64 mesh crossing the near plane, with vertex colors; the camera and its clip-space batch."""
    g = torch.Generator().manual_seed(3)
    pos = torch.rand(40, 3, generator=g, dtype=torch.float64) * torch.tensor([4.0, 3.0, 3.0], dtype=torch.float64)
    pos = pos - torch.tensor([2.0, 1.5, 2.0], dtype=torch.float64)
    faces = torch.randint(0, 40, (30, 3), generator=g)
    faces = faces[(faces[:, 0] != faces[:, 1]) & (faces[:, 1] != faces[:, 2]) & (faces[:, 0] != faces[:, 2])]
    colors = torch.rand(40, 3, generator=g, dtype=torch.float64)
    cam = Camera.perspective((0.0, 0.0, 0.6), (0.0, 0.0, -1.0), fov_y=70.0, aspect=40 / 30, near=0.5).to(dtype=torch.float64)
    clip = cam.world_to_clip(pos[None])
    return pos, faces, colors, cam, TriangleBatch(clip, faces, vertex_colors=colors[None])


def test_render_renderer_and_seed_protocol_give_bit_identical_colors():
    pos, faces, colors, cam, batch = _cut_scene()
    result = py_gpu.frontend.near_clip(batch, (30, 40))
    assert result.num_clipped > 0  # the scene really crosses the near plane
    size, bg = (30, 40), (0.1, 0.2, 0.3)
    want = py_gpu.render(batch, size, backend="reference", background=bg).to_uint8()[0]
    assert int((py_gpu.render(batch, size, backend="reference").face_index >= 0).sum()) > 100
    got = {
        "render torch": py_gpu.render(batch, size, backend="torch", background=bg).to_uint8()[0],
        "render numpy": py_gpu.render(batch, size, backend="numpy", background=bg).to_uint8()[0],
        "seed torch": py_gpu.select_backend("torch").render(batch, 40, 30, background=[c * 255 for c in bg]).to_tensor(),
        "seed reference": py_gpu.select_backend("reference").render(batch, 40, 30, background=[c * 255 for c in bg]).to_tensor(),
    }
    r = Renderer(size, backend="torch", dtype=torch.float64, background=bg)
    h = r.upload(MeshBatch(pos, faces, colors=colors))
    got["Renderer torch"] = r.render(h, cam, model="unlit").to_uint8()[0]
    r = Renderer(size, backend="numpy", dtype=torch.float64, background=bg)
    got["Renderer numpy"] = r.render(r.upload(MeshBatch(pos, faces, colors=colors)), cam, model="unlit").to_uint8()[0]
    for name, image in got.items():
        assert torch.equal(image, want), name


def test_every_face_behind_the_near_plane_renders_empty():
    v = torch.tensor([[[-0.5, -0.5, -0.5, 1.0], [0.5, -0.5, -0.5, 1.0], [0.0, 0.5, -0.5, 1.0]]])
    batch = TriangleBatch(v, torch.tensor([[0, 1, 2]]), vertex_colors=torch.ones(1, 3, 3))
    for backend in ("reference", "numpy", "torch"):
        frame = py_gpu.render(batch, (16, 16), backend=backend)
        assert int(frame.face_index.max()) == -1 and float(frame.alpha.sum()) == 0.0
    frags = py_gpu.rasterize(batch, (16, 16), mode="soft")
    assert int(frags.face_index.max()) == -1


def test_backends_never_clip_and_say_where_clipping_happens():
    v = torch.tensor([[[-0.5, -0.5, 0.5, 1.0], [0.5, -0.5, -1.0, -0.5], [0.0, 0.5, 0.5, 1.0]]])
    batch = TriangleBatch(v, torch.tensor([[0, 1, 2]]))
    with pytest.raises(PyGpuValueError, match="py_gpu.rasterize"):
        py_gpu.NumpyBackend().rasterize(batch, (8, 8))
    assert int((py_gpu.rasterize(batch, (8, 8), backend="numpy").face_index >= 0).sum()) > 0


# ---- settings ------------------------------------------------------------------------------------
def test_settings_are_accepted_per_call_and_have_one_source_of_defaults():
    raster_fields, blend_fields = set(RasterSettings.field_names()), set(BlendSettings.field_names())
    assert not raster_fields & blend_fields
    for fn in (py_gpu.render, py_gpu.rasterize, Renderer.render):
        params = inspect.signature(fn).parameters
        assert "settings" in params and "blend" in params, fn.__qualname__
        for name, p in params.items():
            if name in raster_fields | blend_fields:
                assert p.default is None, f"{fn.__qualname__}({name}) has its own default {p.default!r}"
    _, _, _, cam, batch = _cut_scene()
    soft = py_gpu.render(batch, (30, 40), settings=RasterSettings(mode="soft"), blend=BlendSettings(gamma=0.5))
    sharp = py_gpu.render(batch, (30, 40), mode="soft", gamma=1e-4)
    assert not torch.equal(soft.image, sharp.image)  # the per-call blend settings were used
    with pytest.raises(TypeError, match="BlendSettings"):
        py_gpu.render(batch, (8, 8), blend=RasterSettings())


# ---- errors surface ---------------------------------------------------------------------------------
@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("backend", ["torch", "numpy"])
def test_renderer_on_absent_cuda_says_why(backend):
    with pytest.raises(BackendUnavailableError, match="cuda"):
        Renderer((8, 8), backend=backend, device="cuda")


def test_renderer_refuses_the_meta_device():
    with pytest.raises(PyGpuValueError, match="meta"):
        Renderer((8, 8), device="meta")
    with pytest.raises(PyGpuValueError, match="meta"):
        py_gpu.TorchBackend(device="meta")


def test_unknown_backend_object_is_refused_clearly():
    with pytest.raises(TypeError, match="backend"):
        Renderer((8, 8), backend=object())


def test_architecture_doc_lists_every_module_as_it_is():
    """docs/architecture.md's module list is the one tools/architecture.py writes from the code;
    its picture exists."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    listed = doc.split(TOOL.BEGIN, 1)[1].split(TOOL.END, 1)[0]
    assert listed.strip() == TOOL.module_table().strip(), "run: python tools/architecture.py"
    for module in TOOL.modules():
        assert f"`{module}`" in listed
    assert (ROOT / "docs" / "img" / "architecture.png").stat().st_size > 10_000
