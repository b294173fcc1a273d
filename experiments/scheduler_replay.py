"""Task schedulers compared on replayed measurements: how soon gradient reaches round-robin's latency.

    python experiments/scheduler_replay.py                 # 15 tasks, budget 400, 21 seeds (3 s)
    python experiments/scheduler_replay.py --budget 600 --seeds 51 --patience 32

Each task of the operator benchmark's logs (``experiments/logs/bench_ops_200.jsonl``:
7 workloads tuned 200 trials each with ``xgb``; ``bench_ops_32.jsonl``: 8
more with 32, which run out early) replays its recorded search: a round of
``--batch`` trials given to a task returns its next recorded measurements.
So the schedulers are compared on real searches, without timing anything.
Each seed draws the tasks' weights (occurrences in a model, 1 to 6) and
shuffles each task's recorded order locally (within ``--jitter`` trials,
the default schedule kept first), which varies the curves and keeps their
shape. A model's latency is the weighted sum of its tasks' best times.
Round-robin is the plain one (only an exhausted task drops out); gradient
drops a task after ``--patience`` trials without improvement, as tune-model does.

Reported per seed: round-robin's weighted latency at the full budget, the
trials gradient needs to reach it, the trials a greedy scheduler that sees
each task's next round in advance needs (the "1-round hindsight": the best
any rule ranking tasks by their next round's expected gain can do, Ansor's
among them), and the fewest any scheduler could need knowing every curve in
advance (the "oracle", a lower bound); the median
ratio against the bar (at most 0.70); the trials each scheduler gave each
task (seed 0); and a summary over budgets, for the recorded order and for a
random order of each task's records (a random search over them).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from records import Record, load  # noqa: E402
from records.log import RETIME  # noqa: E402
from tuner.tuning.scheduler import Scheduler, TaskInfo, get_scheduler, replay  # noqa: E402
from tuner.tuning.tune_model import PATIENCE  # noqa: E402

LOGS = (ROOT / "experiments/logs/bench_ops_200.jsonl", ROOT / "experiments/logs/bench_ops_32.jsonl")
BAR = 0.70


def recorded_tasks(logs: tuple[Path, ...] = LOGS) -> dict[str, tuple[list[float], float, str]]:
    """Per workload key: its trials' seconds in recorded order (inf: failed), flops and operator.

    A workload in several logs keeps the longest search.
    """
    out: dict[str, tuple[list[float], float, str]] = {}
    for path in logs:
        by_key: dict[str, list[Record]] = {}
        for r in load(path):
            if r.strategy != RETIME:
                by_key.setdefault(r.workload.key, []).append(r)
        for key, recs in by_key.items():
            recs.sort(key=lambda r: r.trial)
            seconds = [r.median if r.ok else math.inf for r in recs]
            if len(seconds) > len(out.get(key, ([], 0.0, ""))[0]):
                out[key] = (seconds, float(recs[0].flops or 0.0), recs[0].workload.op)
    return out


def jittered(seconds: list[float], rng: np.random.Generator, jitter: int) -> list[float]:
    """The recorded order shuffled within ``jitter`` places; the first (the default) stays first."""
    if jitter <= 0 or len(seconds) < 3:
        return list(seconds)
    keys = np.arange(1, len(seconds)) + rng.uniform(0, jitter, len(seconds) - 1)
    return [seconds[0]] + [seconds[1 + i] for i in np.argsort(keys, kind="stable")]


class Hindsight(Scheduler):
    """Greedy with one round of hindsight: the task whose next round lowers the latency most.

    It reads the recorded curves, so no real scheduler can do this; what it
    reaches bounds any rule that ranks tasks by an estimate of their next
    round's gain, as Ansor's gradient does (ties, and rounds that gain
    nothing anywhere, go to the task with the fewest rounds).
    """

    name = "hindsight"

    def __init__(self, tasks: list[TaskInfo], curves: list[list[float]], batch: int):
        super().__init__(tasks, batch=batch)
        self.curves = curves

    def _gain(self, i: int) -> float:
        nxt = self.curves[i][self.trials[i] : self.trials[i] + self.batch]
        return self.tasks[i].weight * (self.best[i] - min((self.best[i], *nxt)))

    def _pick(self, alive: list[int]) -> int:
        return max(alive, key=lambda i: (self._gain(i), -self.rounds[i], -i))


def reach(curve: list[tuple[int, float]], target: float) -> int | None:
    """The trials after which the weighted latency is first at or below ``target``."""
    for trials, latency in curve:
        if latency <= target * (1 + 1e-12):
            return trials
    return None


def oracle(
    curves: list[list[float]], weights: list[int], target: float, budget: int, batch: int
) -> int | None:
    """The fewest trials (whole rounds, one at least per task) that reach ``target``, in hindsight.

    A lower bound for any scheduler: it knows every task's whole curve. A
    dynamic programme over tasks, the state being the rounds spent so far.
    """
    rounds = budget // batch
    best = [math.inf] * (rounds + 1)  # best[r]: the lowest weighted latency in r rounds
    best[0] = 0.0
    for curve, w in zip(curves, weights, strict=True):
        options = [
            (r, w * min(curve[: r * batch])) for r in range(1, math.ceil(len(curve) / batch) + 1)
        ]
        nxt = [math.inf] * (rounds + 1)
        for used, latency in enumerate(best):
            if math.isfinite(latency):
                for r, cost in options:
                    if used + r <= rounds:
                        nxt[used + r] = min(nxt[used + r], latency + cost)
        best = nxt
    return next((r * batch for r, v in enumerate(best) if v <= target * (1 + 1e-12)), None)


def run_seed(
    tasks: dict[str, tuple[list[float], float, str]],
    seed: int,
    budget: int,
    batch: int,
    patience: int | None,
    jitter: int,
) -> dict[str, Any]:
    """Round-robin (plain: only an exhausted task drops out) and gradient on one draw."""
    rng = np.random.default_rng(seed)
    keys = sorted(tasks)
    weights = [int(w) for w in rng.integers(1, 7, len(keys))]
    curves = [jittered(tasks[k][0], rng, jitter) for k in keys]
    infos = [TaskInfo(w, tasks[k][1], tasks[k][2]) for w, k in zip(weights, keys, strict=True)]
    rr = get_scheduler("round-robin", infos, batch=batch)
    rr_curve = replay(rr, curves, budget)
    grad = get_scheduler("gradient", infos, batch=batch, patience=patience, seed=seed)
    grad_curve = replay(grad, curves, budget)
    target = rr_curve[-1][1]
    hindsight = replay(Hindsight(infos, curves, batch), curves, budget)
    return {
        "weights": weights,
        "keys": keys,
        "target": target,
        "gradient final": grad_curve[-1][1],
        "reached": reach(grad_curve, target),
        "hindsight": reach(hindsight, target),
        "oracle": oracle(curves, weights, target, budget, batch),
        "round-robin trials": list(rr.trials),
        "gradient trials": list(grad.trials),
    }


def ratio(trials: int | None, budget: int) -> float:
    return trials / budget if trials is not None else math.inf


def _at(trials: int | None, budget: int) -> str:
    return f"{trials} ({ratio(trials, budget):.0%})" if trials is not None else "never"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--budget", type=int, default=400, help="trials for the whole model")
    p.add_argument("--seeds", type=int, default=21)
    p.add_argument("--batch", type=int, default=8, help="trials per round")
    p.add_argument("--patience", type=int, default=PATIENCE, help="gradient's drop-out (trials)")
    p.add_argument("--jitter", type=int, default=16, help="local shuffle of each recorded order")
    p.add_argument("--budgets", default="200,300,400,600,800", help="the summary's budgets")
    ns = p.parse_args(argv)
    tasks = recorded_tasks()
    print(
        f"{len(tasks)} tasks replayed, {sum(len(t[0]) for t in tasks.values())} recorded trials; "
        f"budget {ns.budget}, batch {ns.batch}, gradient's patience {ns.patience}, {ns.seeds} seeds"
    )
    print(
        f"{'seed':>4} {'round-robin ms':>15} {'gradient ms':>12} {'gradient reaches it':>20} "
        f"{'1-round hindsight':>18} {'oracle':>12}"
    )
    ratios, greedy = [], []
    for seed in range(ns.seeds):
        r = run_seed(tasks, seed, ns.budget, ns.batch, ns.patience, ns.jitter)
        ratios.append(ratio(r["reached"], ns.budget))
        greedy.append(ratio(r["hindsight"], ns.budget))
        print(
            f"{seed:>4} {r['target'] * 1e3:>15.3f} {r['gradient final'] * 1e3:>12.3f} "
            f"{_at(r['reached'], ns.budget):>20} {_at(r['hindsight'], ns.budget):>18} "
            f"{_at(r['oracle'], ns.budget):>12}"
        )
    med = statistics.median(ratios)
    verdict = "meets" if med <= BAR else "misses"
    print(f"median: gradient reaches round-robin's full-budget latency in {med:.0%} of the trials")
    print(
        f"({verdict} the bar of {BAR:.0%}); greedy with one round of hindsight: "
        f"{statistics.median(greedy):.0%}"
    )

    first = run_seed(tasks, 0, ns.budget, ns.batch, ns.patience, ns.jitter)
    print(f"\ntrials per task, seed 0, budget {ns.budget}:")
    print(f"{'weight':>6} {'best ms':>9} {'round-robin':>11} {'gradient':>8}  task")
    for k, key in enumerate(first["keys"]):
        print(
            f"{first['weights'][k]:>6} {min(tasks[key][0]) * 1e3:>9.3f} "
            f"{first['round-robin trials'][k]:>11} {first['gradient trials'][k]:>8}  {key[:70]}"
        )

    print("\nmedian share of the budget at which round-robin's full-budget latency is reached:")
    print(f"{'budget':>6} {'order':>9} {'gradient':>9} {'hindsight':>9} {'oracle':>7}")
    for budget in (int(b) for b in ns.budgets.split(",")):
        for order, jitter in (("recorded", ns.jitter), ("random", 10**9)):
            runs = [
                run_seed(tasks, s, budget, ns.batch, ns.patience, jitter) for s in range(ns.seeds)
            ]
            g = statistics.median(ratio(r["reached"], budget) for r in runs)
            h = statistics.median(ratio(r["hindsight"], budget) for r in runs)
            o = statistics.median(ratio(r["oracle"], budget) for r in runs)
            print(f"{budget:>6} {order:>9} {g:>9.0%} {h:>9.0%} {o:>7.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
