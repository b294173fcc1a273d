"""Reductions: Reduce*, ArgMax/ArgMin, Softmax, LogSoftmax, LayerNormalization.

Each lowering is a few te stages: a reduction (``te.sum``/``te.max``/``te.min``
over ``te.reduce_axis``, an elementwise prologue inside it) and elementwise
stages around it. Intermediate stages are named ``f"{ctx.name}_{what}"``, the
output ``ctx.name``; means are a sum times ``1/n``. Softmax is the stable
three-pass form::

    n0_max[i]    = max_k x[i, k]
    n0_exp[i, j] = exp(x[i, j] - n0_max[i])
    n0_sum[i]    = sum_k n0_exp[i, k]
    n0[i, j]     = n0_exp[i, j] / n0_sum[i]

Reduce* take their axes as an attribute or (ReduceSum from opset 13, the
others from 18) as a constant input 1, with ``keepdims`` and
``noop_with_empty_axes``; an empty axis list with ``noop_with_empty_axes``
reduces over nothing (the elementwise part still applies: ReduceSumSquare
squares), as ONNX's reference does.

>>> from tuner.graph.ops import opdef
>>> opdef("ReduceMean").kind
<OpKind.REDUCTION: 'reduction'>
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import te
from ...te import Expr, Tensor
from ...te.dtypes import is_float
from ...te.expr import Const
from ..ir import GraphError, Node
from . import LowerContext, OpKind, register
from .elementwise import broadcast_index, input_array, te_shape

__all__ = ["normalize_axes", "reduce_args", "reduce_stage", "reduced_index"]

Index = tuple[Expr, ...]


def normalize_axes(node: Node, axes: Sequence[int], rank: int) -> tuple[int, ...]:
    """``axes`` in ``[0, rank)``, sorted, without repeats; GraphError naming the node if out of range."""
    out = []
    for a in axes:
        a = int(a)
        if not -max(rank, 1) <= a < max(rank, 1):
            raise GraphError(f"{node.describe()} has axis {a}, out of range for rank {rank}")
        out.append(a % max(rank, 1))
    return tuple(sorted(set(out)))


def reduced_index(idx: Index, axes: Sequence[int], keepdims: bool) -> Index:
    """The index into a reduced tensor for the full-rank element at ``idx``."""
    if keepdims:
        return tuple(Const(0, "int64") if d in axes else i for d, i in enumerate(idx))
    kept = tuple(i for d, i in enumerate(idx) if d not in axes)
    return kept or (Const(0, "int64"),)


def _reduced_shape(shape: Sequence[int], axes: Sequence[int], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if d in axes else n for d, n in enumerate(shape))
    return tuple(n for d, n in enumerate(shape) if d not in axes)


_REDUCERS = {"sum": te.sum, "max": te.max, "min": te.min}


def reduce_stage(
    shape: Sequence[int],
    axes: Sequence[int],
    keepdims: bool,
    combiner: str,
    source: Callable[[Index], Expr],
    name: str,
) -> Tensor:
    """A stage reducing ``source(full index)`` over ``axes`` of ``shape`` with ``combiner``.

    The stage's shape is ``shape`` with the axes kept as extent 1
    (``keepdims``) or dropped (then rank 0 is ``(1,)``).

    >>> x = te.placeholder((4, 5), name="x")
    >>> m = reduce_stage((4, 5), (1,), False, "max", lambda i: x[i], "m")   # m[i] = max_k x[i, k]
    """
    axes = tuple(axes)
    raxes = {a: te.reduce_axis(shape[a], name=f"k{a}") for a in axes}
    out_shape = te_shape(_reduced_shape(shape, axes, keepdims))

    def body(*idx: Expr) -> Expr:
        kept = iter(idx)
        full: list[Expr] = []
        for d in range(len(shape)):
            if d in raxes:
                full.append(raxes[d])
                if keepdims:
                    next(kept)
            else:
                full.append(next(kept))
        return _REDUCERS[combiner](source(tuple(full)), axis=list(raxes.values()))

    return te.compute(out_shape, body, name=name)


# -- Reduce* ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Reduction:
    """``epilogue(combine(prologue(x)), n)`` in te, and the same in NumPy."""

    combiner: str
    prologue: Callable[[Expr], Expr]
    epilogue: Callable[[Expr, int], Expr]
    numpy: Callable[[np.ndarray, tuple[int, ...], bool], Any]


def _np_mean(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> Any:
    if is_float(x.dtype.name):
        return np.mean(x, axis=axes, keepdims=keep, dtype=x.dtype)
    n = math.prod(x.shape[a] for a in axes)
    return np.trunc(np.sum(x, axis=axes, keepdims=keep, dtype=np.float64) / n)


def _ident(x: Expr) -> Expr:
    return x


def _ident2(x: Expr, n: int) -> Expr:
    return x


def _square(x: Expr) -> Expr:
    return x * x


_REDUCTIONS: dict[str, _Reduction] = {
    "ReduceSum": _Reduction(
        "sum", _ident, _ident2, lambda x, a, k: np.sum(x, axis=a, keepdims=k, dtype=x.dtype)
    ),
    "ReduceMean": _Reduction("sum", _ident, lambda v, n: v * (1.0 / n), _np_mean),
    "ReduceMax": _Reduction("max", _ident, _ident2, lambda x, a, k: np.max(x, axis=a, keepdims=k)),
    "ReduceMin": _Reduction("min", _ident, _ident2, lambda x, a, k: np.min(x, axis=a, keepdims=k)),
    "ReduceL1": _Reduction(
        "sum", te.abs, _ident2, lambda x, a, k: np.sum(np.abs(x), axis=a, keepdims=k)
    ),
    "ReduceL2": _Reduction(
        "sum",
        _square,
        lambda v, n: te.sqrt(v),
        lambda x, a, k: np.sqrt(np.sum(x * x, axis=a, keepdims=k)),
    ),
    "ReduceSumSquare": _Reduction(
        "sum", _square, _ident2, lambda x, a, k: np.sum(x * x, axis=a, keepdims=k, dtype=x.dtype)
    ),
    "ReduceLogSum": _Reduction(
        "sum", _ident, lambda v, n: te.log(v), lambda x, a, k: np.log(np.sum(x, axis=a, keepdims=k))
    ),
}


def reduce_args(
    node: Node, axes_input: np.ndarray | None, rank: int
) -> tuple[tuple[int, ...], bool]:
    """(axes, keepdims) of a Reduce* node; axes () means reduce over nothing."""
    keepdims = bool(node.attrs.get("keepdims", 1))
    if len(node.inputs) > 1 and node.inputs[1]:
        if axes_input is None:
            raise GraphError(f"{node.describe()} needs its axes (input 1) to be a constant")
        raw: Sequence[int] = [int(a) for a in np.asarray(axes_input).ravel()]
    else:
        raw = tuple(node.attrs.get("axes", ()))
    if not raw:
        if node.attrs.get("noop_with_empty_axes", 0):
            return (), keepdims
        return tuple(range(rank)), keepdims
    return normalize_axes(node, raw, rank), keepdims


def _eval_reduce(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x = input_array(node, arrays, 0)
    axes, keep = reduce_args(node, arrays[1] if len(arrays) > 1 else None, x.ndim)
    with np.errstate(all="ignore"):
        if node.op == "ReduceProd":
            out = np.prod(x, axis=axes, keepdims=keep, dtype=x.dtype)
        elif node.op == "ReduceLogSumExp":
            out = _np_logsumexp(x, axes, keep)
        else:
            out = _REDUCTIONS[node.op].numpy(x, axes, keep)
    return [np.asarray(out).astype(x.dtype, copy=False)]


def _np_logsumexp(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    if not axes:
        return np.log(np.exp(x))
    m = np.max(x, axis=axes, keepdims=True)
    s = np.sum(np.exp(x - m), axis=axes, keepdims=True)
    out = m + np.log(s)
    return out if keep else np.squeeze(out, axis=axes)


def _lower_reduce(ctx: LowerContext) -> list[Tensor]:
    node, x = ctx.node, ctx.tensor(0)
    out = ctx.outputs[0]
    shape = x.extents  # kept axes may be symbolic (dynamic="generic"); reduced ones may not
    axes, keep = reduce_args(node, ctx.consts[1] if len(ctx.consts) > 1 else None, x.ndim)
    if not all(isinstance(shape[a], int) for a in axes):
        raise GraphError(f"{node.describe()} reduces over a symbolic extent")
    if node.op == "ReduceProd":
        return [_product(ctx, x, axes, keep)]
    if node.op == "ReduceLogSumExp":
        return [_logsumexp(ctx, x, axes, keep)]
    r = _REDUCTIONS[node.op]
    n = math.prod(shape[a] for a in axes)
    if not axes:
        return [
            te.compute(
                te_shape(out.shape),
                lambda *i: r.epilogue(r.prologue(x[i]), 1),
                name=ctx.name,
                dtype=out.dtype,
            )
        ]
    if r.epilogue is _ident2:
        return [reduce_stage(shape, axes, keep, r.combiner, lambda i: r.prologue(x[i]), ctx.name)]
    red = reduce_stage(
        shape, axes, keep, r.combiner, lambda i: r.prologue(x[i]), f"{ctx.name}_{r.combiner}"
    )
    return [
        te.compute(red.extents, lambda *i: r.epilogue(red[i], n), name=ctx.name, dtype=out.dtype)
    ]


#: ReduceProd multiplies this many elements per stage (te has no product reducer).
_CHUNK = 16


def _product(ctx: LowerContext, x: Tensor, axes: tuple[int, ...], keep: bool) -> Tensor:
    """ReduceProd as written-out products: chunks of ``_CHUNK`` per stage until one is left.

    The reduced axes are read as one row-major position ``p < n``; while
    ``n > _CHUNK`` a stage multiplies ``_CHUNK`` consecutive positions (the
    tail padded with 1), then the output multiplies what is left.
    """
    shape = x.shape_ints
    dtype = x.dtype
    out_shape = te_shape(_reduced_shape(shape, axes, keep))
    extents = [shape[a] for a in axes]
    n = math.prod(extents)

    def read_input(idx: Index, p: Expr | int) -> Expr:
        full = list(idx) if keep else _expand(idx, axes, len(shape))
        stride = n
        for a, extent in zip(axes, extents, strict=True):
            stride //= extent
            full[a] = (
                Const((p // stride) % extent, "int64")
                if isinstance(p, int)
                else (p // stride) % extent
            )
        return x[tuple(full)]

    read: Callable[[Index, Expr | int], Expr] = read_input
    level = 0
    while n > _CHUNK:
        m = -(-n // _CHUNK)

        def chunk(*i: Expr, read: Callable[[Index, Expr | int], Expr] = read, n: int = n) -> Expr:
            idx, k = i[:-1], i[-1]
            acc: Expr | None = None
            for c in range(_CHUNK):
                p = k * _CHUNK + c
                v = read(idx, te.minimum(p, n - 1) if n % _CHUNK else p)
                if n % _CHUNK:
                    v = te.if_then_else(p < n, v, te.const(1, dtype))
                acc = v if acc is None else acc * v
            assert acc is not None
            return acc

        stage = te.compute((*out_shape, m), chunk, name=f"{ctx.name}_prod{level}", dtype=dtype)
        read = _stage_reader(stage)
        n, level = m, level + 1

    def final(*i: Expr) -> Expr:
        acc = read(i, 0)
        for c in range(1, n):
            acc = acc * read(i, c)
        return acc

    return te.compute(out_shape, final, name=ctx.name, dtype=dtype)


def _stage_reader(stage: Tensor) -> Callable[[Index, Expr | int], Expr]:
    return lambda idx, p: stage[(*idx, p)]


def _expand(idx: Index, axes: Sequence[int], rank: int) -> list[Expr]:
    """The full-rank index for an index of a keepdims=0 reduced tensor (reduced slots 0)."""
    kept = iter(idx)
    return [Const(0, "int64") if d in axes else next(kept) for d in range(rank)]


def _logsumexp(ctx: LowerContext, x: Tensor, axes: tuple[int, ...], keep: bool) -> Tensor:
    shape = x.shape_ints
    if not axes:
        return te.compute(shape, lambda *i: te.log(te.exp(x[i])), name=ctx.name, dtype=x.dtype)
    m = reduce_stage(shape, axes, True, "max", lambda i: x[i], f"{ctx.name}_max")
    s = reduce_stage(
        shape,
        axes,
        True,
        "sum",
        lambda i: te.exp(x[i] - m[reduced_index(i, axes, True)]),
        f"{ctx.name}_sum",
    )

    def out(*i: Expr) -> Expr:
        full = tuple(i) if keep else tuple(_expand(i, axes, len(shape)))
        r = reduced_index(full, axes, True)
        return m[r] + te.log(s[r])

    return te.compute(
        te_shape(_reduced_shape(shape, axes, keep)), out, name=ctx.name, dtype=x.dtype
    )


for _op in (*_REDUCTIONS, "ReduceProd", "ReduceLogSumExp"):
    register(_op, OpKind.REDUCTION, lower=_lower_reduce, const_inputs=(1,))(_eval_reduce)


# -- ArgMax / ArgMin ---------------------------------------------------------------


def _arg_args(node: Node, rank: int) -> tuple[int, bool, bool]:
    (axis,) = normalize_axes(node, [node.attrs.get("axis", 0)], rank)
    return axis, bool(node.attrs.get("keepdims", 1)), bool(node.attrs.get("select_last_index", 0))


def _eval_arg(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x = input_array(node, arrays, 0)
    axis, keep, last = _arg_args(node, x.ndim)
    find = np.argmax if node.op == "ArgMax" else np.argmin
    if last:
        flipped = np.flip(x, axis)
        out = x.shape[axis] - 1 - find(flipped, axis=axis, keepdims=keep)
    else:
        out = find(x, axis=axis, keepdims=keep)
    return [np.asarray(out).astype(np.int64)]


def _lower_arg(ctx: LowerContext) -> list[Tensor]:
    """The extreme value, then the first (or last) position holding it."""
    x = ctx.tensor(0)
    shape = x.shape_ints
    axis, keep, last = _arg_args(ctx.node, x.ndim)
    combiner = "max" if ctx.node.op == "ArgMax" else "min"
    best = reduce_stage(shape, (axis,), True, combiner, lambda i: x[i], f"{ctx.name}_{combiner}")
    miss = -1 if last else shape[axis]

    def position(i: Index) -> Expr:
        hit = te.equal(x[i], best[reduced_index(i, (axis,), True)])
        return te.if_then_else(hit, i[axis], te.const(miss, "int64"))

    return [reduce_stage(shape, (axis,), keep, "max" if last else "min", position, ctx.name)]


for _op in ("ArgMax", "ArgMin"):
    register(_op, OpKind.REDUCTION, lower=_lower_arg)(_eval_arg)


# -- Softmax, LogSoftmax -------------------------------------------------------------


def _softmax_axis(node: Node, rank: int) -> int:
    return normalize_axes(node, [node.attrs.get("axis", -1)], rank)[0]


def _eval_softmax(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x = input_array(node, arrays, 0)
    axis = _softmax_axis(node, x.ndim)
    with np.errstate(all="ignore"):
        m = np.max(x, axis=axis, keepdims=True)
        e = np.exp(x - m)
        s = np.sum(e, axis=axis, keepdims=True)
        out = e / s if node.op == "Softmax" else x - m - np.log(s)
    return [np.asarray(out).astype(x.dtype, copy=False)]


def _lower_softmax(ctx: LowerContext) -> list[Tensor]:
    x = ctx.tensor(0)
    shape = x.shape_ints
    axis = _softmax_axis(ctx.node, x.ndim)
    ax = (axis,)

    def row(i: Index) -> Index:
        return reduced_index(i, ax, False)

    m = reduce_stage(shape, ax, False, "max", lambda i: x[i], f"{ctx.name}_max")
    e = te.compute(shape, lambda *i: te.exp(x[i] - m[row(i)]), name=f"{ctx.name}_exp")
    s = reduce_stage(shape, ax, False, "sum", lambda i: e[i], f"{ctx.name}_sum")
    if ctx.node.op == "Softmax":
        return [te.compute(shape, lambda *i: e[i] / s[row(i)], name=ctx.name)]
    lse = te.compute(s.shape_ints, lambda *i: m[i] + te.log(s[i]), name=f"{ctx.name}_lse")
    return [te.compute(shape, lambda *i: x[i] - lse[row(i)], name=ctx.name)]


for _op in ("Softmax", "LogSoftmax"):
    register(_op, OpKind.REDUCTION, lower=_lower_softmax)(_eval_softmax)


# -- LayerNormalization ---------------------------------------------------------------


def _ln_axes(node: Node, rank: int) -> tuple[int, ...]:
    (axis,) = normalize_axes(node, [node.attrs.get("axis", -1)], rank)
    return tuple(range(axis, rank))


@register("LayerNormalization", OpKind.REDUCTION, lower=lambda ctx: _lower_layer_norm(ctx))
def _eval_layer_norm(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """Y, Mean, InvStdDev (the last two float32, with the normalized axes kept as 1)."""
    x = input_array(node, arrays, 0)
    axes = _ln_axes(node, x.ndim)
    eps = float(node.attrs.get("epsilon", 1e-5))
    xf = x.astype(np.float32) if x.dtype != np.float64 else x
    mean = np.mean(xf, axis=axes, keepdims=True)
    var = np.mean(np.square(xf - mean), axis=axes, keepdims=True)
    rstd = 1 / np.sqrt(var + eps)
    y = (xf - mean) * rstd
    scale = arrays[1] if len(arrays) > 1 else None
    bias = arrays[2] if len(arrays) > 2 else None
    if scale is not None:
        y = y * scale
    if bias is not None:
        y = y + bias
    outs = [y.astype(x.dtype), mean.astype(np.float32), rstd.astype(np.float32)]
    return outs[: len(node.outputs)]


def _lower_layer_norm(ctx: LowerContext) -> list[Tensor]:
    """mean = sum(x)/n, rstd = 1/sqrt(sum((x - mean)^2)/n + eps), y = (x - mean)*rstd*scale + b."""
    x = ctx.tensor(0)
    shape = x.extents  # rows may be symbolic (dynamic="generic"); the normalised axes may not
    axes = _ln_axes(ctx.node, x.ndim)
    eps = float(ctx.node.attrs.get("epsilon", 1e-5))
    if not all(isinstance(shape[a], int) for a in axes):
        raise GraphError(f"{ctx.node.describe()} normalises over a symbolic extent")
    n = math.prod(shape[a] for a in axes)
    scale = ctx.inputs[1] if len(ctx.inputs) > 1 else None
    bias = ctx.inputs[2] if len(ctx.inputs) > 2 else None

    def red(i: Index) -> Index:
        return reduced_index(i, axes, True)

    total = reduce_stage(shape, axes, True, "sum", lambda i: x[i], f"{ctx.name}_sum")
    mean = te.compute(total.extents, lambda *i: total[i] * (1.0 / n), name=f"{ctx.name}_mean")

    def dev(i: Index) -> Expr:
        d = x[i] - mean[red(i)]
        return d * d

    sq = reduce_stage(shape, axes, True, "sum", dev, f"{ctx.name}_sqsum")
    rstd = te.compute(
        sq.extents,
        lambda *i: 1.0 / te.sqrt(sq[i] * (1.0 / n) + eps),
        name=f"{ctx.name}_rstd",
    )

    def y(*i: Expr) -> Expr:
        v = (x[i] - mean[red(i)]) * rstd[red(i)]
        if scale is not None:
            v = v * scale[broadcast_index(scale, i)]
        if bias is not None:
            v = v + bias[broadcast_index(bias, i)]
        return v

    results = [te.compute(shape, y, name=ctx.name, dtype=ctx.outputs[0].dtype)]
    for stage, value in zip((mean, rstd), ctx.outputs[1:], strict=False):
        if stage.dtype != value.dtype:  # float64 input: Mean and InvStdDev are float32
            stage = te.compute(
                stage.extents,
                lambda *i, t=stage: t[i],
                name=f"{stage.name}_out",
                dtype=value.dtype,
            )
        results.append(stage)
    return results
