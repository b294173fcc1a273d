"""Run the chunks of a parallel loop on threads: the fallback where Numba has no thread-safe layer.

A kernel's parallel loop is compiled as a plain ``nogil`` Numba function over
an iteration range ``[lo, hi)``, cut into one contiguous chunk per thread (the
static schedule Numba's ``prange`` uses). Compiling that way costs what a
serial kernel costs: Numba's parfors passes over the whole nest took 5 to 8 s
more per parallel candidate, most of a tuning run's time.

Where OpenMP or TBB loads (:func:`native_layer`), the chunks are launched by a
``prange`` over the chunks alone (``launch.launch``): Numba's threads take
them without the GIL. Elsewhere ``parallel_for`` runs them on a pool of Python
threads, the calling thread taking the first. A worker needs the GIL to take
its chunk, and a thread blocked on the GIL wakes as slowly as a sleeping one,
so the pool gains little below a few hundred microseconds a call.

The pool's threads wait for work by polling, outside the GIL, for a few
milliseconds before they sleep, and the caller polls for their results the
same way: what OpenMP's runtime (behind ``prange``) does. With a plain
thread pool, whose idle threads sleep at once, waking the second core cost
every call: dense 128 x 768 x 3072 + relu on two threads took 5.3 ms against
4.7 ms for the same code launched from a ``prange`` (the machine's cores are
virtual; an idle one is handed back to the host).

A chunk no worker has taken when the caller is done with its own is run by
the caller: a worker that is slow to wake costs a serial call, not a wait
for the wake-up. On this machine waking a sleeping thread took about a
millisecond; with polls that ran out sooner than that (2^21 of them, 0.7 ms
here) a worker and a caller that had once slept kept making each other
sleep: a 0.2 ms product (64 x 196 x 384 + bias) took 0.9 to 1.0 ms a call
in blocks of 20 calls after a pause. Polls are counted in time now (see
:func:`spins_for`), and that product takes 0.2 ms a call from the second
call of a block.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

from .runtime import load_acquire

__all__ = ["chunks", "native_layer", "parallel_for"]

#: How long a worker polls for the next task, and a caller for the chunks workers took,
#: before blocking: longer than a sleeping thread takes to wake (about 1 ms here).
WORKER_POLL_S = 3e-3
CALLER_POLL_S = 20e-3


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


def spins_for(seconds: float) -> int:
    """Polls of ``cell[0]`` that take about ``seconds`` on this machine (measured once)."""
    global _POLLS_PER_S
    if _POLLS_PER_S is None:
        cell, n = np.zeros(1, np.int64), 1 << 18
        _spin_until_changed(cell, 0, 1)  # compiled (or loaded) before it is timed
        started = time.perf_counter()
        _spin_until_changed(cell, 0, n)
        _POLLS_PER_S = n / max(time.perf_counter() - started, 1e-6)
    return max(1, int(seconds * _POLLS_PER_S))


_POLLS_PER_S: float | None = None

#: One call's work: its generation, body, chunks, arguments, and the chunks not yet taken.
_Task = tuple[int, Callable[..., None], list[tuple[int, int]], tuple[Any, ...], list[int]]


class _Pool:
    """Worker threads that take chunks of the current task, then wait for the next.

    The caller runs the first chunk, then any chunk no worker has taken yet,
    then waits for the ones workers took. Chunks are taken by ``list.pop``,
    atomic under the GIL; ``done[i]`` is the generation chunk ``i`` last
    finished in, polled outside the GIL.
    """

    def __init__(self, workers: int, start: bool = True):
        self.workers = workers
        self.generation = np.zeros(1, np.int64)  # bumped for each task
        self.done = np.zeros(workers + 1, np.int64)
        self.task: _Task | None = None
        self.sleeping = 0  # workers blocked on ``wake``
        self.errors: list[BaseException] = []
        self.wake = threading.Condition()  # for workers that stopped polling
        self.finished = threading.Condition()  # for a caller that stopped polling
        self.lock = threading.Lock()  # one task at a time
        self.worker_spins = spins_for(WORKER_POLL_S)
        self.caller_spins = spins_for(CALLER_POLL_S)
        for w in range(workers if start else 0):  # not started: workers that never wake
            threading.Thread(target=self._work, name=f"tuner-kernel-{w}", daemon=True).start()

    def _work(self) -> None:
        seen = 0
        while True:
            if not _spin_until_changed(self.generation, seen, self.worker_spins):
                with self.wake:
                    self.sleeping += 1  # before the check: a caller that bumps after it notifies
                    while int(self.generation[0]) == seen:
                        self.wake.wait()
                    self.sleeping -= 1
            seen = int(self.generation[0])
            task = self.task  # set before the generation: this one's, or a newer one
            if task is not None and task[0] == seen:
                self._take(task)

    def _take(self, task: _Task) -> None:
        """Run chunks of ``task`` that nobody has taken, until none is left."""
        generation, body, parts, args, todo = task
        while True:
            try:
                i = todo.pop()
            except IndexError:
                return
            lo, hi = parts[i]
            try:
                body(lo, hi, *args)
            except BaseException as exc:  # handed to the caller, which re-raises it
                self.errors.append(exc)
            self.done[i] = generation
            if i:  # past the first: a caller that stopped polling may wait for it
                with self.finished:
                    self.finished.notify()

    def run(self, body: Callable[..., None], parts: list[tuple[int, int]], args: Any) -> None:
        with self.lock:
            g = int(self.generation[0]) + 1
            self.errors = []
            task: _Task = (g, body, parts, args, list(range(len(parts) - 1, 0, -1)))
            self.task = task
            self.generation[0] = g
            if self.sleeping:  # read after the bump (see _work)
                with self.wake:
                    self.wake.notify_all()
            error: BaseException | None = None
            try:
                body(parts[0][0], parts[0][1], *args)
            except BaseException as exc:
                error = exc
            self._take(task)  # what no worker has taken yet
            cells = self.done[1 : len(parts)]
            if not _spin_until_all(cells, g, self.caller_spins):
                with self.finished:
                    self.finished.wait_for(lambda: bool((cells == g).all()))
            self.task = None
            if error is not None:
                raise error
            if self.errors:
                raise self.errors[0]


_POOL: _Pool | None = None
_POOL_LOCK = threading.Lock()


def _pool(workers: int) -> _Pool:
    """The process's pool, grown (a new one) when more workers are wanted than it has."""
    global _POOL
    pool = _POOL  # the usual case, without the lock: a pool large enough exists
    if pool is not None and pool.workers >= workers:
        return pool
    with _POOL_LOCK:
        if _POOL is None or workers > _POOL.workers:
            _POOL = _Pool(workers)  # an outgrown pool's threads sleep on, unused
        return _POOL


