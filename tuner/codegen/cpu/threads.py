"""Run the chunks of a parallel loop on threads: what generated kernels call instead of ``prange``.

A kernel's parallel loop is compiled as a plain ``nogil`` Numba function over
an iteration range ``[lo, hi)``; ``parallel_for`` cuts the loop into one
contiguous chunk per thread (the static schedule Numba's ``prange`` uses) and
runs them on a pool of Python threads, the calling thread taking the first.
Compiling that way costs what a serial kernel costs: Numba's parfors passes
took 5 to 8 s more per parallel candidate, most of a tuning run's time.

The pool's threads wait for work by polling, outside the GIL, for about a
millisecond before they sleep, and the caller polls for their results the
same way: what OpenMP's runtime (behind ``prange``) does. With a plain
thread pool, whose idle threads sleep at once, waking the second core cost
every call: dense 128 x 768 x 3072 + relu on two threads took 5.3 ms against
4.7 ms for the same code launched from a ``prange`` (the machine's cores are
virtual; an idle one is handed back to the host).

The thread count is Numba's (``numba.set_num_threads``, ``NUMBA_NUM_THREADS``),
so the same knobs govern both ways of running a parallel loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

from .runtime import load_acquire

__all__ = ["chunks", "parallel_for"]

#: Polls (atomic loads) before a waiting thread blocks: 1.4 ms here.
SPINS = 1 << 21


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


@numba.njit(nogil=True, cache=True)
def _spin_until_changed(
    cell: np.ndarray, old: int, spins: int
) -> bool:  # pragma: no cover - jitted
    """Poll ``cell[0]`` until it differs from ``old``; False after ``spins`` polls."""
    for _ in range(spins):  # noqa: SIM110 - a loop Numba compiles, not a generator
        if load_acquire(cell, 0) != old:  # type: ignore[call-arg]
            return True
    return False


@numba.njit(nogil=True, cache=True)
def _spin_until_all(cells: np.ndarray, value: int, spins: int) -> bool:  # pragma: no cover - jitted
    """Poll until every ``cells[i]`` equals ``value``; False after ``spins`` polls."""
    i = 0
    for _ in range(spins):
        while i < cells.size and load_acquire(cells, i) == value:  # type: ignore[call-arg]
            i += 1
        if i == cells.size:
            return True
    return False


class _Pool:
    """Worker threads that run one chunk each of the current task, then wait for the next."""

    def __init__(self, workers: int):
        self.workers = workers
        self.generation = np.zeros(1, np.int64)  # bumped for each task
        self.finished = np.zeros(workers, np.int64)  # the generation each worker last finished
        self.task: tuple[Callable[..., None], list[tuple[int, int]], tuple[Any, ...]] | None = None
        self.errors: list[BaseException | None] = [None] * workers
        self.wake = threading.Condition()  # for workers that stopped polling
        self.done = threading.Condition()  # for a caller that stopped polling
        self.lock = threading.Lock()  # one task at a time
        for w in range(workers):
            threading.Thread(
                target=self._work, args=(w,), name=f"tuner-kernel-{w}", daemon=True
            ).start()

    def _work(self, w: int) -> None:
        seen = 0
        while True:
            if not _spin_until_changed(self.generation, seen, SPINS):
                with self.wake:
                    while int(self.generation[0]) == seen:
                        self.wake.wait()
            seen = int(self.generation[0])
            assert self.task is not None
            body, parts, args = self.task
            if w + 1 < len(parts):
                lo, hi = parts[w + 1]
                try:
                    body(lo, hi, *args)
                except BaseException as exc:  # handed to the caller, which re-raises it
                    self.errors[w] = exc
            with self.done:
                self.finished[w] = seen
                self.done.notify()

    def run(self, body: Callable[..., None], parts: list[tuple[int, int]], args: Any) -> None:
        with self.lock:
            self.task = (body, parts, args)
            with self.wake:
                self.generation[0] += 1
                self.wake.notify_all()
            g = int(self.generation[0])
            error: BaseException | None = None
            try:
                body(parts[0][0], parts[0][1], *args)
            except BaseException as exc:
                error = exc
            if not _spin_until_all(self.finished, g, SPINS):
                with self.done:
                    self.done.wait_for(lambda: bool((self.finished == g).all()))
            errors = [e for e in self.errors if e is not None]
            self.errors = [None] * self.workers
            self.task = None
            if error is not None:
                raise error
            if errors:
                raise errors[0]


_POOL: _Pool | None = None
_POOL_LOCK = threading.Lock()


def _pool(workers: int) -> _Pool:
    """The process's pool, grown (a new one) when more workers are wanted than it has."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or workers > _POOL.workers:
            _POOL = _Pool(workers)  # an outgrown pool's threads sleep on, unused
        return _POOL


def parallel_for(body: Callable[..., None], n: int, *args: Any) -> None:
    """``body(lo, hi, *args)`` over ``[0, n)``, one chunk per thread; returns when all are done."""
    parts = chunks(n, numba.get_num_threads())
    if len(parts) == 1:
        body(0, n, *args)
        return
    _pool(len(parts) - 1).run(body, parts, args)
