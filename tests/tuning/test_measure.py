"""Isolated measurement: every kind of failure is recorded and the next candidate still runs."""

from __future__ import annotations

import dataclasses
import math
import os
import time
from pathlib import Path

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


def test_the_runner_warms_a_kernel_up_until_it_is_no_faster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its threads sleep between candidates: untimed blocks of runs go on until one is no
    faster than the one before, for ``warm_seconds`` at most."""
    from tuner.measure import _child

    class Waking:
        """A kernel whose ``i``-th call takes ``call(i)`` seconds."""

        def __init__(self, call) -> None:  # type: ignore[no-untyped-def]
            self.calls, self.call = 0, call

        def run(self) -> None:
            self.calls += 1

        def seconds(self, reps: int) -> float:
            self.calls += reps
            return sum(self.call(i) for i in range(self.calls - reps, self.calls))

    awake = Waking(lambda i: 0.001)
    _child._warm(awake, 0.1)
    least = round(_child._WARM_LEAST / 0.001)
    assert least <= awake.calls <= least + 10  # the first stretch and a block: not 100 ms
    asleep = Waking(lambda i: 0.002 if i < least // 2 else 0.001)  # a step within the stretch
    _child._warm(asleep, 0.1)
    assert asleep.calls <= least + 10
    ramp = Waking(lambda i: 0.001 * (1 + max(0, 50 - i) / 50))  # faster and faster, 50 calls
    _child._warm(ramp, 0.2)
    assert ramp.calls >= 40  # on while each block is faster than the one before

    class Faster:
        """Each block of runs 5 % faster than the one before, for ever."""

        def __init__(self) -> None:
            self.blocks = 0

        def seconds(self, reps: int) -> float:
            self.blocks += 1
            return reps * 0.001 * 0.95**self.blocks

    start = time.perf_counter()
    _child._warm(Faster(), 0.05)  # its seconds add up to less than 0.05: the clock ends it
    assert time.perf_counter() - start < 1.0
    opts = MeasureOptions(samples=3, min_sample_seconds=0.004, warm_seconds=0.1, warmup=0)
    monkeypatch.setattr(_child, "_last_timed", -math.inf)  # no kernel timed just before
    samples = _child._time(Waking(lambda i: 0.002 if i < 8 else 0.001), opts)
    assert samples == [0.001] * 3, "no sample is taken before the kernel is awake"
    cold = Waking(lambda i: 0.001)
    _child._warm(cold, 0.0)
    assert cold.calls == 0
    # Straight after another kernel's timing the cores are awake: blocks until one is no
    # faster, without the first stretch.
    busy = Waking(lambda i: 0.001)
    _child._warm(busy, 0.1, awake=True)
    assert busy.calls < least
    faster = Waking(lambda i: 0.001 * (1 + max(0, 30 - i) / 30))  # on while blocks get faster
    _child._warm(faster, 0.1, awake=True)
    assert faster.calls >= 20
    _child._time(Waking(lambda i: 0.001), opts)
    assert time.perf_counter() - _child._last_timed < 1.0  # the next candidate's is short


def test_a_candidate_is_loaded_and_checked_once_over_its_passes(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The runner keeps a checked kernel for the later passes over its batch."""
    from tuner.measure import _child

    loads, checks = [], []
    kernel, matches = _child._kernel, _child.matches
    monkeypatch.setattr(_child, "_kernel", lambda c: loads.append(c) or kernel(c))
    monkeypatch.setattr(_child, "matches", lambda *a: checks.append(a) or matches(*a))
    ws, opts = _child.Workspace(), MeasureOptions(samples=1, min_sample_seconds=0.001)
    for c in (cand("t_double"), cand("t_double", split=4), cand("t_double")):
        out = _child.run_candidate(c, opts, ws)
        assert out["kind"] == ErrorKind.OK.value and len(out["samples"]) == 1
    assert len(loads) == len(checks) == 2
    other = Candidate("t_double", {"N": 32}, {"split": 2}, cand("t_double").target)
    assert _child.run_candidate(other, opts, ws)["kind"] == ErrorKind.OK.value
    assert len(loads) == 3 and list(ws.timers) == [_child._candidate_key(other)]


