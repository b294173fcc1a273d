"""Unary elementwise ONNX operators: activations, math functions, rounding, Sign, Not.

Each operator is one function of its operand and its ONNX attributes
(``alpha``, ``beta``, ``gamma``, Gelu's ``approximate``), written once over
the math of :mod:`.activations`: on te expressions it is the lowering, in
NumPy the constant folding and the graph interpreter. The shared
broadcasting helpers are in ``elementwise``.

The te side is offered on its own: :data:`UNARY` (each operator with its
default attributes as a function on te expressions) and :func:`unary` (any
operator and its attributes, ``unary("LeakyRelu", {"alpha": 0.1})``).

>>> UNARY["Relu"](te.placeholder((4,), name="x")[0])
max(x[0], 0)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ...te import Tensor
from ..ir import GraphError, Node
from . import LowerContext, OpKind, register
from . import activations as act
from .elementwise import Unary, _lower_map, _result, input_array

__all__ = ["UNARY", "unary"]

Attrs = Mapping[str, Any]


def _attr(a: Attrs, name: str, default: float) -> float:
    value = a.get(name)
    return default if value is None else float(value)


#: Each operator as ``fn(math, x, attrs)``, on te expressions (``act.TE``) or NumPy (``act.NP``).
_UNARY: dict[str, Callable[[act.Math, Any, Attrs], Any]] = {
    "Sqrt": lambda m, x, a: m.sqrt(x),
    "Exp": lambda m, x, a: m.exp(x),
    "Log": lambda m, x, a: m.log(x),
    "Tanh": lambda m, x, a: m.tanh(x),
    "Sigmoid": lambda m, x, a: m.sigmoid(x),
    "Erf": lambda m, x, a: m.erf(x),
    "Abs": lambda m, x, a: m.abs(x),
    "Neg": lambda m, x, a: -x,
    "Reciprocal": lambda m, x, a: 1.0 / x,
    "Relu": lambda m, x, a: act.relu(m, x),
    "LeakyRelu": lambda m, x, a: act.leaky_relu(m, x, _attr(a, "alpha", 0.01)),
    "Elu": lambda m, x, a: act.elu(m, x, _attr(a, "alpha", 1.0)),
    "Selu": lambda m, x, a: act.selu(
        m, x, _attr(a, "alpha", act.SELU_ALPHA), _attr(a, "gamma", act.SELU_GAMMA)
    ),
    "HardSigmoid": lambda m, x, a: act.hard_sigmoid(
        m, x, _attr(a, "alpha", 0.2), _attr(a, "beta", 0.5)
    ),
    "HardSwish": lambda m, x, a: act.hard_swish(m, x),
    "Softplus": lambda m, x, a: act.softplus(m, x),
    "Gelu": lambda m, x, a: (
        act.gelu_tanh(m, x) if a.get("approximate", "none") == "tanh" else act.gelu(m, x)
    ),
    "Floor": lambda m, x, a: m.floor(x),
    "Ceil": lambda m, x, a: m.ceil(x),
    "Round": lambda m, x, a: m.round(x),
    "Sign": lambda m, x, a: m.sign(x),
    "Not": lambda m, x, a: m.logical_not(x),
}
_UNARY_OPS = tuple(_UNARY)


def unary(op: str, attrs: Attrs | None = None) -> Unary:
    """The te function of unary operator ``op`` with its ONNX attributes (defaults filled in).

    >>> f = unary("HardSigmoid", {"alpha": 0.25})
    """
    if op not in _UNARY_OPS:
        raise GraphError(f"operator {op} is not a unary elementwise operator")
    fn, a = _UNARY[op], attrs or {}
    return lambda x: fn(act.TE, x, a)


#: Each unary operator with its default attributes, as a function on te expressions.
UNARY: dict[str, Unary] = {op: unary(op) for op in _UNARY_OPS}


def _eval_unary(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x = input_array(node, arrays, 0)
    with np.errstate(all="ignore"):
        return [_result(_UNARY[node.op](act.NP, x, node.attrs), x.dtype)]


def _lower_unary(ctx: LowerContext) -> list[Tensor]:
    return _lower_map(ctx, unary(ctx.node.op, ctx.node.attrs), [0])


for _op in _UNARY_OPS:
    register(_op, OpKind.ELEMENTWISE, lower=_lower_unary)(_eval_unary)
