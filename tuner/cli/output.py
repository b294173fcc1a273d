"""Where the commands write, for people and for scripts.

Every command that reports numbers takes ``--json [PATH]`` (one JSON object)
and ``--csv [PATH]`` (its rows), to standard output when no path is given;
the table people read is built from the same rows, so the two carry the
same numbers. When JSON or CSV goes to standard output, everything else a
command says goes to standard error, so the output parses. When a stream is
not a terminal, rich prints tables as wide as their data, without wrapping
or colour (``console``).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["add_format_flags", "console", "emit", "to_stdout"]

#: Columns of a console that is not a terminal: wide enough that nothing wraps.
_UNWRAPPED = 1 << 20


def console(stderr: bool = False) -> Any:
    """A rich console on standard output (or error); unwrapped and plain when not a terminal."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr, soft_wrap=True)
    return Console(stderr=stderr, width=_UNWRAPPED, no_color=True, highlight=False, soft_wrap=True)


def add_format_flags(p: argparse.ArgumentParser, what: str = "the table") -> None:
    """``--json [PATH]`` and ``--csv [PATH]``: ``what`` as JSON or CSV (``-``: standard output)."""
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--json",
        nargs="?",
        const="-",
        default=None,
        metavar="PATH",
        help=f"write {what} as one JSON object (to PATH, or standard output)",
    )
    group.add_argument(
        "--csv",
        nargs="?",
        const="-",
        default=None,
        metavar="PATH",
        help=f"write {what}'s rows as CSV (to PATH, or standard output)",
    )


def to_stdout(ns: argparse.Namespace) -> bool:
    """Whether JSON or CSV goes to standard output (so the rest must go to standard error)."""
    return "-" in (getattr(ns, "json", None), getattr(ns, "csv", None))


def emit(
    ns: argparse.Namespace,
    doc: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]],
    show: Callable[[], None],
) -> None:
    """``doc`` as JSON or ``rows`` as CSV where ``ns`` asks; the table (``show``) otherwise.

    When the JSON or CSV goes to a file, the table is shown as well.
    """
    if ns.json is not None:
        _write(ns.json, json.dumps(_plain(doc), indent=1, allow_nan=False) + "\n")
    elif ns.csv is not None:
        _write(ns.csv, csv_text(rows))
    if not to_stdout(ns):
        show()


def csv_text(rows: Sequence[Mapping[str, Any]]) -> str:
    """Rows as CSV, the columns in order of first appearance; nested values as JSON."""
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(v) for k, v in row.items()})
    return out.getvalue()


def _cell(value: Any) -> Any:
    if isinstance(value, dict | list | tuple):
        return json.dumps(_plain(value), sort_keys=False)
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    return value


def _plain(value: Any) -> Any:
    """JSON-ready: tuples as lists, NumPy scalars as numbers, NaN and infinity as null."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # a NumPy scalar
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value


def _write(where: str, text: str) -> None:
    if where == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        Path(where).write_text(text)