class _Recorded:
    """A kernel timer that replays recorded samples: ``seconds(reps)`` is the next one."""

    def __init__(self, samples: list[float]) -> None:
        self.samples = list(samples)

    def run(self) -> None:
        pass

    def seconds(self, reps: int) -> float:
        return self.samples.pop(0) * reps


def test_a_first_sample_above_the_cut_is_the_only_one() -> None:
    from tuner.measure._child import _time

    opts = MeasureOptions(samples=3, min_sample_seconds=0.0, warm_seconds=0.0, warmup=0)
    assert _time(_Recorded([5.0, 1.0, 1.0]), opts, cut_above=4.0) == [5.0]
    assert _time(_Recorded([3.0, 1.0, 1.0]), opts, cut_above=4.0) == [3.0, 1.0, 1.0]
    assert _time(_Recorded([5.0, 1.0, 1.0]), opts) == [5.0, 1.0, 1.0]


class _ReplayRunner:
    """The measurer's runner over recorded samples (per config), through the runner's own
    timing rule (``_child._time``): what a tune would have kept with slow candidates cut."""

    def __init__(self, recorded: dict[str, list[float]]) -> None:
        self.left = {k: list(v) for k, v in recorded.items()}
        self.runs: list[str] = []

    def run(self, c: Candidate, opts: MeasureOptions, cut_above: float = 0.0) -> dict:  # type: ignore[type-arg]
        from tuner.measure._child import _time

        key = _key(c.config)
        self.runs.append(key)
        timer = _Recorded(self.left[key])
        quick = dataclasses.replace(opts, min_sample_seconds=0.0, warm_seconds=0.0, warmup=0)
        samples = _time(timer, quick, cut_above)
        self.left[key] = timer.samples
        cut = 0 < cut_above < samples[0]
        return {"kind": ErrorKind.OK.value, "samples": samples, **({"cut": True} if cut else {})}

    def stop(self) -> None:
        pass


def _key(config: dict) -> str:  # type: ignore[type-arg]
    return repr(sorted(config.items()))


def _replayed(  # type: ignore[no-untyped-def]
    recorded: dict[str, list[float]],
    batches: list[list[dict]],
    cut: float,  # type: ignore[type-arg]
):
    opts = MeasureOptions(samples=5, passes=3, cut_slower=cut)
    m = Measurer(opts)
    runner = _ReplayRunner(recorded)
    m._runner = runner  # type: ignore[assignment]
    m._build_all = lambda cs: [(ErrorKind.OK.value, "", 0.0)] * len(cs)  # type: ignore[method-assign]
    target = Target.from_name("cpu").to_json()
    results = {}
    for batch in batches:
        cands = [Candidate("matmul", {"M": 8}, config, target) for config in batch]
        for config, r in zip(batch, m.measure(cands), strict=True):
            results[_key(config)] = r
    return results, runner


def test_slow_candidates_are_cut_after_one_sample_and_get_no_more_passes() -> None:
    configs = [{"x": x} for x in range(3)]
    keys = [_key(c) for c in configs]
    recorded = dict(zip(keys, [[1.0] * 5, [5.0] * 5, [1.5] * 5], strict=True))
    results, runner = _replayed(recorded, [configs], cut=2.0)
    assert [len(results[k].samples) for k in keys] == [5, 1, 5]
    assert runner.runs.count(keys[1]) == 1 and runner.runs.count(keys[0]) == 3
    assert all(results[k].ok for k in keys)
    uncut, _ = _replayed(recorded, [configs], cut=0.0)
    assert [len(uncut[k].samples) for k in keys] == [5, 5, 5]


