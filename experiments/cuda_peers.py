"""The GPU benchmark's peers (CuPy and PyTorch CUDA): their formulations and their timers.

``experiments/bench_cuda.py`` builds and times the tuned kernels; this module
gives it each peer's side of a workload (set up on the device, a launch and
its output) and the event timers that time peers and ours alike, in rounds
of rotating order after a rest.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tuner.measure.timer import reps_for as timer_reps_for

__all__ = [
    "CupyTimer",
    "EventTimer",
    "TorchTimer",
    "cupy_formulation",
    "cupy_side",
    "first_line",
    "interleaved",
    "load_peers",
    "reps_for",
    "torch_formulation",
    "torch_side",
]


def first_line(exc: BaseException) -> str:
    """An exception's first line (at most 200 characters), for a one-line message."""
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


# -- timers: run once (and wait), or seconds for reps launches between two events ------------


class EventTimer:
    """A peer's launch timed between two CUDA events of its own library."""

    def __init__(
        self, launch: Callable[[], Any], event: Callable[[], Any], sync: Callable[[], Any]
    ):
        self.launch, self.event, self.sync = launch, event, sync

    def run(self) -> None:
        self.launch()
        self.sync()

    def seconds(self, reps: int) -> float:
        start, stop = self.event(), self.event()
        start.record()
        for _ in range(reps):
            self.launch()
        stop.record()
        stop.synchronize()
        return self.elapsed_ms(start, stop) / 1e3

    def elapsed_ms(self, start: Any, stop: Any) -> float:
        raise NotImplementedError


class CupyTimer(EventTimer):
    def __init__(self, cp: Any, launch: Callable[[], Any]):
        super().__init__(launch, cp.cuda.Event, cp.cuda.Device().synchronize)
        self.cp = cp

    def elapsed_ms(self, start: Any, stop: Any) -> float:
        return float(self.cp.cuda.get_elapsed_time(start, stop))


class TorchTimer(EventTimer):
    def __init__(self, torch: Any, launch: Callable[[], Any]):
        super().__init__(
            launch, lambda: torch.cuda.Event(enable_timing=True), torch.cuda.synchronize
        )

    def elapsed_ms(self, start: Any, stop: Any) -> float:
        return float(start.elapsed_time(stop))


def reps_for(timer: Any, min_sample: float) -> int:
    """Launches per sample so that a sample lasts at least ``min_sample`` seconds.

    The runner's count (``tuner.measure.timer``), so peers and ours are timed alike.
    """
    return timer_reps_for(timer.seconds, min_sample)[0]


