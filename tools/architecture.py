"""Draw docs/img/architecture.png and write the module list of docs/architecture.md.

    python tools/architecture.py

The layers below are the package's structure: a module imports only from its own layer or lower
ones (tests/test_architecture.py checks the code against them). Each module's line in the
docs is the first paragraph of its docstring.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "py_gpu"
DOC = ROOT / "docs" / "architecture.md"
IMAGE = ROOT / "docs" / "img" / "architecture.png"
BEGIN, END = "<!-- modules: begin (tools/architecture.py) -->", "<!-- modules: end -->"

#: (layer name, module prefixes), from the bottom up.
LAYERS = [
    ("errors, checks, threads", ["py_gpu._version", "py_gpu._check", "py_gpu._runtime"]),
    ("settings, 8-bit images", ["py_gpu.settings", "py_gpu.image"]),
    ("contracts", ["py_gpu.contracts"]),
    ("rasterizers, meshes, shapes, cameras", ["py_gpu.raster", "py_gpu.mesh", "py_gpu.shapes", "py_gpu.camera",
                                              "py_gpu.fit"]),
    ("shading", ["py_gpu.shading"]),
    ("backends", ["py_gpu._gl", "py_gpu.backends"]),
    ("front end", ["py_gpu.frontend"]),
    ("renderer", ["py_gpu.renderer"]),
    ("py_gpu 0.0.1 compatibility", ["py_gpu.compat"]),
    ("fixtures, py_3d bridge, demo", ["py_gpu.fixtures", "py_gpu.adapters", "py_gpu.demo", "py_gpu.showcase"]),
    ("command line", ["py_gpu.cli"]),
    ("public API", ["py_gpu"]),
]


def modules() -> dict[str, str]:
    """``{dotted module name: first docstring line}`` for every module of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        out[".".join(parts)] = " ".join(doc.strip().split("\n\n")[0].split())
    return out


def layer_of(module: str) -> int:
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or (prefix != "py_gpu" and module.startswith(prefix + ".")):
                return rank
    raise KeyError(f"module {module} is in no layer of tools/architecture.py")


def module_table() -> str:
    """The markdown module list, layer by layer from the top."""
    mods = modules()
    lines = []
    for rank in reversed(range(len(LAYERS))):
        names = [m for m in mods if layer_of(m) == rank]
        if not names:
            continue
        lines.append(f"**{LAYERS[rank][0]}**\n")
        lines += [f"- `{m}`: {mods[m]}" for m in names]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def write_doc() -> None:
    text = DOC.read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(head + BEGIN + "\n\n" + module_table() + "\n" + END + tail)


# ---- the picture ----------------------------------------------------------------------------------
FLOW = [
    ("TriangleBatch", "screen [B,V,3] or clip [B,V,4]"),
    ("front end", "validate, clip once (near plane)"),
    ("backend.rasterize", "reference | numpy | torch | moderngl"),
    ("unclip once", "Fragments on the input faces"),
    ("shading", "interpolate, texture, light, composite / blend"),
    ("Frame", "image, alpha, depth, face_index"),
]
SIDE = [
    (0, "MeshBatch + Camera (Renderer: scene, transforms)"),
    (0, "RasterBatch (py_gpu.compat: 0.0.1 seed protocol)"),
]


def _font(size: int):
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # pillow < 10.1
        return ImageFont.load_default()


def draw() -> None:
    W, box_w, box_h, gap = 1180, 300, 58, 30
    layers_h = 34 * len(LAYERS) + 60
    H = 80 + len(FLOW) * (box_h + gap) + layers_h
    img = Image.new("RGB", (W, H), (255, 255, 255))
    d = ImageDraw.Draw(img)
    big, small = _font(20), _font(15)
    d.text((30, 20), "py_gpu: one path from batch to frame", fill=(20, 20, 20), font=_font(24))
    x0, y = 60, 70
    centers = []
    for i, (title, sub) in enumerate(FLOW):
        fill = (225, 238, 255) if i not in (0, len(FLOW) - 1) else (232, 246, 232)
        d.rounded_rectangle((x0, y, x0 + box_w, y + box_h), radius=10, fill=fill, outline=(60, 90, 140), width=2)
        d.text((x0 + 14, y + 8), title, fill=(10, 30, 70), font=big)
        d.text((x0 + 14, y + 33), sub, fill=(60, 60, 60), font=small)
        centers.append(y + box_h // 2)
        if i:
            ax = x0 + box_w // 2
            d.line((ax, y - gap, ax, y - 4), fill=(60, 90, 140), width=3)
            d.polygon([(ax - 7, y - 12), (ax + 7, y - 12), (ax, y - 2)], fill=(60, 90, 140))
        y += box_h + gap
    # other entry points join the front end
    sx = x0 + box_w + 120
    for k, (_, text) in enumerate(SIDE):
        sy = centers[0] - 20 + k * 70
        d.rounded_rectangle((sx, sy, sx + 430, sy + 44), radius=10, fill=(250, 240, 222), outline=(150, 110, 50), width=2)
        d.text((sx + 12, sy + 12), text, fill=(80, 50, 10), font=small)
        d.line((sx, sy + 22, x0 + box_w + 4, centers[1]), fill=(150, 110, 50), width=2)
    note = ["Backends never clip: they receive batches they can draw.",
            "One interpolation kernel (shading.interpolate_vertex) serves every path.",
            "GL's persistent geometry (Renderer) clips on the GPU, same Fragments contract."]
    for k, line in enumerate(note):
        d.text((sx, centers[3] + k * 26), line, fill=(40, 40, 40), font=small)
    # the layer stack, top layer first
    y += 10
    d.text((30, y), "Layers (a module imports only from its own layer or below)", fill=(20, 20, 20), font=big)
    y += 34
    for rank in reversed(range(len(LAYERS))):
        name, prefixes = LAYERS[rank]
        shade = 245 - 6 * rank
        d.rectangle((60, y, W - 60, y + 28), fill=(shade, shade, 255 if rank % 2 else 250), outline=(170, 170, 200))
        d.text((72, y + 5), f"{rank:2d}  {name}", fill=(20, 20, 60), font=small)
        d.text((420, y + 5), ", ".join(p.replace("py_gpu.", "") if p != "py_gpu" else "py_gpu (__init__)"
                                         for p in prefixes), fill=(70, 70, 70), font=small)
        y += 34
    IMAGE.parent.mkdir(parents=True, exist_ok=True)
    img.save(IMAGE)


if __name__ == "__main__":
    draw()
    write_doc()
    print(f"wrote {IMAGE.relative_to(ROOT)} and the module list of {DOC.relative_to(ROOT)}")
    sys.exit(0)
