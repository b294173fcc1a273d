"""``tuner best`` and ``tuner show``: what a tuning log holds, as a table, JSON or CSV.

A record's time is the median of its samples with their interquartile range
(``±`` half of it where they spread widely). Both commands judge a config
measured more than once as ``build`` and ``compile_model`` do
(``records.judged``: its samples pooled, or its re-timing's alone), so they
and the builds agree on one figure per config.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .options import positive
from .output import add_format_flags, console, emit
from .text import milliseconds

__all__ = ["add_commands", "record_row"]


def record_row(rec: Any) -> dict[str, Any]:
    """One record as the tables, JSON and CSV show it."""
    from records import target_label

    return {
        "workload": rec.workload.key,
        "target": target_label(rec.target),
        "strategy": rec.strategy,
        "trial": rec.trial,
        "gflops": round(rec.gflops, 2) if rec.gflops else None,
        "median_ms": round(rec.median * 1e3, 6),
        "iqr_ms": round(rec.iqr * 1e3, 6),
        "samples": len(rec.samples),
        "config": rec.config,
    }


def _table(title: str, rows: list[dict[str, Any]], columns: tuple[str, ...]) -> Any:
    from rich.table import Table

    table = Table(title=title)
    for col in columns:
        table.add_column(col)
    for row in rows:
        cells = {
            "GFLOP/s": f"{row['gflops']:.1f}" if row["gflops"] else "-",
            "median ms": milliseconds(row["median_ms"] / 1e3, row["iqr_ms"] / 1e3),
        }
        table.add_row(*(cells.get(c) or str(row[c]) for c in columns))
    return table


def cmd_best(ns: argparse.Namespace) -> int:
    from records import best_by_workload, load

    best = best_by_workload(load(ns.log, require=True))
    rows = [record_row(rec) for _, rec in sorted(best.items())]
    columns = ("workload", "target", "GFLOP/s", "median ms", "samples", "trial", "config")
    table = _table(f"best records in {ns.log}", rows, columns)
    emit(ns, {"log": str(ns.log), "best": rows}, rows, lambda: console().print(table))
    return 0


def cmd_show(ns: argparse.Namespace) -> int:
    from records import judged, load

    recs = load(ns.log, require=True)
    ok = sorted(judged(recs), key=lambda r: r.median)[: ns.top]
    errors: dict[str, int] = {}
    for r in recs:
        if not r.ok:
            errors[r.error_kind.value] = errors.get(r.error_kind.value, 0) + 1
    rows = [record_row(r) for r in ok]
    columns = ("trial", "workload", "target", "strategy", "GFLOP/s", "median ms", "config")
    table = _table(f"{ns.log}: {len(recs)} records, top {len(ok)}", rows, columns)

    def show() -> None:
        out = console()
        out.print(table)
        if errors:
            out.print("errors: " + ", ".join(f"{k} {v}" for k, v in sorted(errors.items())))

    doc = {"log": str(ns.log), "records": len(recs), "errors": errors, "top": rows}
    emit(ns, doc, rows, show)
    return 0


def add_commands(sub: Any) -> None:
    """Add ``best`` and ``show`` to the ``tuner`` command's subparsers."""
    p = sub.add_parser("best", help="the best record per workload and target in a log")
    p.add_argument("log", type=Path)
    add_format_flags(p, "the best records")
    p.set_defaults(func=cmd_best)
    p = sub.add_parser(
        "show", help="the fastest configs of a log (each judged as best judges) and its errors"
    )
    p.add_argument("log", type=Path)
    p.add_argument("--top", type=positive(int), default=10)
    add_format_flags(p, "the fastest records")
    p.set_defaults(func=cmd_show)
