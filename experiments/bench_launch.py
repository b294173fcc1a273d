"""What starting a parallel loop costs: Numba's threading layer against the Python pool.

    python experiments/bench_launch.py --threads 2 --work-us 0,5,10,20,50,200

A ``nogil`` chunk function of the kind generated kernels have,
``body(lo, hi, a, reps)``, does ``reps`` square roots per iteration. It is
calibrated so that one chunk's work takes about ``--work-us`` microseconds,
and it runs over ``threads`` chunks three ways:
- **serial**: every chunk on the calling thread, the floor;
- **launch**: ``tuner.codegen.cpu.launch.launch``, the chunks on Numba's
  threading layer (what kernels use where OpenMP or TBB loads): a GNU OpenMP
  team started by the launcher itself where that is Numba's layer;
- **prange**: the same chunks through Numba's ``prange`` (the launcher
  elsewhere);
- **pool**: ``tuner.codegen.cpu.threads.parallel_for``, the Python thread pool
  (the fallback).

Timing is ``tuner.measure.interleave``: blocks after a rest, rounds rotated,
medians. A parallel start that pays for itself takes less than ``serial``.
With no numerical peer, the OPENBLAS variables do not apply.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


@numba.njit(
    numba.void(numba.int64, numba.int64, numba.float64[::1], numba.int64[::1]),
    nogil=True,
    cache=True,
)
def body(lo: int, hi: int, a: np.ndarray, reps: np.ndarray) -> None:  # pragma: no cover - jitted
    for i in range(lo, hi):
        s = 0.0
        for k in range(reps[0]):
            s += np.sqrt(k + a[i])
        a[i] += s * 1e-12


def calibrate(us: float) -> int:
    """Square roots per iteration that take about ``us`` microseconds on one thread."""
    if us <= 0:
        return 0
    a, reps = np.zeros(1), np.array([100_000])
    body(0, 1, a, reps)
    best = min(_once(a, reps) for _ in range(5))
    return max(1, int(reps[0] * us * 1e-6 / best))


def _once(a: np.ndarray, reps: np.ndarray) -> float:
    t0 = time.perf_counter()
    body(0, 1, a, reps)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work-us", default="0,5,10,20,50,200", help="work per chunk, comma-separated")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)

    from tuner.codegen.cpu.launch import _launch_prange, chunk_address, gomp_loaded, launch
    from tuner.codegen.cpu.threads import native_layer, parallel_for
    from tuner.measure.interleave import interleaved, medians

    threads = min(args.threads, int(numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]
    numba.set_num_threads(threads)
    address = chunk_address(body)
    print(
        f"{threads} threads; Numba's layer thread-safe here: {native_layer()}; "
        f"launch starts OpenMP teams itself: {gomp_loaded}"
    )
    print(
        "| work per chunk us | serial us | launch us | prange us | pool us "
        "| serial / launch | serial / prange | serial / pool |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for us in (float(w) for w in args.work_us.split(",")):
        a, reps = np.zeros(threads), np.array([calibrate(us)])
        fns = {
            "serial": lambda a=a, reps=reps: body(0, threads, a, reps),
            "launch": lambda a=a, reps=reps: launch(address, threads, a, reps),
            "prange": lambda a=a, reps=reps: _launch_prange(address, threads, a, reps),
            "pool": lambda a=a, reps=reps: parallel_for(body, threads, a, reps),
        }
        t = {k: v * 1e6 for k, v in medians(interleaved(fns, rounds=args.rounds)).items()}
        print(
            f"| {us:g} | {t['serial']:.1f} | {t['launch']:.1f} | {t['prange']:.1f} "
            f"| {t['pool']:.1f} | {t['serial'] / t['launch']:.2f} "
            f"| {t['serial'] / t['prange']:.2f} | {t['serial'] / t['pool']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
