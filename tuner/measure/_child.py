"""Code that runs inside build workers and the runner process."""

from __future__ import annotations

import os
import signal
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from records import ErrorKind

from ._signals import exit_with_parent
from ._types import Candidate, MeasureOptions
from .interleave import REST_SECONDS
from .timer import loop_seconds, reps_for


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return text[0][:500] if text else type(exc).__name__


def init_build_worker(plugins: tuple[str, ...] = (), parent: int | None = None) -> None:
    """Builds run side by side: one Numba thread each, or they oversubscribe the cores.

    A worker exits when the tuner that started it (``parent``) is gone.
    """
    _leave_ctrl_c_to_the_tuner()
    if parent is not None:
        exit_with_parent(parent)
    os.environ["NUMBA_NUM_THREADS"] = "1"
    _import_plugins(plugins)


def _leave_ctrl_c_to_the_tuner() -> None:
    """Ignore SIGINT: a terminal's Ctrl-C reaches the whole process group, and the
    tuner stops its children itself (each would otherwise print a traceback)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _import_plugins(plugins: tuple[str, ...]) -> None:
    import importlib

    for name in plugins:
        importlib.import_module(name)


def _kernel(c: Candidate):  # type: ignore[no-untyped-def]
    from search_spaces import get_operator

    from ..codegen import build
    from ..target import Target

    op, target = get_operator(c.op), Target.from_json(c.target)
    sched, tensors = op.schedule(op.space(c.args, target).validate(c.config), c.args, target)
    return op, tensors, build(sched, tensors, target=target)


def build_candidate(c: Candidate) -> tuple[str, str, float]:
    """Compile into the disk cache; returns (error kind, message, seconds)."""
    from ..schedule import ScheduleError
    from ..space import ConfigError

    t0 = time.perf_counter()
    try:
        _kernel(c)
    except (ScheduleError, ConfigError) as exc:
        return ErrorKind.SCHEDULE_ERROR.value, _short(exc), time.perf_counter() - t0
    except Exception as exc:
        return ErrorKind.COMPILE_ERROR.value, _short(exc), time.perf_counter() - t0
    return ErrorKind.OK.value, "", time.perf_counter() - t0


class _Calls:
    """A plain function timed like a kernel (the NumPy baseline, ``tuner.measure.baseline``)."""

    def __init__(self, fn: Callable[[], Any]):
        self.fn = fn
        self.seconds = loop_seconds(fn)

    def run(self) -> None:
        self.fn()


def _time(timer: Any, opts: MeasureOptions) -> list[float]:
    """Samples of one run's seconds: ``timer.run()`` warms up, ``timer.seconds(reps)`` times.

    Each sample is the mean of as many runs as fill ``min_sample_seconds``
    (``tuner.measure.timer``; between two CUDA events on a GPU, see
    ``tuner.codegen.Timer``). The block that settles the count is the first sample.
    """
    for _ in range(opts.warmup):
        timer.run()
    if opts.warm_seconds > 0:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < opts.warm_seconds:
            timer.seconds(1)
    reps, elapsed = reps_for(timer.seconds, opts.min_sample_seconds)
    samples = [elapsed / reps]
    while len(samples) < opts.samples:
        samples.append(timer.seconds(reps) / reps)
    return samples


def _workload_arrays(op: Any, c: Candidate, refs: dict[str, Any]) -> tuple[Any, Any]:
    """The inputs of ``c``'s workload and the reference output, made once per workload."""
    key = repr((c.op, sorted(c.args.items())))
    if key not in refs:
        from ..target import Target

        inputs = op.make_inputs(c.args, target=Target.from_json(c.target))
        refs.clear()  # keep one workload's arrays at a time
        refs[key] = (inputs, op.reference(*inputs, **c.args))
        # The reference may have run on OpenBLAS's threads, which spin for about 0.1 s
        # after a call and take cores from the kernel timed next (see interleave).
        time.sleep(REST_SECONDS)
    return refs[key]


def matches(out: Any, expected: Any, rtol: float, atol: float) -> bool:
    """Whether a candidate's ``out`` is the reference's ``expected``, to the tolerances.

    ``atol`` is relative to the output's scale (its largest magnitude): a
    softmax over 4096 columns has entries near 2e-4, and with an absolute
    1e-3 an output of zeros would have passed.
    """
    import numpy as np

    scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    scale = scale if np.isfinite(scale) and scale > 0 else 1.0
    return bool(np.allclose(out, expected, rtol=rtol, atol=atol * scale, equal_nan=False))


def run_candidate(
    c: Candidate,
    opts: MeasureOptions,
    refs: dict[str, Any],
    loaded: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """Load, check once against NumPy, and time one candidate (inside the runner).

    ``loaded`` is called once the kernel and the reference are ready, before
    the kernel first runs: the run timeout covers what comes after.
    """
    import numpy as np

    from ..codegen import LaunchError

    t0 = time.perf_counter()
    try:
        op, tensors, kern = _kernel(c)
    except Exception as exc:
        return {"kind": ErrorKind.COMPILE_ERROR.value, "msg": _short(exc)}
    inputs, expected = _workload_arrays(op, c, refs)
    out = np.zeros(tensors[-1].shape_ints, tensors[-1].dtype)
    loaded()
    try:
        # On a GPU the inputs go to the device once; every run below reuses them.
        timer = kern.timer(*inputs, out)
        timer.run()
        timer.fetch()
        if not matches(out, expected, opts.rtol, opts.atol):
            err = float(np.nanmax(np.abs(out.astype(np.float64) - expected)))
            return {"kind": ErrorKind.WRONG_ANSWER.value, "msg": f"max abs error {err:.3g}"}
        samples = _time(timer, opts)
    except LaunchError as exc:
        # A failed launch may leave the process's CUDA context unusable (an illegal address
        # is sticky): the runner reports it, then exits, and the next candidate gets a new one.
        return {"kind": ErrorKind.RUNTIME_ERROR.value, "msg": _short(exc), "fresh": True}
    except Exception as exc:
        return {"kind": ErrorKind.RUNTIME_ERROR.value, "msg": _short(exc)}
    return {"kind": ErrorKind.OK.value, "samples": samples, "seconds": time.perf_counter() - t0}


# What a closed pipe raises: the tuner stopped, or gave up on this runner.
_PIPE_GONE = (EOFError, BrokenPipeError, ConnectionResetError)


def runner_main(
    conn: Connection, threads: int, plugins: tuple[str, ...] = (), parent: int | None = None
) -> None:
    """The runner loop: one candidate at a time, until the pipe closes or the tuner is gone."""
    _leave_ctrl_c_to_the_tuner()
    if parent is not None:
        exit_with_parent(parent)
    os.environ["NUMBA_NUM_THREADS"] = str(threads)
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    _import_plugins(plugins)
    # Import what every candidate needs before saying so: the run timeout starts after.
    import numba  # noqa: F401

    import search_spaces  # noqa: F401

    from ..codegen import build  # noqa: F401

    try:
        conn.send("ready")
        _serve(conn)
    except _PIPE_GONE:
        return  # nobody is listening: nothing to report


def _serve(conn: Connection) -> None:
    refs: dict[str, Any] = {}
    while True:
        c, opts = conn.recv()
        try:
            reply = run_candidate(c, opts, refs, loaded=lambda: conn.send("loaded"))
            conn.send(reply)
            if reply.get("fresh"):
                return  # the tuner starts another runner for the next candidate
        except _PIPE_GONE:
            raise
        except Exception:
            conn.send({"kind": ErrorKind.RUNTIME_ERROR.value, "msg": traceback.format_exc(limit=1)})
