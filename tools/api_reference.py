"""Write ``docs/api.md``: the public API (``py_gpu.__all__``), grouped by module, with each name's
signature and docstring. ``tests/test_infrastructure.py`` checks that the file is current.

    python tools/api_reference.py
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "api.md"


def _signature(obj) -> str:
    try:
        sig = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return ""
    return re.sub(r" at 0x[0-9a-f]+", "", sig)  # default values' reprs without addresses


def _entry(name: str, obj) -> list[str]:
    kind = ("module" if inspect.ismodule(obj) else "class" if inspect.isclass(obj)
            else "function" if callable(obj) else "value")
    head = f"### `{name}{_signature(obj) if kind in ('class', 'function') else ''}`"
    doc = inspect.getdoc(obj) if kind != "value" else None
    if kind == "value":
        doc = re.sub(r" at 0x[0-9a-f]+", "", f"{name} = {obj!r}")
    lines = [head, "", f"*{kind}*", ""]
    if doc:
        lines += ["```text", doc, "```", ""]
    return lines


def render() -> str:
    """The text of docs/api.md for the installed (or checked-out) py_gpu."""
    sys.path.insert(0, str(ROOT))
    import py_gpu

    groups: dict[str, list[tuple[str, object]]] = {}
    for name in sorted(py_gpu.__all__, key=str.lower):
        obj = getattr(py_gpu, name)
        module = getattr(obj, "__module__", None) or "py_gpu"
        if not module.startswith("py_gpu"):
            module = "py_gpu"
        groups.setdefault(module, []).append((name, obj))
    lines = ["# API reference", "",
             "Every public name of `py_gpu` (its `__all__`), grouped by the module that defines it, with its",
             "signature and docstring. Written by `python tools/api_reference.py`; a test checks it is current.", ""]
    lines += [f"- [`{m}`](#{m.replace('.', '').replace('_', '')})" for m in sorted(groups)] + [""]
    for module in sorted(groups):
        lines += [f"## {module}", ""]
        for name, obj in groups[module]:
            lines += _entry(name, obj)
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    OUT.write_text(render())
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
