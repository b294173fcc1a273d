"""Data movement: index remaps (ONNX opsets 13..21).

The **injective** operators (Transpose, Concat, Split, Slice, Pad, Expand,
Tile) read one input element per output element at a computed index. Views,
which give the same data a new shape, are in ``views``; the gathers in
``gather``; shape arithmetic, which moves no data, in ``shape``. The small
helpers at the top (an output's shape, a computed output) serve those
modules too.

The readers (``perm_of``, ``slice_params``, ``pads_of``, ...) turn a node's
attributes and constant inputs into normalised parameters, in both the
attribute form of older opsets and the input form of newer ones; other
modules (shape checks, passes) reuse them.

>>> node = Node("Transpose", ("x",), ("y",))
>>> perm_of(node, 3)
(2, 1, 0)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ... import te
from ...te import Expr, Tensor
from ..ir import GraphError, Node
from . import LowerContext, OpKind, register

__all__ = [
    "concat_axis",
    "expand_shape",
    "pads_of",
    "perm_of",
    "slice_params",
    "split_sizes",
]

Index = tuple[Expr, ...]


# -- small helpers -------------------------------------------------------------


def _ints(data: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in np.asarray(data).reshape(-1))


def _norm_axis(node: Node, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise GraphError(f"{node.describe()} has axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _input(arrays: Sequence[np.ndarray | None], i: int) -> np.ndarray | None:
    return arrays[i] if i < len(arrays) else None


def _owned(a: Any) -> np.ndarray:
    """A fresh C-ordered array (rank 0 stays rank 0, unlike ``np.ascontiguousarray``)."""
    return np.array(a, order="C", copy=True)


def _out_shape(ctx: LowerContext, k: int = 0) -> tuple[Any, ...]:
    """Output ``k``'s shape (a symbolic extent, a ``te.var``, stays one)."""
    return tuple(d if isinstance(d, Expr) else int(d) for d in ctx.outputs[k].shape)


def _static_at(ctx: LowerContext, t: Tensor, axis: int | None = None) -> tuple[Any, ...]:
    """``t``'s extents, symbolic ones as expressions; the one at ``axis`` (default: the node's
    ``axis`` attribute) must be constant, else a GraphError naming the node."""
    dims = t.extents
    a = int(ctx.node.attr("axis", 0)) if axis is None else axis
    if not isinstance(dims[a % len(dims)], int):
        raise GraphError(f"{ctx.node.describe()} needs a constant extent on axis {a}")
    return dims


def _read(t: Tensor, idx: Sequence[Expr]) -> Expr:
    """``t[idx]``; an empty index reads a rank-0 value (a te tensor of shape (1,))."""
    return t[tuple(idx)] if idx else t[0]


def _compute(ctx: LowerContext, fn: Callable[[Index], Expr], k: int = 0) -> Tensor:
    """The output ``k`` of the node: ``fn`` maps an ONNX output index to its value."""
    shape = _out_shape(ctx, k)
    rank = len(shape)
    name = ctx.name if len(ctx.outputs) == 1 else f"{ctx.name}_out{k}"
    dtype = ctx.outputs[k].dtype
    return te.compute(shape or (1,), lambda *i: fn(tuple(i[:rank])), name=name, dtype=dtype)


def _const_input(ctx: LowerContext, i: int) -> np.ndarray | None:
    """Constant input ``i`` if the node has it (None when omitted)."""
    if i >= len(ctx.node.inputs) or not ctx.node.inputs[i]:
        return None
    return ctx.const(i)


# -- injective -------------------------------------------------------------------


def perm_of(node: Node, rank: int) -> tuple[int, ...]:
    """Transpose's permutation (default: reversed axes)."""
    perm = node.attr("perm")
    if perm is None:
        return tuple(reversed(range(rank)))
    out = tuple(_norm_axis(node, int(p), rank) for p in perm)
    if sorted(out) != list(range(rank)):
        raise GraphError(f"{node.describe()} has perm {tuple(perm)}, not a permutation")
    return out


def _lower_transpose(ctx: LowerContext) -> list[Tensor]:
    x = ctx.tensor(0)
    rank = len(_out_shape(ctx))
    perm = perm_of(ctx.node, rank)

    def at(i: Index) -> Expr:
        src: list[Expr] = [i[0]] * rank
        for k, p in enumerate(perm):
            src[p] = i[k]
        return _read(x, src)

    return [_compute(ctx, at)]


