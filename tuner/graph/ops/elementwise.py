"""Elementwise ONNX operators: arithmetic, comparisons, logic, Clip, Where, Cast.

Every operator here computes one output element from the same-index elements
of its inputs under ONNX's multidirectional (NumPy) broadcasting: shapes align
on the right, and an input dimension of extent 1 is read at index 0. The
NumPy evaluation keeps ONNX's dtypes exactly (a float32 ``Add`` stays float32,
comparisons give bool); the lowering is one te stage named ``ctx.name``::

    Add(x: float32[2,3], b: float32[3])  ->  n0[i0, i1] = x[i0, i1] + b[i1]

The unary operators (activations, rounding, ...) are in ``unary``, on the
same helpers. Other modules reuse the pieces: :func:`broadcast_index` (how a
broadcast input is indexed), :func:`te_shape` and :func:`input_array`.

>>> b = te.placeholder((1, 3), name="b")
>>> broadcast_index(b, (te.var("i"), te.var("j"), te.var("k")))
(0, k)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ... import te
from ...te import Expr, Tensor
from ...te.dtypes import is_float
from ...te.expr import Const
from ..ir import GraphError, Node
from . import LowerContext, OpKind, register

__all__ = [
    "BINARY",
    "ONNX_DTYPES",
    "broadcast_dims",
    "broadcast_index",
    "cast_dtype",
    "input_array",
    "te_shape",
]

Unary = Callable[[Expr], Expr]

#: ONNX TensorProto element types this compiler takes, as NumPy dtype names.
ONNX_DTYPES: dict[int, str] = {
    1: "float32",
    2: "uint8",
    3: "int8",
    6: "int32",
    7: "int64",
    9: "bool",
    11: "float64",
}


def te_shape(shape: Sequence[Any]) -> tuple[Any, ...]:
    """The te shape of an ONNX value's shape: rank 0 is ``(1,)``; a symbol (``te.var``) stays."""
    return tuple(d if isinstance(d, Expr) else int(d) for d in shape) or (1,)


def broadcast_index(
    tensor: Tensor, out_indices: Sequence[Expr], out_shape: Sequence[Any] = ()
) -> tuple[Expr, ...]:
    """Indices into ``tensor`` for the output element at ``out_indices`` under NumPy broadcasting.

    The tensor's dimensions align with the last ones of the output; one of
    extent 1 is read at 0, unless the output's extent there (``out_shape``,
    when given) is 1 too: then the output's index, which is 0 as well but
    keeps a flat loop's address recombinable (``tuner.lower.simplify``). A
    rank-0 value (te shape ``(1,)``) is read at 0 whatever the output's rank.

    >>> b = te.placeholder((1, 3), name="b")
    >>> broadcast_index(b, (te.var("i"), te.var("j"), te.var("k")))
    (0, k)
    """
    return broadcast_dims(tensor.shape, out_indices, out_shape)


def _one(extent: Any) -> bool:
    return extent == 1 or (isinstance(extent, Const) and extent.value == 1)


def broadcast_dims(
    shape: Sequence[Any], out_indices: Sequence[Expr], out_shape: Sequence[Any] = ()
) -> tuple[Expr, ...]:
    """:func:`broadcast_index` on a shape (for operands whose leading dims are not the output's)."""
    offset = len(out_indices) - len(shape)
    idx: list[Expr] = []
    for d, extent in enumerate(shape):
        if _one(extent) and out_shape and offset + d >= 0 and _one(out_shape[offset + d]):
            idx.append(out_indices[offset + d])
        elif _one(extent):
            idx.append(Const(0, "int64"))
        elif offset + d < 0:
            raise GraphError(f"shape {tuple(shape)} does not broadcast to rank {len(out_indices)}")
        else:
            idx.append(out_indices[offset + d])
    return tuple(idx)


def _c(value: float, like: Expr) -> Expr:
    """A constant of ``like``'s dtype."""
    return te.const(value, like.dtype)


def _lower_map(ctx: LowerContext, fn: Callable[..., Expr], inputs: Sequence[int]) -> list[Tensor]:
    """One stage: ``fn`` of the (broadcast) elements of ``inputs``, cast to the output dtype."""
    out = ctx.outputs[0]
    tensors = [ctx.tensor(i) for i in inputs]
    shape = te_shape(out.shape)

    def body(*idx: Expr) -> Expr:
        return fn(*(t[broadcast_index(t, idx, shape)] for t in tensors))

    return [te.compute(shape, body, name=ctx.name, dtype=out.dtype)]


def _result(value: Any, dtype: Any) -> np.ndarray:
    """NumPy ufuncs return scalars for rank-0 operands; give an array of the exact dtype."""
    return np.asarray(value).astype(dtype, copy=False)


def input_array(node: Node, arrays: Sequence[np.ndarray | None], i: int) -> np.ndarray:
    """Input ``i`` of an evaluation; GraphError naming the node when it is omitted."""
    x = arrays[i] if i < len(arrays) else None
    if x is None:
        raise GraphError(f"{node.describe()} needs input {i}")
    return np.asarray(x)


