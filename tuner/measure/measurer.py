"""The Measurer: a build pool and an isolated runner, each restarted when a candidate breaks it."""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from types import TracebackType
from typing import Any, TypeVar

from records import ErrorKind

from ._child import build_candidate, import_build_needs, init_build_worker, runner_main
from ._signals import sigterm_as_interrupt
from ._types import Candidate, MeasureOptions, MeasureResult, OnResult

_CTX = multiprocessing.get_context("spawn")

T = TypeVar("T")
R = TypeVar("R")

#: ``Measurer.map`` runs a shorter list in the calling process (a round trip costs more).
_MAP_AT_LEAST = 16


_TIMEOUT = object()

#: Seconds a fresh runner process may take to import what it needs.
_STARTUP_TIMEOUT = 120.0


class _Runner:
    """One runner process; killed and replaced when a candidate hangs or crashes it."""

    def __init__(self, threads: int, plugins: tuple[str, ...]):
        # A target that sets no thread count (a GPU's) drives its device from one host thread.
        self.threads = max(1, threads)
        self.plugins = plugins
        self.proc: Any = None
        self.conn: Any = None
        self._ready = False  # the process said "ready" (its imports are done)

    def start(self) -> None:
        """Start the process unless it runs; it imports in the background, ``run`` waits."""
        if self.proc is None or not self.proc.is_alive():
            self._start()

    def _start(self) -> None:
        self._ready = False
        parent, child = _CTX.Pipe()
        self.proc = _CTX.Process(
            target=runner_main,
            args=(child, self.threads, self.plugins, os.getpid()),
            daemon=True,
        )
        # BLAS reads its thread count when NumPy loads, which the runner does on
        # import: give it the target's count, so that the reference each candidate
        # is checked against does not spread over more cores than the candidates.
        with _environ({v: str(self.threads) for v in _BLAS_THREADS}):
            self.proc.start()
        child.close()
        self.conn = parent

    def _recv(self) -> Any:
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            return None

    def stop(self) -> None:
        if self.proc is not None:
            self.conn.close()
            self.proc.join(timeout=2)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join()
        self.proc = None

    def run(self, c: Candidate, opts: MeasureOptions, cut_above: float = 0.0) -> dict[str, Any]:
        """Run candidate ``c``: check it against its NumPy reference once, then time it
        (one sample only where that one is above ``cut_above`` seconds, when set)."""
        self.start()
        if not self._ready:
            # Starting Python and importing Numba takes seconds on a loaded machine:
            # it is not the candidate's time, so it gets its own, generous limit.
            if not self.conn.poll(_STARTUP_TIMEOUT) or self._recv() != "ready":
                self.stop()
                return {
                    "kind": ErrorKind.RUNTIME_ERROR.value,
                    "msg": f"the runner process did not start within {_STARTUP_TIMEOUT:g} s",
                }
            self._ready = True
        self.conn.send((c, opts, cut_above))
        # Loading the kernel and computing the reference may take as long as a build
        # on a loaded machine; the run timeout starts when the runner says "loaded".
        limit, reply = opts.build_timeout, self._wait(opts.build_timeout)
        if reply == "loaded":
            limit, reply = opts.run_timeout, self._wait(opts.run_timeout)
        if isinstance(reply, dict):
            if reply.pop("fresh", False):  # a GPU context the candidate broke: start afresh
                self.stop()
            return reply
        if reply is _TIMEOUT:
            self.proc.kill()
            self.stop()
            return {
                "kind": ErrorKind.RUN_TIMEOUT.value,
                "msg": f"no result within {limit:g} s",
            }
        code = self.proc.exitcode if self.proc is not None else None
        self.stop()
        return {
            "kind": ErrorKind.RUNTIME_ERROR.value,
            "msg": f"the runner process died (exit code {code})",
        }

    def _wait(self, seconds: float) -> Any:
        """The runner's next message; ``_TIMEOUT`` after ``seconds``, None if it died."""
        if not self.conn.poll(seconds):
            return _TIMEOUT
        return self._recv()


_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


