"""The tuning loop: propose, measure, log, learn; resumable from its own log.

>>> result = tune("matmul", {"M": 512, "N": 512, "K": 512}, TuneOptions(trials=64))
>>> result.best.gflops
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from records import ErrorKind, LogWriter, Record, config_key, load
from records import best as records_best
from records.log import RETIME

from .measure import Candidate, MeasureOptions, Measurer, MeasureResult, ReplayMeasurer
from .search import Strategy, get_strategy
from .space import Config, ConfigError
from .target import Target
from .workload import Workload

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
    storage: str | None = None  # an Optuna storage URL, holding the study of every trial
    transfer_from: tuple[Path, ...] = ()  # logs whose other workloads warm-start the cost model
    measure: MeasureOptions = field(default_factory=MeasureOptions)
    #: At the end, measure this many of the fastest configs once more; the best
    #: is then judged on each config's samples pooled (not on one lucky run).
    retime: int = 3
    #: At the end, time the operator's NumPy reference in the same runner, to
    #: show the best beside it.
    baseline: bool = True


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


def _median(record: Record) -> float:
    return record.median if record.ok else math.inf


def tune(
    op_name: str,
    raw_args: Mapping[str, Any],
    options: TuneOptions | None = None,
    progress: Callable[[TuneProgress], None] | None = None,
    replay: ReplayMeasurer | None = None,
) -> TuneResult:
    """Search ``op_name``'s schedule space; every measurement is appended to ``options.log``.

    With ``replay``, candidates are answered from recorded measurements and the
    space is limited to the recorded configs (for comparing strategies).
    """
    from search_spaces import get_operator

    opts = options or TuneOptions()
    op = get_operator(op_name)
    args = op.parse_args(raw_args)
    workload = Workload.make(op_name, **args)
    target = Target.from_name(opts.target, num_threads=opts.threads)
    space = op.space(args, target)
    if replay is not None:
        space = space.restricted(replay.keys, "measured in the replayed log")
    # One study per workload and target in a storage, whichever strategy runs it.
    extra: dict[str, Any] = (
        {"storage": opts.storage, "study_name": f"{workload.key} on {target.kind}"}
        if opts.storage
        else {}
    )
    featurize = _featurizer(op, args, space, target)
    if opts.transfer_from:
        extra["transfer"] = transfer_data(opts.transfer_from, workload, target, space, featurize)
    strategy = get_strategy(
        opts.strategy,
        space,
        seed=opts.seed,
        workload=workload,
        target=target,
        features=featurize,
        **extra,
    )

    from search_spaces import canonical_records

    logged = load(opts.log, target_kind=target.kind) if opts.log.exists() else []
    prior = [r for r in canonical_records(logged) if r.workload == workload]
    measured = _warm_start(strategy, space, prior)
    best = min((r for r in prior if r.ok), key=_median, default=None)
    first_trial = max((r.trial for r in prior), default=-1) + 1
    flops = op.flops(args)

    start = time.monotonic()
    done = errors = since_best = 0
    written: list[Record] = []
    stopped = "trial budget reached"
    try:  # the template's default is always measured first
        defaults = [space.validate(op.default_config(args, target))]
    except ConfigError:  # not in a replayed set
        defaults = []
    runner = replay or Measurer(opts.measure, threads=target.threads)
    with runner as measurer, LogWriter(opts.log) as log:
        while done < opts.trials:
            if opts.time_limit is not None and time.monotonic() - start >= opts.time_limit:
                stopped = "time limit reached"
                break
            if opts.early_stopping is not None and since_best >= opts.early_stopping:
                stopped = f"no improvement in {opts.early_stopping} trials"
                break
            n = min(opts.batch, opts.trials - done)
            batch = [d for d in defaults if d.key not in measured]
            measured.update(d.key for d in batch)
            batch += strategy.propose(n - len(batch), exclude=measured)
            if not batch:
                stopped = "search space exhausted"
                break
            cands = [Candidate(op_name, args, cfg.to_json(), target.to_json()) for cfg in batch]
            results = measurer.measure(cands)
            observations = []
            for cfg, res in zip(batch, results, strict=True):
                rec = _measured(
                    workload,
                    target,
                    cfg.to_json(),
                    res,
                    strategy=strategy.name,
                    trial=first_trial + done,
                    predicted=strategy.predicted(cfg),
                    flops=flops,
                )
                log.write(rec)
                written.append(rec)
                measured.add(cfg.key)
                observations.append((cfg, _median(rec)))
                done += 1
                errors += res.error_kind != ErrorKind.OK
                if rec.ok and (best is None or rec.median < best.median):
                    best, since_best = rec, 0
                else:
                    since_best += 1
                if progress is not None:
                    progress(
                        TuneProgress(done, opts.trials, rec, best, errors, time.monotonic() - start)
                    )
            strategy.observe(observations)
        if replay is None and opts.retime > 0 and done > 0:
            written += _retime(
                measurer, log, op_name, args, workload, target, prior + written, opts
            )
            best = records_best(prior + written, workload, target) or best
        numpy_seconds = None
        if isinstance(measurer, Measurer) and opts.baseline and done > 0:
            base = measurer.baseline(Candidate(op_name, args, {}, target.to_json()))
            numpy_seconds = statistics.median(base.samples) if base.ok else None
    return TuneResult(
        workload,
        target,
        done,
        len(prior),
        errors,
        best,
        time.monotonic() - start,
        stopped,
        numpy_seconds,
    )


def _measured(
    workload: Workload,
    target: Target,
    config: dict[str, Any],
    res: MeasureResult,
    **fields: Any,
) -> Record:
    """The record of one measurement: ``res``'s outcome and times, plus ``fields`` (strategy, trial...)."""
    return Record.make(
        workload,
        target,
        config,
        samples=res.samples,
        error_kind=res.error_kind,
        error_msg=res.error_msg,
        build_seconds=res.build_seconds,
        run_seconds=res.run_seconds,
        **fields,
    )


