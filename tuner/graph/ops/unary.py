"""Unary elementwise ONNX operators: activations, math functions, rounding, Sign, Not.

Each operator is a pair of tables, one on te expressions (the lowering) and
one in NumPy (constant folding, the graph interpreter), keyed by the ONNX
operator and read with its attributes (``alpha``, ``beta``, ``gamma``,
Gelu's ``approximate``). Floor, Ceil and Round are built from casts and
selects, since the backends have no rounding intrinsics. The shared
broadcasting helpers are in ``elementwise``.

The te side is offered on its own: :data:`UNARY` (each operator with its
default attributes as a function on te expressions) and :func:`unary` (any
operator and its attributes, ``unary("LeakyRelu", {"alpha": 0.1})``).

>>> UNARY["Relu"](te.placeholder((4,), name="x")[0])
max(x[0], 0)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ... import te
from ...te import Expr, Tensor
from ..ir import GraphError, Node
from . import LowerContext, OpKind, register
from .elementwise import Unary, _c, _lower_map, _result, input_array

__all__ = ["UNARY", "unary"]

Attrs = Mapping[str, Any]

_SELU_ALPHA = 1.67326319217681884765625
_SELU_GAMMA = 1.05070102214813232421875


# -- rounding without intrinsics ----------------------------------------------


def _integral_limit(x: Expr) -> Expr:
    """Floats at least this large are integers already (and would overflow an int64 cast)."""
    return _c(2.0**23 if x.dtype == "float32" else 2.0**52, x)


def _floor(x: Expr) -> Expr:
    t = x.astype("int64").astype(x.dtype)  # truncation toward zero
    return te.if_then_else(te.abs(x) < _integral_limit(x), te.if_then_else(x < t, t - 1, t), x)


def _ceil(x: Expr) -> Expr:
    t = x.astype("int64").astype(x.dtype)
    return te.if_then_else(te.abs(x) < _integral_limit(x), te.if_then_else(x > t, t + 1, t), x)


def _round(x: Expr) -> Expr:
    """Round half to even, as ONNX (and NumPy) do."""
    f = _floor(x)
    d = x - f
    odd = (f.astype("int64") % 2).astype(x.dtype)  # Python's %: 0 or 1 for negatives too
    half = f + odd
    near = te.if_then_else(d > 0.5, f + 1, te.if_then_else(d < 0.5, f, half))
    return te.if_then_else(te.abs(x) < _integral_limit(x), near, x)


# -- unary operators -------------------------------------------------------------


def _te_unary(op: str, a: Attrs) -> Unary:
    alpha = a.get("alpha")
    beta = a.get("beta")
    table: dict[str, Unary] = {
        "Sqrt": te.sqrt,
        "Exp": te.exp,
        "Log": te.log,
        "Tanh": te.tanh,
        "Sigmoid": te.sigmoid,
        "Erf": te.erf,
        "Abs": te.abs,
        "Neg": lambda x: -x,
        "Reciprocal": lambda x: 1.0 / x,
        "Relu": lambda x: te.maximum(x, 0),
        "LeakyRelu": lambda x: te.if_then_else(x < 0, x * (0.01 if alpha is None else alpha), x),
        "Elu": lambda x: te.if_then_else(
            x < 0, (te.exp(x) - 1.0) * (1.0 if alpha is None else alpha), x
        ),
        "Selu": lambda x: (
            te.if_then_else(
                x <= 0,
                te.exp(x) * (_SELU_ALPHA if alpha is None else alpha)
                - (_SELU_ALPHA if alpha is None else alpha),
                x,
            )
            * (a.get("gamma", _SELU_GAMMA))
        ),
        "HardSigmoid": lambda x: te.maximum(
            te.minimum(
                x * (0.2 if alpha is None else alpha) + (0.5 if beta is None else beta), 1.0
            ),
            0.0,
        ),
        "HardSwish": lambda x: x * te.maximum(te.minimum(x * (1.0 / 6.0) + 0.5, 1.0), 0.0),
        # Stable: max(x, 0) + log(1 + exp(-|x|)) never overflows.
        "Softplus": lambda x: te.maximum(x, 0.0) + te.log(te.exp(-te.abs(x)) + 1.0),
        "Gelu": _gelu_tanh if a.get("approximate", "none") == "tanh" else _gelu,
        "Floor": _floor,
        "Ceil": _ceil,
        "Round": _round,
        "Sign": lambda x: te.if_then_else(
            x > 0, _c(1, x), te.if_then_else(x < 0, _c(-1, x), _c(0, x))
        ),
        "Not": lambda x: ~x,
    }
    return table[op]


def _gelu(x: Expr) -> Expr:
    return x * 0.5 * (te.erf(x * (1.0 / math.sqrt(2.0))) + 1.0)


def _gelu_tanh(x: Expr) -> Expr:
    inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
    return x * 0.5 * (te.tanh(inner) + 1.0)


def _np_sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _np_erf(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf

    return np.asarray(erf(x))


def _np_unary(op: str, a: Attrs) -> Callable[[np.ndarray], np.ndarray]:
    alpha = a.get("alpha")
    beta = a.get("beta")
    table: dict[str, Callable[[np.ndarray], Any]] = {
        "Sqrt": np.sqrt,
        "Exp": np.exp,
        "Log": np.log,
        "Tanh": np.tanh,
        "Sigmoid": _np_sigmoid,
        "Erf": _np_erf,
        "Abs": np.abs,
        "Neg": np.negative,
        "Reciprocal": lambda x: 1 / x,
        "Relu": lambda x: np.maximum(x, 0),
        "LeakyRelu": lambda x: np.where(x < 0, x * (0.01 if alpha is None else alpha), x),
        "Elu": lambda x: np.where(x < 0, (np.exp(x) - 1) * (1.0 if alpha is None else alpha), x),
        "Selu": lambda x: (
            np.where(
                x <= 0,
                np.exp(x) * (_SELU_ALPHA if alpha is None else alpha)
                - (_SELU_ALPHA if alpha is None else alpha),
                x,
            )
            * a.get("gamma", _SELU_GAMMA)
        ),
        "HardSigmoid": lambda x: np.clip(
            x * (0.2 if alpha is None else alpha) + (0.5 if beta is None else beta), 0, 1
        ),
        "HardSwish": lambda x: x * np.clip(x * (1 / 6) + 0.5, 0, 1),
        "Softplus": lambda x: np.maximum(x, 0) + np.log(np.exp(-np.abs(x)) + 1),
        "Gelu": lambda x: (
            x * 0.5 * (np.tanh((x + 0.044715 * x**3) * math.sqrt(2 / math.pi)) + 1)
            if a.get("approximate", "none") == "tanh"
            else x * 0.5 * (_np_erf(x / math.sqrt(2)) + 1)
        ),
        "Floor": np.floor,
        "Ceil": np.ceil,
        "Round": np.round,
        "Sign": np.sign,
        "Not": np.logical_not,
    }
    return table[op]


_UNARY_OPS = tuple(
    [
        "Sqrt",
        "Exp",
        "Log",
        "Tanh",
        "Sigmoid",
        "Erf",
        "Abs",
        "Neg",
        "Reciprocal",
        "Relu",
        "LeakyRelu",
        "Elu",
        "Selu",
        "HardSigmoid",
        "HardSwish",
        "Softplus",
        "Gelu",
        "Floor",
        "Ceil",
        "Round",
        "Sign",
        "Not",
    ]
)


def unary(op: str, attrs: Attrs | None = None) -> Unary:
    """The te function of unary operator ``op`` with its ONNX attributes (defaults filled in).

    >>> f = unary("HardSigmoid", {"alpha": 0.25})
    """
    if op not in _UNARY_OPS:
        raise GraphError(f"operator {op} is not a unary elementwise operator")
    return _te_unary(op, attrs or {})


#: Each unary operator with its default attributes, as a function on te expressions.
UNARY: dict[str, Unary] = {op: unary(op) for op in _UNARY_OPS}


def _eval_unary(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x = input_array(node, arrays, 0)
    with np.errstate(all="ignore"):
        return [_result(_np_unary(node.op, node.attrs)(x), x.dtype)]


def _lower_unary(ctx: LowerContext) -> list[Tensor]:
    return _lower_map(ctx, unary(ctx.node.op, ctx.node.attrs), [0])


for _op in _UNARY_OPS:
    register(_op, OpKind.ELEMENTWISE, lower=_lower_unary)(_eval_unary)
