"""Task schedulers compared on replayed measurements: how soon gradient reaches round-robin's latency.

    python experiments/scheduler_replay.py                 # 15 tasks, budget 1200, 21 seeds (a second)
    python experiments/scheduler_replay.py --budget 600 --seeds 51

Each task of the operator benchmark's logs (``experiments/logs/bench_ops_200.jsonl``:
7 workloads tuned 200 trials each with ``xgb``; ``bench_ops_32.jsonl``: 8
more with 32, which run out early) replays its recorded search: a round of
``--batch`` trials given to a task returns its next recorded measurements.
So the schedulers are compared on real searches, without timing anything.
Each seed draws the tasks' weights (occurrences in a model, 1 to 6) and
shuffles each task's recorded order locally (within ``--jitter`` trials,
the default schedule kept first), which varies the curves and keeps their
shape. A model's latency is the weighted sum of its tasks' best times.

Reported per seed: round-robin's weighted latency at the full budget, the
trials gradient needs to reach it, and their ratio; then the median ratio
against the bar (at most 0.70), and, for the first seed, the trials each
scheduler gave each task.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from records import Record, load  # noqa: E402
from records.log import RETIME  # noqa: E402
from tuner.scheduler import TaskInfo, get_scheduler, replay  # noqa: E402

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


def reach(curve: list[tuple[int, float]], target: float) -> int | None:
    """The trials after which the weighted latency is first at or below ``target``."""
    for trials, latency in curve:
        if latency <= target * (1 + 1e-12):
            return trials
    return None


def run_seed(
    tasks: dict[str, tuple[list[float], float, str]],
    seed: int,
    budget: int,
    batch: int,
    patience: int | None,
    jitter: int,
) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    keys = sorted(tasks)
    weights = [int(w) for w in rng.integers(1, 7, len(keys))]
    curves = [jittered(tasks[k][0], rng, jitter) for k in keys]
    infos = [TaskInfo(w, tasks[k][1], tasks[k][2]) for w, k in zip(weights, keys, strict=True)]
    result: dict[str, object] = {"seed": seed, "weights": weights, "keys": keys}
    for name in ("round-robin", "gradient"):
        sched = get_scheduler(name, infos, batch=batch, patience=patience, seed=seed)
        result[name] = replay(sched, curves, budget)
        result[name + " trials"] = list(sched.trials)
    rr = result["round-robin"]
    assert isinstance(rr, list)
    target = rr[-1][1]
    grad = result["gradient"]
    assert isinstance(grad, list)
    result["target"] = target
    result["gradient final"] = grad[-1][1]
    result["reached"] = reach(grad, target)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--budget", type=int, default=1200, help="trials for the whole model")
    p.add_argument("--seeds", type=int, default=21)
    p.add_argument("--batch", type=int, default=8, help="trials per round")
    p.add_argument("--patience", type=int, default=64, help="a task drops out after this many")
    p.add_argument("--jitter", type=int, default=16, help="local shuffle of each recorded order")
    ns = p.parse_args(argv)
    tasks = recorded_tasks()
    print(
        f"{len(tasks)} tasks replayed, {sum(len(t[0]) for t in tasks.values())} recorded trials; "
        f"budget {ns.budget}, batch {ns.batch}, patience {ns.patience}, {ns.seeds} seeds"
    )
    print(f"{'seed':>4} {'round-robin ms':>15} {'gradient ms':>12} {'gradient reaches rr at':>23}")
    ratios = []
    first: dict[str, object] = {}
    for seed in range(ns.seeds):
        r = run_seed(tasks, seed, ns.budget, ns.batch, ns.patience, ns.jitter)
        first = first or r
        reached = r["reached"]
        ratio = reached / ns.budget if isinstance(reached, int) else math.inf
        ratios.append(ratio)
        at = f"{reached} ({ratio:.0%})" if isinstance(reached, int) else "never"
        print(
            f"{seed:>4} {float(r['target']) * 1e3:>15.3f} "  # type: ignore[arg-type]
            f"{float(r['gradient final']) * 1e3:>12.3f} {at:>23}"  # type: ignore[arg-type]
        )
    med = statistics.median(ratios)
    verdict = "meets" if med <= BAR else "misses"
    print(f"median: gradient reaches round-robin's full-budget latency in {med:.0%} of the trials")
    print(f"({verdict} the bar of {BAR:.0%})")
    print(f"\ntrials per task, seed {first['seed']}:")
    print(f"{'weight':>6} {'best ms':>9} {'round-robin':>11} {'gradient':>8}  task")
    keys = first["keys"]
    assert isinstance(keys, list)
    for k, key in enumerate(keys):
        best = min(tasks[key][0])
        w = first["weights"][k]  # type: ignore[index]
        rr_t = first["round-robin trials"][k]  # type: ignore[index]
        g_t = first["gradient trials"][k]  # type: ignore[index]
        print(f"{w:>6} {best * 1e3:>9.3f} {rr_t:>11} {g_t:>8}  {key[:70]}")
    return 0 if med <= BAR else 1


if __name__ == "__main__":
    raise SystemExit(main())