def _retime(
    measurer: Any,
    log: LogWriter,
    op_name: str,
    args: dict[str, Any],
    workload: Workload,
    target: Target,
    records: list[Record],
    opts: TuneOptions,
) -> list[Record]:
    """Measure the ``opts.retime`` fastest configs once more, logged as strategy "retime".

    A search keeps the luckiest timing of many close candidates; measuring
    the leaders again, at the end and in one batch, lets the best be judged
    on more samples (``records.best`` pools them per config).
    """
    ranked: dict[str, Record] = {}
    for r in sorted((r for r in records if r.ok and r.workload == workload), key=_median):
        ranked.setdefault(config_key(r.config), r)
    leaders = list(ranked.values())[: opts.retime]
    if len(leaders) < 2:
        return []
    cands = [Candidate(op_name, args, r.config, target.to_json()) for r in leaders]
    trial = max(r.trial for r in records) + 1
    out = []
    for i, (r, res) in enumerate(zip(leaders, measurer.measure(cands), strict=True)):
        rec = _measured(
            workload, target, r.config, res, strategy=RETIME, trial=trial + i, flops=r.flops
        )
        log.write(rec)
        out.append(rec)
    return out


def _featurizer(
    op: Any, args: dict[str, Any], space: Any, target: Target
) -> Callable[[Config], Any]:
    """Knob encoding plus the features of the lowered loop nest (what carries across workloads)."""
    import numpy as np

    from cost_models import loop_features

    from .lower.lower import lower

    def features(cfg: Config) -> Any:
        sched, tensors = op.schedule(cfg, args, target)
        return np.concatenate([space.encode(cfg), loop_features(lower(sched, tensors))])

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

    from .lower.lower import lower

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
        records = sorted(records, key=_median)[:TRANSFER_PER_WORKLOAD]
        for r in records:
            try:  # each config on the target it was measured on
                cfg = spaces[r.target].validate(r.config)
                sched, tensors = other.schedule(cfg, other_args, r.target)
                nest = loop_features(lower(sched, tensors))
            except Exception:  # an older space or a template that changed: skip it
                continue
            try:
                knobs = np.asarray(featurize(space.validate(r.config)))[:knob_width]
            except ConfigError:
                knobs = np.full(knob_width, np.nan)
            rows.append(np.concatenate([knobs, nest]))
            seconds.append(_median(r))
            groups.append(group)
    if not rows:
        return None
    return np.vstack(rows), np.asarray(seconds), np.asarray(groups, dtype=np.int64)


def _warm_start(strategy: Strategy, space: Any, prior: list[Record]) -> set[str]:
    """Teach the strategy what the log already holds; return the measured config keys.

    A config logged several times (re-timed) is one observation: the median of
    its samples pooled, infinite if it never ran correctly or ever gave a
    wrong answer.
    """
    by_key: dict[str, list[Record]] = {}
    for r in prior:
        by_key.setdefault(config_key(r.config), []).append(r)
    observations = []
    for group in by_key.values():
        try:
            cfg = space.validate(group[0].config)
        except ConfigError:
            continue  # a config of an older space: keep it in the log, not in the model
        samples = [s for r in group if r.ok for s in r.samples]
        wrong = any(r.error_kind is ErrorKind.WRONG_ANSWER for r in group)
        observations.append(
            (cfg, statistics.median(samples) if samples and not wrong else math.inf)
        )
    strategy.observe(observations)
    return set(by_key)
