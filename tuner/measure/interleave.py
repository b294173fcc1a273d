"""Timing several functions against each other in one process, interleaved in rounds.

What ``tuner build`` and the benchmarks use to put a tuned kernel beside its
peers (NumPy, PyTorch). On a shared machine the load drifts over seconds, so
each round times every function once, in a rotating order, and each one's
figure is the median of its rounds. A block holds as many calls as last
``min_sample`` seconds (``tuner.measure.timer``). Before each timed block:

- a rest (``REST_SECONDS``): OpenBLAS's and OpenMP's worker threads spin for
  about 0.1 s after a call and took the second core from whatever ran next
  (a 2-thread matmul 512 went from 2.7 to 5.9 ms right after NumPy's calls);
- a warm-up (``WARM_SECONDS``) of untimed calls: after a rest, a 2-thread
  kernel ran at about one-thread speed for 0.2 s (softmax 4096 x 1024: calls
  of 7.8 ms, then 5.2 ms from then on), while a one-thread peer such as a
  NumPy ufunc did not slow down. Timing straight after the rest measured the
  second core waking up, against the threaded kernels only.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from .timer import loop_seconds, reps_for

__all__ = ["REST_SECONDS", "WARM_SECONDS", "calls_per_sample", "interleaved", "medians"]

REST_SECONDS = 0.25
WARM_SECONDS = 0.2


def calls_per_sample(fn: Callable[[], object], min_sample: float) -> int:
    """How many back-to-back calls of ``fn`` last at least ``min_sample`` seconds."""
    return reps_for(loop_seconds(fn), min_sample)[0]


def _warm(fn: Callable[[], object], seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        fn()


def interleaved(
    fns: dict[str, Callable[[], object]],
    rounds: int,
    min_sample: float = 0.05,
    rest: float = REST_SECONDS,
    warm: float = WARM_SECONDS,
) -> dict[str, list[float]]:
    """Seconds per call of each function, one sample per round (rounds rotate the order)."""
    seconds = {name: loop_seconds(fn) for name, fn in fns.items()}
    reps = {name: reps_for(s, min_sample)[0] for name, s in seconds.items()}
    names = list(fns)
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            n = reps[name]
            time.sleep(rest)
            _warm(fns[name], warm)
            samples[name].append(seconds[name](n) / n)
    return samples


def medians(samples: dict[str, list[float]]) -> dict[str, float]:
    return {k: statistics.median(v) for k, v in samples.items()}
