"""One measured candidate as a frozen ``Record``, and its JSON-line form.

The line layout is a contract: the tuner writes it, the compiler, notebooks and
other tools read it, and logs written today must stay readable forever (the
golden logs under ``tests/records/golden/`` pin every version). Version 1, one
JSON object per line, keys in any order::

    {"v": 1,
     "workload": {"op": "matmul", "args": {"M": 512, "N": 512, "K": 512}},
     "workload_key": "matmul(K=512,M=512,N=512)",
     "target": {"kind": "cpu", "capabilities": {...}, "fingerprint": "3f2a..."},
     "config": {"tile_i": [8, 16], "order": "ikj", "vectorize": true},
     "result": {"samples": [0.0012, 0.0011], "error_kind": "ok",
                "error_msg": "", "build_s": 0.8, "run_s": 0.01},
     "time": 1717171717.5,
     "provenance": {"strategy": "xgb", "trial": 17, "predicted": 0.93},
     "flops": 268435456}

- ``samples`` holds every timing sample, in seconds per run; it may be empty
  for a candidate that never ran. ``error_kind`` is one of ``ErrorKind``.
- ``workload_key`` is written for people and ``grep``; readers recompute it
  from ``workload`` so that a log stays valid if the key's rendering changes.
- ``config`` values are plain JSON: numbers, strings, bools and lists of them.
- ``predicted`` (the cost model's score) and ``flops`` may be ``null``.
- Unknown top-level keys are kept in ``Record.extra`` and written back, so a
  newer minor writer's additions survive an older reader.

Version 2 adds one key, what makes a record replay on its own::

     "schedule": {"trace": [{"step": "split", "stage": "C", "axis": "i", ...}, ...],
                  "space": "9c1f03d2e4a5b6c7"}

- ``trace`` is the schedule that was measured, as its step records (see
  ``tuner.schedule.steps``); replaying it on the operator's tensors gives the
  same loop nest even after the template's knobs change meaning.
- ``space`` is the version hash of the template's space the config was drawn
  from (``ConfigSpace.version``): where it differs from today's, the compiler
  rebuilds from the trace rather than trusting the knob values.
- Either may be ``null`` (a record written by a tool that had no schedule).
  The target's ``capabilities.threads`` is the thread count it was timed
  with; records of two thread counts are never pooled.

Readers are registered per version in ``_READERS``; a new format version adds a
reader and a golden log, and never changes an old reader. A record read from
a version 1 line writes back as that line.
"""

from __future__ import annotations

import enum
import json
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tuner.target import Target
from tuner.workload import Workload, dumps_canonical

from ._checks import (
    KnobValue,
    RecordError,
    RecordVersionError,
    freeze_knob,
    optional_number,
    seconds,
    strict_json,
    thaw_knob,
)

__all__ = [
    "FORMAT_VERSION",
    "ErrorKind",
    "KnobValue",
    "Record",
    "RecordError",
    "RecordVersionError",
    "config_key",
]

FORMAT_VERSION = 2


class ErrorKind(enum.StrEnum):
    """How a measurement ended; only ``OK`` records carry meaningful timings."""

    OK = "ok"
    SCHEDULE_ERROR = "schedule_error"
    COMPILE_ERROR = "compile_error"
    COMPILE_TIMEOUT = "compile_timeout"
    RUNTIME_ERROR = "runtime_error"
    RUN_TIMEOUT = "run_timeout"
    WRONG_ANSWER = "wrong_answer"


_V1_KEYS = frozenset(  # the top-level keys of the version 1 line format
    ["v", "workload", "workload_key", "target", "config", "result", "time", "provenance", "flops"]
)
_LINE_KEYS = _V1_KEYS | {"schedule"}  # the top-level keys of the current line format


def iqr(samples: Sequence[float]) -> float:
    """The interquartile range of ``samples`` (0 with fewer than two): how far they spread."""
    if len(samples) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return q3 - q1


def config_key(config: Mapping[str, Any]) -> str:
    """Canonical text of a config (sorted keys, lists and tuples alike).

    Two configs with the same knob values share one key, which is how a resumed
    run recognises candidates it already measured.

    >>> config_key({"b": (8, 16), "a": True})
    '{"a":true,"b":[8,16]}'
    """
    return dumps_canonical(dict(config))


def _frozen_config(config: Mapping[str, Any]) -> tuple[tuple[str, KnobValue], ...]:
    return tuple(sorted((str(k), freeze_knob(v, f"config[{k!r}]")) for k, v in config.items()))


