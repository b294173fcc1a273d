"""The one record resolver: which schedule a workload is built with, from which record, and why.

Every path that builds a kernel from tuning logs asks :func:`resolve`: an
operator (``build_op``), a dynamic operator's shape-generic kernel, a
model's kernels, static or generic. Given a task and the logs (passed, or
those of the enclosing ``apply_best`` block) it answers, in this order:

1. **the record of this workload on this target** (``records.best_match``:
   timed at this thread count on this machine, else the nearest thread count
   or machine, with a note). Its knobs are used while its template's space is
   the one it was measured in; where the space changed, its schedule trace is
   replayed (``replay``), else its knobs are tried as the best guess left. A
   record that none of these rebuilds gives the default schedule;
2. **else the best record of the nearest tuned shape** of the same family whose
   knobs fit this shape (another batch size or sequence length);
3. **else the template's default schedule**.

The :class:`Choice` says what was chosen (``how``) and carries the warnings a
user should see (another machine's record, a replayed trace, a borrowed shape,
an untuned workload), which the caller gives at its own caller's line.
MetaSchedule's database query is the model: one function, one policy.

>>> with tuner.apply_best("tune.jsonl"):
...     choice = resolve(Task.make("matmul", {"M": 512, "N": 512, "K": 512}, target))
>>> choice.how, choice.record
"""

from __future__ import annotations

import contextlib
import contextvars
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from records import Match, Record, best_match, load

from ..lower.lower import lower
from ..schedule import Schedule, ScheduleError
from ..space import ConfigError
from ..target import Target
from ..task import Task
from ..te import Tensor
from ..workload import Workload

__all__ = [
    "BestRecords",
    "Choice",
    "RecordChoiceWarning",
    "UntunedWorkloadWarning",
    "apply_best",
    "records_in_scope",
    "resolve",
]


class UntunedWorkloadWarning(UserWarning):
    """A workload was built with its default schedule: no record matched it."""


class RecordChoiceWarning(UserWarning):
    """A record was used that is not an exact match: another thread count or machine,
    another shape, or a space that changed since it was measured (then its schedule
    trace is replayed)."""


class BestRecords:
    """The records of some logs, queried for the best one per workload and target."""

    def __init__(self, source: str | Path | Sequence[str | Path]):
        from search_spaces import canonical_records

        self.records = canonical_records(load(source, require=True))  # type: ignore[arg-type]

    @classmethod
    def of(cls, records: Iterable[Record]) -> BestRecords:
        """Records already read (a compiled model's own, ``tuner.model.artifact``), queried alike."""
        from search_spaces import canonical_records

        self = cls.__new__(cls)
        self.records = canonical_records(list(records))
        return self

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
    """Within the block, ``build_op`` and ``compile_model`` use the best records of ``source``."""
    chosen = BestRecords(source)
    token = _ACTIVE.set(chosen)
    try:
        yield chosen
    finally:
        _ACTIVE.reset(token)


#: How a choice was made: this workload's record (its knobs, or its replayed trace), the
#: nearest tuned shape's record, or the template's default.
How = Literal["record", "trace", "nearest", "default"]


@dataclass
class Choice:
    """The config a task is built with, the record it came from, and what to tell the user.

    ``replayed`` holds the schedule rebuilt from the record's trace (``how ==
    "trace"``): its config is the record's, which no longer describes it alone.
    """

    config: dict[str, Any]
    record: Record | None
    how: How
    replayed: tuple[Schedule, list[Tensor]] | None = None
    notes: list[tuple[type[Warning], str]] = field(default_factory=list)

    def warn(self, stacklevel: int = 2) -> None:
        """Give the choice's warnings (``stacklevel`` as ``warnings.warn``'s, from the caller)."""
        for category, message in self.notes:
            warnings.warn(message, category, stacklevel=stacklevel + 1)


def resolve(task: Task, records: BestRecords | None = None, *, replay: bool = True) -> Choice:
    """The record ``task`` is built with (see the module's docstring for the order).

    ``replay=False`` where a schedule of this very shape is of no use (a shape-generic
    kernel is scheduled from knobs at symbolic extents): a changed space's trace is not
    replayed.
    """
    chosen = records_in_scope(records)
    if chosen is None:
        return _default(task, [])
    key = task.workload.key
    notes: list[tuple[type[Warning], str]] = []
    match = chosen.match(task.workload, task.target)
    if match.note:
        notes.append((RecordChoiceWarning, f"record for {key}: {match.note}"))
    if match.record is not None:
        return _from_record(task, match.record, replay, notes) or _default(task, notes)
    for distance, source, near in chosen.nearest(task.workload, task.target):
        assert near.record is not None
        try:
            config = task.space.validate(near.record.config).to_json()
            task.schedule(config)
        except (ConfigError, ScheduleError):
            continue  # its knobs do not fit this shape: try the next nearest
        note = f"; {near.note}" if near.note else ""
        notes.append(
            (
                RecordChoiceWarning,
                f"record for {key}: none of this shape; using the one tuned for "
                f"{source.key} (shape distance {distance:.3g}){note}",
            )
        )
        return Choice(config, near.record, "nearest", notes=notes)
    notes.append(
        (
            UntunedWorkloadWarning,
            f"no tuning record for {key} on {task.target.kind}; using the default schedule",
        )
    )
    return _default(task, notes)


def _default(task: Task, notes: list[tuple[type[Warning], str]]) -> Choice:
    config = task.space.validate(task.default_config()).to_json()
    return Choice(config, None, "default", notes=notes)


def _from_record(
    task: Task, record: Record, replay: bool, notes: list[tuple[type[Warning], str]]
) -> Choice | None:
    """``record``'s schedule: its knobs while its space is today's, else its trace, else its
    knobs as the best guess left; None (with a warning) when none of them fits."""
    key = task.workload.key
    changed = record.space_version is not None and record.space_version != task.space.version
    knobs_error = ""
    if not changed:
        try:
            config = task.space.validate(record.config).to_json()
            task.schedule(config)
            return Choice(config, record, "record", notes=notes)
        except ConfigError as exc:
            knobs_error = str(exc)
    if replay and record.trace is not None:
        default, tensors = task.schedule(task.default_config())
        try:
            sched = Schedule.from_json(list(default.outputs), record.trace)
            lower(sched, tensors, target=task.target)
        except ScheduleError as exc:
            notes.append(
                (
                    RecordChoiceWarning,
                    f"record for {key}: its schedule trace no longer applies ({exc})",
                )
            )
        else:
            why = (
                "its template's space changed"
                if changed
                else f"its knobs no longer fit ({knobs_error})"
            )
            notes.append(
                (RecordChoiceWarning, f"record for {key}: {why}; rebuilt from its schedule trace")
            )
            return Choice(record.config, record, "trace", (sched, tensors), notes)
    if changed:  # no trace to replay: the knobs are the best guess left
        try:
            config = task.space.validate(record.config).to_json()
            task.schedule(config)
            return Choice(config, record, "record", notes=notes)
        except (ConfigError, ScheduleError) as exc:
            knobs_error = str(exc)
    notes.append(
        (
            UntunedWorkloadWarning,
            f"record for {key} no longer fits its space ({knobs_error}); using the default schedule",
        )
    )
    return None
