"""Compile-time use of tuning logs: build each operator with its best record.

>>> with tuner.apply_best("tune.jsonl"):
...     f = tuner.build_op("matmul", M=512, N=512, K=512)
>>> c = f(a, b)

``apply_best`` takes one log, a list of logs or a folder of them. A workload
with no record on this target gets its template's default schedule and one
warning that names it. Each build takes the record timed at its own thread
count on this machine where there is one (others with a warning), and a
record whose template changed since is rebuilt from its stored schedule
trace. Kernels come from the on-disk cache when built before. ``build_op``
(``tuner.op``) is the entry point above this module and ``tuner.dynamic``.
"""

from __future__ import annotations

import contextlib
import contextvars
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from records import Match, Record, best_match, load

from .codegen import Kernel, build
from .codegen.backend import check_output
from .codegen.index import indexed
from .lower.lower import lower
from .schedule import Schedule, ScheduleError
from .space import ConfigError
from .target import Target
from .task import Task
from .te import Tensor
from .workload import Workload

__all__ = [
    "BestRecords",
    "OpKernel",
    "RecordChoiceWarning",
    "UntunedWorkloadWarning",
    "apply_best",
    "build_task",
]


class UntunedWorkloadWarning(UserWarning):
    """A workload was built with its default schedule: no record matched it."""


class RecordChoiceWarning(UserWarning):
    """A record was used that is not an exact match: another thread count or machine,
    or a space that changed since it was measured (then its schedule trace is replayed)."""


class BestRecords:
    """The records of some logs, queried for the best one per workload and target."""

    def __init__(self, source: str | Path | Sequence[str | Path]):
        from search_spaces import canonical_records

        self.records = canonical_records(load(source))  # type: ignore[arg-type]

    def match(self, workload: Workload, target: Target) -> Match:
        """The best record and, for a near miss, why it was taken (see ``records.best_match``)."""
        return best_match(self.records, workload, target)

    def lookup(self, workload: Workload, target: Target) -> Record | None:
        return self.match(workload, target).record

    def nearest(
        self, workload: Workload, target: Target
    ) -> Iterator[tuple[float, Workload, Match]]:
        """Other shapes' best records, nearest first (see ``records.nearest``)."""
        from records.nearest import nearest_matches

        return nearest_matches(self.records, workload, target)


_ACTIVE: contextvars.ContextVar[BestRecords | None] = contextvars.ContextVar(
    "tuner_best", default=None
)


def records_in_scope(records: BestRecords | None = None) -> BestRecords | None:
    """``records`` when given, else those of the enclosing ``apply_best`` block (or None)."""
    return records if records is not None else _ACTIVE.get()


@contextlib.contextmanager
def apply_best(source: str | Path | Sequence[str | Path]) -> Iterator[BestRecords]:
    """Within the block, ``build_op`` uses the best records of ``source``."""
    chosen = BestRecords(source)
    token = _ACTIVE.set(chosen)
    try:
        yield chosen
    finally:
        _ACTIVE.reset(token)


