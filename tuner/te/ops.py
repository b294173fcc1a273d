"""Reductions, conditionals, constants and math intrinsics of the expression language."""

from __future__ import annotations

from collections.abc import Sequence

from .dtypes import check_dtype, is_float
from .expr import Binary, Call, Const, Expr, ExprLike, IterVar, Reduce, Select, as_expr, binary
from .tensor import TensorError

__all__ = [
    "abs",
    "const",
    "erf",
    "exp",
    "if_then_else",
    "log",
    "max",
    "maximum",
    "min",
    "minimum",
    "pow",
    "sigmoid",
    "sqrt",
    "sum",
    "tanh",
]


def _reduce(combiner: str, source: ExprLike, axis: IterVar | Sequence[IterVar]) -> Reduce:
    axes = (axis,) if isinstance(axis, IterVar) else tuple(axis)
    if not axes:
        raise TensorError(f"te.{combiner} needs at least one reduce axis")
    for a in axes:
        if not isinstance(a, IterVar) or a.kind != "reduce":
            raise TensorError(f"te.{combiner} axis {a!r} is not a te.reduce_axis")
    expr = as_expr(source)
    return Reduce(combiner, expr, axes, expr.dtype)


def sum(source: ExprLike, axis: IterVar | Sequence[IterVar]) -> Reduce:
    """Sum of ``source`` over ``axis`` (identity 0)."""
    return _reduce("sum", source, axis)


def max(source: ExprLike, axis: IterVar | Sequence[IterVar]) -> Reduce:
    """Maximum of ``source`` over ``axis`` (identity -inf, or the dtype's minimum)."""
    return _reduce("max", source, axis)


def min(source: ExprLike, axis: IterVar | Sequence[IterVar]) -> Reduce:
    """Minimum of ``source`` over ``axis`` (identity +inf, or the dtype's maximum)."""
    return _reduce("min", source, axis)


def const(value: int | float | bool, dtype: str = "float32") -> Expr:
    """A constant of an explicit dtype (``te.const(0, "float32")``)."""
    check_dtype(dtype, "te.const")
    if dtype == "bool":
        return as_expr(bool(value))
    return Const(float(value) if is_float(dtype) else int(value), dtype)


def if_then_else(cond: ExprLike, true_value: ExprLike, false_value: ExprLike) -> Expr:
    """``true_value`` where ``cond`` holds, else ``false_value`` (padding, masking)."""
    c = as_expr(cond)
    if c.dtype != "bool":
        raise TensorError(f"te.if_then_else condition must be a comparison, got {c!r}")
    both = binary("add", true_value, false_value)
    assert isinstance(both, Binary)
    return Select(c, both.a.astype(both.dtype), both.b.astype(both.dtype), both.dtype)


def _unary(name: str, x: ExprLike) -> Expr:
    e = as_expr(x, "float32")
    dtype = e.dtype if is_float(e.dtype) else "float32"
    return Call(name, (e.astype(dtype),), dtype)


def exp(x: ExprLike) -> Expr:
    return _unary("exp", x)


def log(x: ExprLike) -> Expr:
    return _unary("log", x)


def sqrt(x: ExprLike) -> Expr:
    return _unary("sqrt", x)


def tanh(x: ExprLike) -> Expr:
    return _unary("tanh", x)


def sigmoid(x: ExprLike) -> Expr:
    return _unary("sigmoid", x)


def erf(x: ExprLike) -> Expr:
    return _unary("erf", x)


def abs(x: ExprLike) -> Expr:
    e = as_expr(x)
    return Call("abs", (e,), e.dtype)


def pow(x: ExprLike, y: ExprLike) -> Expr:
    return binary("pow", x, y)


def maximum(x: ExprLike, y: ExprLike) -> Expr:
    return binary("max", x, y)


def minimum(x: ExprLike, y: ExprLike) -> Expr:
    return binary("min", x, y)
