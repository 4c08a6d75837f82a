"""Render an OBJ + MTL + PNG asset in five lines, then fit its texture back from renders.

The asset is written first (:func:`write_asset`, a few kB in the output folder): a crate (a cube
whose six sides map the whole ``crate.png``) standing on a slab with a plain ``Kd`` color, two
materials in ``crate.mtl``. Loading and rendering it is five lines of user code
(:func:`render_asset`)::

    mesh, materials = py_gpu.mesh.load_obj_with_materials(path)
    renderer = py_gpu.Renderer((size, size))
    camera = py_gpu.fit.orbit_camera(4.0, 25.0, 35.0)
    frame = renderer.render(renderer.upload(mesh), camera, textures=[m.texture for m in materials], gamma=2.2)
    frame.to_png(png_path)

Then the crate's texture is replaced by flat grey and recovered from renders of the asset from 6
views (``py_gpu.Renderer``, hard mode, Lambert light); the metric is the PSNR of the recovered
texture (linear RGB, as the loader decodes it from sRGB) on the texels the views see.

    python examples/fit_obj.py [--steps 150] [--size 128] [--out DIR]
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image

import py_gpu
from py_gpu.shading.lights import AmbientLight, DirectionalLight

from _fitting import Recorder, main
from fit_texture import visible_texels

TEXELS = 32


def write_asset(folder) -> Path:
    """Write ``crate.obj``, ``crate.mtl`` and ``crate.png`` (a 32 x 32 sRGB image) into ``folder``;
    returns the OBJ's path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # the texture: planks with a dark frame and a diagonal brace, in sRGB
    y, x = np.mgrid[0:TEXELS, 0:TEXELS]
    wood = np.stack([150 + 40 * np.sin(x * 0.9 + 3 * (y // 8)), 100 + 25 * np.sin(x * 0.9 + 3 * (y // 8)),
                     50 + 10 * np.cos(x * 0.5)], -1)
    frame = (x < 3) | (x >= TEXELS - 3) | (y < 3) | (y >= TEXELS - 3) | (np.abs(x - y) < 2)
    gaps = (y % 8 == 0)
    rgb = np.where(frame[..., None], [90, 55, 25], np.where(gaps[..., None], [70, 45, 20], wood))
    Image.fromarray(rgb.clip(0, 255).astype(np.uint8), "RGB").save(folder / "crate.png")
    (folder / "crate.mtl").write_text(
        "# crate: a textured box on a plain slab\n"
        "newmtl crate\nKd 1 1 1\nmap_Kd crate.png\n\n"
        "newmtl slab\nKd 0.35 0.5 0.65\n"
    )
    box = py_gpu.shapes.cube(1.0)  # 24 vertices, each side mapped to the full UV square
    lines = ["# crate.obj: written by examples/fit_obj.py", "mtllib crate.mtl", "o crate"]
    lines += [f"v {x:g} {y + 0.5:g} {z:g}" for x, y, z in box.positions.tolist()]
    lines += [f"vt {u:g} {v:g}" for u, v in box.uvs.tolist()]
    lines += ["usemtl crate"] + [f"f {a + 1}/{a + 1} {b + 1}/{b + 1} {c + 1}/{c + 1}" for a, b, c in box.faces.tolist()]
    n = box.positions.shape[0]
    slab = [(-1.2, 0.0, -1.2), (1.2, 0.0, -1.2), (1.2, 0.0, 1.2), (-1.2, 0.0, 1.2),
            (-1.2, -0.15, -1.2), (1.2, -0.15, -1.2), (1.2, -0.15, 1.2), (-1.2, -0.15, 1.2)]
    # the slab is untextured, but its corners still name a UV: py_gpu.mesh keeps UVs only when
    # every face has them
    lines += ["o slab"] + [f"v {x:g} {y:g} {z:g}" for x, y, z in slab] + ["vt 0 0", "usemtl slab"]
    quads = [(4, 3, 2, 1), (5, 6, 7, 8), (1, 2, 6, 5), (2, 3, 7, 6), (3, 4, 8, 7), (4, 1, 5, 8)]
    t = box.uvs.shape[0] + 1
    lines += [f"f {a + n}/{t} {b + n}/{t} {c + n}/{t} {d + n}/{t}" for a, b, c, d in quads]  # quads: fanned on load
    path = folder / "crate.obj"
    path.write_text("\n".join(lines) + "\n")
    return path


def render_asset(path, size: int, png_path) -> py_gpu.Frame:
    """The five lines: load the OBJ with its materials, render it, write a PNG."""
    mesh, materials = py_gpu.mesh.load_obj_with_materials(path)
    renderer = py_gpu.Renderer((size, size))
    camera = py_gpu.fit.orbit_camera(4.0, 25.0, 35.0)
    frame = renderer.render(renderer.upload(mesh), camera, textures=[m.texture for m in materials], gamma=2.2)
    frame.to_png(png_path)
    return frame


def run(steps: int = 150, size: int = 128, device: str = "cpu", seed: int = 0, out=None, lr: float = 0.05) -> dict:
    """Write the asset, render it in five lines, fit its texture; ``metric`` is that texture's PSNR (dB).

    Without ``out`` the asset goes to a temporary folder that is removed afterwards."""
    if out is None:
        with tempfile.TemporaryDirectory(prefix="py_gpu-obj-") as tmp:
            return _run(steps, size, device, seed, None, lr, Path(tmp))
    return _run(steps, size, device, seed, out, lr, Path(out))


def _run(steps, size, device, seed, out, lr, folder: Path) -> dict:
    g = torch.Generator().manual_seed(seed)
    rec = Recorder(out, steps)  # creates `out`
    path = write_asset(folder / "asset")
    frame = render_asset(path, size, folder / "asset.png")
    covered = float(frame.alpha.mean())
    print(f"obj: wrote {path} and rendered it in five lines to {folder / 'asset.png'} ({100 * covered:.0f} % covered)")

    mesh, materials = py_gpu.mesh.load_obj_with_materials(path, device=device)
    names = [m.name for m in materials]
    true_tex = materials[names.index("crate")].texture  # float [32, 32, 3] linear RGB
    renderer = py_gpu.Renderer((size, size), device=device)
    handle = renderer.upload(mesh)
    cams = py_gpu.fit.orbit_camera(4.0, torch.tensor([30.0, 10.0, 45.0, 20.0, 35.0, 5.0], device=device),
                                   torch.tensor([35.0, 100.0, 170.0, 235.0, 300.0, 0.0], device=device))
    lights = [AmbientLight(intensity=0.45), DirectionalLight((-0.4, -1.0, -0.6), intensity=0.7)]
    kw = dict(lights=lights, model="lambert", gamma=2.2)

    def textures(t):
        return [t if n == "crate" else m.texture for n, m in zip(names, materials)]

    with torch.no_grad():
        want = renderer.render(handle, cams, textures=textures(true_tex), attachments=("uv", "material_id"), **kw)
    crate_px = (want.alpha[..., 0] > 0) & (want.extras["material_id"][..., 0] == names.index("crate"))
    visible = visible_texels(want.extras["uv"], crate_px, TEXELS)
    tex = torch.full_like(true_tex, 0.5).requires_grad_(True)
    start = tex.detach().clone()

    def psnr(t):
        mse = float(((t.detach().clamp(0, 1) - true_tex) ** 2)[visible].mean())
        return 10.0 * math.log10(1.0 / max(mse, 1e-20))

    print(f"fitting the crate's {TEXELS}x{TEXELS} texture ({int(visible.sum())} texels seen) from {cams.batch_size} views, "
          f"{steps} steps; PSNR at the start {psnr(tex):.2f} dB")
    opt = torch.optim.Adam([tex], lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda it: 0.05 ** min(1.0, it / max(steps, 1)))
    show = py_gpu.Camera(cams.view[:1], cams.projection)
    for step in range(steps):
        pick = torch.randperm(cams.batch_size, generator=g)[:3].to(device)
        got = renderer.render(handle, py_gpu.Camera(cams.view[pick], cams.projection), textures=textures(tex), **kw)
        loss = ((got.image - want.image[pick]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        with torch.no_grad():
            tex.clamp_(0.0, 1.0)
        info = {"psnr_db": psnr(tex)} if step % max(1, steps // 10) == 0 or step == steps - 1 else {}
        rec.loss(step, "image MSE", loss.item(), **info)
        rec.frame(step, lambda: [("estimate", renderer.render(handle, show, textures=textures(tex.detach()), **kw).image[0]),
                                 ("target", want.image[0])])
    end = psnr(tex)
    print(f"crate texture PSNR on seen texels: start {psnr(start):.2f} dB -> end {end:.2f} dB (target >= 30)")
    with torch.no_grad():
        view = lambda t: renderer.render(handle, show, textures=textures(t), **kw).image[0]  # noqa: E731
        enlarge = lambda t: t.clamp(0, 1).repeat_interleave(size // TEXELS, 0).repeat_interleave(size // TEXELS, 1)  # noqa: E731
        pictures = [("five-line render", frame.image[0]), ("start", view(start)), ("result", view(tex.detach())),
                    ("target", want.image[0]), ("texture", enlarge(py_gpu.image.linear_to_srgb(tex.detach())))]
    rec.frame(steps, lambda: pictures[2:4], force=True)
    files = rec.write(pictures, title="OBJ texture", ylabel="image MSE")
    if out is not None:
        files.update(asset=str(path), five_line_render=str(folder / "asset.png"))
    return dict(metric=end, start_psnr=psnr(start), user_lines=5, coverage=covered, files=files)


def _options(parser) -> None:
    parser.add_argument("--lr", type=float, default=0.05)


if __name__ == "__main__":
    main("obj", run, steps=150, size=128, doc=__doc__, extra=_options)
