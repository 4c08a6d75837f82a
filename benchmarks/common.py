"""Benchmark plumbing shared by the suites: timing, peak memory, and the report that
``benchmarks/run.py`` prints and writes to ``docs/benchmarks.md``.

A suite is a module ``benchmarks/suite_*.py`` with ``run(report: Report, quick: bool) -> None``.
It adds tables with ``report.table(...)``; ratios against other backends are columns of the
same table, measured in the same process.
"""

from __future__ import annotations

import gc
import resource
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable


def time_call(fn: Callable[[], object], *, repeat: int = 5, warmup: int = 1, sync: Callable[[], None] | None = None) -> float:
    """Median wall time of ``fn()`` in milliseconds (after ``warmup`` untimed calls)."""
    for _ in range(warmup):
        fn()
        if sync:
            sync()
    samples = []
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        samples.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(samples)


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB (``resource.getrusage``)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024.0 * 1024.0) if sys.platform == "darwin" else peak / 1024.0


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "n/a"
    return f"{ms:,.1f}" if ms >= 10 else f"{ms:.2f}"


def fmt_ratio(num: float | None, den: float | None) -> str:
    if not num or not den:
        return "n/a"
    return f"{num / den:.1f}x"


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        out = [f"### {self.title}", "", "| " + " | ".join(self.columns) + " |", "|" + "---|" * len(self.columns)]
        out += ["| " + " | ".join(str(c) for c in row) + " |" for row in self.rows]
        if self.notes:
            out += [""] + [f"- {n}" for n in self.notes]
        return "\n".join(out) + "\n"

    def text(self) -> str:
        cells = [self.columns] + [[str(c) for c in r] for r in self.rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.columns))]
        lines = [self.title, "  ".join(c.ljust(w) for c, w in zip(self.columns, widths))]
        lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells[1:]]
        lines += [f"  * {n}" for n in self.notes]
        return "\n".join(lines)


@dataclass
class Report:
    tables: list[Table] = field(default_factory=list)

    def table(self, title: str, columns: list[str]) -> Table:
        t = Table(title, list(columns))
        self.tables.append(t)
        return t

    def add_row(self, table: Table, row: list) -> None:
        """Append a row and print it at once, so long runs show progress."""
        table.rows.append([str(c) for c in row])
        print(f"  [{table.title}] " + " | ".join(str(c) for c in row), flush=True)