class OpKernel:
    """An operator built for one workload: ``f(*inputs)`` returns the output array.

    ``record`` is the record it was built from (None: the default schedule);
    ``record.target`` says which machine and thread count it was timed on.
    ``replayed`` is True when the schedule was rebuilt from the record's trace.
    """

    def __init__(
        self,
        workload: Workload,
        kernel: Kernel,
        config: dict[str, Any],
        record: Record | None,
        replayed: bool = False,
    ):
        self.workload, self.kernel, self.config, self.record = workload, kernel, config, record
        self.replayed = replayed

    @property
    def source(self) -> str:
        return self.kernel.source

    def __call__(self, *inputs: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """The output for ``inputs``: written into ``out`` when given, else a new array.

        A loop that reuses ``out`` pays no allocation per call (fresh pages
        fault in on first touch, which a small kernel notices).
        """
        buf = self.kernel.args[-1]
        arrays = [np.ascontiguousarray(a) for a in inputs]
        if out is None:
            out = np.empty(buf.shape, buf.dtype)
        else:
            check_output(out, buf.shape, buf.dtype, "out", arrays)
        self.kernel(*arrays, out)
        return out


def build_task(task: Task, records: BestRecords | None = None) -> OpKernel:
    """Build ``task`` with its best record in ``records`` (or in scope), else its default.

    What ``tuner.op.build_op`` does once the task is made; a model's kernels are built
    here, one per task.
    """
    tgt = task.target
    chosen = records_in_scope(records)
    match = chosen.match(task.workload, tgt) if chosen is not None else Match(None)
    if match.note:
        _warn(RecordChoiceWarning, f"record for {task.workload.key}: {match.note}")
    record = match.record
    built = _from_record(task, record) if record is not None else None
    if built is None and record is None and chosen is not None:
        nearest = _from_nearest(task, chosen)
        if nearest is not None:
            return nearest
    if built is None:
        if chosen is not None and record is None:
            _warn(
                UntunedWorkloadWarning,
                f"no tuning record for {task.workload.key} on {tgt.kind}; using the default schedule",
            )
        config = task.space.validate(task.default_config()).to_json()
        sched, tensors = task.schedule(config)
        return OpKernel(task.workload, _build(task, sched, tensors), config, None)
    sched, tensors, config, replayed = built
    return OpKernel(task.workload, _build(task, sched, tensors), config, record, replayed)


def _from_nearest(task: Task, chosen: BestRecords) -> OpKernel | None:
    """``task`` built with the config of the nearest tuned shape of its family that fits it.

    A shape never tuned (another batch size or sequence length) starts from
    its closest tuned neighbour rather than the default schedule; one
    warning names the shape the record came from.
    """
    for distance, source, match in chosen.nearest(task.workload, task.target):
        assert match.record is not None
        try:
            config = task.space.validate(match.record.config).to_json()
            sched, tensors = task.schedule(config)
        except (ConfigError, ScheduleError):
            continue  # its knobs do not fit this shape: try the next nearest
        note = f"; {match.note}" if match.note else ""
        _warn(
            RecordChoiceWarning,
            f"record for {task.workload.key}: none of this shape; using the one tuned for "
            f"{source.key} (shape distance {distance:.3g}){note}",
            depth=2,
        )
        return OpKernel(task.workload, _build(task, sched, tensors), config, match.record)
    return None


def _build(task: Task, sched: Schedule, tensors: list[Tensor]) -> Kernel:
    """The schedule's kernel, from the kernel index when this very schedule was built before.

    The schedule's identity is its task and its trace (the steps it is made
    of), so a config and a replayed trace that make the same schedule share it.
    """
    identity = f"{task.key}\n{sched.dumps()}"
    return indexed(
        identity,
        lambda: build(sched, tensors, target=task.target),
        task.target,
        relower=lambda: lower(sched, tensors, "kernel", target=task.target),
    )


def _from_record(
    task: Task, record: Record
) -> tuple[Schedule, list[Tensor], dict[str, Any], bool] | None:
    """The schedule ``record`` measured: from its knobs while its space is today's, else its trace.

    None when neither applies (knobs that no longer validate and no trace
    that replays); each fallback is said in one warning.
    """
    key = task.workload.key
    changed = record.space_version is not None and record.space_version != task.space.version
    knobs_error = ""
    if not changed:
        try:
            config = task.space.validate(record.config).to_json()
            sched, tensors = task.schedule(config)
            return sched, tensors, config, False
        except ConfigError as exc:
            knobs_error = str(exc)
    if record.trace is not None:
        default, tensors = task.schedule(task.default_config())
        try:
            sched = Schedule.from_json(list(default.outputs), record.trace)
            lower(sched, tensors, target=task.target)
        except ScheduleError as exc:
            _warn(
                RecordChoiceWarning,
                f"record for {key}: its schedule trace no longer applies ({exc})",
                depth=2,
            )
        else:
            why = (
                "its template's space changed"
                if changed
                else f"its knobs no longer fit ({knobs_error})"
            )
            _warn(
                RecordChoiceWarning,
                f"record for {key}: {why}; rebuilt from its schedule trace",
                depth=2,
            )
            return sched, tensors, record.config, True
    if changed:  # no trace to replay: the knobs are the best guess left
        try:
            config = task.space.validate(record.config).to_json()
        except ConfigError as exc:
            knobs_error = str(exc)
        else:
            sched, tensors = task.schedule(config)
            return sched, tensors, config, False
    _warn(
        UntunedWorkloadWarning,
        f"record for {key} no longer fits its space ({knobs_error}); using the default schedule",
        depth=2,
    )
    return None


def _warn(category: type[Warning], message: str, depth: int = 1) -> None:
    """Warn at the caller of ``build_op`` (``depth``: helpers between it and here)."""
    warnings.warn(message, category, stacklevel=2 + depth)
