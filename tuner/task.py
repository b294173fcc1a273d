"""Tasks: the unit of tuning and of record lookup, and the tuner that advances one.

A :class:`Task` is what to compute (an operator template with its arguments;
a fused subgraph of a model later) on which target, thread count included.
Its ``key`` bounds duplicate detection (a config is measured once per task)
and selects the records a build uses; its ``study_name`` (the key and the
hardware fingerprint) names the Optuna study that workers share.

A :class:`TaskTuner` advances one task's search by a few trials at a time
(``step(n)``: propose, measure, record), through a measurer and a log that
other tasks' tuners may share; ``tune()`` is a loop over one of them, and a
task scheduler interleaves many. Under ``--storage`` many tuners, in many
processes, share the task's study: each claims its candidates before
measuring them (``tuner.search.study``) and learns from the others' results.

>>> task = Task.make("matmul", {"M": 512, "N": 512, "K": 512}, Target.from_name("cpu"))
>>> task.key
'matmul(K=512,M=512,N=512,dtype=float32,epilogue=none,trans_a=false,trans_b=false)@cpu/threads=2'
>>> with Measurer(MeasureOptions(), threads=2) as m, LogWriter("tune.jsonl") as log:
...     tt = TaskTuner(task, m, log)
...     tt.step(8)
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from records import ErrorKind, LogWriter, Record, config_key
from records import best as records_best
from records.log import RETIME

from .measure import Candidate, MeasureResult
from .schedule import Schedule
from .search import Strategy
from .search.study import KnobStudy
from .space import Config, ConfigError, ConfigSpace
from .target import Target
from .te import Tensor
from .workload import Workload

__all__ = ["Task", "TaskTuner"]


@dataclass(frozen=True)
class Task:
    """An operator workload on a target; everything the tuner and the compiler ask of it.

    The key is the workload's key and the target's kind and thread count:
    ``matmul(K=64,M=64,N=64,...)@cpu/threads=2``. It leaves out the hardware
    fingerprint: records keep theirs, and a build prefers its own machine's
    (``records.best_match``). The study name adds it, so that workers on
    identical machines share a study and workers on other hardware never mix
    their timings into it.
    """

    workload: Workload
    target: Target

    @classmethod
    def make(cls, op: str, args: Mapping[str, Any], target: Target) -> Task:
        """The task of operator ``op`` with ``args`` (checked and completed with defaults)."""
        from search_spaces import get_operator

        parsed = get_operator(op).parse_args(args)
        return cls(Workload.make(op, **parsed), target)

    def __getstate__(self) -> dict[str, Any]:
        """The workload and the target: the operator, arguments and space a task caches are
        made again where it is unpickled (the operator holds functions pickle cannot send)."""
        return {"workload": self.workload, "target": self.target}

    @property
    def key(self) -> str:
        return f"{self.workload.key}@{self.target.kind}/threads={self.target.threads}"

    @property
    def study_name(self) -> str:
        """``<key>#<fingerprint>``: the Optuna study of this task on this hardware."""
        return f"{self.key}#{self.target.fingerprint}"

    @property
    def op_name(self) -> str:
        return self.workload.op

    @functools.cached_property
    def operator(self) -> Any:
        """The operator template (``search_spaces.Operator``)."""
        from search_spaces import get_operator

        return get_operator(self.workload.op)

    @functools.cached_property
    def args(self) -> dict[str, Any]:
        return self.operator.parse_args(self.workload.as_dict())

    @functools.cached_property
    def space(self) -> ConfigSpace:
        """The template's space on this task's target."""
        space: ConfigSpace = self.operator.space(self.args, self.target)
        return space

    def default_config(self) -> dict[str, Any]:
        return dict(self.operator.default_config(self.args, self.target))

    def schedule(self, config: Mapping[str, Any]) -> tuple[Schedule, list[Tensor]]:
        """The schedule of ``config`` (validate configs from outside against ``space`` first)."""
        return self.operator.schedule(config, self.args, self.target)  # type: ignore[no-any-return]

    @property
    def flops(self) -> float:
        return float(self.operator.flops(self.args))

    def candidate(self, config: Mapping[str, Any]) -> Candidate:
        """What a measurer is sent to build and time ``config``."""
        return Candidate(self.op_name, self.args, dict(config), self.target.to_json())

    def measures(self, record: Record) -> bool:
        """Whether ``record`` measured this task (the thread count unknown in old logs counts)."""
        return (
            record.workload == self.workload
            and record.target.kind == self.target.kind
            and record.target.threads in (0, self.target.threads)
        )


