"""The tuning loop of one operator workload: a thin loop over its TaskTuner; resumable.

The search of one task lives in ``tuner.task.TaskTuner`` (``step(n)``:
propose, measure, log, learn); this module adds the stopping rules, the
progress reports, the re-timing of the leaders and the NumPy baseline.

>>> result = tune("matmul", {"M": 512, "N": 512, "K": 512}, TuneOptions(trials=64))
>>> result.best.gflops
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from records import LogWriter, Record, load

from ..measure import MeasureOptions, Measurer, ReplayMeasurer
from ..search import Strategy, get_strategy
from ..search.storage import StorageError
from ..search.study import CLAIM_TIMEOUT
from ..space import Config, ConfigError, ConfigSpace
from ..target import Target
from ..task import Task, TaskTuner
from ..workload import Workload
from .shared_model import SharedCostModel, share_cost_model

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
    #: At the end, time the operator's NumPy reference in the same runner, to
    #: show the best beside it.
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
    # The NumPy reference timed in the runner at the end of the run (median
    # seconds; None when not measured: replay, nothing new, or baseline off).
    numpy_seconds: float | None = None


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
    strategy = task_strategy(task, space, opts)
    if shared is not None:
        share_cost_model(strategy, shared[0], shared[1], task)
    logged = load(opts.log, target_kind=target.kind) if opts.log.exists() else []

    start = time.monotonic()
    stopped = "trial budget reached"
    runner: Any = (
        replay
        or (contextlib.nullcontext(measurer) if measurer is not None else None)
        or Measurer(opts.measure, threads=target.threads)
    )
    with runner as measurer, LogWriter(opts.log) as log:
        tuner = TaskTuner(task, strategy, measurer, log, canonical_records(logged), space)
        tuner.budget = opts.trials
        best, errors, since_best = tuner.best, 0, 0
        try:
            while tuner.done < opts.trials:
                if opts.time_limit is not None and time.monotonic() - start >= opts.time_limit:
                    stopped = "time limit reached"
                    break
                if opts.early_stopping is not None and since_best >= opts.early_stopping:
                    stopped = f"no improvement in {opts.early_stopping} trials"
                    break
                records = tuner.step(min(opts.batch, opts.trials - tuner.done))
                if not records:
                    if tuner.exhausted:
                        stopped = "search space exhausted"
                        break
                    time.sleep(_WAIT)  # the rest of the budget is claimed by other workers
                    continue
                # done counts the batch once told (own) or as of the claims (shared)
                first = tuner.done + 1 - (len(records) if tuner.shared is None else 0)
                for i, rec in enumerate(records):
                    errors += not rec.ok
                    if rec.ok and (best is None or rec.median < best.median):
                        best, since_best = rec, 0
                    else:
                        since_best += 1
                    if progress is not None:
                        elapsed = time.monotonic() - start
                        progress(TuneProgress(first + i, opts.trials, rec, best, errors, elapsed))
        except StorageError as exc:
            raise StorageError(f"{exc}; {opts.log} keeps every measurement made") from None
        finally:
            tuner.close()
        measured = tuner.trials
        if replay is None and opts.retime > 0 and measured > 0:
            tuner.retime(opts.retime)
        numpy_seconds = None
        if isinstance(measurer, Measurer) and opts.baseline and measured > 0:
            base = measurer.baseline(task.candidate({}))
            numpy_seconds = statistics.median(base.samples) if base.ok else None
    return TuneResult(
        task.workload,
        target,
        measured,
        len(tuner.prior),
        errors,
        tuner.best,
        time.monotonic() - start,
        stopped,
        numpy_seconds,
    )


def task_strategy(task: Task, space: ConfigSpace, opts: TuneOptions) -> Strategy:
    """The search strategy ``opts`` names for ``task``, over ``space``.

    Its trials live in the Optuna study named by the task's key and the
    hardware's fingerprint (when ``opts.storage`` is given), whichever
    strategy runs it; the cost model
    sees knob encodings and loop-nest features, warm-started from
    ``opts.transfer_from``.
    """
    extra: dict[str, Any] = {}
    if opts.storage:
        extra = {
            "storage": opts.storage,
            "study_name": task.study_name,
            "claim_timeout": opts.claim_timeout,
        }
    featurize = _featurizer(task.operator, task.args, space, task.target)
    if opts.transfer_from:
        extra["transfer"] = transfer_data(
            opts.transfer_from, task.workload, task.target, space, featurize
        )
    return get_strategy(
        opts.strategy,
        space,
        seed=opts.seed,
        workload=task.workload,
        target=task.target,
        features=featurize,
        **extra,
    )


def _featurizer(
    op: Any, args: dict[str, Any], space: Any, target: Target
) -> Callable[[Config], Any]:
    """Knob encoding plus the features of the lowered loop nest (what carries across workloads)."""
    import numpy as np

    from cost_models import loop_features

    from ..lower.lower import lower

    def features(cfg: Config) -> Any:
        sched, tensors = op.schedule(cfg, args, target)
        return np.concatenate([space.encode(cfg), loop_features(lower(sched, tensors), target)])

    return features


#: At most this many records of each other workload are learnt from (the fastest first).
TRANSFER_PER_WORKLOAD = 400


def transfer_data(
    logs: Sequence[Path],
    workload: Workload,
    target: Target,
    space: Any,
    featurize: Callable[[Config], Any],
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
                knobs = np.asarray(featurize(space.validate(r.config)))[:knob_width]
            except ConfigError:
                knobs = np.full(knob_width, np.nan)
            rows.append(np.concatenate([knobs, nest]))
            seconds.append(r.median)
            groups.append(group)
    if not rows:
        return None
    return np.vstack(rows), np.asarray(seconds), np.asarray(groups, dtype=np.int64)
