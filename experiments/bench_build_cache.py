"""Cold and cached build times of one register-blocked matmul kernel, each in a fresh process.

    python experiments/bench_build_cache.py --runs 5

The first process compiles into an empty cache folder; every later process
loads the kernel from it. Prints the medians and writes
experiments/out/bench_build_cache.csv.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "experiments" / "out"

CHILD = """
import sys, time
sys.path.insert(0, {root!r})
sys.path.insert(0, {exp!r})
from bench_schedules import register_blocked
import tuner
s, args = register_blocked({n})
t0 = time.perf_counter()
kern = tuner.build(s, args)
print(kern.from_cache, time.perf_counter() - t0)
"""


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=int, default=5, help="fresh processes per measurement")
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--out", type=Path, default=OUT / "bench_build_cache.csv")
    args = p.parse_args()
    script = CHILD.format(root=str(ROOT), exp=str(ROOT / "experiments"), n=args.size)
    rows = []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TUNER_CACHE_DIR=cache)
            for phase in ("cold", "cached"):
                out = subprocess.run(
                    [sys.executable, "-c", script],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                hit, seconds = out.stdout.split()
                rows.append(
                    {"run": run, "phase": phase, "from_cache": hit, "build_s": float(seconds)}
                )
    for phase in ("cold", "cached"):
        times = [r["build_s"] for r in rows if r["phase"] == phase]
        print(
            f"{phase:>7}: median {statistics.median(times):.3f} s over {len(times)} fresh processes"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
