"""tune_model and ``tuner tune-model``: one budget over a model's tasks, resumable, one shared model."""

from __future__ import annotations

import json
import statistics
import zlib
from collections import Counter
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from cost_models import LOOP_FEATURE_NAMES  # noqa: E402
from records import ErrorKind, LogWriter, config_key, load  # noqa: E402
from tests.models import builders  # noqa: E402
from tuner.cli import main  # noqa: E402
from tuner.measure import Candidate, MeasureResult  # noqa: E402
from tuner.search import get_strategy  # noqa: E402
from tuner.target import Target  # noqa: E402
from tuner.task import TaskTuner  # noqa: E402
from tuner.tuning.shared_model import SharedCostModel, share_cost_model  # noqa: E402
from tuner.tuning.tune import TuneOptions  # noqa: E402
from tuner.tuning.tune_model import model_tasks, trials_in_log, tune_model  # noqa: E402

ONE = Target.from_name("cpu", num_threads=1)


def seconds_of(c: Candidate) -> float:
    """A made-up, repeatable time per config: what a simulation needs, nothing timed."""
    text = json.dumps(c.config, sort_keys=True) + json.dumps(c.args, sort_keys=True, default=str)
    return 1e-5 * (1 + zlib.crc32(text.encode()) % 97)


class Simulated:
    """Answers every candidate from ``seconds_of``; after ``stop_after`` of them, Ctrl-C."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.seen: list[Candidate] = []
        self.stop_after = stop_after

    def start(self) -> None:  # (a real measurer starts its processes here)
        pass

    def measure(self, candidates: list[Candidate], on_result: Any = None) -> list[MeasureResult]:
        if self.stop_after is not None and len(self.seen) + len(candidates) > self.stop_after:
            raise KeyboardInterrupt
        self.seen += candidates
        return [MeasureResult(ErrorKind.OK, samples=(seconds_of(c),)) for c in candidates]

    def __enter__(self) -> Simulated:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        pass


@pytest.fixture
def mlp(tmp_path: Path) -> Path:
    """Gemm -> Gelu -> Gemm: two dense tasks."""
    path = tmp_path / "mlp.onnx"
    onnx.save(builders.mlp(), path)
    return path


def opts(log: Path, trials: int, **kw: object) -> TuneOptions:
    kw.setdefault("strategy", "random")
    kw.setdefault("retime", 0)
    return TuneOptions(trials=trials, log=log, batch=4, threads=1, **kw)  # type: ignore[arg-type]


def test_a_models_tasks_are_its_distinct_kernels_weighted_by_how_often_they_run(
    tmp_path: Path,
) -> None:
    path = tmp_path / "block.onnx"
    onnx.save(builders.basic_block(), path)
    tasks = model_tasks(path, ONE)
    assert len({t.task.key for t in tasks}) == len(tasks)
    assert all(t.weight >= 1 and t.task.target == ONE for t in tasks)
    symbolic = tmp_path / "sym.onnx"
    onnx.save(builders.symbolic_batch(), symbolic)
    with pytest.raises(ValueError, match="symbolic dimensions: give them with --shape"):
        model_tasks(symbolic, ONE)
    assert model_tasks(symbolic, ONE, shapes={"x": (3, 16)})


def test_one_budget_over_every_task_one_measurer_one_log_and_a_table(
    mlp: Path, tmp_path: Path
) -> None:
    log = tmp_path / "tune.jsonl"
    measurer = Simulated()
    seen = []
    result = tune_model(mlp, opts(log, 20), measurer=measurer, progress=seen.append)
    records = load(log)
    assert len(records) == len(measurer.seen) == result.measured == 20
    assert [p.trials for p in seen] == list(range(1, 21))
    assert {p.task_index for p in seen} == {0, 1}, "both tasks tuned, through the one measurer"
    assert result.stopped_because == "trial budget reached"
    tasks = model_tasks(mlp, ONE)
    for row, mt in zip(result.tasks, tasks, strict=True):
        mine = [r for r in records if mt.task.measures(r)]
        assert row.trials == row.measured == len(mine)
        assert config_key(mine[0].config) == mt.task.space.validate(mt.task.default_config()).key
        assert row.default_seconds == mine[0].median, "the first trial is the default schedule"
        assert row.best_seconds == min(r.median for r in mine)
    assert result.latency is not None and result.default_latency is not None
    assert result.latency <= result.default_latency
    assert sum(result.share(r) or 0.0 for r in result.tasks) == pytest.approx(1.0)
    last = seen[-1]
    assert last.latency == pytest.approx(result.latency)
    assert last.start_latency == pytest.approx(result.default_latency)


def test_resume_after_ctrl_c_measures_nothing_twice_and_goes_on_for_its_trials(
    mlp: Path, tmp_path: Path
) -> None:
    log = tmp_path / "tune.jsonl"
    with pytest.raises(KeyboardInterrupt):
        tune_model(mlp, opts(log, 30), measurer=Simulated(stop_after=13))
    before = load(log)
    # each task's default (one trial each), then rounds of 4: 1 + 1 + 4 + 4, and Ctrl-C
    assert len(before) == 10, "every batch measured before Ctrl-C is in the log"
    tasks = model_tasks(mlp, ONE)
    assert trials_in_log(tasks, log) == 10
    second = Simulated()
    result = tune_model(mlp, opts(log, 20), measurer=second)
    assert result.resumed == 10 and result.measured == 20 == len(second.seen)
    assert result.budget == 20, "--trials counts this run's trials, as tune's does"
    records = load(log)
    pairs = Counter((r.workload.key, config_key(r.config)) for r in records)
    assert len(records) == 30 and max(pairs.values()) == 1, "no config measured twice"
    for mt in tasks:  # each task's search continued: trial numbers go on from the log's
        trials = sorted(r.trial for r in records if mt.task.measures(r))
        assert trials == list(range(len(trials)))
        assert trials, "every task warmed up before any got a second round"


def test_the_retimed_leaders_do_not_count_against_the_budget(mlp: Path, tmp_path: Path) -> None:
    log = tmp_path / "tune.jsonl"
    result = tune_model(mlp, opts(log, 16, retime=2), scheduler="round-robin", measurer=Simulated())
    records = load(log)
    assert 4 <= sum(r.strategy == "retime" for r in records) <= 6  # 2 leaders + each default
    assert trials_in_log(model_tasks(mlp, ONE), log) == result.measured == 16


def test_the_default_is_retimed_with_the_leaders_and_judged_on_all_its_samples(
    mlp: Path, tmp_path: Path
) -> None:
    # "default vs best" must compare times taken alike: the best is judged on its
    # pooled samples, so the default is timed again in the same batch and pooled too.
    log = tmp_path / "tune.jsonl"
    result = tune_model(mlp, opts(log, 16, retime=2), scheduler="round-robin", measurer=Simulated())
    records = load(log)
    for mt, row in zip(model_tasks(mlp, ONE), result.tasks, strict=True):
        default = mt.task.space.validate(mt.task.default_config()).key
        mine = [r for r in records if mt.task.measures(r) and config_key(r.config) == default]
        assert [r.strategy for r in mine][-1] == "retime"
        samples = [s for r in mine for s in r.samples]
        assert row.default_seconds == statistics.median(samples)


def test_a_task_with_no_measurement_of_its_own_starts_ranked_by_the_shared_model(
    mlp: Path, tmp_path: Path
) -> None:
    first, second = (t.task for t in model_tasks(mlp, ONE))
    shared = SharedCostModel("xgb", seed=0)
    small = {"pool": 12, "rounds": 1, "min_observations": 4}
    strategies = [get_strategy("xgb", t.space, seed=0, **small) for t in (first, second)]
    for i, (task, strategy) in enumerate(zip((first, second), strategies, strict=True)):
        assert share_cost_model(strategy, shared, i, task)
    assert not share_cost_model(get_strategy("random", first.space), shared, 0, first)
    with LogWriter(tmp_path / "t.jsonl") as log:
        tuner = TaskTuner(first, strategies[0], Simulated(), log)
        tuner.step(8)
        assert shared.fits == 0, "training waits until a task asks for a prediction"
        assert strategies[1].model.is_fitted, "the second task has observed nothing yet"
        assert shared.fits == 1
        picks = TaskTuner(second, strategies[1], Simulated(), log).step(4)
    assert len(picks) == 4 and all(r.predicted is not None for r in picks[1:])
    rng = np.random.default_rng(0)
    for task, strategy in zip((first, second), strategies, strict=True):
        features = strategy.featurize(task.space.sample(rng))
        assert features.shape == (len(LOOP_FEATURE_NAMES),), "loop-nest features only"


def test_the_command_tunes_a_model_and_prints_the_table(
    mlp: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import tuner.tuning.context

    monkeypatch.setattr(tuner.tuning.context, "Measurer", lambda *a, **kw: Simulated())
    monkeypatch.setenv("COLUMNS", "200")  # a table as wide as it wants
    log = tmp_path / "tune.jsonl"
    argv = ["tune-model", str(mlp), "--trials", "12", "--log", str(log), "--threads", "1"]
    assert main([*argv, "--strategy", "random", "--batch", "4", "--retime", "0"]) == 0
    err = capsys.readouterr().err
    assert "2 tasks over 2 kernels" in err and "12 trials measured this run" in err
    assert "estimated model latency" in err and "default ms" in err
    assert len(load(log)) == 12


def test_ctrl_c_in_the_command_keeps_the_log(
    mlp: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import tuner.tuning.context

    monkeypatch.setattr(tuner.tuning.context, "Measurer", lambda *a, **kw: Simulated(stop_after=9))
    log = tmp_path / "tune.jsonl"
    argv = ["tune-model", str(mlp), "--trials", "40", "--log", str(log), "--strategy", "random"]
    assert main([*argv, "--batch", "4", "--threads", "1"]) == 130
    assert "the log keeps every measurement" in capsys.readouterr().err
    assert len(load(log)) == 6  # the two defaults and a round of 4, then Ctrl-C


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--scheduler", "fifo"], "unknown scheduler 'fifo'"),
        (["--strategy", "nope"], "unknown strategy 'nope'"),
        (["--shape", "x=0"], "--shape takes NAME=D1,D2,..."),
    ],
)
def test_bad_input_gives_one_line_and_a_non_zero_exit(
    mlp: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert main(["tune-model", str(mlp), "--log", str(tmp_path / "t.jsonl"), *extra]) == 1
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert main(["tune-model", str(tmp_path / "missing.onnx")]) == 1
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.slow
def test_the_command_end_to_end_with_real_measurements(
    mlp: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "tune.jsonl"
    argv = ["tune-model", str(mlp), "--trials", "4", "--log", str(log), "--threads", "1"]
    assert main([*argv, "--strategy", "random", "--batch", "2", "--jobs", "1"]) == 0
    records = load(log)
    assert len([r for r in records if r.strategy != "retime"]) == 4
    assert all(r.ok for r in records), [r.error_msg for r in records if not r.ok]
    assert "estimated model latency" in " ".join(capsys.readouterr().err.split())


def test_shapes_tuned_in_one_run_teach_one_cost_model(tmp_path: Path) -> None:
    # What `tuner tune softmax M=4,6 N=8` does: one measurer, one shared model.
    from tuner.tuning.tune import tune

    shared, measurer = SharedCostModel("xgb", seed=0), Simulated()
    log = tmp_path / "t.jsonl"
    for i, M in enumerate((4, 6)):
        args = {"M": M, "N": 64}
        result = tune(
            "softmax", args, opts(log, 12, strategy="xgb"), measurer=measurer, shared=(shared, i)
        )
        assert result.measured == 12
    assert sorted(shared._data) == [0, 1], "each shape's observations went to the shared model"
    assert len(measurer.seen) == 24


@pytest.mark.parametrize(
    ("argv", "budget"),
    [
        (["tune-model", "m.onnx"], 200),
        (["tune-model", "m.onnx", "--time-limit", "900"], None),
        (["tune-model", "m.onnx", "--time-limit", "900", "--trials", "50"], 50),
        (["tune", "matmul", "M=8", "N=8", "K=8"], 64),
        (["tune", "matmul", "M=8", "N=8", "K=8", "--time-limit", "60"], None),
    ],
)
def test_a_time_limit_alone_sets_no_trial_budget(argv: list[str], budget: int | None) -> None:
    """``--time-limit 900`` means 900 seconds of tuning, not the default 200 trials (which
    ResNet-50 spent in two minutes); ``--trials`` beside it still bounds the run."""
    from tuner.cli import _parser
    from tuner.cli.options import check_search_flags, unlimited

    ns = _parser().parse_args(argv)
    check_search_flags(ns)
    assert (None if unlimited(ns.trials) else ns.trials) == budget
