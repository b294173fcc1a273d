"""How many calls one timing sample takes: the one loop that the runner and the benchmarks share.

A call of microseconds is timed over many calls, so that the clock's
resolution and the timing's own overhead are small beside the sample. The
loop times a block of calls, scales the count up until one block lasts at
least ``min_sample`` seconds, and stops at ``MAX_REPS``. It takes a
``seconds(reps)`` callable: ``loop_seconds(fn)`` for a plain Python
function, a kernel timer's ``seconds`` (two CUDA events on a GPU, see
``tuner.codegen.Timer``) for a launch.

>>> reps, elapsed = reps_for(loop_seconds(lambda: sum(range(100))), min_sample=0.01)
>>> elapsed >= 0.01 or reps == MAX_REPS
True
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["MAX_REPS", "loop_seconds", "reps_for"]

#: The most calls in one sample. A Python call or a kernel launch takes far
#: more than ``min_sample / MAX_REPS`` (50 ns at 0.05 s), so the cap only stops
#: a clock that reads no time at all from asking for ever more calls.
MAX_REPS = 1 << 20


def loop_seconds(fn: Callable[[], object]) -> Callable[[int], float]:
    """``seconds(reps)`` for a plain function: ``reps`` calls timed by ``time.perf_counter``."""

    def seconds(reps: int) -> float:
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return time.perf_counter() - t0

    return seconds


def reps_for(seconds: Callable[[int], float], min_sample: float) -> tuple[int, float]:
    """Calls per sample so that a sample lasts ``min_sample`` seconds, and that sample's seconds.

    The seconds of the last block are returned so that a caller can keep
    them as its first sample rather than time the same block again.
    """
    reps = 1
    while True:
        elapsed = seconds(reps)
        if elapsed >= min_sample or reps >= MAX_REPS:
            return reps, elapsed
        scaled = int(reps * min_sample / max(elapsed, 1e-9)) + 1
        reps = min(MAX_REPS, max(2 * reps, scaled))
