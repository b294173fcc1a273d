"""What one tuning run shares among the tasks it searches: a :class:`TuneContext`.

Both loops, ``tune`` (one task) and ``tune_model`` (a model's tasks under one
budget), open one. It owns the measurer (its own, or one passed in), the log
writer, the clock, the error count and every :class:`~tuner.task.TaskTuner`
opened in it, and it builds each task's tuner the one way: the strategy the
options name over the task's space, with its study, its featurizer and, when
the run shares one, the shared cost model's view. What differs between the
loops stays in them: which task gets the next batch and when to stop. What
happens after each measured batch hangs on the context's callbacks
(``on_batch``), and re-timing the leaders at the end is one call.

>>> with TuneContext(opts, target) as ctx:
...     tt = ctx.tuner(task, prior)
...     while tt.done < opts.trials and not ctx.out_of_time():
...         ctx.step(0, opts.batch)
...     ctx.retime()
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any

from records import LogWriter, Record, load

from ..measure import Measurer
from ..search import Strategy, get_strategy
from ..search.storage import StorageError
from ..space import ConfigError, ConfigSpace
from ..target import Target
from ..task import Task, TaskTuner
from ..workload import Workload
from .featurize import Featurizer
from .shared_model import SharedCostModel, share_cost_model

__all__ = ["BatchHook", "TuneContext", "task_strategy", "transfer_data"]

#: Called after each measured batch: (the tuner's index in the context, its tuner, the records).
BatchHook = Callable[[int, TaskTuner, list[Record]], None]


class TuneContext:
    """One tuning run: its options, target, measurer, log, clock and tuners.

    ``measurer`` replaces the run's own (a ``ReplayMeasurer``, a simulation,
    or one shared with other runs; it is not closed here). ``shared`` is a
    cost model every tuner of the run teaches and learns from. On exit, the
    claims every tuner still holds in a shared study go back, whatever ended
    the run; a storage that goes away mid-run raises ``StorageError`` naming
    the log that keeps every measurement made.
    """

    def __init__(
        self,
        opts: Any,
        target: Target,
        *,
        measurer: Any = None,
        shared: SharedCostModel | None = None,
    ):
        self.opts, self.target, self.shared = opts, target, shared
        self._given = measurer
        self.measurer: Any = None
        self.log: LogWriter | None = None
        self.tuners: list[TaskTuner] = []
        self.on_batch: list[BatchHook] = []
        self.errors = 0
        self.start = time.monotonic()
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> TuneContext:
        runner: Any = (
            contextlib.nullcontext(self._given)
            if self._given is not None
            else Measurer(self.opts.measure, threads=self.target.threads)
        )
        with self._stack as stack:
            self.measurer = stack.enter_context(runner)
            if self._given is None:  # its processes import while the search is set up
                self.measurer.start()
            self.log = stack.enter_context(LogWriter(self.opts.log))
            self._stack = stack.pop_all()
        self.start = time.monotonic()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.close()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def out_of_time(self) -> bool:
        limit = self.opts.time_limit
        return limit is not None and self.elapsed >= limit

    def tuner(
        self,
        task: Task,
        prior: Sequence[Record] = (),
        *,
        space: ConfigSpace | None = None,
        shared_index: int | None = None,
    ) -> TaskTuner:
        """``task``'s tuner in this run: its strategy, the shared cost model, the prior records.

        ``shared_index`` is the task's group in the shared cost model (by
        default its index in this run; a model shared by several runs needs
        one per task across them).
        """
        assert self.log is not None, "TuneContext.tuner outside its with-block"
        space = space if space is not None else task.space
        strategy = task_strategy(task, space, self.opts, workers=self.measurer)
        if self.shared is not None:
            index = shared_index if shared_index is not None else len(self.tuners)
            share_cost_model(strategy, self.shared, index, task, workers=self.measurer)
        tt = TaskTuner(task, strategy, self.measurer, self.log, prior, space)
        self._stack.callback(tt.close)
        self.tuners.append(tt)
        return tt

    def step(self, index: int, n: int) -> list[Record]:
        """Measure up to ``n`` candidates of tuner ``index``; the batch goes to the callbacks."""
        tt = self.tuners[index]
        try:
            records = tt.step(n)
        except StorageError as exc:
            raise StorageError(f"{exc}; {self.opts.log} keeps every measurement made") from None
        self.errors += sum(not rec.ok for rec in records)
        if records:
            for hook in self.on_batch:
                hook(index, tt, records)
        return records

    def retime(self, also: Callable[[int], Sequence[str]] | None = None) -> None:
        """Measure the leaders of every tuner that searched once more (``opts.retime`` of each).

        ``also(i)`` names configs of tuner ``i`` measured in the same batch
        (its default schedule, so "default vs best" compares times taken alike).
        """
        if self.opts.retime <= 0:
            return
        for i, tt in enumerate(self.tuners):
            if tt.trials > 0:
                tt.retime(self.opts.retime, also=also(i) if also is not None else ())


def task_strategy(task: Task, space: ConfigSpace, opts: Any, workers: Any = None) -> Strategy:
    """The search strategy ``opts`` names for ``task``, over ``space``.

    Its trials live in the Optuna study named by the task's key and the
    hardware's fingerprint (when ``opts.storage`` is given), whichever
    strategy runs it; the cost model sees knob encodings and loop-nest
    features (lowered in ``workers``' build processes, see ``Featurizer``),
    warm-started from ``opts.transfer_from``.
    """
    extra: dict[str, Any] = {}
    if opts.storage:
        extra = {
            "storage": opts.storage,
            "study_name": task.study_name,
            "claim_timeout": opts.claim_timeout,
        }
    featurize = Featurizer(task, space, workers)
    if opts.transfer_from:
        extra["transfer"] = transfer_data(opts.transfer_from, task.workload, task.target, space)
    return get_strategy(
        opts.strategy,
        space,
        seed=opts.seed,
        workload=task.workload,
        target=task.target,
        features=featurize,
        **extra,
    )


#: At most this many records of each other workload are learnt from (the fastest first).
TRANSFER_PER_WORKLOAD = 400


def transfer_data(
    logs: Sequence[Any],
    workload: Workload,
    target: Target,
    space: Any,
) -> tuple[Any, Any, Any] | None:
    """Features, seconds and group labels of other workloads' records, for the cost model.

    Each other workload of the target's kind is one ranking group. Its configs
    are lowered with its own arguments, so the loop-nest features describe the
    program that was timed; the knob part of the features is this space's
    encoding when the config fits this space, NaN otherwise (XGBoost treats
    NaN as missing). Records that no longer validate are skipped.
    """
    import numpy as np

    from cost_models import loop_features
    from search_spaces import OperatorError, canonical_records, get_operator

    from ..lower.lower import lower

    by_workload: dict[str, list[Record]] = {}
    for path in logs:
        for r in canonical_records(load(path, target_kind=target.kind)):
            if r.workload != workload:
                by_workload.setdefault(r.workload.key, []).append(r)
    knob_width = len(space.feature_names())
    rows, seconds, groups = [], [], []
    for group, records in enumerate(by_workload.values(), start=1):
        w = records[0].workload
        try:
            other = get_operator(w.op)
            other_args = other.parse_args(w.as_dict())
            spaces = {t: other.space(other_args, t) for t in {r.target for r in records}}
        except (OperatorError, ConfigError):
            continue
        records = sorted(records, key=lambda r: r.median)[:TRANSFER_PER_WORKLOAD]
        for r in records:
            try:  # each config on the target it was measured on
                cfg = spaces[r.target].validate(r.config)
                sched, tensors = other.schedule(cfg, other_args, r.target)
                nest = loop_features(lower(sched, tensors), r.target)
            except Exception:  # an older space or a template that changed: skip it
                continue
            try:
                knobs = np.asarray(space.encode(space.validate(r.config)), dtype=np.float64)
            except ConfigError:
                knobs = np.full(knob_width, np.nan)
            rows.append(np.concatenate([knobs, nest]))
            seconds.append(r.median)
            groups.append(group)
    if not rows:
        return None
    return np.vstack(rows), np.asarray(seconds), np.asarray(groups, dtype=np.int64)
