"""Views: a new shape over the same row-major data (ONNX opsets 13..21).

Reshape, Flatten, Squeeze, Unsqueeze, Identity and Dropout (in inference)
move no data: the compiled module aliases their buffers, and their lowerings
(plain index remaps, through the flat position where the shapes differ by
more than extents of 1) are used only when a view sits inside a kernel group.
The operators that do move data are in ``movement``.

The readers (``reshape_target``, ``squeeze_axes``, ...) turn a node's
attributes and constant inputs into normalised parameters, in both the
attribute form of older opsets and the input form of newer ones.

>>> node = Node("Reshape", ("x", "s"), ("y",))
>>> reshape_target(node, (2, 3, 4), np.array([0, -1]))
(2, 12)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ... import te
from ...te import Expr, Tensor
from ..ir import GraphError, Node
from . import LowerContext, OpKind, register
from .movement import Index, _compute, _input, _ints, _norm_axis, _out_shape, _owned

__all__ = ["flatten_shape", "reshape_target", "squeeze_axes", "unsqueeze_axes"]


def _view_index(in_shape: tuple[int, ...], out_shape: tuple[int, ...], idx: Index) -> Index:
    """The input index holding the same row-major element as output index ``idx``.

    When the two shapes differ only by extents of 1 (Squeeze, Unsqueeze, most
    Flattens) the index is a direct mapping; otherwise it goes through the
    flat position.
    """
    keep_in = [d for d, n in enumerate(in_shape) if n != 1]
    keep_out = [d for d, n in enumerate(out_shape) if n != 1]
    if [in_shape[d] for d in keep_in] == [out_shape[d] for d in keep_out]:
        src: list[Expr] = [te.const(0, "int64")] * len(in_shape)
        for a, b in zip(keep_in, keep_out, strict=True):
            src[a] = idx[b]
        return tuple(src)
    flat: Expr = te.const(0, "int64")
    for i, n in zip(idx, out_shape, strict=True):
        flat = flat * n + i
    out: list[Expr] = []
    stride = 1
    for n in reversed(in_shape):
        out.append(flat // stride % n if stride > 1 else flat % n)
        stride *= n
    return tuple(reversed(out))


def _lower_view(ctx: LowerContext) -> list[Tensor]:
    x = ctx.tensor(0)
    in_shape, out_shape = x.shape_ints, _out_shape(ctx) or (1,)  # te shapes: rank 0 is (1,)
    name = ctx.name if len(ctx.outputs) == 1 else f"{ctx.name}_out0"
    view = te.compute(out_shape, lambda *i: x[_view_index(in_shape, out_shape, i)], name=name)
    results = [view]
    if len(ctx.outputs) > 1:  # Dropout's mask: all True in inference
        results.append(_compute(ctx, lambda i: te.const(True, "bool"), 1))
    return results


def reshape_target(node: Node, in_shape: Sequence[int], shape_data: Any) -> tuple[int, ...]:
    """Reshape's output shape: 0 copies the input extent (unless ``allowzero``), -1 is inferred."""
    target = list(_ints(shape_data))
    allowzero = int(node.attr("allowzero", 0))
    if target.count(-1) > 1:
        raise GraphError(f"{node.describe()} has more than one -1 in its target shape")
    for d, n in enumerate(target):
        if n == 0 and not allowzero:
            if d >= len(in_shape):
                raise GraphError(f"{node.describe()} copies extent {d} the input does not have")
            target[d] = int(in_shape[d])
        elif n < -1:
            raise GraphError(f"{node.describe()} has a negative extent {n} in its target shape")
    total = math.prod(int(n) for n in in_shape)
    if -1 in target:
        known = math.prod(n for n in target if n != -1)
        if known == 0 or total % known:
            raise GraphError(f"{node.describe()} cannot reshape {tuple(in_shape)} to {target}")
        target[target.index(-1)] = total // known
    if math.prod(target) != total:
        raise GraphError(f"{node.describe()} cannot reshape {tuple(in_shape)} to {target}")
    return tuple(target)


@register("Reshape", OpKind.VIEW, lower=_lower_view, const_inputs=(1,))
def _reshape(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x = arrays[0]
    assert x is not None
    return [_owned(x.reshape(reshape_target(node, x.shape, arrays[1])))]


def flatten_shape(node: Node, in_shape: Sequence[int]) -> tuple[int, int]:
    """Flatten's 2-D output shape (``axis`` may be negative, or equal to the rank)."""
    rank = len(in_shape)
    axis = int(node.attr("axis", 1))
    if not -rank <= axis <= rank:
        raise GraphError(f"{node.describe()} has axis {axis} out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    return math.prod(in_shape[:axis]), math.prod(in_shape[axis:])


@register("Flatten", OpKind.VIEW, lower=_lower_view)
def _flatten(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x = arrays[0]
    assert x is not None
    return [_owned(x.reshape(flatten_shape(node, x.shape)))]


def squeeze_axes(node: Node, in_shape: Sequence[int], axes_data: Any = None) -> tuple[int, ...]:
    """The axes Squeeze removes: its ``axes`` input (opset 13) or attribute, else every 1."""
    axes = node.attr("axes") if axes_data is None else _ints(axes_data)
    if axes is None:
        return tuple(d for d, n in enumerate(in_shape) if n == 1)
    out = tuple(sorted({_norm_axis(node, int(a), len(in_shape)) for a in axes}))
    for a in out:
        if in_shape[a] != 1:
            raise GraphError(f"{node.describe()} squeezes axis {a} of extent {in_shape[a]}")
    return out


@register("Squeeze", OpKind.VIEW, lower=_lower_view, const_inputs=(1,))
def _squeeze(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x = arrays[0]
    assert x is not None
    return [_owned(np.squeeze(x, squeeze_axes(node, x.shape, _input(arrays, 1))))]


def unsqueeze_axes(node: Node, rank: int, axes_data: Any = None) -> tuple[int, ...]:
    """The new axes of Unsqueeze, normalised against the output rank, sorted."""
    axes = node.attr("axes") if axes_data is None else _ints(axes_data)
    if axes is None:
        raise GraphError(f"{node.describe()} has no axes")
    out_rank = rank + len(axes)
    out = tuple(sorted({_norm_axis(node, int(a), out_rank) for a in axes}))
    if len(out) != len(axes):
        raise GraphError(f"{node.describe()} repeats an axis in {tuple(axes)}")
    return out


@register("Unsqueeze", OpKind.VIEW, lower=_lower_view, const_inputs=(1,))
def _unsqueeze(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x = arrays[0]
    assert x is not None
    return [_owned(np.expand_dims(x, unsqueeze_axes(node, x.ndim, _input(arrays, 1))))]


@register("Identity", OpKind.VIEW, lower=_lower_view)
def _identity(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x = arrays[0]
    assert x is not None
    return [x.copy()]


@register("Dropout", OpKind.VIEW, lower=_lower_view)
def _dropout(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """Inference: the input unchanged and, if asked for, a mask of all True."""
    x = arrays[0]
    assert x is not None
    training = _input(arrays, 2)
    if training is not None and bool(np.asarray(training).reshape(-1)[0]):
        raise GraphError(f"{node.describe()} is in training mode; only inference is supported")
    outs = [x.copy()]
    if len(node.outputs) > 1 and node.outputs[1]:
        outs.append(np.ones(x.shape, bool))
    return outs
