"""The tuning log: versioned, append-only JSON lines of measured candidates.

>>> from records import Record, LogWriter, load, best, to_dataframe
>>> with LogWriter("logs/matmul.jsonl") as log:
...     log.write(Record.make(workload, target, {"tile": [8, 16]}, samples=[1.2e-3]))
>>> fastest = best(load("logs/matmul.jsonl"), workload, target)
>>> df = to_dataframe("logs/")  # one row per candidate, knobs as ``knob.*`` columns
>>> merge("tune.jsonl", ["worker-a.jsonl", "worker-b.jsonl"])  # trial numbers unique again

The line format is documented in ``records.format``; it is a contract.
"""

from .format import FORMAT_VERSION, ErrorKind, Record, RecordError, config_key
from .frame import to_dataframe
from .log import (
    LogWriter,
    Match,
    RecordsWarning,
    append,
    best,
    best_by_workload,
    best_match,
    judged,
    load,
    measured_configs,
    target_label,
)
from .merge import MergeResult, merge

__all__ = [
    "FORMAT_VERSION",
    "ErrorKind",
    "LogWriter",
    "Match",
    "MergeResult",
    "Record",
    "RecordError",
    "RecordsWarning",
    "append",
    "best",
    "best_by_workload",
    "best_match",
    "config_key",
    "judged",
    "load",
    "measured_configs",
    "merge",
    "target_label",
    "to_dataframe",
]
