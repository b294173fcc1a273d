"""Isolated measurement: every kind of failure is recorded and the next candidate still runs."""

from __future__ import annotations

import os

import numpy as np
import pytest

from records import ErrorKind
from tuner.measure import Candidate, MeasureOptions, Measurer
from tuner.measure.baseline import fresh_baseline
from tuner.target import Target

from . import faulty_ops  # noqa: F401  (registers the t_* operators here too)

PLUGIN = ("tests.tuning.faulty_ops",)


def cand(op: str, split: int = 2) -> Candidate:
    return Candidate(op, {"N": 16}, {"split": split}, Target.from_name("cpu").to_json())


@pytest.fixture(scope="module")
def measurer():  # type: ignore[no-untyped-def]
    # t_hang hangs in its reference, which the runner computes before it says
    # "loaded", so the build timeout bounds it: the default (120 s) made this
    # test wait two minutes for nothing.
    opts = MeasureOptions(
        jobs=2,
        build_timeout=20.0,
        run_timeout=5.0,
        samples=3,
        min_sample_seconds=0.001,
        plugins=PLUGIN,
    )
    with Measurer(opts) as m:
        yield m


def test_each_failure_is_recorded_and_the_next_candidate_still_runs(measurer) -> None:  # type: ignore[no-untyped-def]
    batch = [
        cand("t_double"),
        cand("t_wrong"),
        cand("t_double", split=3),  # not a value of the knob
        cand("t_crash"),
        cand("t_double", split=4),
        cand("t_hang"),
        cand("t_double", split=1),
    ]
    told: list[tuple[int, object]] = []
    results = measurer.measure(batch, on_result=lambda i, r: told.append((i, r)))
    # Each result is told once, as soon as it is final: the build's failure at
    # once, a run's failure in the first pass, the others after their last pass.
    assert [i for i, _ in told] == [2, 1, 3, 5, 0, 4, 6]
    assert all(r == results[i] for i, r in told)
    kinds = [r.error_kind for r in results]
    assert kinds == [
        ErrorKind.OK,
        ErrorKind.WRONG_ANSWER,
        ErrorKind.SCHEDULE_ERROR,
        ErrorKind.RUNTIME_ERROR,
        ErrorKind.OK,
        ErrorKind.RUN_TIMEOUT,
        ErrorKind.OK,
    ]
    assert "died" in results[3].error_msg
    assert "knob 'split'" in results[2].error_msg
    ok = results[0]
    assert len(ok.samples) == 3 and all(s > 0 for s in ok.samples)
    assert ok.build_seconds > 0


def test_a_build_timeout_is_recorded_and_the_pool_recovers() -> None:
    opts = MeasureOptions(jobs=1, build_timeout=0.01, samples=1, plugins=PLUGIN)
    with Measurer(opts) as m:
        first = m.measure([cand("t_double", split=4)])
    assert first[0].error_kind == ErrorKind.COMPILE_TIMEOUT


def test_the_runner_gives_blas_the_targets_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    opts = MeasureOptions(jobs=1, samples=3, min_sample_seconds=0.001, plugins=PLUGIN)
    with Measurer(opts, threads=1) as m:
        assert m.measure([cand("t_blas1")])[0].ok, "the runner's BLAS got the target's threads"
    assert "OPENBLAS_NUM_THREADS" not in os.environ, "the tuner's own environment is unchanged"


def test_the_baseline_is_timed_in_a_fresh_process_with_numpys_own_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    opts = MeasureOptions(samples=5, min_sample_seconds=0.001, plugins=PLUGIN)
    with Measurer(opts, threads=1) as m:  # a runner holding BLAS to one thread is up
        m.measure([cand("t_double")])
        base = fresh_baseline(cand("t_own_threads"), opts)
    assert base.ok, base.error_msg
    assert len(base.samples) == 5 and all(s > 0 for s in base.samples)
    crashed = fresh_baseline(cand("t_crash"), opts)
    assert (
        crashed.error_kind == ErrorKind.RUNTIME_ERROR and "NumPy timing failed" in crashed.error_msg
    )
    hung = fresh_baseline(cand("t_hang"), opts, timeout=3)
    assert hung.error_kind == ErrorKind.RUN_TIMEOUT


def test_samples_are_spread_over_passes() -> None:
    from tuner.measure.measurer import _shares

    assert _shares(5, 3) == [2, 2, 1]
    assert _shares(2, 3) == [1, 1]
    assert _shares(4, 1) == [4]
    assert sum(_shares(7, 3)) == 7


def test_the_output_check_scales_its_absolute_tolerance_with_the_output() -> None:
    from tuner.measure._child import matches

    rng = np.random.default_rng(0)
    rows = rng.random((4, 4096)).astype(np.float32)
    probs = rows / rows.sum(axis=1, keepdims=True)  # entries near 2e-4, as a softmax's
    assert not matches(np.zeros_like(probs), probs, 1e-3, 1e-3), "zeros are no softmax"
    assert matches(probs * np.float32(1 + 1e-5), probs, 1e-3, 1e-3)
    big = rng.standard_normal((64, 64)).astype(np.float32) * 300  # a deep matmul's sums
    noise = rng.standard_normal(big.shape).astype(np.float32) * 1e-3
    assert matches(big + noise, big, 1e-3, 1e-3)
    assert not matches(big + 5.0, big, 1e-3, 1e-3)
    zeros = np.zeros(8, np.float32)
    assert matches(zeros, zeros, 1e-3, 1e-3) and not matches(zeros + 0.01, zeros, 1e-3, 1e-3)


def test_the_runner_warms_a_kernel_up_for_a_while_before_timing_it() -> None:
    """Its threads sleep between candidates: untimed runs go on for ``warm_seconds`` first."""
    import time

    from tuner.measure._child import _time

    class Clocked:
        def __init__(self) -> None:
            self.calls: list[float] = []

        def run(self) -> None:
            self.calls.append(time.perf_counter())

        def seconds(self, reps: int) -> float:
            t0 = time.perf_counter()
            for _ in range(reps):
                self.run()
                time.sleep(0.001)
            return time.perf_counter() - t0

    timer = Clocked()
    start = time.perf_counter()
    samples = _time(timer, MeasureOptions(samples=3, min_sample_seconds=0.005, warm_seconds=0.05))
    assert len(samples) == 3
    assert timer.calls[-1] - start >= 0.05 + 3 * 0.005  # warmed for 0.05 s, then timed
    cold = Clocked()
    _time(cold, MeasureOptions(samples=3, min_sample_seconds=0.005, warm_seconds=0.0))
    assert len(cold.calls) < len(timer.calls)