def interleaved(
    timers: dict[str, Any], rounds: int, samples: int, min_sample: float, rest: float
) -> dict[str, tuple[list[float], int]]:
    """Seconds per launch of each side: ``samples`` a round, rounds in rotating order."""
    names = list(timers)
    for t in timers.values():  # warm-up: first launches load modules and pick algorithms
        t.run()
    reps = {k: reps_for(t, min_sample) for k, t in timers.items()}
    out: dict[str, list[float]] = {k: [] for k in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            t, n = timers[name], reps[name]
            time.sleep(rest)
            t.seconds(max(1, n // 4))  # untimed: the clocks back up after the rest
            out[name] += [t.seconds(n) / n for _ in range(samples)]
    return {k: (v, reps[k]) for k, v in out.items()}


# -- the peers: set up on the device, checked, then timed ------------------------------------


def load_peers() -> dict[str, Any]:
    """The peer libraries that can run on this GPU; one line for each that cannot."""
    found: dict[str, Any] = {}
    os.environ["CUPY_TF32"] = "0"  # read when CuPy is imported: cuBLAS in float32, as we compute
    try:
        import cupy as cp

        if cp.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("it sees no GPU")
        found["cupy"] = cp
    except ImportError:
        print("peer CuPy: skipped (cupy is not installed)")
    except Exception as exc:  # a CuPy without a usable device raises its own errors
        print(f"peer CuPy: skipped ({type(exc).__name__}: {first_line(exc)})")
    try:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError(f"torch {torch.__version__} has no CUDA device")
        _float32_only(torch)
        found["torch"] = torch
    except ImportError:
        print("peer PyTorch: skipped (torch is not installed)")
    except Exception as exc:
        print(f"peer PyTorch: skipped ({first_line(exc)})")
    return found


def _float32_only(torch: Any) -> None:
    """No TF32 in matmul or convolution: every side computes in float32. cuDNN may autotune.

    PyTorch 2.9 and later say it with ``fp32_precision`` (and warn at the old flags).
    """
    matmul: Any = torch.backends.cuda.matmul
    conv: Any = getattr(torch.backends.cudnn, "conv", None)
    if hasattr(matmul, "fp32_precision") and hasattr(conv, "fp32_precision"):
        matmul.fp32_precision = "ieee"
        conv.fp32_precision = "ieee"
    else:
        matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True


def cupy_formulation(xp: Any, op: str, args: dict[str, Any], dev: list[Any]) -> Any:
    """(launch, output) of CuPy's formulation of ``op`` on device arrays ``dev``, or a str
    saying why there is none. ``xp`` is ``cupy`` (NumPy runs the same calls, for the tests)."""
    if op == "matmul":
        a, b = dev
        c = xp.empty((a.shape[0], b.shape[1]), a.dtype)
        return (lambda: xp.matmul(a, b, out=c)), c
    if op == "softmax":
        (x,) = dev
        y = xp.empty_like(x)
        m = xp.empty((x.shape[0], 1), x.dtype)
        s = xp.empty((x.shape[0], 1), x.dtype)

        def softmax() -> None:
            xp.max(x, axis=1, keepdims=True, out=m)
            xp.subtract(x, m, out=y)
            xp.exp(y, out=y)
            xp.sum(y, axis=1, keepdims=True, out=s)
            xp.divide(y, s, out=y)

        return softmax, y
    if op == "layer_norm":
        x, gamma, beta = dev
        eps = x.dtype.type(float(args["eps"]))
        y = xp.empty_like(x)
        mean = xp.empty((x.shape[0], 1), x.dtype)
        rstd = xp.empty((x.shape[0], 1), x.dtype)

        def layer_norm() -> None:
            xp.mean(x, axis=1, keepdims=True, out=mean)
            xp.var(x, axis=1, keepdims=True, out=rstd)
            xp.add(rstd, eps, out=rstd)
            xp.sqrt(rstd, out=rstd)
            xp.reciprocal(rstd, out=rstd)
            xp.subtract(x, mean, out=y)
            xp.multiply(y, rstd, out=y)
            xp.multiply(y, gamma, out=y)
            xp.add(y, beta, out=y)

        return layer_norm, y
    if op == "conv2d":
        return "CuPy has no conv2d of its own; no CuPy figure"
    return f"no CuPy formulation of {op}"


def cupy_side(cp: Any, op: str, args: dict[str, Any], inputs: list[np.ndarray]) -> Any:
    """(timer, fetch) for CuPy on ``op``, or a str saying why there is none."""
    got = cupy_formulation(cp, op, args, [cp.asarray(a) for a in inputs])
    if isinstance(got, str):
        return got
    launch, y = got
    return CupyTimer(cp, launch), lambda: cp.asnumpy(y)


def torch_formulation(
    torch: Any, op: str, args: dict[str, Any], dev: list[Any]
) -> tuple[Callable[[], None], Callable[[], Any]] | str:
    """(launch, output) of PyTorch's call of ``op`` on tensors ``dev`` (any device), or a str
    saying why there is none."""
    import torch.nn.functional as F

    box: dict[str, Any] = {}
    if op == "matmul":
        a, b = dev
        c = torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)
        box["y"] = c
        return (lambda: torch.matmul(a, b, out=c)), lambda: box["y"]
    if op == "conv2d":
        x, wt = dev
        if args["layout"] != "NCHW" or args["bias"] or args["activation"] != "none":
            return "the PyTorch side is written for plain NCHW conv2d"
        if args["epilogue"] not in ("", "none"):
            return "the PyTorch side is written for conv2d without an epilogue"
        conv = (int(args["stride"]), int(args["pad"]), int(args["dilation"]), int(args["groups"]))

        def conv2d() -> None:
            box["y"] = F.conv2d(x, wt, None, *conv)

        return conv2d, lambda: box["y"]
    if op == "softmax":
        (x,) = dev

        def softmax() -> None:
            box["y"] = torch.softmax(x, dim=1)

        return softmax, lambda: box["y"]
    if op == "layer_norm":
        x, gamma, beta = dev
        eps, n = float(args["eps"]), x.shape[1]

        def layer_norm() -> None:
            box["y"] = F.layer_norm(x, (n,), gamma, beta, eps)

        return layer_norm, lambda: box["y"]
    return f"no PyTorch call for {op}"


def torch_side(torch: Any, op: str, args: dict[str, Any], inputs: list[np.ndarray]) -> Any:
    """(timer, fetch) for PyTorch CUDA on ``op``, or a str saying why there is none."""
    dev = [torch.from_numpy(np.ascontiguousarray(a)).cuda() for a in inputs]
    got = torch_formulation(torch, op, args, dev)
    if isinstance(got, str):
        return got
    launch, y = got
    return TorchTimer(torch, launch), lambda: y().cpu().numpy()
