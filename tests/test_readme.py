"""The README's code examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(BLOCKS[index], f"README.md[{index}]", "exec"), namespace)
    assert list(tmp_path.glob("*.png")), "each README example writes a PNG"


GETTING_STARTED = Path(__file__).resolve().parents[1] / "docs" / "getting-started.md"


def test_getting_started_runs_in_order(tmp_path, monkeypatch):
    """docs/getting-started.md's Python blocks run one after another, as a reader types them."""
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", GETTING_STARTED.read_text(), flags=re.S)
    assert len(blocks) >= 3
    namespace: dict = {}
    for i, block in enumerate(blocks):
        exec(compile(block, f"getting-started.md[{i}]", "exec"), namespace)
    assert (tmp_path / "triangle.png").exists() and (tmp_path / "torus.png").exists()
    assert namespace["verts"].grad is not None and namespace["verts"].grad.abs().sum() > 0
