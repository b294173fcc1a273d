"""Merging the logs of many workers into one, with trial numbers unique again.

Workers tuning one study each append to their own log (no shared filesystem
is assumed), and each numbers its trials from where its own log left off, so
two logs repeat each other's numbers. ``merge`` reads every log (files or
folders), drops records present twice (a log merged again, or listed twice),
orders them by time and numbers the trials 0, 1, 2, ... in that order.

>>> result = merge("tune.jsonl", ["worker-a.jsonl", "worker-b.jsonl"])
>>> result.written, result.duplicates
(48, 0)
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .format import FORMAT_VERSION, Record
from .log import LogSource, _encode, _log_files, load

__all__ = ["MergeResult", "merge"]


@dataclass(frozen=True)
class MergeResult:
    read: int  # records read, OUT's own included
    written: int
    duplicates: int  # records dropped for being present already


def _identity(record: Record) -> Record:
    """What makes two records the same measurement (their trial numbers aside)."""
    return dataclasses.replace(record, trial=0, version=FORMAT_VERSION)


def merge(out: str | os.PathLike[str], sources: LogSource) -> MergeResult:
    """Write every record of ``out`` (if it exists) and of ``sources`` into ``out``.

    Each measurement is kept once; records are ordered by timestamp (ties
    keep the order they were read in) and their trial numbers are rewritten
    to be unique. ``out`` is replaced in one step, so a crash leaves it whole.
    """
    target = Path(out)
    inputs = _log_files(sources)
    if target.exists() and target.resolve() not in {p.resolve() for p in inputs}:
        inputs.insert(0, target)
    records = load(inputs)
    seen: set[Record] = set()
    unique = []
    for record in records:
        key = _identity(record)
        if key not in seen:
            seen.add(key)
            unique.append(record)
    unique.sort(key=lambda r: r.timestamp)
    merged = [dataclasses.replace(r, trial=i) for i, r in enumerate(unique)]
    _write_whole(target, merged)
    return MergeResult(len(records), len(merged), len(records) - len(merged))


def _write_whole(path: Path, records: list[Record]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(b"".join(_encode(r) for r in records))
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
