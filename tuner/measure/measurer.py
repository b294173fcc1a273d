"""The Measurer: a build pool and an isolated runner, each restarted when a candidate breaks it."""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from types import TracebackType
from typing import Any

from records import ErrorKind

from ._child import build_candidate, init_build_worker, runner_main
from ._types import Candidate, MeasureOptions, MeasureResult

_CTX = multiprocessing.get_context("spawn")


_TIMEOUT = object()

#: Seconds a fresh runner process may take to import what it needs.
_STARTUP_TIMEOUT = 120.0


class _Runner:
    """One runner process; killed and replaced when a candidate hangs or crashes it."""

    def __init__(self, threads: int, plugins: tuple[str, ...]):
        self.threads = threads
        self.plugins = plugins
        self.proc: Any = None
        self.conn: Any = None

    def _start(self) -> None:
        parent, child = _CTX.Pipe()
        self.proc = _CTX.Process(
            target=runner_main, args=(child, self.threads, self.plugins), daemon=True
        )
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

    def run(self, c: Candidate, opts: MeasureOptions) -> dict[str, Any]:
        if self.proc is None or not self.proc.is_alive():
            self._start()
            # Starting Python and importing Numba takes seconds on a loaded machine:
            # it is not the candidate's time, so it gets its own, generous limit.
            if not self.conn.poll(_STARTUP_TIMEOUT) or self._recv() != "ready":
                self.stop()
                return {
                    "kind": ErrorKind.RUNTIME_ERROR.value,
                    "msg": f"the runner process did not start within {_STARTUP_TIMEOUT:g} s",
                }
        self.conn.send((c, opts))
        # Loading the kernel and computing the reference may take as long as a build
        # on a loaded machine; the run timeout starts when the runner says "loaded".
        limit, reply = opts.build_timeout, self._wait(opts.build_timeout)
        if reply == "loaded":
            limit, reply = opts.run_timeout, self._wait(opts.run_timeout)
        if isinstance(reply, dict):
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


class Measurer:
    """Builds candidates in parallel, then runs them one at a time."""

    def __init__(self, options: MeasureOptions | None = None, threads: int = 1):
        self.options = options or MeasureOptions()
        self._runner = _Runner(threads, self.options.plugins)
        self._pool: ProcessPoolExecutor | None = None

    def _get_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=self.options.jobs,
                mp_context=_CTX,
                initializer=init_build_worker,
                initargs=(self.options.plugins,),
            )
        return self._pool

    def _drop_pool(self) -> None:
        if self._pool is not None:
            for proc in list(getattr(self._pool, "_processes", {}).values()):
                proc.kill()
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def measure(self, candidates: list[Candidate]) -> list[MeasureResult]:
        """Measure every candidate; a failure is a result, never an exception.

        The whole batch is built first and run after, so that no compilation
        competes with a timed run for the cores.
        """
        return [
            self._run(c, built)
            for c, built in zip(candidates, self._build_all(candidates), strict=True)
        ]

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

    def _run(self, c: Candidate, built: tuple[str, str, float]) -> MeasureResult:
        kind, msg, build_s = built
        if kind != ErrorKind.OK.value:
            return MeasureResult(ErrorKind(kind), msg, build_seconds=build_s)
        t0 = time.perf_counter()
        out = self._runner.run(c, self.options)
        return MeasureResult(
            ErrorKind(out["kind"]),
            out.get("msg", ""),
            tuple(out.get("samples", ())),
            build_s,
            time.perf_counter() - t0,
        )

    def _submit(self, candidates: list[Candidate]) -> list[Future[tuple[str, str, float]]]:
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
        return self

    def __exit__(
        self, *exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]
    ) -> None:
        self.close()
