"""Tune a whole model: a task scheduler spends one trial budget over the model's tasks.

The model's tasks are those ``compile_model`` builds (one per distinct fused
group; weight = how often it runs). Each gets a :class:`~tuner.task.TaskTuner`;
all share one measurer (build pool and runner), one log and, for the ``xgb``
strategy, one cost model (``tuner.tuning.shared_model``). A scheduler
(``tuner.tuning.scheduler``, ``gradient`` by default) picks the task that gets the
next round: every task first gets one trial, its default schedule, then
the scheduler follows the expected gain. Resumable: the scheduler's state and
every task's search are rebuilt from the log and no config is measured twice;
``trials`` are this run's, as in ``tune`` (a resumed run measures that many
more).

>>> result = tune_model("resnet50.onnx", TuneOptions(trials=2000, log=Path("tune.jsonl")))
>>> result.default_latency / result.latency    # the estimated speed-up of the whole model
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from records import ErrorKind, Record, config_key, load
from records.log import RETIME

from ..space import ConfigError
from ..target import Target
from ..task import Task, TaskTuner
from .context import BatchHook, TuneContext
from .scheduler import TaskInfo, get_scheduler
from .shared_model import SharedCostModel
from .tune import TuneOptions

__all__ = [
    "ModelProgress",
    "ModelTask",
    "ModelTuneResult",
    "TaskSummary",
    "model_tasks",
    "trials_in_log",
    "tune_model",
]

#: Trials without improvement after which a task drops out, unless ``early_stopping`` says.
PATIENCE = 64


@dataclass(frozen=True)
class ModelTask:
    """A distinct task of a model: how often it runs, and the ONNX operators it computes."""

    task: Task
    weight: int
    ops: str


def model_tasks(
    model: str | os.PathLike[str] | Any,
    target: Target,
    shapes: Mapping[str, Sequence[int]] | None = None,
) -> list[ModelTask]:
    """The distinct tasks of an ONNX model (a path or a ModelProto), in the order they first run.

    The same lowering as ``compile_model`` (and its on-disk cache), without
    building any kernel. A model with symbolic input dimensions needs ``shapes``.
    """
    from ..model.lowered import Lowered, cache_key, external_files

    key = cache_key(model, shapes, target, True)
    lowered = Lowered.load(key, model, target) if key is not None else None
    if lowered is None:
        from ..graph.onnx_import import from_onnx

        graph = from_onnx(model, shapes)
        dynamic = [i for i in graph.inputs if not graph.values[i].static]
        if dynamic:
            raise ValueError(
                f"input {dynamic[0]!r} has symbolic dimensions: give them with --shape NAME=D1,D2,..."
            )
        lowered = Lowered.from_graph(graph, target, True)
        if key is not None:
            lowered.save(key, external_files(model))
    uses: dict[str, ModelTask] = {}
    for spec in lowered.specs:
        key_ = spec.task.key
        prev = uses.get(key_)
        uses[key_] = ModelTask(spec.task, prev.weight + 1 if prev else 1, spec.ops)
    return list(uses.values())


@dataclass(frozen=True)
class ModelProgress:
    """Sent after each measured candidate."""

    trials: int  # this session's
    budget: int  # this session's
    warmed: int  # tasks timed at least once (the log's included)
    task_index: int
    task: ModelTask
    record: Record
    task_best: float | None  # the task's best seconds so far
    task_share: float | None  # its weighted best's share of the estimated latency
    latency: float | None  # the weighted sum of the best times (None until every task ran)
    start_latency: float | None  # the same sum over the default schedules
    errors: int  # this session
    elapsed: float


@dataclass(frozen=True)
class TaskSummary:
    """One row of the final table."""

    key: str
    ops: str
    weight: int
    trials: int  # in the log, this session included (re-timings excluded)
    measured: int  # this session
    default_seconds: float | None
    best_seconds: float | None


@dataclass(frozen=True)
class ModelTuneResult:
    tasks: tuple[TaskSummary, ...]
    budget: int
    measured: int  # this session (re-timings excluded)
    resumed: int  # trials in the log before the session
    errors: int
    elapsed: float
    stopped_because: str
    scheduler: str

    @property
    def latency(self) -> float | None:
        """The model's estimated latency: the weighted sum of the best times (None if one lacks)."""
        return _weighted([(t.weight, t.best_seconds) for t in self.tasks])

    @property
    def default_latency(self) -> float | None:
        return _weighted([(t.weight, t.default_seconds) for t in self.tasks])

    def share(self, row: TaskSummary) -> float | None:
        """``row``'s weighted best time as a share of the estimated latency."""
        total = self.latency
        if not total or row.best_seconds is None:
            return None
        return row.weight * row.best_seconds / total

    def share_before(self, row: TaskSummary) -> float | None:
        """``row``'s weighted default time as a share of the default schedules' latency."""
        total = self.default_latency
        if not total or row.default_seconds is None:
            return None
        return row.weight * row.default_seconds / total


