"""Code that runs inside build workers and the runner process."""

from __future__ import annotations

import math
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


def import_build_needs() -> None:
    """Import what a build needs (Numba, the operators, the code generator): sent to each
    build worker when a tune starts, so that the imports overlap the tuner's own setup
    instead of delaying the first batch's builds."""
    import numba  # noqa: F401

    import search_spaces  # noqa: F401

    from ..codegen import build  # noqa: F401


def _leave_ctrl_c_to_the_tuner() -> None:
    """Ignore SIGINT: a terminal's Ctrl-C reaches the whole process group, and the
    tuner stops its children itself (each would otherwise print a traceback)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _import_plugins(plugins: tuple[str, ...]) -> None:
    import importlib

    for name in plugins:
        importlib.import_module(name)


def _kernel(c: Candidate):  # type: ignore[no-untyped-def]
    """``c``'s operator, tensors and kernel, through the kernel index (``codegen.index``): the
    build worker records the kernel it compiled, so the runner loads that module without
    lowering and rendering the schedule again (about 45 of the 50 ms a 3 x 3 convolution
    candidate took to load, Zen 4)."""
    import json

    from search_spaces import get_operator, is_builtin

    from ..codegen import build
    from ..codegen.index import indexed
    from ..lower.lower import lower
    from ..target import Target

    op, target = get_operator(c.op), Target.from_json(c.target)
    sched, tensors = op.schedule(op.space(c.args, target).validate(c.config), c.args, target)
    if not is_builtin(c.op):
        # A plugin's operator: the index's code fingerprint does not cover its compute, so a
        # changed definition with the same schedule trace would load the old kernel.
        return op, tensors, build(sched, tensors, target=target)
    identity = f"{json.dumps([c.op, c.args], sort_keys=True, default=str)}\n{sched.dumps()}"
    kernel = indexed(
        identity,
        lambda: build(sched, tensors, target=target),
        target,
        relower=lambda: lower(sched, tensors, "kernel", target=target),
    )
    return op, tensors, kernel


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


def _time(timer: Any, opts: MeasureOptions, cut_above: float = 0.0) -> list[float]:
    """Samples of one run's seconds: ``timer.run()`` warms up, ``timer.seconds(reps)`` times.

    Each sample is the mean of as many runs as fill ``min_sample_seconds``
    (``tuner.measure.timer``; between two CUDA events on a GPU, see
    ``tuner.codegen.Timer``). The block that settles the count is the first
    sample; where it is above ``cut_above`` seconds (when set), it is the only one.
    """
    global _last_timed
    for _ in range(opts.warmup):
        timer.run()
    _warm(timer, opts.warm_seconds, awake=time.perf_counter() - _last_timed < _AWAKE)
    reps, elapsed = reps_for(timer.seconds, opts.min_sample_seconds)
    samples = [elapsed / reps]
    if not 0 < cut_above < samples[0]:
        while len(samples) < opts.samples:
            samples.append(timer.seconds(reps) / reps)
    _last_timed = time.perf_counter()
    return samples


#: Seconds of one block of untimed runs while a kernel warms up (``_warm``).
_WARM_BLOCK = 0.004
#: Seconds a kernel warms up at least, in blocks (``_warm``).
_WARM_LEAST = 0.02
#: A block at most this much faster than the one before it is as fast as the kernel gets.
_SETTLED = 0.02
#: Seconds since the last timing within which the cores count as still awake (``_warm``).
_AWAKE = 0.005
#: When this process last finished timing a kernel (``time.perf_counter``).
_last_timed = -math.inf


def _warm(timer: Any, most: float, awake: bool = False) -> None:
    """Untimed blocks of runs: for ``_WARM_LEAST`` seconds, then until one is no faster than
    the one before, for ``most`` seconds in all; with ``awake`` (another kernel was timed
    just before: the threads and cores have not idled) only until one is no faster.

    A runner's threads (and the cores under them) idle while it waits for the
    next candidate, and a kernel runs slower until they are awake: a
    2-thread matmul 512 ran 2.7 ms timed straight away where a user's loop
    saw 2.0 (Zen 4). On Zen 5 that lasted the first call (1.3 ms after half
    a second idle, 1.07 from the second call). A fixed 0.1 s of warm-up per
    candidate and pass was most of a tune's measuring time; the warm-up now
    watches the speed instead, in blocks of at least ``_WARM_BLOCK`` seconds,
    after a first stretch long enough for a wake-up that takes its time. The later passes
    over a batch time its kernels back to back, each straight after the one before: that
    stretch, 20 ms in each of three passes, was a tenth of a 3 x 3 convolution candidate's
    cost (0.59 s, Zen 4), for cores already awake.
    """
    if most <= 0:
        return
    least = 0.0 if awake else _WARM_LEAST
    t0 = time.perf_counter()
    reps, before = reps_for(timer.seconds, _WARM_BLOCK)
    spent = before  # the seconds of the runs, as the timer counts them (a GPU's: its events)
    while spent < most and time.perf_counter() - t0 < most:
        now = timer.seconds(reps)
        spent += now
        if now >= before * (1 - _SETTLED) and spent >= least:
            return
        before = now


#: Kernels a runner keeps loaded (and checked) at most: a batch's, timed again in each pass.
_KEPT_KERNELS = 128


class Workspace:
    """What the runner keeps from one candidate to the next of the same workload.

    The workload's inputs, its reference output and one output array, made
    once; and each candidate's loaded kernel and its timer, checked against
    the reference the first time it ran, so that the later passes over a
    batch (``Measurer.measure``) time it without loading (a schedule lowered
    and a cached module imported again) or checking it afresh.
    """

    def __init__(self) -> None:
        self.workload: str | None = None
        self.inputs: tuple[Any, ...] = ()
        self.expected: Any = None
        self.out: Any = None
        self.timers: dict[str, Any] = {}

    def arrays(self, op: Any, c: Candidate, tensors: Any) -> None:
        """Make ``c``'s workload's arrays, unless they are this workload's already."""
        key = repr((c.op, sorted(c.args.items())))
        if key == self.workload:
            return
        import numpy as np

        from ..target import Target

        self.workload, self.timers = None, {}  # keep one workload's arrays at a time
        self.inputs = tuple(op.make_inputs(c.args, target=Target.from_json(c.target)))
        self.expected = op.reference(*self.inputs, **c.args)
        self.out = np.zeros(tensors[-1].shape_ints, tensors[-1].dtype)
        self.workload = key
        # The reference may have run on OpenBLAS's threads, which spin for about 0.1 s
        # after a call and take cores from the kernel timed next (see interleave).
        time.sleep(REST_SECONDS)

    def keep(self, key: str, timer: Any) -> None:
        if len(self.timers) >= _KEPT_KERNELS:
            del self.timers[next(iter(self.timers))]
        self.timers[key] = timer


