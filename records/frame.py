"""Tuning logs as tidy pandas DataFrames, for notebooks and plots.

One row per measured candidate, in log order. Columns:

- ``workload_key, op, target_kind, fingerprint, threads, trial, strategy, predicted``
  (``threads``: the thread count the candidate was timed with, 0 when the log did not say)
- ``error_kind`` (the ``ErrorKind`` value as a string) and ``ok``
- ``median_s, iqr_s, mean_s, min_s``: seconds per run (``iqr_s``: the interquartile
  range of the samples, their spread), NaN unless ``ok`` -- so that a
  wrong answer that returned early can never look like the fastest schedule;
  ``n_samples`` counts the samples of every row
- ``gflops`` (NaN when unknown), ``build_s, run_s``
- ``timestamp``: pandas datetime, UTC
- ``best_so_far_s``: the lowest ok median of the same workload, target kind and
  thread count up to this row, in trial order (ties by time); NaN before the first ok row
- ``arg.<name>``: one column per workload argument
- ``knob.<name>``: one column per knob; list-valued knobs are tuples (hashable,
  so ``groupby`` and ``value_counts`` work), e.g. ``(8, 16)``

>>> df = to_dataframe("logs/matmul.jsonl")
>>> df[df.ok].sort_values("median_s").head()
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .format import Record, RecordError
from .log import LogSource, load

if TYPE_CHECKING:  # pandas loads when a frame is made: compiling a model never needs it
    import pandas as pd

__all__ = ["BASE_COLUMNS", "to_dataframe"]

BASE_COLUMNS = (
    "workload_key",
    "op",
    "target_kind",
    "fingerprint",
    "threads",
    "trial",
    "strategy",
    "predicted",
    "error_kind",
    "ok",
    "median_s",
    "iqr_s",
    "mean_s",
    "min_s",
    "n_samples",
    "gflops",
    "build_s",
    "run_s",
    "timestamp",
    "best_so_far_s",
)


def _row(record: Record) -> dict[str, Any]:
    timed = record.ok and bool(record.samples)
    samples = record.samples
    row: dict[str, Any] = {
        "workload_key": record.workload.key,
        "op": record.workload.op,
        "target_kind": record.target.kind,
        "fingerprint": record.target.fingerprint,
        "threads": record.target.threads,
        "trial": record.trial,
        "strategy": record.strategy,
        "predicted": math.nan if record.predicted is None else record.predicted,
        "error_kind": record.error_kind.value,
        "ok": record.ok,
        "median_s": record.median if timed else math.nan,
        "iqr_s": record.iqr if timed else math.nan,
        "mean_s": statistics.fmean(samples) if timed else math.nan,
        "min_s": min(samples) if timed else math.nan,
        "n_samples": len(samples),
        "gflops": math.nan if record.gflops is None else record.gflops,
        "build_s": record.build_seconds,
        "run_s": record.run_seconds,
        "timestamp": record.timestamp,
    }
    row.update({f"arg.{k}": v for k, v in record.workload.args})
    row.update({f"knob.{k}": v for k, v in record.config_items})
    return row


def _best_so_far(df: pd.DataFrame) -> pd.Series:
    """Running minimum of ok medians per workload, target kind and thread count, in trial order."""
    ordered = df.sort_values(["trial", "timestamp"], kind="stable")
    running = (
        ordered["median_s"]
        .fillna(math.inf)
        .groupby([ordered["workload_key"], ordered["target_kind"], ordered["threads"]])
        .cummin()
    )
    return running.replace(math.inf, math.nan).reindex(df.index)


def _records(source: LogSource | Iterable[Record]) -> list[Record]:
    if isinstance(source, str | os.PathLike):
        return load(source)
    items = list(source)
    records = [item for item in items if isinstance(item, Record)]
    paths = [item for item in items if not isinstance(item, Record)]
    if records and paths:
        raise RecordError("to_dataframe takes records or log paths, not a mix of both")
    return records or load(paths)


def to_dataframe(source: LogSource | Iterable[Record]) -> pd.DataFrame:
    """A tidy frame of a log file, a list or folder of logs, or records in memory.

    An empty log gives an empty frame that still has every base column.
    """
    rows = [_row(record) for record in _records(source)]
    import pandas as pd

    df = pd.DataFrame(rows)
    extra = sorted(c for c in df.columns if c.startswith(("arg.", "knob.")))
    df = df.reindex(columns=[*BASE_COLUMNS[:-1], *extra])
    seconds = df["timestamp"].astype(float)
    # One fixed resolution, so frames of empty and non-empty logs concatenate cleanly.
    df["timestamp"] = pd.to_datetime(seconds, unit="s", utc=True).astype("datetime64[ns, UTC]")
    df.insert(len(BASE_COLUMNS) - 1, "best_so_far_s", _best_so_far(df))
    return df