# -- binary operators ------------------------------------------------------------


def _np_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if is_float(a.dtype.name):
        return a / b
    # ONNX (like C) truncates integer quotients toward zero; NumPy floors them.
    q = np.floor_divide(a, b)
    fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
    return q + fix.astype(q.dtype)


def _te_div(a: Expr, b: Expr) -> Expr:
    if is_float(a.dtype):
        return a / b
    q, r = a // b, a % b  # Python's floor semantics in the kernel
    return te.if_then_else(te.not_equal(r, 0) & te.not_equal(a < 0, b < 0), q + 1, q)


#: Binary operators: name -> (NumPy function, te function).
BINARY: dict[str, tuple[Callable[[Any, Any], Any], Callable[[Expr, Expr], Expr]]] = {
    "Add": (np.add, lambda a, b: a + b),
    "Sub": (np.subtract, lambda a, b: a - b),
    "Mul": (np.multiply, lambda a, b: a * b),
    "Div": (_np_div, _te_div),
    "Equal": (np.equal, te.equal),
    "Less": (np.less, lambda a, b: a < b),
    "Greater": (np.greater, lambda a, b: a > b),
    "LessOrEqual": (np.less_equal, lambda a, b: a <= b),
    "GreaterOrEqual": (np.greater_equal, lambda a, b: a >= b),
    "And": (np.logical_and, lambda a, b: a & b),
    "Or": (np.logical_or, lambda a, b: a | b),
    "Xor": (np.logical_xor, te.not_equal),
}
_BOOL_RESULT = ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor")


