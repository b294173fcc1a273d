"""How fast each strategy finds a good schedule, on replayed measurements.

    # 1. measure a random sample of the serial matmul space once (real timings, ~12 minutes):
    python experiments/search_efficiency.py --measure 400 --log experiments/logs/matmul256_sample_400.jsonl
    # 2. replay it for each strategy over many seeds (no timing; ~12 minutes):
    python experiments/search_efficiency.py --log experiments/logs/matmul256_sample_400.jsonl --seeds 20 --trials 400

The sample keeps parallel=False: parallel kernels take longer to build and
their timings are noisier on this shared 2-core machine. A sample is tied to
the code generator that measured it: matmul256_sample.jsonl (200 configs)
predates register tiles padded at the edges and packing an untransposed A;
its best config was alone within 95% of it and 10% ahead of the next.

The replay limits the space to the measured configs and answers each
candidate with its recorded result, so strategies are compared on identical
ground. Reports, per strategy (median over seeds), the trials needed to reach
95% of the best known throughput and the fraction of it reached within 32, 64
and 128 trials. Writes experiments/out/search_efficiency.csv and a plot of
the median best-so-far curves when matplotlib is installed.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from records import load  # noqa: E402
from tuner.measure import ReplayMeasurer  # noqa: E402
from tuner.tuning.tune import TuneOptions, tune  # noqa: E402

OUT = ROOT / "experiments" / "out"


def curve(log: Path) -> list[float]:
    """Best-so-far median seconds after each trial."""
    best, out = math.inf, []
    for r in sorted(load(log), key=lambda r: r.trial):
        if r.ok:
            best = min(best, r.median)
        out.append(best)
    return out


def measure_sample(n: int, log: Path, size: int, seed: int) -> None:
    """Measure ``n`` random serial configs of matmul size^3 (plus the default) into ``log``."""
    import numpy as np

    from records import LogWriter, Record
    from search_spaces import get_operator
    from tuner.measure import Candidate, Measurer
    from tuner.target import Target
    from tuner.workload import Workload

    op = get_operator("matmul")
    args = op.parse_args({"M": size, "N": size, "K": size})
    target = Target.from_name("cpu", num_threads=1)
    space = op.space(args, target)
    pool = [c for c in space.sample_many(np.random.default_rng(seed), 4 * n) if not c["parallel"]][
        :n
    ]
    workload = Workload.make("matmul", **args)
    with Measurer(threads=1) as m, LogWriter(log) as out:
        for start in range(0, len(pool), 16):
            batch = pool[start : start + 16]
            cands = [Candidate("matmul", args, c.to_json(), target.to_json()) for c in batch]
            for i, (cfg, res) in enumerate(zip(batch, m.measure(cands), strict=True)):
                out.write(
                    Record.make(
                        workload,
                        target,
                        cfg.to_json(),
                        samples=res.samples,
                        error_kind=res.error_kind,
                        error_msg=res.error_msg,
                        build_seconds=res.build_seconds,
                        run_seconds=res.run_seconds,
                        strategy="sample",
                        trial=start + i,
                        flops=op.flops(args),
                    )
                )
            print(f"measured {min(start + 16, len(pool))}/{len(pool)}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--log", type=Path, required=True, help="a log that measured a sample of one workload"
    )
    p.add_argument("--strategies", default="random,tpe,xgb")
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--trials", type=int, default=128)
    p.add_argument("--out", type=Path, default=OUT / "search_efficiency.csv")
    p.add_argument(
        "--measure",
        type=int,
        default=0,
        metavar="N",
        help="first measure N random serial configs into --log",
    )
    p.add_argument("--size", type=int, default=256, help="matmul extent for --measure")
    args = p.parse_args()
    if args.measure:
        measure_sample(args.measure, args.log, args.size, seed=0)
        return
    from search_spaces import canonical_records

    records = canonical_records(load(args.log))  # configs with the knobs the space has now
    workload = records[0].workload
    best_known = min(r.median for r in records if r.ok and r.workload == workload)
    replay = ReplayMeasurer(r for r in records if r.workload == workload)
    budget = min(args.trials, len(replay.keys))
    print(
        f"{workload.key}: {len(replay.keys)} measured configs, best {best_known * 1e3:.3f} ms; budget {budget} trials"
    )
    rows, curves = [], {}
    for name in args.strategies.split(","):
        curves[name] = []
        for seed in range(args.seeds):
            with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                log = Path(tmp) / "replay.jsonl"
                opts = TuneOptions(trials=budget, strategy=name, seed=seed, log=log, batch=8)
                tune(workload.op, workload.as_dict(), opts, replay=replay)
                c = curve(log)
            curves[name].append(c)
            reach = next((i + 1 for i, t in enumerate(c) if t <= best_known / 0.95), math.inf)
            row = {"strategy": name, "seed": seed, "trials_to_95pct": reach}
            for k in (32, 64, 128):
                row[f"fraction_at_{k}"] = best_known / c[min(k, len(c)) - 1] if c else 0.0
            rows.append(row)
    print(
        f"{'strategy':<10}{'trials to 95%':>15}{'@32':>8}{'@64':>8}{'@128':>8}   (medians over {args.seeds} seeds)"
    )
    for name in curves:
        mine = [r for r in rows if r["strategy"] == name]
        med = {
            k: statistics.median(float(r[k]) for r in mine)
            for k in mine[0]
            if k not in ("strategy", "seed")
        }
        print(
            f"{name:<10}{med['trials_to_95pct']:>15}{med['fraction_at_32']:>8.2f}{med['fraction_at_64']:>8.2f}{med['fraction_at_128']:>8.2f}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {args.out}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed; no plot")
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, cs in curves.items():
        n = min(len(c) for c in cs)
        med = [statistics.median(best_known / c[i] for c in cs) for i in range(n)]
        ax.plot(range(1, n + 1), med, label=name)
    ax.axhline(0.95, color="grey", linestyle=":")
    ax.set_xlabel("trial")
    ax.set_ylabel("best so far / best known (median over seeds)")
    ax.set_title(workload.key)
    ax.legend()
    plot = args.out.with_suffix(".png")
    fig.savefig(plot, dpi=120, bbox_inches="tight")
    print(f"wrote {plot}")


if __name__ == "__main__":
    main()
