"""Run every benchmark suite in one process, print the tables, and write docs/benchmarks.md.

    python benchmarks/run.py            # everything
    python benchmarks/run.py --quick    # small cases only
    python benchmarks/run.py --only core,torch   # some suites: printed; written only with --output FILE

Suites are the modules ``benchmarks/suite_*.py``; each adds tables to one shared report, with
ratios against the other backends measured in the same process. Each suite runs in a fresh
child process, so its peak-memory figures are its own and no suite's settings leak into the next.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import subprocess
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import Report, Table  # noqa: E402

ORDER = ["core", "moderngl", "torch", "soft", "renderer", "gl_renderer"]


def machine_line() -> str:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA GPU"
    return f"{cpu}, {os.cpu_count()} cores, {gpu}; python {platform.python_version()}, torch {torch.__version__}"


def _progress(total: int):
    """A tqdm bar over the suites on stderr, when tqdm is installed (it is a py_gpu dependency)."""
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        return None
    return tqdm(total=total, unit="suite", file=sys.stderr, leave=False)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small cases only")
    parser.add_argument("--only", default="", help="comma list of suites (core, moderngl, torch, soft, renderer, gl_renderer)")
    parser.add_argument("--no-write", action="store_true", help="do not rewrite docs/benchmarks.md")
    parser.add_argument("--output", default=None,
                        help="file to write (default docs/benchmarks.md; a run with --only writes only with --output)")
    parser.add_argument("--child-suite", default="", help=argparse.SUPPRESS)  # run one suite, print JSON
    args = parser.parse_args(argv)
    if args.child_suite:
        return _child(args.child_suite, args.quick)

    found = sorted(p.stem[len("suite_"):] for p in HERE.glob("suite_*.py"))
    names = [n for n in ORDER if n in found] + [n for n in found if n not in ORDER]
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        names = [n for n in names if n in wanted]
    report = Report()
    started = time.perf_counter()
    bar = _progress(len(names))
    for name in names:
        if bar is not None:
            bar.set_description(f"suite {name}")
        print(f"== suite {name}", flush=True)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child-suite", name] + (["--quick"] if args.quick else [])
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        marker = proc.stdout.rfind(_MARKER)
        if proc.returncode != 0 or marker < 0:
            print(proc.stdout)
            print(f"suite {name} failed (exit {proc.returncode})", file=sys.stderr)
            return 1
        print(proc.stdout[:marker], end="", flush=True)
        for t in json.loads(proc.stdout[marker + len(_MARKER):]):
            report.tables.append(Table(t["title"], t["columns"], t["rows"], t["notes"]))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    total = time.perf_counter() - started
    print()
    for table in report.tables:
        print(table.text())
        print()
    print(f"{total:.0f} s")
    if args.only and args.output is None and not args.no_write:  # a part must not replace the whole record
        print("partial run (--only): docs/benchmarks.md is not rewritten; pass --output FILE to write these tables")
        return 0
    args.output = args.output or str(HERE.parent / "docs" / "benchmarks.md")
    if not args.no_write:
        today = datetime.date.today().isoformat()
        header = [
            "# Benchmarks",
            "",
            "Written by `python benchmarks/run.py`" + (" --quick" if args.quick else "") + f" on {today}.",
            "Each suite runs in its own process; within a table the backends are measured side by side in that process, and ratios compare columns of the same run.",
            *_device_note(),
            "Times are medians in milliseconds. Tests never assert timings; these figures are the record.",
            "",
            f"Machine: {machine_line()}.",
            "",
            "",
        ]
        body = [t.markdown() for t in report.tables]
        extra = Path(args.output).with_name("benchmarks-device.md")
        tail = [f"\nFigures measured on other devices are kept in [{extra.name}]({extra.name}).\n"] if extra.exists() else []
        Path(args.output).write_text("\n".join(header) + "\n".join(body) + "".join(tail))
        print(f"wrote {args.output}")
    return 0


_MARKER = "\n@@tables@@"


def _device_note() -> list[str]:
    import torch

    if torch.cuda.is_available():
        return []
    return ["No CUDA device was available for this run. On a CUDA machine, `bash benchmarks/device_check.sh` "
            "runs the CUDA tests and writes the CUDA tables (target: 1M faces at 512x512 in under 10 ms) to "
            "docs/benchmarks-device.md."]


def _child(name: str, quick: bool) -> int:
    report = Report()
    importlib.import_module(f"suite_{name}").run(report, quick)
    tables = [{"title": t.title, "columns": t.columns, "rows": t.rows, "notes": t.notes} for t in report.tables]
    sys.stdout.write(_MARKER + json.dumps(tables))
    return 0


if __name__ == "__main__":
    sys.exit(main())
