"""``tuner best`` and ``tuner show``: what a tuning log holds."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .options import positive

__all__ = ["add_commands"]


def cmd_best(ns: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from records import best_by_workload, load

    table = Table(title=f"best records in {ns.log}")
    for col in ("workload", "target", "GFLOP/s", "median ms", "trial", "config"):
        table.add_column(col)
    for (key, kind), rec in sorted(best_by_workload(load(ns.log, require=True)).items()):
        gf = f"{rec.gflops:.1f}" if rec.gflops else "-"
        table.add_row(key, kind, gf, f"{rec.median * 1e3:.3f}", str(rec.trial), str(rec.config))
    Console().print(table)
    return 0


def cmd_show(ns: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from records import load, target_label

    recs = load(ns.log, require=True)
    ok = sorted((r for r in recs if r.ok), key=lambda r: r.median)[: ns.top]
    errors: dict[str, int] = {}
    for r in recs:
        if not r.ok:
            errors[r.error_kind.value] = errors.get(r.error_kind.value, 0) + 1
    table = Table(title=f"{ns.log}: {len(recs)} records, top {len(ok)}")
    for col in ("trial", "workload", "target", "strategy", "GFLOP/s", "median ms", "config"):
        table.add_column(col)
    for r in ok:
        gf = f"{r.gflops:.1f}" if r.gflops else "-"
        table.add_row(
            str(r.trial),
            r.workload.key,
            target_label(r.target),
            r.strategy,
            gf,
            f"{r.median * 1e3:.3f}",
            str(r.config),
        )
    console = Console()
    console.print(table)
    if errors:
        console.print("errors: " + ", ".join(f"{k} {v}" for k, v in sorted(errors.items())))
    return 0


def add_commands(sub: Any) -> None:
    """Add ``best`` and ``show`` to the ``tuner`` command's subparsers."""
    p = sub.add_parser("best", help="the best record per workload and target in a log")
    p.add_argument("log", type=Path)
    p.set_defaults(func=cmd_best)
    p = sub.add_parser("show", help="the fastest records of a log and its error counts")
    p.add_argument("log", type=Path)
    p.add_argument("--top", type=positive(int), default=10)
    p.set_defaults(func=cmd_show)