def tune_model(
    model: str | os.PathLike[str] | Any,
    options: TuneOptions | None = None,
    *,
    scheduler: str = "gradient",
    shapes: Mapping[str, Sequence[int]] | None = None,
    progress: Callable[[ModelProgress], None] | None = None,
    measurer: Any = None,
) -> ModelTuneResult:
    """Tune ``model``'s tasks with ``options.trials`` more trials; every measurement to ``options.log``.

    ``options`` are ``tuner tune``'s (strategy, batch, seed, target, threads,
    storage, time limit, re-timing); ``early_stopping`` is per task: a task
    that has not improved in that many trials drops out (default
    ``PATIENCE``). ``measurer`` replaces the real one (anything with
    ``measure(candidates)``: a ``ReplayMeasurer``, a simulation). Ctrl-C
    leaves every measurement made so far in the log; running again resumes.
    """
    opts = options or TuneOptions()
    if opts.transfer_from:
        raise ValueError(
            "tune-model learns across the model's own tasks; it takes no transfer logs"
        )
    target = Target.from_name(opts.target, num_threads=opts.threads)
    mtasks = model_tasks(model, target, shapes)
    logged = _logged(opts.log, target)
    priors = [[r for r in logged if mt.task.measures(r)] for mt in mtasks]
    infos = [
        TaskInfo(weight=mt.weight, flops=_flops(mt.task), tag=mt.task.op_name) for mt in mtasks
    ]
    patience = opts.early_stopping if opts.early_stopping is not None else PATIENCE
    sched = get_scheduler(scheduler, infos, batch=opts.batch, patience=patience, seed=opts.seed)
    for i, prior in enumerate(priors):
        sched.restore(i, [_seconds(r) for r in _searched(prior)])
    resumed = sched.total_trials
    default_keys = [_default_key(mt.task) for mt in mtasks]
    defaults = [_default_seconds(k, p) for k, p in zip(default_keys, priors, strict=True)]

    shared = SharedCostModel(opts.strategy, seed=opts.seed) if opts.strategy == "xgb" else None
    stopped = "trial budget reached"
    with TuneContext(opts, target, measurer=measurer, shared=shared) as ctx:
        tuners = [ctx.tuner(mt.task, prior) for mt, prior in zip(mtasks, priors, strict=True)]
        # after each batch: the scheduler hears of it, then the default's time, then the report
        ctx.on_batch += [_told(sched), _default_seen(default_keys, defaults)]
        if progress is not None:
            ctx.on_batch.append(
                _reporter(progress, sched, mtasks, defaults, opts.trials, resumed, ctx)
            )
        while (spent := sched.total_trials - resumed) < opts.trials:
            if ctx.out_of_time():
                stopped = "time limit reached"
                break
            pick = sched.next_task()
            if pick is None:
                stopped = "every task is exhausted or stopped improving"
                break
            if not ctx.step(pick, min(sched.round_trials(pick), opts.trials - spent)):
                _told(sched)(pick, tuners[pick], [])  # nothing left to measure: the task drops out
        ctx.retime(also=lambda i: [k for k in default_keys[i : i + 1] if k is not None])
        for i, tt in enumerate(tuners):
            if tt.trials > 0:
                defaults[i] = (
                    _default_seconds(default_keys[i], tt.prior + tt.written) or defaults[i]
                )
    rows = tuple(
        TaskSummary(
            mt.task.key,
            mt.ops,
            mt.weight,
            sched.trials[i],
            tt.trials,
            defaults[i],
            tt.best.median if tt.best is not None else None,
        )
        for i, (mt, tt) in enumerate(zip(mtasks, tuners, strict=True))
    )
    measured = sched.total_trials - resumed
    return ModelTuneResult(
        rows, opts.trials, measured, resumed, ctx.errors, ctx.elapsed, stopped, sched.name
    )


