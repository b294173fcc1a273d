"""The tuning loop end to end: log, resume without repeats, damaged lines, wrong answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from records import RecordsWarning, load
from tuner.measure import MeasureOptions, ReplayMeasurer
from tuner.tuning.tune import TuneOptions, tune

from . import faulty_ops  # noqa: F401

MEASURE = MeasureOptions(
    jobs=2, samples=2, min_sample_seconds=0.001, plugins=("tests.tuning.faulty_ops",)
)


def options(log: Path, trials: int, **kw) -> TuneOptions:  # type: ignore[no-untyped-def]
    kw.setdefault("strategy", "random")
    kw.setdefault("retime", 0)
    return TuneOptions(trials=trials, log=log, batch=2, threads=1, measure=MEASURE, **kw)


def test_resume_measures_nothing_twice_and_survives_a_damaged_line(tmp_path: Path) -> None:
    log = tmp_path / "tune.jsonl"
    seen = []
    first = tune("t_double", {"N": "16"}, options(log, 2), progress=seen.append)
    assert first.measured == 2 and first.best is not None
    assert [p.trial for p in seen] == [1, 2]
    assert load(log)[0].config == {"split": 2}, "the template's default goes first"
    with log.open("a") as f:
        f.write('{"v": 1, "workload": {"op": "t_dou')  # a write cut short by Ctrl-C
    with pytest.warns(RecordsWarning, match="1 damaged line"):
        second = tune("t_double", {"N": 16}, options(log, 5))
    assert second.resumed == 2
    assert second.measured == 1
    assert second.stopped_because == "search space exhausted"
    with pytest.warns(RecordsWarning):
        records = load(log)
    assert sorted(r.config["split"] for r in records) == [1, 2, 4]
    assert [r.trial for r in records] == [0, 1, 2]
    assert all(r.workload.key == "t_double(N=16)" for r in records)


def test_the_leaders_are_retimed_and_judged_on_their_retimed_samples(tmp_path: Path) -> None:
    log = tmp_path / "tune.jsonl"
    result = tune("t_double", {"N": 16}, options(log, 3, retime=2))
    records = load(log)
    searched, retimed = records[:3], records[3:]
    assert [r.strategy for r in retimed] == ["retime", "retime"]
    assert [r.trial for r in retimed] == [3, 4]
    leaders = sorted((r for r in searched if r.ok), key=lambda r: r.median)[:2]
    assert [r.config for r in retimed] == [r.config for r in leaders]
    assert result.best is not None and result.best.strategy == "retime"
    mine = [r for r in retimed if r.config == result.best.config]
    assert result.best.samples == mine[0].samples, "the side-by-side re-timing decides"
    again = tune("t_double", {"N": 16}, options(log, 3, retime=2))
    assert again.measured == 0 and again.stopped_because == "search space exhausted"
    assert len(load(log)) == 5, "a run that measured nothing new re-times nothing"


def test_the_numpy_reference_is_timed_at_the_end_unless_turned_off(tmp_path: Path) -> None:
    on = tune("t_double", {"N": 16}, options(tmp_path / "a.jsonl", 2))
    assert on.numpy_seconds is not None and on.numpy_seconds > 0
    off = tune("t_double", {"N": 16}, options(tmp_path / "b.jsonl", 2, baseline=False))
    assert off.numpy_seconds is None


def test_a_wrong_answer_is_logged_and_never_best(tmp_path: Path) -> None:
    log = tmp_path / "wrong.jsonl"
    result = tune("t_wrong", {}, options(log, 3))
    assert result.best is None
    assert result.errors == 3
    assert {r.error_kind.value for r in load(log)} == {"wrong_answer"}


def test_replay_serves_recorded_results_within_the_recorded_set(tmp_path: Path) -> None:
    from .test_compile import write_log

    recorded = tmp_path / "recorded.jsonl"
    write_log(recorded, [(1, 3e-6, "ok"), (4, 1e-6, "ok")])  # split=2 was never measured
    replay = ReplayMeasurer(load(recorded))
    out = tmp_path / "replayed.jsonl"
    result = tune("t_double", {"N": 16}, options(out, 10, strategy="xgb"), replay=replay)
    assert result.measured == 2 and result.stopped_because == "search space exhausted"
    assert result.best is not None and result.best.config == {"split": 4}
    assert result.best.samples == (1e-6,)
