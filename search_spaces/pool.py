"""2-D pooling over NCHW tensors: ``max_pool2d``, ``avg_pool2d``, ``global_avg_pool2d``.

Windowed pools (PyTorch's ``max_pool2d`` / ``avg_pool2d`` with ``kernel_size``,
``stride`` (defaults to the kernel) and ``padding``; no dilation, no ceil mode)::

    Xp[n, c, h, w] = X[n, c, h - pad, w - pad] inside X, else the pad value
    R[n, c, oh, ow] = max (or sum) over rh, rw < kernel of Xp[n, c, oh*s + rh, ow*s + rw]
    Y[n, c, oh, ow] = R  (R / kernel**2 for an average)

Padding never wins a max: it is -inf. A max drops NaN inputs (compare and
select), where PyTorch propagates them. An average counts the padding as zeros
and divides by ``kernel**2`` everywhere, which is PyTorch's default
``count_include_pad=True``.

The loop nest of one output plane (``nc`` is ``n`` and ``c`` fused; the
default is ``pad_at="rows"``, no ``ow_split``, the window innermost)::

    for nc in N*C:                          # parallel across cores if chosen
      Xp plane (pad_at="plane")             # the padded copy, then no bounds tests
      for oh in Ho:
        Xp rows (pad_at="rows")             # just the kernel rows of this output row
        for owo in Wo / ow_split:           # no split: one whole output row
          for owi in ow_split:              # vectorized by LLVM, the window
            R[nc, oh, ow] = identity        #   unrolled inside it
            for rh in kernel:
              for rw in kernel:             # unroll_window: written out
                R[nc, oh, ow] = max(R[nc, oh, ow], Xp[nc, oh*s + rh, ow*s + rw])
        Y[nc, oh, :] = R[nc, oh, :]

``window_outer`` moves ``rh, rw`` outside ``owi`` (a row of partial results
updated ``kernel**2`` times, as NumPy's strided-slice formulation does);
``local`` keeps the ``ow_split`` results of one ``owo`` step in registers.
Measured, LLVM handles the window-innermost order best (see default_config).
With ``pad_at="inline"`` there is no copy: every read tests the bounds, which
is free when ``pad`` is 0 and otherwise keeps LLVM from vectorizing.

``global_avg_pool2d`` is PyTorch's ``adaptive_avg_pool2d(x, 1)``: ``Y[N, C, 1, 1]``.
Per plane, a column sum vectorized along the row (``W`` accumulators, in
registers with ``local``) and then a sum of that row::

    for nc in N*C:                          # parallel, planes_per_task per task
      P_local[0:W] = 0
      for h in H: for w in W: P_local[w] += X[nc, h, w]      # vectorized over w
      Y[nc, 0, 0] = sum_w P[nc, w] / (H*W)

>>> args = {"N": 1, "C": 64, "H": 112, "W": 112, "kernel": 3, "stride": 2, "pad": 1}
>>> s, tensors = schedule(default_config("max", args), "max", args)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from tuner import te
from tuner.schedule import Schedule
from tuner.space import ConfigSpace
from tuner.target import Target
from tuner.te import Tensor

from ._cuda import is_gpu
from ._cuda import pool as gpu
from ._target import resolve
from .reduce import PARALLEL_MIN_BYTES

if TYPE_CHECKING:
    from . import Operator

__all__ = [
    "KINDS",
    "bytes_moved",
    "check_args",
    "config_space",
    "default_config",
    "define",
    "flops",
    "global_bytes_moved",
    "global_config_space",
    "global_default_config",
    "global_reference",
    "global_schedule",
    "out_size",
    "reference",
    "schedule",
]

#: The windowed pools this module registers, as ``<kind>_pool2d``.
KINDS = ("max", "avg")
_PAD_AT = ("inline", "plane", "rows")
_OW_SPLITS = (0, 8, 16, 32, 64)  # 0: the whole output row


def _stride(args: Mapping[str, Any]) -> int:
    return int(args["stride"]) or int(args["kernel"])


def out_size(args: Mapping[str, Any]) -> tuple[int, int]:
    """``(Ho, Wo)``: PyTorch's floor((H + 2*pad - kernel) / stride) + 1."""
    k, s, p = int(args["kernel"]), _stride(args), int(args["pad"])
    return (args["H"] + 2 * p - k) // s + 1, (args["W"] + 2 * p - k) // s + 1