def _eval_binary(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    a, b = input_array(node, arrays, 0), input_array(node, arrays, 1)
    dtype = np.bool_ if node.op in _BOOL_RESULT else a.dtype
    with np.errstate(all="ignore"):
        return [_result(BINARY[node.op][0](a, b), dtype)]


def _lower_binary(ctx: LowerContext) -> list[Tensor]:
    return _lower_map(ctx, BINARY[ctx.node.op][1], [0, 1])


for _op in BINARY:
    register(_op, OpKind.ELEMENTWISE, lower=_lower_binary)(_eval_binary)


@register("Mod", OpKind.ELEMENTWISE, lower=lambda ctx: _lower_mod(ctx))
def _eval_mod(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """``fmod=0``: the remainder takes the divisor's sign (Python's); ``fmod=1``: the dividend's (C's)."""
    a, b = input_array(node, arrays, 0), input_array(node, arrays, 1)
    with np.errstate(all="ignore"):
        out = np.fmod(a, b) if node.attrs.get("fmod", 0) else np.mod(a, b)
    return [_result(out, a.dtype)]


def _lower_mod(ctx: LowerContext) -> list[Tensor]:
    def fn(a: Expr, b: Expr) -> Expr:
        r = a % b  # Python's remainder in the kernel, for ints and floats
        if not ctx.node.attrs.get("fmod", 0):
            return r
        return te.if_then_else(te.not_equal(r, 0) & te.not_equal(a < 0, b < 0), r - b, r)

    return _lower_map(ctx, fn, [0, 1])


@register("PRelu", OpKind.ELEMENTWISE, lower=lambda ctx: _lower_map(ctx, _te_prelu, [0, 1]))
def _eval_prelu(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x, slope = input_array(node, arrays, 0), input_array(node, arrays, 1)
    return [_result(np.where(x < 0, x * slope, x), x.dtype)]


def _te_prelu(x: Expr, slope: Expr) -> Expr:
    return te.if_then_else(x < 0, x * slope, x)


@register("Pow", OpKind.ELEMENTWISE, lower=lambda ctx: _lower_pow(ctx))
def _eval_pow(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    a, b = input_array(node, arrays, 0), input_array(node, arrays, 1)
    with np.errstate(all="ignore"):
        if not is_float(a.dtype.name):
            return [_result(np.power(a.astype(np.float64), b), a.dtype)]
        return [_result(np.power(a, b.astype(a.dtype)), a.dtype)]


def _const_scalar(data: np.ndarray | None) -> float | None:
    """The one value of a constant whose elements are all equal, else None."""
    if data is None or data.size == 0:
        return None
    flat = data.ravel()
    return float(flat[0]) if bool(np.all(flat == flat[0])) else None


def _lower_pow(ctx: LowerContext) -> list[Tensor]:
    out = ctx.outputs[0]
    exponent = _const_scalar(ctx.consts[1] if len(ctx.consts) > 1 else None)
    special: dict[float, Unary] = {
        1.0: lambda v: v,
        2.0: lambda v: v * v,
        3.0: lambda v: v * v * v,
        0.5: te.sqrt,
        -1.0: lambda v: 1.0 / v,
    }
    if exponent in special and (is_float(out.dtype) or exponent >= 1):
        return _lower_map(ctx, special[exponent], [0])
    if not is_float(out.dtype):
        return _lower_map(ctx, lambda a, b: te.pow(a.astype("float64"), b), [0, 1])
    return _lower_map(ctx, lambda a, b: te.pow(a, b.astype(a.dtype)), [0, 1])


# -- variadic, Where, Clip, Cast --------------------------------------------------

_VARIADIC: dict[str, tuple[Callable[[Any, Any], Any], Callable[[Expr, Expr], Expr]]] = {
    "Sum": (np.add, lambda a, b: a + b),
    "Mean": (np.add, lambda a, b: a + b),
    "Max": (np.maximum, te.maximum),
    "Min": (np.minimum, te.minimum),
}


def _present(node: Node) -> list[int]:
    return [i for i, name in enumerate(node.inputs) if name]


def _eval_variadic(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    xs = [input_array(node, arrays, i) for i in _present(node)]
    if not xs:
        raise GraphError(f"{node.describe()} needs at least one input")
    acc = functools.reduce(_VARIADIC[node.op][0], xs)
    if node.op == "Mean":
        acc = acc / len(xs)
    return [_result(acc, xs[0].dtype)]


def _lower_variadic(ctx: LowerContext) -> list[Tensor]:
    combine = _VARIADIC[ctx.node.op][1]
    present = _present(ctx.node)

    def fn(*xs: Expr) -> Expr:
        acc = functools.reduce(combine, xs)
        return acc / _c(len(xs), acc) if ctx.node.op == "Mean" else acc

    return _lower_map(ctx, fn, present)


for _op in _VARIADIC:
    register(_op, OpKind.ELEMENTWISE, lower=_lower_variadic)(_eval_variadic)


@register(
    "Where", OpKind.ELEMENTWISE, lower=lambda ctx: _lower_map(ctx, te.if_then_else, [0, 1, 2])
)
def _eval_where(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    c, x, y = (input_array(node, arrays, i) for i in range(3))
    return [_result(np.where(c, x, y), x.dtype)]


def _clip_bounds(
    node: Node, values: Sequence[np.ndarray | None]
) -> tuple[float | np.ndarray | None, float | np.ndarray | None]:
    """Clip's (min, max): attributes before opset 11, optional scalar inputs from 11 (None: none)."""
    lo: Any = node.attrs.get("min")
    hi: Any = node.attrs.get("max")
    for pos in (1, 2):
        if pos < len(node.inputs) and node.inputs[pos]:
            v = values[pos] if pos < len(values) else None
            if pos == 1:
                lo = v
            else:
                hi = v
    return lo, hi


@register("Clip", OpKind.ELEMENTWISE, lower=lambda ctx: _lower_clip(ctx))
def _eval_clip(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x = input_array(node, arrays, 0)
    lo, hi = _clip_bounds(node, arrays)
    out = x
    # max then min: where min > max every element becomes max, as ONNX says.
    if lo is not None:
        out = np.maximum(out, np.asarray(lo).astype(x.dtype))
    if hi is not None:
        out = np.minimum(out, np.asarray(hi).astype(x.dtype))
    return [_result(out, x.dtype)]


def _lower_clip(ctx: LowerContext) -> list[Tensor]:
    node = ctx.node
    x = ctx.tensor(0)
    lo, hi = _clip_bounds(node, ctx.consts)
    tensors = {
        pos: ctx.inputs[pos] for pos in (1, 2) if pos < len(node.inputs) and node.inputs[pos]
    }

    def bound(value: Any, pos: int, v: Expr) -> Expr | None:
        if value is not None:
            data = np.asarray(value).astype(x.dtype).ravel()
            return te.const(data[0].item(), x.dtype)
        t = tensors.get(pos)
        return None if t is None else t[(Const(0, "int64"),) * t.ndim].astype(v.dtype)

    def fn(v: Expr) -> Expr:
        b_lo, b_hi = bound(lo, 1, v), bound(hi, 2, v)
        if b_lo is not None:
            v = te.maximum(v, b_lo)
        if b_hi is not None:
            v = te.minimum(v, b_hi)
        return v

    return _lower_map(ctx, fn, [0])


def cast_dtype(node: Node, code: Any) -> str:
    """The NumPy dtype name of ONNX element type ``code``; GraphError if not supported."""
    try:
        return ONNX_DTYPES[int(code)]
    except (KeyError, TypeError, ValueError):
        raise GraphError(
            f"{node.describe()} casts to ONNX type {code!r}, which is not supported"
        ) from None


@register("Cast", OpKind.ELEMENTWISE, lower=lambda ctx: _lower_map(ctx, lambda x: x, [0]))
def _eval_cast(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x = input_array(node, arrays, 0)
    with np.errstate(all="ignore"):
        return [_result(x, cast_dtype(node, node.attrs.get("to")))]


@register("CastLike", OpKind.ELEMENTWISE, lower=lambda ctx: _lower_map(ctx, lambda x: x, [0]))
def _eval_cast_like(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x, like = input_array(node, arrays, 0), input_array(node, arrays, 1)
    with np.errstate(all="ignore"):
        return [_result(x, like.dtype)]