def _candidate_key(c: Candidate) -> str:
    return repr((c.op, sorted(c.args.items()), sorted(c.config.items()), sorted(c.target.items())))


def matches(out: Any, expected: Any, rtol: float, atol: float) -> bool:
    """Whether a candidate's ``out`` is the reference's ``expected``, to the tolerances.

    ``atol`` is relative to the output's scale (its largest magnitude): a
    softmax over 4096 columns has entries near 2e-4, and with an absolute
    1e-3 an output of zeros would have passed. An 8-bit output is a quantized one: it
    matches within one quantization step (a float rounding on either side of a step's
    boundary, an FMA's or a reordered sum's, moves a value by one).
    """
    import numpy as np

    if out.dtype in (np.int8, np.uint8):
        diff = np.abs(out.astype(np.int32) - expected.astype(np.int32))
        return out.shape == expected.shape and bool(diff.max(initial=0) <= 1)

    scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    scale = scale if np.isfinite(scale) and scale > 0 else 1.0
    return bool(np.allclose(out, expected, rtol=rtol, atol=atol * scale, equal_nan=False))


def run_candidate(
    c: Candidate,
    opts: MeasureOptions,
    ws: Workspace,
    loaded: Callable[[], None] = lambda: None,
    cut_above: float = 0.0,
) -> dict[str, Any]:
    """Load and check ``c`` once against NumPy, then time it (inside the runner).

    ``loaded`` is called once the kernel and the reference are ready, before
    the kernel first runs: the run timeout covers what comes after. A first
    sample above ``cut_above`` seconds (when set) ends the timing there: the
    reply says ``cut``, and has that one sample.
    """
    import numpy as np

    from ..codegen import LaunchError

    t0 = time.perf_counter()
    key = _candidate_key(c)
    timer = ws.timers.get(key)
    if timer is None:
        try:
            op, tensors, kern = _kernel(c)
        except Exception as exc:
            return {"kind": ErrorKind.COMPILE_ERROR.value, "msg": _short(exc)}
        ws.arrays(op, c, tensors)
    loaded()
    try:
        if timer is None:
            # On a GPU the inputs go to the device once; every run below reuses them.
            timer = kern.timer(*ws.inputs, ws.out)
            timer.run()
            timer.fetch()
            if not matches(ws.out, ws.expected, opts.rtol, opts.atol):
                diff = np.abs(ws.out.astype(np.float64) - ws.expected)
                return {
                    "kind": ErrorKind.WRONG_ANSWER.value,
                    "msg": f"max abs error {float(np.nanmax(diff)):.3g}",
                }
            ws.keep(key, timer)
        samples = _time(timer, opts, cut_above)
    except LaunchError as exc:
        # A failed launch may leave the process's CUDA context unusable (an illegal address
        # is sticky): the runner reports it, then exits, and the next candidate gets a new one.
        return {"kind": ErrorKind.RUNTIME_ERROR.value, "msg": _short(exc), "fresh": True}
    except Exception as exc:
        return {"kind": ErrorKind.RUNTIME_ERROR.value, "msg": _short(exc)}
    reply = {"kind": ErrorKind.OK.value, "samples": samples, "seconds": time.perf_counter() - t0}
    if cut_above > 0 and len(samples) < opts.samples:
        reply["cut"] = True
    return reply


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
    import_build_needs()
    try:
        conn.send("ready")
        _serve(conn)
    except _PIPE_GONE:
        return  # nobody is listening: nothing to report


def _serve(conn: Connection) -> None:
    ws = Workspace()
    while True:
        c, opts, cut_above = conn.recv()
        try:
            reply = run_candidate(c, opts, ws, lambda: conn.send("loaded"), cut_above)
            conn.send(reply)
            if reply.get("fresh"):
                return  # the tuner starts another runner for the next candidate
        except _PIPE_GONE:
            raise
        except Exception:
            conn.send({"kind": ErrorKind.RUNTIME_ERROR.value, "msg": traceback.format_exc(limit=1)})