def check_args(args: Mapping[str, Any]) -> None:
    """PyTorch's rules: pad at most half the kernel; the window fits the padded input."""
    from . import OperatorError

    k, p = int(args["kernel"]), int(args["pad"])
    if 2 * p > k:
        raise OperatorError(f"pad must be at most half the kernel ({k}), got {p}")
    if args["H"] + 2 * p < k or args["W"] + 2 * p < k:
        raise OperatorError(
            f"the {k} x {k} window does not fit the padded {args['H']} x {args['W']} input"
        )


def define(kind: str, args: Mapping[str, Any]) -> tuple[Tensor, Tensor]:
    """The input ``X[N, C, H, W]`` and the output ``Y[N, C, Ho, Wo]``."""
    X, _, _, Y = _stages(kind, args)
    return X, Y


def _stages(kind: str, args: Mapping[str, Any]) -> tuple[Tensor, Tensor | None, Tensor, Tensor]:
    """``X``, the padded input ``Xp`` (None without padding), the reduction ``R`` and ``Y``."""
    N, C, H, W = (int(args[a]) for a in "NCHW")
    k, s, p = int(args["kernel"]), _stride(args), int(args["pad"])
    Ho, Wo = out_size(args)
    X = te.placeholder((N, C, H, W), "float32", name="X")
    src = X
    Xp: Tensor | None = None
    if p:
        fill = te.const(-np.inf if kind == "max" else 0.0, "float32")
        Xp = te.compute(
            (N, C, H + 2 * p, W + 2 * p),
            lambda n, c, h, w: te.if_then_else(
                (h >= p) & (h < H + p) & (w >= p) & (w < W + p), X[n, c, h - p, w - p], fill
            ),
            name="Xp",
        )
        src = Xp
    rh = te.reduce_axis(k, name="rh")
    rw = te.reduce_axis(k, name="rw")
    combine = te.max if kind == "max" else te.sum
    R = te.compute(
        (N, C, Ho, Wo),
        lambda n, c, oh, ow: combine(src[n, c, oh * s + rh, ow * s + rw], axis=[rh, rw]),
        name="R",
    )
    if kind == "max":
        Y = te.compute(R.shape, lambda n, c, oh, ow: R[n, c, oh, ow], name="Y")
    else:
        area = te.const(k * k, "float32")
        Y = te.compute(R.shape, lambda n, c, oh, ow: R[n, c, oh, ow] / area, name="Y")
    return X, Xp, R, Y


def reference(x: np.ndarray, *, kind: str, kernel: int, stride: int, pad: int) -> np.ndarray:
    """NumPy pooling over a padded sliding-window view (``stride=0`` means the kernel)."""
    s = stride or kernel
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=fill)
    win = np.lib.stride_tricks.sliding_window_view(xp, (kernel, kernel), axis=(2, 3))
    win = win[:, :, ::s, ::s]
    if kind == "max":
        out: np.ndarray = win.max(axis=(4, 5))
        return out
    return (win.sum(axis=(4, 5), dtype=np.float32) / np.float32(kernel * kernel)).astype(np.float32)


def numpy_fast(x: np.ndarray, *, kind: str, kernel: int, stride: int, pad: int) -> np.ndarray:
    """NumPy's best formulation (the benchmark's peer): one padded copy, then
    ``kernel**2`` strided slices folded into one output buffer with ``out=``."""
    s = stride or kernel
    n, c, h, w = x.shape
    ho, wo = (h + 2 * pad - kernel) // s + 1, (w + 2 * pad - kernel) // s + 1
    fill = -np.inf if kind == "max" else 0.0
    xp = x
    if pad:
        xp = np.full((n, c, h + 2 * pad, w + 2 * pad), fill, np.float32)
        xp[:, :, pad : pad + h, pad : pad + w] = x
    fold = np.maximum if kind == "max" else np.add
    out = np.full((n, c, ho, wo), fill, np.float32)
    for rh in range(kernel):
        for rw in range(kernel):
            fold(
                out,
                xp[:, :, rh : rh + s * (ho - 1) + 1 : s, rw : rw + s * (wo - 1) + 1 : s],
                out=out,
            )
    if kind == "avg":
        out *= np.float32(1.0 / (kernel * kernel))
    return out