@contextlib.contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    """Set the variables of ``values`` that are not set, for the duration (the tuner is serial)."""
    added = [k for k in values if k not in os.environ]
    os.environ.update({k: values[k] for k in added})
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def _workload(c: Candidate) -> str:
    return repr((c.op, sorted(c.args.items()), sorted(c.target.items())))


def _shares(samples: int, passes: int) -> list[int]:
    """``samples`` split over at most ``passes`` passes, larger shares first: 5, 3 -> 2, 2, 1."""
    passes = max(1, min(passes, samples))
    base, extra = divmod(samples, passes)
    return [base + (p < extra) for p in range(passes)]


class Measurer:
    """Builds candidates in parallel, then runs them one at a time.

    Used as a context manager, it handles SIGTERM as Ctrl-C (``Terminated``
    is raised, and its processes are stopped on the way out); its processes
    exit by themselves if the tuner is killed outright.
    """

    def __init__(self, options: MeasureOptions | None = None, threads: int = 1):
        self.options = options or MeasureOptions()
        self._runner = _Runner(threads, self.options.plugins)
        self._pool: ProcessPoolExecutor | None = None
        self._signals = contextlib.ExitStack()
        #: The fastest median timed per workload (and target), which slow candidates are cut at.
        self._fastest: dict[str, float] = {}

    def _get_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=self.options.jobs,
                mp_context=_CTX,
                initializer=init_build_worker,
                initargs=(self.options.plugins, os.getpid()),
            )
        return self._pool

    def start(self) -> None:
        """Start the runner and the build workers now, their imports in the background
        (seconds of Python and Numba loading each; a tune calls this before its own setup)."""
        self._runner.start()
        pool = self._get_pool()
        for _ in range(self.options.jobs):
            pool.submit(import_build_needs)

    def _drop_pool(self) -> None:
        """Kill the build workers and wait for the pool's manager thread to notice.

        Waiting matters even though the workers are gone: with ``wait=False``
        the manager thread may close its wake-up pipe while the interpreter's
        exit hook writes to it (a race in Python 3.11's ``concurrent.futures``,
        seen in CI as ``OSError: Bad file descriptor`` printed at a worker's exit).
        """
        if self._pool is not None:
            for proc in list(getattr(self._pool, "_processes", {}).values()):
                proc.kill()
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def measure(
        self, candidates: list[Candidate], on_result: OnResult | None = None
    ) -> list[MeasureResult]:
        """Measure every candidate; a failure is a result, never an exception.

        The whole batch is built first and run after, so that no compilation
        competes with a timed run for the cores. The timing samples are taken
        in ``options.passes`` passes over the batch: on a shared machine the
        load drifts over seconds, and with all of a candidate's samples taken
        in one burst, a quiet moment decided which config looked best (the
        winner of a matmul 512 tune ran 2.31 ms in its burst and 3.0 ms when
        timed again). The runner loads and checks a candidate in the first
        pass and keeps it loaded for the others (``_child.Workspace``); a
        candidate that fails is not run again, nor one whose first sample
        was ``options.cut_slower`` times the fastest yet (it keeps that sample).

        ``on_result(i, result)`` is called as soon as candidate ``i``'s result
        is final (its build or a run failed, it was cut, or its last pass ran),
        so that a caller can log it before the rest of the batch is done.
        """
        built = self._build_all(candidates)
        kinds = [ErrorKind(kind) for kind, _, _ in built]
        msgs = [msg for _, msg, _ in built]
        samples: list[list[float]] = [[] for _ in candidates]
        run_s = [0.0] * len(candidates)
        done = [k != ErrorKind.OK for k in kinds]  # failed, cut, or through its last pass

        def result(i: int) -> MeasureResult:
            ok = kinds[i] == ErrorKind.OK
            return MeasureResult(
                kinds[i], msgs[i], tuple(samples[i]) if ok else (), built[i][2], run_s[i]
            )

        def final(i: int) -> None:
            if on_result is not None:
                on_result(i, result(i))

        for i in range(len(candidates)):
            if done[i]:
                final(i)
        shares = _shares(self.options.samples, self.options.passes)
        for p, share in enumerate(shares):
            opts = dataclasses.replace(self.options, samples=share)
            for i, c in enumerate(candidates):
                if done[i]:
                    continue
                t0 = time.perf_counter()
                out = self._runner.run(c, opts, self._cut_above(c))
                run_s[i] += time.perf_counter() - t0
                kinds[i], msgs[i] = ErrorKind(out["kind"]), out.get("msg", "")
                samples[i] += out.get("samples", ())
                done[i] = kinds[i] != ErrorKind.OK or out.get("cut", False) or p == len(shares) - 1
                if kinds[i] == ErrorKind.OK and not out.get("cut", False):
                    self._timed(c, statistics.median(samples[i]))
                if done[i]:
                    final(i)
        return [result(i) for i in range(len(candidates))]

    def map(self, fn: Callable[[list[T]], list[R]], items: Sequence[T]) -> list[R]:
        """``fn(chunk)`` over ``items`` in the build workers, one chunk each; the results in
        order. For work between batches, while the workers idle (a search lowering the
        configs it ranks). ``fn`` is a module-level function; short lists, a single worker
        or a pool that breaks run it here."""
        items = list(items)
        jobs = self.options.jobs
        if jobs <= 1 or len(items) < _MAP_AT_LEAST:
            return fn(items)
        size = -(-len(items) // jobs)
        chunks = [items[i : i + size] for i in range(0, len(items), size)]
        try:
            futures = [self._get_pool().submit(fn, chunk) for chunk in chunks]
            return [r for fut in futures for r in fut.result()]
        except BrokenProcessPool:
            self._drop_pool()
            return fn(items)

    def _cut_above(self, c: Candidate) -> float:
        """Seconds above which ``c``'s first sample ends its timing (0: never, see ``cut_slower``)."""
        fastest = self._fastest.get(_workload(c))
        return self.options.cut_slower * fastest if fastest and self.options.cut_slower else 0.0

    def _timed(self, c: Candidate, seconds: float) -> None:
        key = _workload(c)
        self._fastest[key] = min(seconds, self._fastest.get(key, seconds))

    def _build_all(self, candidates: list[Candidate]) -> list[tuple[str, str, float]]:
        futures = self._submit(candidates)
        built: list[tuple[str, str, float]] = []
        for i in range(len(candidates)):
            outcome = self._wait_build(futures[i])
            if self._pool is None:  # a timeout or crash took the pool: rebuild the rest afresh
                futures[i + 1 :] = self._submit(candidates[i + 1 :])
            if outcome is None:
                timeout = self.options.build_timeout
                outcome = (
                    ErrorKind.COMPILE_TIMEOUT.value,
                    f"build exceeded {timeout:g} s",
                    timeout,
                )
            built.append(outcome)
        return built

    def _submit(self, candidates: list[Candidate]) -> list[Future[tuple[str, str, float]]]:
        try:
            pool = self._get_pool()
            return [pool.submit(build_candidate, c) for c in candidates]
        except BrokenProcessPool:  # broken while idle (a worker killed, or dead at start-up)
            self._drop_pool()
            pool = self._get_pool()
            return [pool.submit(build_candidate, c) for c in candidates]

    def _wait_build(self, fut: Future[tuple[str, str, float]]) -> tuple[str, str, float] | None:
        """The build's outcome, or None after a timeout (the pool is then replaced)."""
        try:
            return fut.result(timeout=self.options.build_timeout)
        except FutureTimeout:
            self._drop_pool()
            return None
        except BrokenProcessPool as exc:  # a build crashed its worker process
            self._drop_pool()
            return (ErrorKind.COMPILE_ERROR.value, f"the build worker died: {exc}", 0.0)

    def close(self) -> None:
        self._runner.stop()
        self._drop_pool()

    def __enter__(self) -> Measurer:
        self._signals.enter_context(sigterm_as_interrupt())
        return self

    def __exit__(
        self, *exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]
    ) -> None:
        try:
            self.close()
        finally:
            self._signals.close()
