"""Run the chunks of a parallel loop on threads: what generated kernels call instead of ``prange``.

A kernel's parallel loop is compiled as a plain ``nogil`` Numba function over
an iteration range ``[lo, hi)``; ``parallel_for`` cuts the loop into one
contiguous chunk per thread (the static schedule Numba's ``prange`` uses) and
runs them on a pool of Python threads, the calling thread taking the first.
Compiling that way costs what a serial kernel costs: Numba's parfors passes
took 5 to 8 s more per parallel candidate, most of a tuning run's time.

The thread count is Numba's (``numba.set_num_threads``, ``NUMBA_NUM_THREADS``),
so the same knobs govern both ways of running a parallel loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numba

__all__ = ["chunks", "parallel_for"]

_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = 0
_POOL_LOCK = threading.Lock()


def chunks(n: int, parts: int) -> list[tuple[int, int]]:
    """``[0, n)`` cut into ``min(parts, n)`` contiguous ranges whose sizes differ by at most one."""
    parts = max(1, min(parts, n))
    base, extra = divmod(n, parts)
    out, lo = [], 0
    for p in range(parts):
        hi = lo + base + (p < extra)
        out.append((lo, hi))
        lo = hi
    return out


def _pool(workers: int) -> ThreadPoolExecutor:
    global _POOL, _POOL_SIZE
    with _POOL_LOCK:
        if _POOL is None or workers > _POOL_SIZE:
            if _POOL is not None:
                _POOL.shutdown(wait=False)
            _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tuner-kernel")
            _POOL_SIZE = workers
        return _POOL


def parallel_for(body: Callable[..., None], n: int, *args: Any) -> None:
    """``body(lo, hi, *args)`` over ``[0, n)``, one chunk per thread; returns when all are done."""
    parts = chunks(n, numba.get_num_threads())
    if len(parts) == 1:
        body(0, n, *args)
        return
    pool = _pool(len(parts) - 1)
    futures: list[Future[None]] = [pool.submit(body, lo, hi, *args) for lo, hi in parts[1:]]
    lo, hi = parts[0]
    body(lo, hi, *args)
    for f in futures:
        f.result()
