"""Task schedulers on replayed measurements: warm-up, drop-outs, rebuilding, and where gradient spends."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from records import load
from records.log import RETIME
from tuner.tuning.scheduler import (
    GradientScheduler,
    SchedulerError,
    TaskInfo,
    get_scheduler,
    replay,
    schedulers,
)

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "experiments" / "logs" / "bench_ops_200.jsonl"


def recorded_curves() -> dict[str, list[float]]:
    """Each workload's recorded search (median seconds in trial order; inf for failures)."""
    by_key: dict[str, list[tuple[int, float]]] = {}
    for r in load(LOG):
        if r.strategy != RETIME:
            by_key.setdefault(r.workload.key, []).append((r.trial, r.median if r.ok else math.inf))
    return {k: [s for _, s in sorted(v)] for k, v in sorted(by_key.items())}


def test_the_registry_names_both_and_refuses_an_unknown_one() -> None:
    assert {"gradient", "round-robin"} <= set(schedulers())
    with pytest.raises(SchedulerError, match="unknown scheduler 'fifo'; known schedulers: "):
        get_scheduler("fifo", [TaskInfo()])
    with pytest.raises(SchedulerError, match="weights must be positive"):
        get_scheduler("gradient", [TaskInfo(weight=0)])


@pytest.mark.parametrize("name", ["round-robin", "gradient"])
def test_every_task_warms_up_once_in_order_then_dropouts_end_the_run(name: str) -> None:
    sched = get_scheduler(name, [TaskInfo(), TaskInfo(weight=3), TaskInfo()], batch=2)
    order = []
    for _ in range(3):
        i = sched.next_task()
        assert i is not None
        order.append(i)
        sched.tell(i, 2, 1.0)
    assert order == [0, 1, 2]
    sched.tell(1, 0, 1.0)  # task 1's space is exhausted
    assert 1 in sched.dead
    seen = {sched.next_task() for _ in range(4)}
    assert seen <= {0, 2}
    for i in (0, 2):
        sched.tell(i, 0, 1.0)
    assert sched.next_task() is None


def test_every_task_is_timed_once_before_any_is_timed_twice() -> None:
    """A warm-up round is one trial (the default schedule): a budget, or a time limit, that
    fits one trial per task times every task once, whatever the batch."""
    infos = [TaskInfo(weight=w) for w in (1, 5, 2, 1, 3)]
    for name in ("round-robin", "gradient"):
        sched = get_scheduler(name, infos, batch=8)
        assert [sched.round_trials(i) for i in range(5)] == [1] * 5
        replay(sched, [[1.0 - 0.01 * k for k in range(20)] for _ in infos], 5)
        assert sched.trials == [1] * 5
        assert sched.weighted_latency() == pytest.approx(12.0)
        assert all(sched.round_trials(i) == 8 for i in range(5))
    with pytest.raises(SchedulerError, match="at least one trial"):
        get_scheduler("gradient", infos, warmup=0)


def test_round_robin_gives_each_live_task_a_round_in_turn() -> None:
    sched = get_scheduler("round-robin", [TaskInfo(), TaskInfo(), TaskInfo()], batch=1)
    curve = replay(sched, [[3.0] * 10, [2.0] * 10, [1.0] * 2], 12)
    assert sched.trials == [5, 5, 2], "task 2 runs out after two trials; the others share the rest"
    assert curve[-1] == (12, 6.0)


def test_a_task_that_stops_improving_drops_out_after_patience_trials() -> None:
    sched = get_scheduler("round-robin", [TaskInfo(), TaskInfo()], batch=4, warmup=4, patience=8)
    replay(sched, [[1.0, 0.5] + [0.9] * 50, [2.0 - 0.01 * k for k in range(50)]], 60)
    assert 0 in sched.dead and sched.trials[0] == 12, "its best came at trial 2; 8 more, rounded up"
    assert 1 not in sched.dead and sched.trials[1] == 48


def test_a_task_that_never_ran_correctly_counts_its_patience_from_zero() -> None:
    sched = get_scheduler("gradient", [TaskInfo(), TaskInfo()], batch=4, warmup=4, patience=8)
    replay(sched, [[math.inf] * 40, [1.0 - 0.01 * k for k in range(40)]], 40)
    assert 0 in sched.dead and sched.trials[0] == 8
    assert sched.best[0] == math.inf and sched.weighted_latency() == math.inf