@dataclass(frozen=True)
class Record:
    """One measured candidate: what was run, where, with which knobs, and how it went.

    Build one with ``Record.make`` (which accepts plain dicts and lists); the
    fields hold hashable, immutable forms so records can be set members and keys,
    and ``config`` and ``extra`` give them back as fresh plain dicts.

    >>> r = Record.make(Workload.make("matmul", M=64, N=64, K=64), Target.from_name("cpu"),
    ...                 {"tile": [8, 8]}, samples=[1e-3, 2e-3], flops=2 * 64**3)
    >>> r.median, r.config
    (0.0015, {'tile': [8, 8]})
    """

    workload: Workload
    target: Target
    config_items: tuple[tuple[str, KnobValue], ...]
    samples: tuple[float, ...]
    error_kind: ErrorKind
    error_msg: str
    build_seconds: float
    run_seconds: float
    timestamp: float
    strategy: str
    trial: int
    predicted: float | None
    flops: float | None
    version: int = FORMAT_VERSION  # the format version this record was read from
    extra_items: tuple[tuple[str, str], ...] = ()  # key -> canonical JSON text
    #: The applied schedule's steps as canonical JSON text (None: not recorded).
    trace_text: str | None = None
    #: The version hash of the template's space the config belongs to (None: not recorded).
    space_version: str | None = None

    @classmethod
    def make(
        cls,
        workload: Workload,
        target: Target,
        config: Mapping[str, Any],
        *,
        samples: Sequence[float] = (),
        error_kind: ErrorKind | str = ErrorKind.OK,
        error_msg: str = "",
        build_seconds: float = 0.0,
        run_seconds: float = 0.0,
        timestamp: float | None = None,
        strategy: str = "",
        trial: int = 0,
        predicted: float | None = None,
        flops: float | None = None,
        extra: Mapping[str, Any] | None = None,
        trace: Sequence[Mapping[str, Any]] | None = None,
        space_version: str | None = None,
    ) -> Record:
        """Validate and normalise plain values into a Record (``RecordError`` if bad)."""
        if isinstance(trial, bool) or not isinstance(trial, int):
            raise RecordError(f"trial must be an int, got {trial!r}")
        if not isinstance(strategy, str) or not isinstance(error_msg, str):
            raise RecordError("strategy and error_msg must be strings")
        try:
            kind = ErrorKind(error_kind)
        except ValueError:
            raise RecordError(f"unknown error kind {error_kind!r}") from None
        items = _frozen_config(config)
        flops_value = optional_number(flops, "flops")
        if flops_value is not None and flops_value < 0:
            raise RecordError(f"flops must be non-negative, got {flops!r}")
        clashes = sorted(_LINE_KEYS.intersection(extra or {}))
        if clashes:
            raise RecordError(f"extra fields {clashes} clash with the record format's own keys")
        try:
            extra_items = tuple(sorted((k, strict_json(v)) for k, v in (extra or {}).items()))
        except (TypeError, ValueError) as exc:
            raise RecordError(f"extra fields must be plain JSON: {exc}") from None
        if space_version is not None and not isinstance(space_version, str):
            raise RecordError(f"schedule.space must be a string or null, got {space_version!r}")
        return cls(
            workload=workload,
            target=target,
            config_items=items,
            samples=tuple(seconds(s, "sample") for s in samples),
            error_kind=kind,
            error_msg=error_msg,
            build_seconds=seconds(build_seconds, "build_seconds"),
            run_seconds=seconds(run_seconds, "run_seconds"),
            timestamp=seconds(time.time() if timestamp is None else timestamp, "timestamp"),
            strategy=strategy,
            trial=trial,
            predicted=optional_number(predicted, "predicted"),
            flops=flops_value,
            extra_items=extra_items,
            trace_text=_trace_text(trace),
            space_version=space_version,
        )

    @property
    def config(self) -> dict[str, Any]:
        """The knob values as a fresh plain-JSON dict (tuples back to lists)."""
        return {k: thaw_knob(v) for k, v in self.config_items}

    def with_config(self, config: Mapping[str, Any]) -> Record:
        """This record with its knob values replaced (``RecordError`` if one is not JSON)."""
        return replace(self, config_items=_frozen_config(config))

    @property
    def trace(self) -> list[dict[str, Any]] | None:
        """The measured schedule's steps (plain JSON), or None when not recorded."""
        return None if self.trace_text is None else json.loads(self.trace_text)

    @property
    def extra(self) -> dict[str, Any]:
        """Unknown top-level fields read from the log, as a fresh dict."""
        return {k: json.loads(v) for k, v in self.extra_items}

    @property
    def ok(self) -> bool:
        """Whether the candidate ran and matched the reference."""
        return self.error_kind is ErrorKind.OK

    @property
    def median(self) -> float:
        """Median seconds per run; ``inf`` unless ok with samples, so it sorts last."""
        if not self.ok or not self.samples:
            return math.inf
        return statistics.median(self.samples)

    @property
    def iqr(self) -> float:
        """Interquartile range of the samples, seconds: how far its timings spread.

        0 with fewer than two samples; ``inf`` unless ok with samples, as ``median``.
        """
        if not self.ok or not self.samples:
            return math.inf
        return iqr(self.samples)

    @property
    def gflops(self) -> float | None:
        """Achieved GFLOP/s from the median, or None when flops or timing is unknown."""
        median = self.median
        if self.flops is None or not math.isfinite(median) or median <= 0:
            return None
        return self.flops / median / 1e9

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON-ready dict (see module doc): version 1 if read from one."""
        line: dict[str, Any] = {
            "v": 1 if self.version == 1 else FORMAT_VERSION,
            "workload": self.workload.to_json(),
            "workload_key": self.workload.key,
            "target": self.target.to_json(),
            "config": self.config,
            "result": {
                "samples": list(self.samples),
                "error_kind": self.error_kind.value,
                "error_msg": self.error_msg,
                "build_s": self.build_seconds,
                "run_s": self.run_seconds,
            },
            "time": self.timestamp,
            "provenance": {
                "strategy": self.strategy,
                "trial": self.trial,
                "predicted": self.predicted,
            },
            "flops": self.flops,
        }
        if line["v"] >= 2:
            recorded = self.trace_text is not None or self.space_version is not None
            line["schedule"] = (
                {"trace": self.trace, "space": self.space_version} if recorded else None
            )
        line.update(self.extra)
        return line

    @classmethod
    def from_json(cls, data: Any) -> Record:
        """Read one decoded JSON line; ``RecordError`` (one line) if it is not a record.

        Raises ``RecordVersionError`` for a version this reader does not know.
        """
        if not isinstance(data, dict):
            raise RecordError(f"a record must be a JSON object, got {type(data).__name__}")
        if "v" not in data:
            raise RecordError("record has no format version 'v'")
        version = data["v"]
        reader = _READERS.get(version) if type(version) is int else None
        if reader is None:
            raise RecordVersionError(f"unknown record format version {version!r}")
        try:
            return reader(data)
        except RecordError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            raise RecordError(f"bad version {version} record: {detail}") from None


def _trace_text(trace: Sequence[Mapping[str, Any]] | None) -> str | None:
    """A trace as canonical JSON text: a list of step objects (checked as data, never run)."""
    if trace is None:
        return None
    if not isinstance(trace, list | tuple) or not all(isinstance(t, Mapping) for t in trace):
        raise RecordError("schedule.trace must be a list of step objects or null")
    try:
        return strict_json([dict(t) for t in trace])
    except (TypeError, ValueError) as exc:
        raise RecordError(f"schedule.trace must be plain JSON: {exc}") from None


def _common(data: dict[str, Any], line_keys: frozenset[str], **fields: Any) -> Record:
    result, provenance, config = data["result"], data["provenance"], data["config"]
    if not isinstance(config, dict):
        raise RecordError("record 'config' must be an object")
    samples = result["samples"]
    if not isinstance(samples, list):
        raise RecordError("record 'result.samples' must be a list")
    return Record.make(
        Workload.from_json(data["workload"]),
        Target.from_json(data["target"]),
        config,
        samples=samples,
        error_kind=result["error_kind"],
        error_msg=result.get("error_msg", ""),
        build_seconds=result.get("build_s", 0.0),
        run_seconds=result.get("run_s", 0.0),
        timestamp=seconds(data["time"], "time"),  # required here: None means "now" in make
        strategy=provenance.get("strategy", ""),
        trial=provenance["trial"],
        predicted=provenance.get("predicted"),
        flops=data.get("flops"),
        extra={k: v for k, v in data.items() if k not in line_keys},
        **fields,
    )


def _read_v1(data: dict[str, Any]) -> Record:
    return replace(_common(data, _V1_KEYS), version=1)


def _read_v2(data: dict[str, Any]) -> Record:
    schedule = data.get("schedule")
    if schedule is None:
        schedule = {}
    if not isinstance(schedule, dict):
        raise RecordError("record 'schedule' must be an object or null")
    record = _common(
        data, _LINE_KEYS, trace=schedule.get("trace"), space_version=schedule.get("space")
    )
    return replace(record, version=2)


_READERS: dict[int, Callable[[dict[str, Any]], Record]] = {1: _read_v1, 2: _read_v2}
