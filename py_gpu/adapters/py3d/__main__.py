"""Run a py_3d script with the Linux import fix applied.

    python -m py_gpu.adapters.py3d script.py [args ...]
    python -m py_gpu.adapters.py3d -m module [args ...]

py3dengine 0.0.4 (and py_3d's repository at the time of writing) fails ``import py_3d`` outside
Windows: it needs ``ctypes.wintypes.HCURSOR``. This gives ``ctypes.wintypes`` that alias
(:func:`py_gpu.adapters.py3d.apply_import_fix`) and then runs the script as ``__main__``, with
its directory first on ``sys.path`` and ``sys.argv`` as the script would see it, the way
``python script.py`` does. Nothing of torch or py_gpu's backends is loaded before the script
asks for it.
"""

from __future__ import annotations

import os
import runpy
import sys

from . import apply_import_fix

USAGE = "usage: python -m py_gpu.adapters.py3d script.py [args ...]  |  python -m py_gpu.adapters.py3d -m module [args ...]"


def main(argv: list[str] | None = None) -> int:
    """Run the script (or ``-m module``) named first in ``argv``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    apply_import_fix()
    if argv[0] == "-m":
        if len(argv) < 2:
            print(USAGE, file=sys.stderr)
            return 2
        sys.argv = [argv[1], *argv[2:]]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return 0
    script = argv[0]
    if not os.path.isfile(script):
        print(f"py_gpu.adapters.py3d: no such script: {script}", file=sys.stderr)
        return 2
    sys.argv = [script, *argv[1:]]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