def parallel_for(body: Callable[..., None], n: int, *args: Any) -> None:
    """``body(lo, hi, *args)`` over ``[0, n)``, one chunk per thread; returns when all are done."""
    parts = _chunks(n, numba.get_num_threads())
    if len(parts) == 1:
        body(0, n, *args)
        return
    _pool(len(parts) - 1).run(body, parts, args)


#: ``chunks`` for ``parallel_for``: a kernel's loop and thread count repeat call after call.
_chunks = functools.lru_cache(maxsize=1024)(chunks)


@functools.cache
def native_layer() -> bool:
    """Whether kernels launch their chunks on Numba's threading layer rather than this pool.

    True where a thread-safe layer loads (OpenMP or TBB) and the user has not
    asked Numba for another (``NUMBA_THREADING_LAYER``). Its threads wait outside
    the GIL: two chunks of a parallel loop cost about 3 us more than one call,
    against 25 us on this pool, whose workers need the GIL to take a chunk (a
    thread blocked on the GIL takes as long to wake as a sleeping one). On two
    cores the pool ran two 50 us chunks in 113 us, slower than one thread; the
    layer in 33 us.
    """
    from numba.core import config as numba_config

    layer = str(getattr(numba_config, "THREADING_LAYER", "default"))
    if layer not in ("default", "omp", "tbb", "threadsafe"):
        return False
    import importlib

    wanted = {"omp": ["omppool"], "tbb": ["tbbpool"]}.get(layer, ["tbbpool", "omppool"])
    for name in wanted:
        try:
            importlib.import_module(f"numba.np.ufunc.{name}")
        except (ImportError, OSError):
            continue
        return True
    return False
