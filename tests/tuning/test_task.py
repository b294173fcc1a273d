"""Tasks and TaskTuner: keys, a few trials at a time, one measurer and log shared by tasks."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

import tuner
from records import ErrorKind, LogWriter, best_by_workload, load, target_label
from tuner.lower.lower import lower
from tuner.measure import Candidate, MeasureResult
from tuner.schedule import Schedule
from tuner.search import get_strategy
from tuner.target import Target
from tuner.task import Task, TaskTuner
from tuner.tuning.tune import TuneOptions, tune

from . import faulty_ops  # noqa: F401  (registers t_double: one knob, split in {1, 2, 4})
from .test_tune import MEASURE


class SimulatedMeasurer:
    """Answers without timing anything: seconds fall with the split and grow with N."""

    def __init__(self) -> None:
        self.seen: list[Candidate] = []

    def measure(self, candidates: list[Candidate], on_result: Any = None) -> list[MeasureResult]:
        self.seen += candidates
        return [
            MeasureResult(ErrorKind.OK, samples=(1e-6 * c.args["N"] / c.config["split"],))
            for c in candidates
        ]


def _tuner(task: Task, measurer: SimulatedMeasurer, log: LogWriter) -> TaskTuner:
    strategy = get_strategy("random", task.space, seed=1)
    return TaskTuner(task, strategy, measurer, log)


def test_a_task_key_names_the_workload_the_target_kind_and_the_thread_count() -> None:
    one = Task.make("t_double", {"N": "16"}, Target.from_name("cpu", num_threads=1))
    two = Task.make("t_double", {"N": 16}, Target.from_name("cpu", num_threads=2))
    assert one.key == "t_double(N=16)@cpu/threads=1"
    assert two.key == "t_double(N=16)@cpu/threads=2"
    assert one.workload == two.workload and one.target.fingerprint == two.target.fingerprint


def test_two_tasks_advance_in_turn_through_one_measurer_and_one_log(tmp_path: Path) -> None:
    target = Target.from_name("cpu", num_threads=1)
    small, large = (Task.make("t_double", {"N": n}, target) for n in (16, 32))
    measurer = SimulatedMeasurer()
    path = tmp_path / "tune.jsonl"
    with LogWriter(path) as log:
        tuners = [_tuner(small, measurer, log), _tuner(large, measurer, log)]
        for _ in range(3):
            for tt in tuners:
                assert len(tt.step(1)) == 1
        assert all(tt.step(1) == [] and tt.exhausted for tt in tuners)
    assert len(measurer.seen) == 6
    records = load(path)
    for task in (small, large):
        mine = [r for r in records if r.workload == task.workload]
        assert [r.trial for r in mine] == [0, 1, 2]
        assert mine[0].config == {"split": 2}, "the template's default goes first"
        assert sorted(r.config["split"] for r in mine) == [1, 2, 4], "no config twice"
    assert tuners[1].best is not None and tuners[1].best.config == {"split": 4}


class KilledAfterOne(SimulatedMeasurer):
    """Tells the first candidate's result, then the tuner is stopped mid-batch."""

    def measure(self, candidates: list[Candidate], on_result: Any = None) -> list[MeasureResult]:
        first = super().measure(candidates[:1])[0]
        on_result(0, first)
        raise KeyboardInterrupt


def test_a_result_is_in_the_log_as_soon_as_it_is_final(tmp_path: Path) -> None:
    task = Task.make("t_double", {"N": 16}, Target.from_name("cpu", num_threads=1))
    path = tmp_path / "t.jsonl"
    with pytest.raises(KeyboardInterrupt), LogWriter(path) as log:
        _tuner(task, KilledAfterOne(), log).step(3)
    (rec,) = load(path)
    assert rec.ok and rec.config == {"split": 2} and rec.trial == 0


def test_every_record_replays_to_the_loop_nest_that_was_measured(tmp_path: Path) -> None:
    task = Task.make("t_double", {"N": 12}, Target.from_name("cpu", num_threads=1))
    with LogWriter(tmp_path / "t.jsonl") as log:
        records = _tuner(task, SimulatedMeasurer(), log).step(3)
    for rec in records:
        assert rec.trace is not None and rec.space_version == task.space.version
        sched, tensors = task.schedule(rec.config)
        replayed = Schedule.from_json(list(sched.outputs), rec.trace)
        assert str(lower(replayed, tensors)) == str(lower(sched, tensors))


def test_a_resumed_task_learns_only_from_its_own_thread_count(tmp_path: Path) -> None:
    one = Task.make("t_double", {"N": 16}, Target.from_name("cpu", num_threads=1))
    two = Task.make("t_double", {"N": 16}, one.target.with_threads(2))
    path = tmp_path / "t.jsonl"
    with LogWriter(path) as log:
        _tuner(one, SimulatedMeasurer(), log).step(2)
    prior = load(path)
    with LogWriter(path) as log:
        again = TaskTuner(one, get_strategy("random", one.space), SimulatedMeasurer(), log, prior)
        other = TaskTuner(two, get_strategy("random", two.space), SimulatedMeasurer(), log, prior)
        assert len(again.prior) == 2 and again.step(5) != [] and again.step(5) == []
        assert other.prior == [] and len(other.step(5)) == 3


def test_one_and_two_thread_tunes_into_one_log_give_two_best_records(tmp_path: Path) -> None:
    """Measured for real: each thread count tunes all three configs and keeps its own best."""
    log = tmp_path / "tune.jsonl"
    opts = {"log": log, "trials": 5, "batch": 2, "strategy": "random", "retime": 0}
    first = tune("t_double", {"N": 64}, TuneOptions(threads=1, measure=MEASURE, **opts))
    second = tune("t_double", {"N": 64}, TuneOptions(threads=2, measure=MEASURE, **opts))
    assert first.measured == 3 and second.measured == 3, "no config is skipped across thread counts"
    assert second.resumed == 0
    table = best_by_workload(load(log))
    assert sorted(label for _, label in table) == ["cpu, 1 thread", "cpu, 2 threads"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with tuner.apply_best(log):
            for threads in (1, 2):
                f = tuner.build_op("t_double", target=first.target.with_threads(threads), N=64)
                assert f.record is not None and target_label(f.record.target).endswith(
                    f"{threads} thread{'s' if threads > 1 else ''}"
                )
                best = table["t_double(N=64)", target_label(f.record.target)]
                assert f.config == best.config