def test_cutting_slow_candidates_keeps_the_best_of_a_recorded_tune() -> None:
    """A tune's real samples (matmul 512, 64 trials in batches of 8, Zen 5), replayed through
    the measurer in their order: the 2x cut keeps the best config and cuts many others."""
    import json
    import statistics
    from pathlib import Path

    log = Path(__file__).parents[2] / "experiments" / "logs" / "matmul512_zen5.jsonl"
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    rows = [r for r in rows if len(r["result"]["samples"]) == 5]
    recorded: dict[str, list[float]] = {}
    configs = []
    for r in rows:
        if _key(r["config"]) not in recorded:
            recorded[_key(r["config"])] = r["result"]["samples"]
            configs.append(r["config"])
    keys = list(recorded)
    batches = [configs[i : i + 8] for i in range(0, len(configs), 8)]
    results, _ = _replayed(recorded, batches, cut=2.0)
    best = min(keys, key=lambda k: statistics.median(recorded[k]))
    assert len(results[best].samples) == 5
    kept = {k for k in keys if len(results[k].samples) == 5}
    assert min(kept, key=lambda k: statistics.median(results[k].samples)) == best
    assert len(kept) < len(keys)


def test_a_built_in_candidate_is_indexed_for_the_runner_and_a_plugins_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build worker records a built-in operator's kernel in the kernel index, so the runner
    loads it without lowering again; a plugin's operator is built afresh each time, since the
    index's code fingerprint does not cover the plugin's compute definition."""
    from search_spaces import get_operator
    from tuner.measure._child import _kernel, build_candidate

    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path))
    target = Target.from_name("cpu")
    op = get_operator("matmul")
    args = op.parse_args({"M": 8, "N": 8, "K": 8})
    config = dict(op.default_config(args, target))
    built_in = Candidate("matmul", args, config, target.to_json())
    assert build_candidate(built_in)[0] == ErrorKind.OK.value
    assert len(list((tmp_path / "index").glob("*.json"))) == 1
    _, _, kernel = _kernel(built_in)
    assert kernel.lowered is not None  # restored from the index, lowered again on demand
    assert build_candidate(cand("t_double"))[0] == ErrorKind.OK.value
    assert len(list((tmp_path / "index").glob("*.json"))) == 1
    # softmax's schedule is a functools.partial: built-in all the same
    softmax = get_operator("softmax")
    sargs = softmax.parse_args({"M": 4, "N": 8})
    sconfig = dict(softmax.default_config(sargs, target))
    assert (
        build_candidate(Candidate("softmax", sargs, sconfig, target.to_json()))[0]
        == ErrorKind.OK.value
    )
    assert len(list((tmp_path / "index").glob("*.json"))) == 2


def test_an_operator_is_built_in_when_this_package_registers_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import dataclasses as dc

    import search_spaces
    from search_spaces import get_operator, is_builtin, register_operator

    assert is_builtin("matmul") and is_builtin("softmax") and not is_builtin("t_double")
    monkeypatch.setattr(search_spaces, "_REGISTRY", dict(search_spaces._REGISTRY))
    monkeypatch.setattr(search_spaces, "_BUILTIN", set(search_spaces._BUILTIN))
    register_operator(dc.replace(get_operator("matmul")))  # a plugin's over a built-in name
    assert not is_builtin("matmul")


def test_build_workers_killed_between_batches_are_replaced() -> None:
    """The workers ``start`` spawns may die while the tuner sets up or waits (OOM killer, a
    user's kill); the next batch gets a fresh pool instead of an exception."""
    with Measurer(MeasureOptions(jobs=2, plugins=PLUGIN)) as m:
        m.start()
        assert m._pool is not None
        for proc in list(m._pool._processes.values()):  # type: ignore[attr-defined]
            proc.kill()
        deadline = time.monotonic() + 10
        while not m._pool._broken and time.monotonic() < deadline:  # type: ignore[attr-defined]
            time.sleep(0.05)
        (r,) = m.measure([cand("t_double")])
    assert r.ok, r.error_msg