def bytes_moved(args: Mapping[str, Any]) -> float:
    """Compulsory traffic: ``X`` read once and ``Y`` written once (float32)."""
    Ho, Wo = out_size(args)
    return 4.0 * args["N"] * args["C"] * (args["H"] * args["W"] + Ho * Wo)


def flops(args: Mapping[str, Any]) -> float:
    """One compare (or add) per window element of every output."""
    Ho, Wo = out_size(args)
    return float(args["N"] * args["C"] * Ho * Wo * args["kernel"] ** 2)


def config_space(kind: str, args: Mapping[str, Any], target: Target | None = None) -> ConfigSpace:
    """Where the padded copy lives, the window order, the column split, registers, threads.

    Local accumulators fit half the target's vector registers.
    """
    tgt = resolve(target)
    vector_lanes, half = tgt.lanes("float32"), tgt.vector_registers // 2
    _, Wo = out_size(args)
    sp = ConfigSpace()
    sp.define_knob("pad_at", list(_PAD_AT))
    sp.define_knob("window_outer", [True, False])
    sp.define_knob("ow_split", list(_OW_SPLITS))
    sp.define_knob("local", [True, False])
    sp.define_knob("unroll_window", [True, False])
    sp.define_knob("parallel", [True, False])
    sp.add_constraint(
        lambda c: c["pad_at"] == "inline" or int(args["pad"]) > 0,
        "without padding there is no padded copy to place (pad_at=inline)",
    )
    sp.add_constraint(
        lambda c: c["ow_split"] <= max(Wo, vector_lanes),
        f"the column split is no wider than an output row or one {vector_lanes}-lane vector",
    )
    sp.add_constraint(
        lambda c: not c["local"] or (c["ow_split"] or Wo) <= half * vector_lanes,
        f"local accumulators fit {half} vector registers",
    )
    sp.add_constraint(
        lambda c: not c["unroll_window"] or int(args["kernel"]) <= 8,
        "unroll only windows of at most 8 columns",
    )
    return sp.freeze()


def default_config(
    kind: str, args: Mapping[str, Any], target: Target | None = None
) -> dict[str, Any]:
    """Padded rows, whole output rows, the window innermost, parallel planes.

    With the window innermost LLVM unrolls it and vectorizes the output-column
    loop around it (strided loads, ``vmaxps``); with the window outside, the
    update of a stored max became a masked store (``vmaskmovps``), and a short
    column split is fully unrolled into scalar code. Measured for the 112 x 112,
    3 x 3 stride-2 max pool on one (busy) thread: 0.4 to 0.5 ms against 0.9 to
    3.6 ms for the window outside, and NumPy's nine strided ``np.maximum``
    calls at 1.4 ms.
    """
    return {
        "pad_at": "rows" if int(args["pad"]) else "inline",
        "window_outer": False,
        "ow_split": 0,
        "local": False,
        "unroll_window": False,
        "parallel": bytes_moved(args) >= PARALLEL_MIN_BYTES,
    }


def schedule(
    cfg: Mapping[str, Any], kind: str, args: Mapping[str, Any]
) -> tuple[Schedule, list[Tensor]]:
    """The schedule for ``cfg`` (validate configs from outside against config_space first)."""
    X, Xp, R, Y = _stages(kind, args)
    s = te.create_schedule(Y)
    n, c, oh, ow = s[Y].op.axis
    nc = s[Y].fuse(n, c)
    s[Y].vectorize(ow)
    if cfg["parallel"]:
        s[Y].parallel(nc)
    plane = cfg["pad_at"] == "plane"
    s[R].compute_at(s[Y], nc if plane else oh)
    rn, rc, roh, row = s[R].op.axis
    rh, rw = s[R].op.reduce_axis
    split = int(cfg["ow_split"])
    owo, owi = s[R].split(row, factor=split) if split else (roh, row)
    if cfg["window_outer"]:
        s[R].reorder(owo, rh, rw, owi)
        s[R].vectorize(owi)
    else:
        s[R].reorder(owo, owi, rh, rw)
    if cfg["unroll_window"]:
        s[R].unroll(rw)
    if cfg["local"]:
        RL = s.cache_write(R, "local")
        s[RL].compute_at(s[R], owo)
    if Xp is not None:
        if cfg["pad_at"] == "inline":
            s[Xp].compute_inline()
        else:
            s[Xp].compute_at(s[R], rc if plane else roh)
            s[Xp].vectorize(s[Xp].op.axis[-1])
    return s, [X, Y]