@register("Transpose", OpKind.INJECTIVE, lower=_lower_transpose)
def _transpose(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x = arrays[0]
    assert x is not None
    return [_owned(np.transpose(x, perm_of(node, x.ndim)))]


def concat_axis(node: Node, rank: int) -> int:
    if node.attr("axis") is None:
        raise GraphError(f"{node.describe()} has no axis")
    return _norm_axis(node, int(node.attr("axis")), rank)


def _lower_concat(ctx: LowerContext) -> list[Tensor]:
    xs = [t for t in ctx.inputs if t is not None]
    axis = concat_axis(ctx.node, len(_out_shape(ctx)))
    sizes = [t.extents[axis] for t in xs]  # other axes may be symbolic (a batch)
    if not all(isinstance(n, int) for n in sizes):
        raise GraphError(f"{ctx.node.describe()} concatenates along a symbolic axis")
    starts = np.cumsum([0, *sizes]).tolist()

    def at(i: Index) -> Expr:
        def part(k: int) -> Expr:
            return _read(xs[k], (*i[:axis], i[axis] - starts[k], *i[axis + 1 :]))

        value = part(len(xs) - 1)
        for k in reversed(range(len(xs) - 1)):
            value = te.if_then_else(i[axis] < starts[k + 1], part(k), value)
        return value

    return [_compute(ctx, at)]


@register("Concat", OpKind.INJECTIVE, lower=_lower_concat)
def _concat(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    xs = [a for a in arrays if a is not None]
    return [np.concatenate(xs, axis=concat_axis(node, xs[0].ndim))]


def split_sizes(
    node: Node, in_shape: Sequence[int], split_data: Any, n_outputs: int
) -> tuple[int, tuple[int, ...]]:
    """Split's axis and part sizes: the ``split`` input or attribute, ``num_outputs`` (18), or equal."""
    axis = _norm_axis(node, int(node.attr("axis", 0)), len(in_shape))
    n = int(in_shape[axis])
    split = node.attr("split") if split_data is None else _ints(split_data)
    if split is not None:
        sizes = tuple(int(s) for s in split)
        if sum(sizes) != n or len(sizes) != n_outputs:
            raise GraphError(f"{node.describe()} splits extent {n} into {sizes}")
    else:
        parts = int(node.attr("num_outputs", n_outputs))
        if parts != n_outputs:
            raise GraphError(f"{node.describe()} has num_outputs {parts} but {n_outputs} outputs")
        if node.attr("num_outputs") is None and n % parts:
            raise GraphError(f"{node.describe()} cannot split extent {n} into {parts} equal parts")
        size = -(-n // parts)
        sizes = tuple(min(size, n - k * size) for k in range(parts))
    if any(s <= 0 for s in sizes):
        raise GraphError(f"{node.describe()} makes an empty part {sizes}")
    return axis, sizes


def _lower_split(ctx: LowerContext) -> list[Tensor]:
    x = ctx.tensor(0)
    axis, sizes = split_sizes(ctx.node, _static_at(ctx, x), _const_input(ctx, 1), len(ctx.outputs))
    starts = np.cumsum([0, *sizes]).tolist()

    def part(k: int) -> Tensor:
        def at(i: Index) -> Expr:
            return x[(*i[:axis], i[axis] + starts[k], *i[axis + 1 :])]

        return _compute(ctx, at, k)

    return [part(k) for k in range(len(sizes))]


@register("Split", OpKind.INJECTIVE, lower=_lower_split, const_inputs=(1,))
def _split(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x = arrays[0]
    assert x is not None
    axis, sizes = split_sizes(node, x.shape, _input(arrays, 1), len(node.outputs))
    bounds = np.cumsum(sizes)[:-1]
    return [_owned(p) for p in np.split(x, bounds, axis=axis)]


def slice_params(
    node: Node,
    in_shape: Sequence[int],
    starts: Any = None,
    ends: Any = None,
    axes: Any = None,
    steps: Any = None,
) -> list[tuple[int, int, int]]:
    """One ``(start, step, length)`` per input axis, clamped as ONNX says.

    Starts and ends are inputs from opset 10 (attributes before); negative
    values count from the end; a positive step clamps start and end to
    ``[0, n]``, a negative one to ``[0, n-1]`` and ``[-1, n-1]``.
    """
    rank = len(in_shape)
    st = _ints(node.attr("starts") if starts is None else starts)
    en = _ints(node.attr("ends") if ends is None else ends)
    ax = tuple(range(len(st))) if axes is None and node.attr("axes") is None else None
    ax = ax or _ints(node.attr("axes") if axes is None else axes)
    sp = (1,) * len(st) if steps is None else _ints(steps)
    if not len(st) == len(en) == len(ax) == len(sp):
        raise GraphError(f"{node.describe()} has starts, ends, axes and steps of unequal lengths")
    out = [(0, 1, int(n)) for n in in_shape]
    for s, e, a, step in zip(st, en, ax, sp, strict=True):
        a = _norm_axis(node, a, rank)
        n = int(in_shape[a])
        if step == 0:
            raise GraphError(f"{node.describe()} has step 0")
        s = s + n if s < 0 else s
        e = e + n if e < 0 else e
        if step > 0:
            s, e = min(max(s, 0), n), min(max(e, 0), n)
        else:
            s, e = min(max(s, 0), n - 1), min(max(e, -1), n - 1)
        out[a] = (s, step, max(0, -(-(e - s) // step)))
    return out


def _slice_inputs(node: Node, get: Callable[[int], np.ndarray | None]) -> list[Any]:
    return [get(i) if i < len(node.inputs) and node.inputs[i] else None for i in range(1, 5)]


def _lower_slice(ctx: LowerContext) -> list[Tensor]:
    x = ctx.tensor(0)
    params = slice_params(ctx.node, x.shape_ints, *_slice_inputs(ctx.node, ctx.const))

    def at(i: Index) -> Expr:
        return x[
            tuple(s + k * st if st != 1 else k + s for k, (s, st, _) in zip(i, params, strict=True))
        ]

    return [_compute(ctx, at)]


@register("Slice", OpKind.INJECTIVE, lower=_lower_slice, const_inputs=(1, 2, 3, 4))
def _slice(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x = arrays[0]
    assert x is not None
    params = slice_params(node, x.shape, *_slice_inputs(node, lambda i: _input(arrays, i)))
    index = tuple(slice(s, s + st * n, st) if s + st * n >= 0 else slice(s, None, st)
                  for s, st, n in params)  # fmt: skip
    return [_owned(x[index])]


_PAD_MODES = ("constant", "reflect", "edge", "wrap")


def pads_of(
    node: Node, rank: int, pads_data: Any = None, axes_data: Any = None
) -> tuple[str, tuple[tuple[int, int], ...]]:
    """Pad's mode and one ``(before, after)`` per axis (``pads`` input from 11, ``axes`` from 18)."""
    mode = str(node.attr("mode", "constant"))
    if mode not in _PAD_MODES:
        raise GraphError(f"{node.describe()} has unsupported mode {mode!r}")
    pads = _ints(node.attr("pads") if pads_data is None else pads_data)
    axes = tuple(range(rank)) if axes_data is None else _ints(axes_data)
    if len(pads) != 2 * len(axes):
        raise GraphError(f"{node.describe()} has {len(pads)} pads for {len(axes)} axes")
    out = [(0, 0)] * rank
    for k, a in enumerate(axes):
        out[_norm_axis(node, a, rank)] = (pads[k], pads[k + len(axes)])
    if mode != "constant" and any(p < 0 for pair in out for p in pair):
        raise GraphError(f"{node.describe()} has negative pads in mode {mode!r}")
    return mode, tuple(out)


def _pad_value(node: Node, arrays: Sequence[Any]) -> float:
    v = arrays[2] if len(arrays) > 2 and arrays[2] is not None else node.attr("value", 0.0)
    return float(np.asarray(v).reshape(-1)[0]) if np.asarray(v).size else 0.0


def _check_pad_extents(node: Node, mode: str, shape: Sequence[int], pads: Any) -> None:
    for n, (b, a) in zip(shape, pads, strict=True):
        if mode == "reflect" and max(b, a) >= n:
            raise GraphError(f"{node.describe()} reflects {max(b, a)} over an extent of {n}")


def _lower_pad(ctx: LowerContext) -> list[Tensor]:
    x = ctx.tensor(0)
    shape = x.shape_ints
    mode, pads = pads_of(ctx.node, len(shape), ctx.const(1), _const_input(ctx, 3))
    _check_pad_extents(ctx.node, mode, shape, pads)
    dtype = ctx.outputs[0].dtype
    fill: Expr
    if len(ctx.node.inputs) > 2 and ctx.node.inputs[2]:
        data = ctx.consts[2]
        fill = (
            ctx.tensor(2)[0] if data is None else te.const(_pad_value(ctx.node, ctx.consts), dtype)
        )
    else:
        fill = te.const(_pad_value(ctx.node, []), dtype)

    def at(i: Index) -> Expr:
        src: list[Expr] = []
        inside: Expr | None = None
        for k, n, (b, _) in zip(i, shape, pads, strict=True):
            j = k - b if b else k
            if mode == "constant":
                cond = (j >= 0) & (j < n)
                inside = cond if inside is None else inside & cond
            elif mode == "edge":
                j = te.minimum(te.maximum(j, 0), n - 1)
            elif mode == "reflect":
                j = te.abs(j)
                j = te.if_then_else(j >= n, 2 * (n - 1) - j, j)
            else:  # wrap: shift to non-negative before the modulo
                j = (j + n * (-(-b // n))) % n
            src.append(j)
        value = x[tuple(src)]
        return value if inside is None else te.if_then_else(inside, value, fill)

    return [_compute(ctx, at)]


@register("Pad", OpKind.INJECTIVE, lower=_lower_pad, const_inputs=(1, 3))
def _pad(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x = arrays[0]
    assert x is not None
    mode, pads = pads_of(node, x.ndim, _input(arrays, 1), _input(arrays, 3))
    _check_pad_extents(node, mode, x.shape, pads)
    crop = tuple(slice(max(-b, 0), n - max(-a, 0)) for n, (b, a) in zip(x.shape, pads, strict=True))
    grow = [(max(b, 0), max(a, 0)) for b, a in pads]
    x = x[crop]
    if mode == "constant":
        out = np.pad(x, grow, mode="constant", constant_values=_pad_value(node, arrays))
    elif mode == "reflect":
        out = np.pad(x, grow, mode="reflect")
    elif mode == "edge":
        out = np.pad(x, grow, mode="edge")
    else:
        out = np.pad(x, grow, mode="wrap")
    return [_owned(out.astype(x.dtype))]


def expand_shape(node: Node, in_shape: Sequence[int], shape_data: Any) -> tuple[int, ...]:
    """Expand's output: the input shape and the target broadcast both ways."""
    target = _ints(shape_data)
    try:
        return tuple(int(d) for d in np.broadcast_shapes(tuple(in_shape), target))
    except ValueError:
        raise GraphError(
            f"{node.describe()} cannot broadcast {tuple(in_shape)} to {target}"
        ) from None


def _broadcast_read(x: Tensor, in_shape: tuple[Any, ...], i: Index) -> Expr:
    """Read ``x`` (ONNX shape ``in_shape``) at output index ``i``, broadcasting extents of 1
    (a symbolic extent is the output's own, as the probes of ``dynamic="generic"`` found)."""
    lead = len(i) - len(in_shape)
    one = [isinstance(n, int) and n == 1 for n in in_shape]
    idx = [te.const(0, "int64") if o else i[lead + d] for d, o in enumerate(one)]
    return x[tuple(idx)] if idx else x[0]


def _lower_expand(ctx: LowerContext) -> list[Tensor]:
    x = ctx.tensor(0)
    shape = x.extents
    return [_compute(ctx, lambda i: _broadcast_read(x, shape, i))]


@register("Expand", OpKind.INJECTIVE, lower=_lower_expand, const_inputs=(1,))
def _expand(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x = arrays[0]
    assert x is not None
    shape = expand_shape(node, x.shape, arrays[1])
    return [_owned(np.broadcast_to(x, shape))]


def _lower_tile(ctx: LowerContext) -> list[Tensor]:
    x = ctx.tensor(0)
    shape = x.shape_ints
    if not _ints(ctx.const(1)):  # a rank-0 input
        return [_compute(ctx, lambda i: x[0])]
    zero = te.const(0, "int64")
    return [
        _compute(
            ctx, lambda i: x[tuple(k % n if n > 1 else zero for k, n in zip(i, shape, strict=True))]
        )
    ]


@register("Tile", OpKind.INJECTIVE, lower=_lower_tile, const_inputs=(1,))
def _tile(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x = arrays[0]
    assert x is not None
    repeats = _ints(arrays[1])
    if len(repeats) != x.ndim or any(r < 1 for r in repeats):
        raise GraphError(f"{node.describe()} has repeats {repeats} for rank {x.ndim}")
    return [_owned(np.tile(x, repeats))]
