"""Hand-written matmul schedules beside NumPy, on 1 and 2 threads.

    python experiments/bench_schedules.py --size 1024 --threads 1,2 --rounds 7

Each thread count runs in its own process (thread pools are fixed at start).
Inside it, every variant and NumPy are timed in interleaved rounds and the
median of the rounds is reported, because the machine's cores are at times
shared with other work. Writes experiments/out/bench_schedules.csv.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from search_spaces import matmul
from tuner.measure.interleave import interleaved

OUT = Path(__file__).resolve().parent / "out"


def naive(n: int):  # type: ignore[no-untyped-def]
    from tuner import te

    A, B, C = matmul.define(n, n, n)
    return te.create_schedule(C), [A, B, C]


def cache_tiled(n: int):  # type: ignore[no-untyped-def]
    """32x256 tiles of C, K blocked by 64, inner loop over contiguous rows of B."""
    from tuner import te

    A, B, C = matmul.define(n, n, n)
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    io, jo, ii, ji = s[C].tile(i, j, 32, 256)
    ko, ki = s[C].split(k, factor=64)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    s[C].vectorize(ji)
    return s, [A, B, C]


def register_blocked(n: int, parallel: bool = False, **knobs: object):  # type: ignore[no-untyped-def]
    """The matmul template's GotoBLAS nest: B packed into [NC/16][KC][16], a 6x16 register tile."""
    cfg = {**matmul.default_config(n, n, n), "parallel": parallel, **knobs}
    return matmul.schedule(matmul.config_space(n, n, n).validate(cfg), n, n, n)


VARIANTS = {
    "naive": naive,
    "cache_tiled": cache_tiled,
    "register_blocked": register_blocked,
    "parallel": lambda n: register_blocked(n, parallel=True, nc_tiles=8),
}


def worker(n: int, threads: int, rounds: int, variants: list[str]) -> list[dict[str, object]]:
    import numpy as np

    import tuner

    rng = np.random.default_rng(0)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    ref = a @ b
    target = tuner.Target.from_name("cpu", num_threads=threads)
    fns = {"numpy": lambda: np.matmul(a, b, out=c_np)}
    c_np = np.empty_like(ref)
    build_s = {}
    for name in variants:
        s, args = VARIANTS[name](n)
        t0 = time.perf_counter()
        kern = tuner.build(s, args, target=target)
        build_s[name] = time.perf_counter() - t0
        c = np.zeros_like(ref)
        kern(a, b, c)
        err = float(np.abs(c - ref).max() / np.abs(ref).max())
        if err > 1e-4:
            raise SystemExit(f"{name}: wrong result (relative error {err:.2e})")
        fns[name] = lambda kern=kern, c=c: kern(a, b, c)
    # Each side in a block after a rest and a warm-up, the order rotating by round.
    samples = interleaved(fns, rounds)
    flops = 2.0 * n**3
    np_med = statistics.median(samples["numpy"])
    rows = []
    for name, ts in samples.items():
        med = statistics.median(ts)
        rows.append(
            {
                "variant": name,
                "n": n,
                "threads": threads,
                "median_s": med,
                "gflops": flops / med / 1e9,
                "ratio_to_numpy": np_med / med,
                "build_s": build_s.get(name, 0.0),
            }
        )
    return rows


def _spin(seconds: float) -> float:
    """Busy-loop for ``seconds`` of wall time; return the CPU seconds this process got."""
    end = time.perf_counter() + seconds
    c0 = time.process_time()
    while time.perf_counter() < end:
        pass
    return time.process_time() - c0


def thread_env(threads: int) -> dict[str, str]:
    """The environment of a timing process with ``threads`` threads in every pool (BLAS, OpenMP, Numba).

    OpenBLAS picks its own kernels and cache sizes (``OPENBLAS_CORETYPE`` and
    ``OPENBLAS_L2_SIZE`` unset). OpenMP keeps its default wait policy, the one users run with: a short spin,
    then sleep. ``OMP_WAIT_POLICY=passive`` (sleep at once, what the tuning
    runner sets, since it shares the cores with build processes) slowed every
    OpenMP user in the timing process: prange kernels and PyTorch alike
    (conv2d 3x3 1.96 against 1.63 ms on two threads). The rests between timed
    blocks (``tuner.measure.interleave``) outlast the default spin.
    """
    env = dict(
        os.environ,
        OPENBLAS_NUM_THREADS=str(threads),
        OMP_NUM_THREADS=str(threads),
        NUMBA_NUM_THREADS=str(threads),
    )
    for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # NumPy at its best: its own choice
        env.pop(name, None)
    return env


def cpus_available(seconds: float = 0.5) -> float:
    """CPUs two busy processes get together: about 2 on a quiet 2-core machine.

    Processes, not threads: Python threads share the GIL and never show more than one.
    """
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(2) as pool:
        return sum(pool.map(_spin, [seconds, seconds])) / seconds


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--out", type=Path, default=OUT / "bench_schedules.csv")
    p.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    variants = args.variants.split(",")
    if args.worker:
        for row in worker(args.size, args.worker, args.rounds, variants):
            print("ROW", ",".join(f"{k}={v}" for k, v in row.items()))
        return
    rows: list[dict[str, str]] = []
    for t in (int(x) for x in args.threads.split(",")):
        env = thread_env(t)
        probe_before = cpus_available()
        cmd = [
            sys.executable,
            __file__,
            "--worker",
            str(t),
            "--size",
            str(args.size),
            "--rounds",
            str(args.rounds),
            "--variants",
            args.variants,
        ]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if out.returncode:
            raise SystemExit(out.stderr.strip().splitlines()[-1] if out.stderr else "worker failed")
        probe_after = cpus_available()
        for line in out.stdout.splitlines():
            if line.startswith("ROW "):
                row = dict(kv.split("=", 1) for kv in line[4:].split(","))
                row["cpus_before"], row["cpus_after"] = f"{probe_before:.2f}", f"{probe_after:.2f}"
                rows.append(row)
    print(f"{'variant':<18}{'threads':>8}{'GFLOP/s':>10}{'x NumPy':>9}{'build s':>9}  cpus")
    for r in rows:
        print(
            f"{r['variant']:<18}{r['threads']:>8}{float(r['gflops']):>10.1f}{float(r['ratio_to_numpy']):>9.2f}{float(r['build_s']):>9.2f}  {r['cpus_before']}/{r['cpus_after']}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