@pytest.mark.parametrize("name", ["round-robin", "gradient"])
def test_a_scheduler_rebuilt_from_a_log_is_in_the_state_the_run_left(name: str) -> None:
    curves = list(recorded_curves().values())[:4]
    infos = [TaskInfo(weight=w) for w in (1, 3, 2, 1)]
    live = get_scheduler(name, infos, batch=8, patience=64, seed=3)
    served = [0] * len(curves)
    for _ in range(20):  # a run cut short: what each task measured is in the "log"
        i = live.next_task()
        assert i is not None
        chunk = curves[i][served[i] : served[i] + live.round_trials(i)]
        served[i] += len(chunk)
        live.tell(i, len(chunk), min((live.best[i], *chunk)))
    rebuilt = get_scheduler(name, infos, batch=8, patience=64, seed=3)
    for i, curve in enumerate(curves):
        rebuilt.restore(i, curve[: served[i]])
    assert rebuilt.trials == live.trials and rebuilt.rounds == live.rounds
    assert rebuilt.best == live.best and rebuilt.history == live.history
    assert rebuilt.dead == live.dead
    assert rebuilt.next_task() == live.next_task()


def test_the_forward_estimate_favours_a_task_slower_than_its_similar_peer() -> None:
    # Tasks 0 and 1 are alike (same tag and flops) but 0 is ten times slower; task 2, as
    # slow as task 0 with no peer, expects only its own 1/rounds decay.
    infos = [TaskInfo(1, 1e9, "conv"), TaskInfo(1, 1e9, "conv"), TaskInfo(1, 1e9, "dense")]
    sched = GradientScheduler(infos, batch=8)
    for _ in range(4):
        for i, best in enumerate((1.0, 0.1, 1.0)):
            sched.tell(i, 8, best)
    # Task 0 could reach beta times its peer's time (0.2 s); task 2 expects 1 - 1/4.
    assert sched.gradient(0) == pytest.approx(0.8 * (0.2 - 1.0))
    assert sched.gradient(2) == pytest.approx(0.8 * (0.75 - 1.0))
    assert sched.next_task() == 0


def test_the_backward_gradient_favours_a_task_that_has_been_improving() -> None:
    sched = GradientScheduler([TaskInfo(), TaskInfo()], batch=8)
    for k in range(4):  # equal bests now; task 1 got there by improving, task 0 did not
        sched.tell(0, 8, 1.0)
        sched.tell(1, 8, 1.0 + 0.5 * (3 - k))
    assert sched.best == [1.0, 1.0]
    assert sched.gradient(1) < sched.gradient(0)
    assert sched.next_task() == 1


def test_a_task_far_slower_than_its_peers_after_many_rounds_leaves_their_group() -> None:
    infos = [TaskInfo(1, 1e9, "conv"), TaskInfo(1, 1e9, "conv")]
    sched = GradientScheduler(infos, batch=8)
    sched.tell(1, 8, 0.1)
    for _ in range(7):
        sched.tell(0, 8, 1.0)
    assert sched.groups["conv"] == [1]


def test_on_recorded_searches_gradient_spends_on_heavy_tasks_and_ends_lower_than_round_robin() -> (
    None
):
    curves = recorded_curves()
    keys = list(curves)
    # The float32 1024^3 matmul (the slowest kernel, ~13 ms) runs four times in this "model".
    heavy = next(i for i, k in enumerate(keys) if k.startswith("matmul(K=1024"))
    infos = [TaskInfo(weight=4 if i == heavy else 1) for i in range(len(keys))]
    budget = 400
    results = {}
    for name in ("round-robin", "gradient"):
        sched = get_scheduler(name, infos, batch=8, patience=64)
        curve = replay(sched, list(curves.values()), budget)
        assert curve[-1][0] == budget
        results[name] = (sched.trials, curve[-1][1])
    (rr_trials, rr_latency), (g_trials, g_latency) = results["round-robin"], results["gradient"]
    assert g_trials[heavy] > 2 * rr_trials[heavy]
    assert g_latency < rr_latency


@pytest.mark.parametrize("budget", [200, 400])
def test_gradient_reaches_round_robins_final_latency_in_at_most_70_percent_of_the_trials(
    budget: int,
) -> None:
    """On recorded searches (every task's trials in the order a search measured them), weights
    as a model gives them (one task four times, two twice), the gradient scheduler's weighted
    latency falls to what round-robin ends with after ``budget`` trials within 70% of them."""
    curves = recorded_curves()
    keys = list(curves)
    weights = [
        4 if k.startswith("matmul(K=1024") else 2 if i % 5 == 0 else 1 for i, k in enumerate(keys)
    ]
    infos = [TaskInfo(weight=w) for w in weights]
    rr = replay(
        get_scheduler("round-robin", infos, batch=8, patience=64), list(curves.values()), budget
    )
    target = rr[-1][1]
    grad = replay(
        get_scheduler("gradient", infos, batch=8, patience=64), list(curves.values()), budget
    )
    reached = next(spent for spent, latency in grad if latency <= target)
    assert reached <= 0.7 * budget, (reached, budget)
