"""Appending a benchmark's rows to a CSV that may already hold earlier runs' rows."""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def append_rows(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """Add ``rows`` to ``path``; a new file gets the first row's keys as its header."""
    if not rows:
        return
    new = not path.exists()
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        if new:
            writer.writeheader()
        writer.writerows(rows)
