"""docs/make_figures.py regenerates every picture the docs show."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("make_figures", ROOT / "docs" / "make_figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_picture_the_docs_show_is_made_by_the_script():
    shown = set()
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", doc.read_text()):
            path = (doc.parent / target).resolve()
            assert path.exists(), f"{doc.name} shows {target}, which does not exist"
            shown.add(path.relative_to(ROOT / "docs" / "img").as_posix())
    made = set(_script().outputs())
    assert shown <= made, f"pictures with no maker in docs/make_figures.py: {sorted(shown - made)}"
    on_disk = {p.relative_to(ROOT / "docs" / "img").as_posix() for p in (ROOT / "docs" / "img").rglob("*")
               if p.suffix in (".png", ".gif")}
    assert on_disk <= made, f"pictures in docs/img with no maker: {sorted(on_disk - made)}"


@pytest.mark.slow
def test_quick_run_writes_every_picture(tmp_path):
    r = subprocess.run([sys.executable, "docs/make_figures.py", "--quick", "--out", str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    for name in _script().outputs():
        path = tmp_path / name
        assert path.stat().st_size > 0, name
        with Image.open(path) as img:
            img.verify()