# -- global average pooling -------------------------------------------------


def _global_stages(N: int, C: int, H: int, W: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``X``, the per-plane column sums ``P[N, C, W]``, the plane sums ``S`` and ``Y``."""
    X = te.placeholder((N, C, H, W), "float32", name="X")
    h = te.reduce_axis(H, name="h")
    P = te.compute((N, C, W), lambda n, c, w: te.sum(X[n, c, h, w], axis=h), name="P")
    r = te.reduce_axis(W, name="r")
    S = te.compute((N, C), lambda n, c: te.sum(P[n, c, r], axis=r), name="S")
    area = te.const(H * W, "float32")
    Y = te.compute((N, C, 1, 1), lambda n, c, i, j: S[n, c] / area, name="Y")
    return X, P, S, Y


def global_reference(x: np.ndarray) -> np.ndarray:
    """``x.mean(axis=(2, 3), keepdims=True)``: PyTorch's ``adaptive_avg_pool2d(x, 1)``."""
    out: np.ndarray = x.mean(axis=(2, 3), keepdims=True, dtype=np.float32)
    return out


def global_bytes_moved(N: int, C: int, H: int, W: int) -> float:
    """Compulsory traffic: ``X`` read once and one float per plane written."""
    return 4.0 * N * C * (H * W + 1)


def global_config_space(
    N: int, C: int, H: int, W: int, target: Target | None = None
) -> ConfigSpace:
    """Planes per parallel task, and whether the ``W`` column sums live in registers."""
    registers = _column_registers(resolve(target))
    sp = ConfigSpace()
    sp.define_knob("planes_per_task", [1, 2, 4, 8, 16, 32])
    sp.define_knob("local", [True, False])
    sp.define_knob("parallel", [True, False])
    sp.add_constraint(
        lambda c: c["planes_per_task"] <= N * C, "a task holds no more planes than N*C"
    )
    sp.add_constraint(
        lambda c: not c["local"] or registers >= W,
        f"local column sums fit the target's vector registers ({registers} floats)",
    )
    return sp.freeze()


def _column_registers(target: Target) -> int:
    """float32 values the target's vector registers hold (128 with AVX2's 16 x 8)."""
    return target.vector_registers * target.lanes("float32")


def global_default_config(
    N: int, C: int, H: int, W: int, target: Target | None = None
) -> dict[str, Any]:
    """Tasks of 8 planes, register column sums, threads for large inputs.

    Measured on one (busy) thread, CPU time, 8 x 256 x 56 x 56: 1.5 ms against
    NumPy's ``x.mean(axis=(2, 3))`` 1.9 to 2.0 ms; 1 x 2048 x 7 x 7: 0.027 ms
    against 0.097.
    """
    return {
        "planes_per_task": next(p for p in (8, 4, 2, 1) if (N * C) % p == 0),
        "local": _column_registers(resolve(target)) >= W,
        "parallel": global_bytes_moved(N, C, H, W) >= PARALLEL_MIN_BYTES,
    }


def global_schedule(
    cfg: Mapping[str, Any], N: int, C: int, H: int, W: int
) -> tuple[Schedule, list[Tensor]]:
    """Planes fused and cut into tasks; per plane the column sums, then their sum."""
    X, P, S, Y = _global_stages(N, C, H, W)
    s = te.create_schedule(Y)
    n, c, _, _ = s[Y].op.axis
    nc = s[Y].fuse(n, c)
    task, one = s[Y].split(nc, factor=int(cfg["planes_per_task"]))
    if cfg["parallel"]:
        s[Y].parallel(task)
    s[S].compute_at(s[Y], one)
    s[P].compute_at(s[S], s[S].op.axis[1])
    pn, pc, pw = s[P].op.axis
    (ph,) = s[P].op.reduce_axis
    s[P].reorder(pn, pc, ph, pw)
    s[P].vectorize(pw)
    if cfg["local"]:
        PL = s.cache_write(P, "local")
        s[PL].compute_at(s[P], pc)
    return s, [X, Y]


_NCHW = (
    ("N", "batch"),
    ("C", "channels"),
    ("H", "input height"),
    ("W", "input width"),
)


def _pixels(args: Mapping[str, Any]) -> int:
    """Output pixels of one plane."""
    oh, ow = out_size(args)
    return oh * ow


def _operator(kind: str) -> Operator:
    """The registry entry of ``<kind>_pool2d``; its callables take the parsed arguments."""
    from . import Operator, Param

    def space(a: Mapping[str, Any], target: Target) -> ConfigSpace:
        if is_gpu(target):
            return gpu.config_space(_pixels(a), target)
        return config_space(kind, a, target)

    def sched(
        cfg: Mapping[str, Any], a: Mapping[str, Any], target: Target
    ) -> tuple[Schedule, list[Tensor]]:
        if is_gpu(target):
            return gpu.schedule(cfg, *_stages(kind, a))
        return schedule(cfg, kind, a)

    def default(a: Mapping[str, Any], target: Target) -> dict[str, Any]:
        if is_gpu(target):
            return gpu.default_config(_pixels(a), target)
        return default_config(kind, a, target)

    def ref(x: np.ndarray, **args: Any) -> np.ndarray:
        """``reference(*inputs, **parsed_args)``: the window comes from the arguments."""
        return reference(
            x,
            kind=kind,
            kernel=args["kernel"],
            stride=args.get("stride", 0),
            pad=args.get("pad", 0),
        )

    counting = " (padding counted, count_include_pad=True)" if kind == "avg" else ""
    return Operator(
        name=f"{kind}_pool2d",
        doc=f"{kind} pooling of an NCHW float32 tensor over kernel x kernel windows{counting}",
        params=(
            *(Param(name, int, doc=doc) for name, doc in _NCHW),
            Param("kernel", int, doc="window height and width"),
            Param("stride", int, 0, doc="step of the window; 0 means the kernel size", minimum=0),
            Param("pad", int, 0, doc="-inf (max) or zero (avg) padding on each side", minimum=0),
        ),
        space=space,
        schedule=sched,
        default_config=default,
        reference=ref,
        flops=flops,
        bytes_moved=bytes_moved,
        check=check_args,
    )


def _global_reference(x: np.ndarray, **args: Any) -> np.ndarray:
    return global_reference(x)


def _register() -> None:
    from . import Operator, Param, register_operator

    for kind in KINDS:
        register_operator(_operator(kind))
    register_operator(
        Operator(
            name="global_avg_pool2d",
            doc="mean of each H x W plane of an NCHW float32 tensor, as Y[N, C, 1, 1]",
            params=tuple(Param(name, int, doc=doc) for name, doc in _NCHW),
            space=lambda a, target: (
                gpu.global_config_space(a["W"], target)
                if is_gpu(target)
                else global_config_space(a["N"], a["C"], a["H"], a["W"], target)
            ),
            schedule=lambda cfg, a, target: (
                gpu.global_schedule(cfg, *_global_stages(a["N"], a["C"], a["H"], a["W"]))
                if is_gpu(target)
                else global_schedule(cfg, a["N"], a["C"], a["H"], a["W"])
            ),
            default_config=lambda a, target: (
                gpu.global_default_config(a["W"], target)
                if is_gpu(target)
                else global_default_config(a["N"], a["C"], a["H"], a["W"], target)
            ),
            reference=_global_reference,
            flops=lambda a: float(a["N"] * a["C"] * a["H"] * a["W"]),
            bytes_moved=lambda a: global_bytes_moved(a["N"], a["C"], a["H"], a["W"]),
        )
    )


_register()