class TaskTuner:
    """One task's search: ``step(n)`` proposes, measures and logs ``n`` candidates.

    ``prior`` are records already in the log; the strategy learns from those
    of this task, and none of their configs is measured again. The
    template's default config is measured first. ``measurer`` and ``log``
    belong to the caller and may be shared with other tasks' tuners.

    When the strategy's study lives in a shared storage, each step first
    learns what other workers measured since the last one, then claims its
    candidates (configs others finished or hold are dropped and replaced);
    ``budget``, when set, caps the trials that all workers together spend in
    the study from the moment this tuner joined it. ``close()`` gives back
    the claims still held.
    """

    #: Rounds of proposing again when other workers won the claims of a batch.
    claim_rounds = 3

    def __init__(
        self,
        task: Task,
        strategy: Strategy,
        measurer: Any,
        log: LogWriter,
        prior: Iterable[Record] = (),
        space: ConfigSpace | None = None,
    ):
        self.task, self.strategy, self.measurer, self.log = task, strategy, measurer, log
        self.space = space if space is not None else task.space
        self.prior = [r for r in prior if task.measures(r)]
        self.measured = warm_start(strategy, self.space, self.prior)
        self.written: list[Record] = []
        self.best: Record | None = min(
            (r for r in self.prior if r.ok), key=lambda r: r.median, default=None
        )
        self.errors = 0
        self.exhausted = False
        self.budget: int | None = None
        study = strategy.study
        self.shared: KnobStudy | None = study if study and study.shared else None
        self._next_trial = max((r.trial for r in self.prior), default=-1) + 1
        try:  # the template's default is always measured first
            self._pending = [self.space.validate(task.default_config())]
        except ConfigError:  # not in a restricted (replayed) space
            self._pending = []

    @property
    def trials(self) -> int:
        """Candidates measured by this tuner (this session)."""
        return len(self.written)

    @property
    def done(self) -> int:
        """Trials measured since this tuner started: its own, and other workers' when shared.

        For a shared study, as of the last read of it (each ``step`` reads it first).
        """
        return self.shared.snapshot.done if self.shared is not None else self.trials

    def step(self, n: int) -> list[Record]:
        """Measure up to ``n`` new candidates; fewer (none) when the space runs out.

        With a shared study, fewer (none) also when the budget is held by
        other workers' claims; ``exhausted`` tells the two apart.
        """
        if self.shared is None:
            return self._measure(self._propose(n, set()))
        with self.shared.errors():
            self._learn(self.shared.observations())
            batch: list[Config] = []
            for _ in range(self.claim_rounds):
                room = n - len(batch)
                if self.budget is not None:
                    room = min(room, self.budget - self.shared.snapshot.spent)
                if room <= 0:
                    break
                taken = self.shared.snapshot.taken | {c.key for c in batch}
                wanted = self._propose(room, taken)
                if not wanted:
                    break
                got = self.shared.claim(wanted, self.budget)
                batch += got
                if len(got) == len(wanted):
                    break
            return self._measure(batch)

    def _propose(self, n: int, exclude: set[str]) -> list[Config]:
        """The pending default config, then the strategy's; ``exhausted`` if none is left."""
        batch = [c for c in self._pending if c.key not in self.measured | exclude][:n]
        self._pending = []
        if n > len(batch):
            taken = self.measured | exclude | {c.key for c in batch}
            batch += self.strategy.propose(n - len(batch), exclude=taken)
        self.exhausted = not batch and n > 0
        return batch

    def _learn(self, observations: list[tuple[Config, float]]) -> None:
        """Teach the strategy what other workers measured (told to their study already)."""
        new = [(c, s) for c, s in observations if c.key not in self.measured]
        self.measured.update(c.key for c, _ in new)
        self.strategy.observe(new)

    def _measure(self, batch: list[Config]) -> list[Record]:
        if not batch:
            return []
        self.measured.update(c.key for c in batch)
        predicted = [self.strategy.predicted(cfg) for cfg in batch]
        study = self.strategy.study
        # The study hears of each measurement as the log does: a worker killed
        # mid-batch leaves no logged config that the other workers would redo.
        told = (lambda cfg, rec: study.tell(cfg, rec.median)) if study is not None else None
        logged = self._measure_logged(batch, self.strategy.name, predicted, told)
        records, observations = [], []
        for cfg, (res, rec) in zip(batch, logged, strict=True):
            observations.append((cfg, rec.median))
            self.errors += res.error_kind != ErrorKind.OK
            if rec.ok and (self.best is None or rec.median < self.best.median):
                self.best = rec
            records.append(rec)
        self.strategy.observe(observations)
        return records

    def close(self) -> None:
        """Give back the claims still held in a shared study (others measure them at once)."""
        if self.shared is not None:
            self.shared.close()

    def retime(self, k: int, also: Sequence[str] = ()) -> list[Record]:
        """Measure the ``k`` fastest configs once more, logged as strategy "retime".

        A search keeps the luckiest timing of many close candidates; measuring
        the leaders again, at the end and in one batch, lets the best be judged
        on more samples (``records.best`` pools them per config). The best is
        then chosen among the re-timed configs. The configs keyed in ``also``
        (the default schedule's, so that "default vs best" compares times taken
        alike) are measured in the same batch if they ran correctly before.
        """
        ranked: dict[str, Record] = {}
        for r in sorted((r for r in self.prior + self.written if r.ok), key=lambda r: r.median):
            ranked.setdefault(config_key(r.config), r)
        leaders = list(ranked.values())[:k]
        if k <= 0 or len(leaders) < 2:
            return []
        leaders += [ranked[key] for key in also if key in ranked and ranked[key] not in leaders]
        configs = [self.space.validate(r.config) for r in leaders]
        out = [rec for _, rec in self._measure_logged(configs, RETIME, [None] * len(configs))]
        self.best = records_best(self.prior + self.written, self.task.workload, self.task.target)
        return out

    def _measure_logged(
        self,
        configs: list[Config],
        strategy: str,
        predicted: list[float | None],
        told: Callable[[Config, Record], None] | None = None,
    ) -> list[tuple[MeasureResult, Record]]:
        """Measure ``configs``, logging each record as soon as its result is final.

        A tuner killed outright (SIGKILL) then loses only what was still in
        flight, not the whole batch; ``told(config, record)`` runs after each
        record is written. A measurer that reports nothing early has its
        results logged when it returns.
        """
        logged: dict[int, Record] = {}

        def log(i: int, res: MeasureResult) -> None:
            if i not in logged:
                logged[i] = self._record(configs[i], res, strategy, predicted[i])
                if told is not None:
                    told(configs[i], logged[i])

        results = self.measurer.measure(
            [self.task.candidate(c.to_json()) for c in configs], on_result=log
        )
        for i, res in enumerate(results):
            log(i, res)
        return [(res, logged[i]) for i, res in enumerate(results)]

    def _record(
        self, cfg: Config, res: MeasureResult, strategy: str, predicted: float | None
    ) -> Record:
        """Log one measurement with the schedule it ran (trace and space version)."""
        trace: list[dict[str, Any]] | None
        try:
            trace = self.task.schedule(cfg)[0].to_json()
        except Exception:  # a config whose schedule fails is logged as the measurer saw it
            trace = None
        rec = measured_record(
            self.task,
            cfg.to_json(),
            res,
            strategy=strategy,
            trial=self._next_trial,
            predicted=predicted,
            flops=self.task.flops,
            trace=trace,
            space_version=self.space.version,
        )
        self._next_trial += 1
        self.log.write(rec)
        self.written.append(rec)
        return rec


def measured_record(
    task: Task, config: dict[str, Any], res: MeasureResult, **fields: Any
) -> Record:
    """The record of one measurement: ``res``'s outcome and times, plus ``fields`` (strategy, trial...)."""
    return Record.make(
        task.workload,
        task.target,
        config,
        samples=res.samples,
        error_kind=res.error_kind,
        error_msg=res.error_msg,
        build_seconds=res.build_seconds,
        run_seconds=res.run_seconds,
        **fields,
    )


def warm_start(strategy: Strategy, space: ConfigSpace, prior: list[Record]) -> set[str]:
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