def trials_in_log(tasks: Sequence[ModelTask], log: os.PathLike[str] | str) -> int:
    """How many search trials of ``tasks`` the log holds (what a resumed run counts as spent)."""
    if not tasks:
        return 0
    logged = _logged(Path(log), tasks[0].task.target)
    return sum(len(_searched([r for r in logged if t.task.measures(r)])) for t in tasks)


def _logged(log: Path, target: Target) -> list[Record]:
    from search_spaces import canonical_records

    if not log.exists():
        return []
    return canonical_records(load(log, target_kind=target.kind))


def _searched(prior: list[Record]) -> list[Record]:
    """A task's search trials in the order they were measured (re-timings left out)."""
    return sorted((r for r in prior if r.strategy != RETIME), key=lambda r: (r.trial, r.timestamp))


def _seconds(r: Record) -> float:
    return r.median if r.ok else math.inf


def _flops(task: Task) -> float:
    try:
        return task.flops
    except Exception:  # an operator without a flop count: no similarity estimate for it
        return 0.0


def _default_key(task: Task) -> str | None:
    """The config key of the task's default schedule (None if its space refuses it)."""
    try:
        return task.space.validate(task.default_config()).key
    except ConfigError:
        return None


def _default_seconds(key: str | None, prior: list[Record]) -> float | None:
    """The default schedule's median seconds from the log, if it ran.

    Judged as ``records.best`` judges the best: on its re-timed samples when
    it was re-timed with the leaders, else on all its samples pooled.
    """
    mine = [r for r in prior if key is not None and config_key(r.config) == key]
    retimed = [r for r in mine if r.strategy == RETIME]
    samples = [s for r in (retimed or mine) if r.ok for s in r.samples]
    wrong = any(r.error_kind is ErrorKind.WRONG_ANSWER for r in mine)
    return statistics.median(samples) if samples and not wrong else None


def _weighted(pairs: Sequence[tuple[int, float | None]]) -> float | None:
    if any(s is None for _, s in pairs):
        return None
    return sum(w * s for w, s in pairs if s is not None)


def _told(sched: Any) -> BatchHook:
    """A batch hook telling the scheduler how many trials a task spent and its best since."""

    def tell(i: int, tt: TaskTuner, records: list[Record]) -> None:
        sched.tell(i, len(records), tt.best.median if tt.best is not None else math.inf)

    return tell


def _default_seen(keys: list[str | None], defaults: list[float | None]) -> BatchHook:
    """A batch hook noting each task's default schedule's time when a batch measured it."""

    def seen(i: int, tt: TaskTuner, records: list[Record]) -> None:
        for rec in records:
            if defaults[i] is None and rec.ok and config_key(rec.config) == keys[i]:
                defaults[i] = rec.median

    return seen


def _reporter(
    progress: Callable[[ModelProgress], None],
    sched: Any,
    mtasks: list[ModelTask],
    defaults: list[float | None],
    budget: int,
    resumed: int,
    ctx: TuneContext,
) -> BatchHook:
    """The ``progress`` callback as a batch hook: one report per measured record."""

    def report(i: int, tt: TaskTuner, records: list[Record]) -> None:
        errors = ctx.errors - sum(not r.ok for r in records)
        for k, rec in enumerate(records):
            errors += not rec.ok
            done = sched.total_trials - resumed - len(records) + k + 1
            progress(_progress(sched, mtasks, defaults, i, rec, done, budget, errors, ctx.start))

    return report


def _progress(
    sched: Any,
    mtasks: list[ModelTask],
    defaults: list[float | None],
    i: int,
    rec: Record,
    done: int,
    budget: int,
    errors: int,
    start: float,
) -> ModelProgress:
    best = sched.best[i] if math.isfinite(sched.best[i]) else None
    now = sched.weighted_latency()
    latency = now if math.isfinite(now) else None
    share = mtasks[i].weight * best / latency if latency and best is not None else None
    start_latency = _weighted([(mt.weight, d) for mt, d in zip(mtasks, defaults, strict=True)])
    return ModelProgress(
        trials=done,
        budget=budget,
        warmed=sum(r > 0 for r in sched.rounds),
        task_index=i,
        task=mtasks[i],
        record=rec,
        task_best=best,
        task_share=share,
        latency=latency,
        start_latency=start_latency,
        errors=errors,
        elapsed=time.monotonic() - start,
    )
