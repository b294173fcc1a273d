"""Tensor expressions: what an operator computes, in the style of TVM's ``te``.

>>> from tuner import te
>>> A = te.placeholder((64, 32), "float32", name="A")
>>> B = te.placeholder((32, 16), "float32", name="B")
>>> k = te.reduce_axis(32, name="k")
>>> C = te.compute((64, 16), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
>>> s = te.create_schedule(C)
"""

from ..schedule.schedule import create_schedule
from .expr import Expr, IterVar, Var, equal, not_equal
from .ops import (
    abs,
    const,
    erf,
    exp,
    if_then_else,
    log,
    max,
    maximum,
    min,
    minimum,
    pow,
    sigmoid,
    sqrt,
    sum,
    tanh,
)
from .reducer import CommReducer, comm_reducer
from .tensor import Tensor, TensorError, compute, placeholder, reduce_axis, var

__all__ = [
    "CommReducer",
    "Expr",
    "IterVar",
    "Tensor",
    "TensorError",
    "Var",
    "abs",
    "comm_reducer",
    "compute",
    "const",
    "create_schedule",
    "equal",
    "erf",
    "exp",
    "if_then_else",
    "log",
    "max",
    "maximum",
    "min",
    "minimum",
    "not_equal",
    "placeholder",
    "pow",
    "reduce_axis",
    "sigmoid",
    "sqrt",
    "sum",
    "tanh",
    "var",
]
