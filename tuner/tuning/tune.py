"""The tuning loop of one operator workload: a thin loop over its TaskTuner; resumable.

The search of one task lives in ``tuner.task.TaskTuner`` (``step(n)``:
propose, measure, log, learn), opened in a ``TuneContext`` (measurer, log,
clock, re-timing; ``tuner.tuning.context``); this module adds the stopping
rules, the progress reports as a batch hook and the NumPy baseline.

>>> result = tune("matmul", {"M": 512, "N": 512, "K": 512}, TuneOptions(trials=64))
>>> result.best.gflops
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from records import Record, load
from records.format import iqr

from ..measure import MeasureOptions, Measurer, ReplayMeasurer
from ..measure.baseline import fresh_baseline
from ..measure.load import Load, other_load
from ..search.study import CLAIM_TIMEOUT
from ..target import Target
from ..task import Task, TaskTuner
from ..workload import Workload
from .context import BatchHook, TuneContext
from .shared_model import SharedCostModel

__all__ = ["TuneOptions", "TuneProgress", "TuneResult", "tune"]


@dataclass(frozen=True)
class TuneOptions:
    """How long and how to search; everything a ``tuner tune`` flag sets."""

    trials: int = 64
    time_limit: float | None = None  # seconds
    strategy: str = "xgb"
    log: Path = Path("tune.jsonl")
    seed: int = 0
    batch: int = 8
    early_stopping: int | None = None  # stop after this many trials without improvement
    target: str = "cpu"
    threads: int | None = None
    #: An Optuna storage (``postgresql+psycopg://...``, ``journal:PATH``, ``sqlite:///PATH``)
    #: holding the task's study; workers given the same one share the study and the budget.
    storage: str | None = None
    #: Seconds a dead worker's claims are held before others measure those configs.
    claim_timeout: float = CLAIM_TIMEOUT
    transfer_from: tuple[Path, ...] = ()  # logs whose other workloads warm-start the cost model
    measure: MeasureOptions = field(default_factory=MeasureOptions)
    #: At the end, measure this many of the fastest configs once more; the best
    #: is then judged on each config's samples pooled (not on one lucky run).
    retime: int = 3
    #: At the end, time the operator's NumPy reference in a fresh process with NumPy's
    #: own threading (``tuner.measure.baseline``), to show the best beside it.
    baseline: bool = True


#: Seconds between looks at the study while other workers hold the rest of the budget.
_WAIT = 0.5


@dataclass(frozen=True)
class TuneProgress:
    """Sent after each measured candidate."""

    trial: int  # this session's count, 1-based
    total: int
    record: Record
    best: Record | None
    errors: int
    elapsed: float


@dataclass(frozen=True)
class TuneResult:
    workload: Workload
    target: Target
    measured: int  # in this session
    resumed: int  # records found in the log before starting
    errors: int
    best: Record | None
    elapsed: float
    stopped_because: str
    # The NumPy reference timed in a fresh process at the end of the run (median
    # seconds; None when not measured: replay, nothing new, or baseline off).
    numpy_seconds: float | None = None
    #: The interquartile range of the NumPy reference's samples (seconds).
    numpy_iqr: float | None = None
    #: The heavier of the other processes' loads read just before and after the
    #: NumPy reference was timed (None when not read).
    load: Load | None = None


def tune(
    op_name: str,
    raw_args: Mapping[str, Any],
    options: TuneOptions | None = None,
    progress: Callable[[TuneProgress], None] | None = None,
    replay: ReplayMeasurer | None = None,
    measurer: Measurer | None = None,
    shared: tuple[SharedCostModel, int] | None = None,
) -> TuneResult:
    """Search ``op_name``'s schedule space; every measurement is appended to ``options.log``.

    A loop over one :class:`~tuner.task.TaskTuner`: batches until the trial
    budget, the time limit or early stopping says stop, then the leaders are
    re-timed and the NumPy reference is timed beside them. With ``replay``,
    candidates are answered from recorded measurements and the space is
    limited to the recorded configs (for comparing strategies).

    With ``options.storage``, every worker given it joins the task's study:
    the trial budget counts what all of them measure from the moment this
    one joins, no config is measured twice, and a worker that finds the
    rest of the budget claimed by others waits until those claims are
    measured or released. A storage that goes away raises ``StorageError``;
    the log keeps what was measured.

    Tuning several shapes in one run, pass the same open ``measurer`` to
    each call and ``shared=(model, i)``: shape ``i`` learns from, and
    teaches, one cost model shared by all (``tuner.tuning.shared_model``).
    """
    from search_spaces import canonical_records

    opts = options or TuneOptions()
    target = Target.from_name(opts.target, num_threads=opts.threads)
    task = Task.make(op_name, raw_args, target)
    space = task.space
    if replay is not None:
        space = space.restricted(replay.keys, "measured in the replayed log")
    logged = load(opts.log, target_kind=target.kind) if opts.log.exists() else []
    model, index = shared if shared is not None else (None, None)
    stopped = "trial budget reached"
    with TuneContext(opts, target, measurer=replay or measurer, shared=model) as ctx:
        tuner = ctx.tuner(task, canonical_records(logged), space=space, shared_index=index)
        tuner.budget = opts.trials
        watch = _SinceBest(tuner.best)
        ctx.on_batch.append(
            watch if progress is None else _reporter(progress, opts.trials, ctx, watch)
        )
        while tuner.done < opts.trials:
            if ctx.out_of_time():
                stopped = "time limit reached"
                break
            if opts.early_stopping is not None and watch.since >= opts.early_stopping:
                stopped = f"no improvement in {opts.early_stopping} trials"
                break
            if not ctx.step(0, min(opts.batch, opts.trials - tuner.done)):
                if tuner.exhausted:
                    stopped = "search space exhausted"
                    break
                time.sleep(_WAIT)  # the rest of the budget is claimed by other workers
        measured = tuner.trials
        if replay is None:
            ctx.retime()
        numpy_seconds = numpy_iqr = busy = None
        if isinstance(ctx.measurer, Measurer) and opts.baseline and measured > 0:
            before = other_load()
            base = fresh_baseline(task.candidate({}), ctx.measurer.options)
            loads = [x for x in (before, other_load()) if x is not None]
            busy = max(loads, key=lambda x: x.busy, default=None)
            if base.ok and base.samples:
                numpy_seconds = statistics.median(base.samples)
                numpy_iqr = iqr(base.samples)
    return TuneResult(
        task.workload,
        target,
        measured,
        len(tuner.prior),
        ctx.errors,
        tuner.best,
        ctx.elapsed,
        stopped,
        numpy_seconds,
        numpy_iqr,
        busy,
    )


class _SinceBest:
    """The best record so far and how many records came since it improved (early stopping)."""

    def __init__(self, best: Record | None):
        self.best, self.since = best, 0

    def __call__(self, index: int, tuner: TaskTuner, records: list[Record]) -> None:
        for rec in records:
            if rec.ok and (self.best is None or rec.median < self.best.median):
                self.best, self.since = rec, 0
            else:
                self.since += 1


def _reporter(
    progress: Callable[[TuneProgress], None], total: int, ctx: TuneContext, watch: _SinceBest
) -> BatchHook:
    """The ``progress`` callback as a batch hook: ``watch`` told of each record in turn, then
    the trial's number, the best so far and the errors reported."""

    def report(index: int, tt: TaskTuner, records: list[Record]) -> None:
        # done counts the batch once told (own) or as of the claims (shared)
        first = tt.done + 1 - (len(records) if tt.shared is None else 0)
        errors = ctx.errors - sum(not r.ok for r in records)
        for i, rec in enumerate(records):
            watch(index, tt, [rec])
            errors += not rec.ok
            progress(TuneProgress(first + i, total, rec, watch.best, errors, ctx.elapsed))

    return report
