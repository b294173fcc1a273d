"""What one tuning candidate costs: build and measure seconds, per operator.

    python experiments/candidate_cost.py --csv experiments/results/candidate_cost_<machine>.csv
    # the code before a change, same configs, same machine:
    git worktree add /tmp/before <rev>
    (cd /tmp/before && PYTHONPATH=$PWD python <this file> --label before --csv <same csv>)

Each workload's configs are a seeded random sample of its space (the same
configs whichever code runs, where the space is the same), measured the way
``tuner tune`` measures a batch: one ``Measurer`` built and timed with the
default ``MeasureOptions`` (2 build workers, 5 samples in 3 passes), in
batches of 8 as the tuner sends them. A candidate's cost is its build
seconds (in a build worker; two build side by side) and its run seconds
(loaded, checked and timed in the runner, all passes); the wall time per
candidate is the batch's wall time over its size. Every build starts from an
empty kernel cache, so nothing is loaded that an earlier run compiled.
Rows are appended to ``--csv`` with the machine (``lscpu`` model name and
the target's fingerprint) and a label for the code measured.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

from csv_rows import append_rows  # noqa: E402

#: (name, operator, arguments): a matmul, a 3 x 3 convolution and a dense layer with gelu.
WORKLOADS = [
    ("matmul 512^3", "matmul", {"M": 512, "N": 512, "K": 512}),
    (
        "conv2d 3x3 64ch 56x56",
        "conv2d",
        {"N": 1, "C": 64, "H": 56, "W": 56, "K": 64, "R": 3, "S": 3, "pad": 1, "layout": "NHWC"},
    ),
    (
        "dense+gelu 128x768x3072",
        "dense",
        {"batch": 128, "in_features": 768, "out_features": 3072, "activation": "gelu"},
    ),
]
BATCH = 8


def machine() -> str:
    from tuner.target import Target

    model = Target.from_name("cpu").get("model", "unknown")
    return f"{model} {Target.from_name('cpu').fingerprint}"


def measure(op_name: str, raw: dict[str, object], n: int, seed: int) -> dict[str, float]:
    import numpy as np

    from search_spaces import get_operator
    from tuner.measure import Candidate, MeasureOptions, Measurer
    from tuner.target import Target

    op, target = get_operator(op_name), Target.from_name("cpu")
    args = op.parse_args(raw)
    space = op.space(args, target)
    rng = np.random.default_rng(seed)
    configs = [space.sample(rng).to_json() for _ in range(n)]
    cands = [Candidate(op_name, args, c, target.to_json()) for c in configs]
    results = []
    wall = 0.0
    threads = int(target.get("threads", 1))
    with Measurer(MeasureOptions(), threads=threads) as m:
        m.measure(cands[:1])  # start the workers and the runner: not a candidate's cost
        for i in range(0, n, BATCH):
            t0 = time.perf_counter()
            results += m.measure(cands[i : i + BATCH])
            wall += time.perf_counter() - t0
    ok = [r for r in results if r.ok]
    build = [r.build_seconds for r in results]
    run = [r.run_seconds for r in ok]
    return {
        "candidates": n,
        "ok": len(ok),
        "median_build_s": statistics.median(build),
        "median_run_s": statistics.median(run) if run else float("nan"),
        "median_build_plus_run_s": statistics.median([r.build_seconds + r.run_seconds for r in ok])
        if ok
        else float("nan"),
        "wall_s_per_candidate": wall / n,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--candidates", type=int, default=24, help="per workload")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--label", default="now", help="names the code measured in the CSV")
    ap.add_argument("--only", nargs="*", help="workload names (a prefix is enough)")
    ap.add_argument("--csv", type=Path)
    a = ap.parse_args()
    os.environ["TUNER_CACHE_DIR"] = tempfile.mkdtemp(prefix="candidate_cost_")
    rows = []
    for name, op, raw in WORKLOADS:
        if a.only and not any(name.startswith(o) for o in a.only):
            continue
        row = {"machine": machine(), "label": a.label, "workload": name}
        row.update(measure(op, raw, a.candidates, a.seed))
        rows.append(row)
        print(
            f"{a.label:8s} {name:26s} build {row['median_build_s']:.2f} s  "
            f"run {row['median_run_s']:.2f} s  build+run {row['median_build_plus_run_s']:.2f} s  "
            f"wall/candidate {row['wall_s_per_candidate']:.2f} s  ({row['ok']}/{row['candidates']} ok)",
            flush=True,
        )
    if a.csv:
        append_rows(a.csv, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
