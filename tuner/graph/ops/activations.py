"""Activations and math functions written once, for te expressions and NumPy arrays alike.

Each function takes the math it computes with, :data:`TE` (te's intrinsics:
the kernels) or :data:`NP` (NumPy: constant folding, the graph interpreter,
every template's reference), then its operand and attributes. The ONNX
operators (``unary``) and the templates' fused epilogues
(``search_spaces._epilogue``) both read them here, so a kernel and its
reference cannot drift apart.

Floor, Ceil and Round of te expressions are built from casts and selects,
since the backends have no rounding intrinsics.

>>> relu(TE, te.placeholder((4,), name="x")[0])
max(x[0], 0)
>>> gelu(NP, np.float32([1.0]))
array([0.8413447], dtype=float32)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import te
from ...te import Expr

__all__ = [
    "NP",
    "TE",
    "Math",
    "clip",
    "elu",
    "gelu",
    "gelu_tanh",
    "hard_sigmoid",
    "hard_swish",
    "leaky_relu",
    "relu",
    "selu",
    "softplus",
]

Fn = Callable[..., Any]

SELU_ALPHA = 1.67326319217681884765625
SELU_GAMMA = 1.05070102214813232421875
_SQRT_HALF = 1.0 / math.sqrt(2.0)
_GELU_TANH = math.sqrt(2.0 / math.pi)


@dataclass(frozen=True)
class Math:
    """The primitive functions one side computes with (``where`` is a select)."""

    exp: Fn
    log: Fn
    tanh: Fn
    sqrt: Fn
    abs: Fn
    erf: Fn
    sigmoid: Fn
    maximum: Fn
    minimum: Fn
    pow: Fn
    where: Fn
    floor: Fn
    ceil: Fn
    round: Fn
    sign: Fn
    logical_not: Fn


# -- te's side: rounding without intrinsics -------------------------------------


def _c(value: float, like: Expr) -> Expr:
    return te.const(value, like.dtype)


def _integral_limit(x: Expr) -> Expr:
    """Floats at least this large are integers already (and would overflow an int64 cast)."""
    return _c(2.0**23 if x.dtype == "float32" else 2.0**52, x)


def _te_floor(x: Expr) -> Expr:
    t = x.astype("int64").astype(x.dtype)  # truncation toward zero
    return te.if_then_else(te.abs(x) < _integral_limit(x), te.if_then_else(x < t, t - 1, t), x)


def _te_ceil(x: Expr) -> Expr:
    t = x.astype("int64").astype(x.dtype)
    return te.if_then_else(te.abs(x) < _integral_limit(x), te.if_then_else(x > t, t + 1, t), x)


def _te_round(x: Expr) -> Expr:
    """Round half to even, as ONNX (and NumPy) do."""
    f = _te_floor(x)
    d = x - f
    odd = (f.astype("int64") % 2).astype(x.dtype)  # Python's %: 0 or 1 for negatives too
    near = te.if_then_else(d > 0.5, f + 1, te.if_then_else(d < 0.5, f, f + odd))
    return te.if_then_else(te.abs(x) < _integral_limit(x), near, x)


def _te_sign(x: Expr) -> Expr:
    return te.if_then_else(x > 0, _c(1, x), te.if_then_else(x < 0, _c(-1, x), _c(0, x)))


TE = Math(
    exp=te.exp,
    log=te.log,
    tanh=te.tanh,
    sqrt=te.sqrt,
    abs=te.abs,
    erf=te.erf,
    sigmoid=te.sigmoid,
    maximum=te.maximum,
    minimum=te.minimum,
    pow=te.pow,
    where=te.if_then_else,
    floor=_te_floor,
    ceil=_te_ceil,
    round=_te_round,
    sign=_te_sign,
    logical_not=lambda x: ~x,
)


# -- NumPy's side ----------------------------------------------------------------


def _np_sigmoid(x: np.ndarray) -> np.ndarray:
    """Without overflow: ``exp`` of minus the magnitude only."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _np_erf(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf

    return np.asarray(erf(x))


NP = Math(
    exp=np.exp,
    log=np.log,
    tanh=np.tanh,
    sqrt=np.sqrt,
    abs=np.abs,
    erf=_np_erf,
    sigmoid=_np_sigmoid,
    maximum=np.maximum,
    minimum=np.minimum,
    pow=np.power,
    where=np.where,
    floor=np.floor,
    ceil=np.ceil,
    round=np.round,  # half to even
    sign=np.sign,
    logical_not=np.logical_not,
)


# -- the activations ---------------------------------------------------------------


def relu(m: Math, x: Any) -> Any:
    """``max(x, 0)``, in ``x``'s own type (ONNX's Relu takes integers too)."""
    return m.maximum(x, 0)


def leaky_relu(m: Math, x: Any, alpha: float = 0.01) -> Any:
    """ONNX's LeakyRelu without a branch: ``max(x, 0) + alpha * min(x, 0)``."""
    return m.maximum(x, 0.0) + alpha * m.minimum(x, 0.0)


def elu(m: Math, x: Any, alpha: float = 1.0) -> Any:
    return m.where(x < 0, (m.exp(x) - 1.0) * alpha, x)


def selu(m: Math, x: Any, alpha: float = SELU_ALPHA, gamma: float = SELU_GAMMA) -> Any:
    return m.where(x <= 0, m.exp(x) * alpha - alpha, x) * gamma


def hard_sigmoid(m: Math, x: Any, alpha: float = 0.2, beta: float = 0.5) -> Any:
    """ONNX's HardSigmoid: ``max(0, min(1, alpha * x + beta))``."""
    return m.maximum(m.minimum(x * alpha + beta, 1.0), 0.0)


def hard_swish(m: Math, x: Any) -> Any:
    return x * hard_sigmoid(m, x, 1.0 / 6.0, 0.5)


def softplus(m: Math, x: Any) -> Any:
    """Stable: ``max(x, 0) + log(1 + exp(-|x|))`` never overflows."""
    return m.maximum(x, 0.0) + m.log(m.exp(-m.abs(x)) + 1.0)


def gelu(m: Math, x: Any) -> Any:
    return 0.5 * x * (1.0 + m.erf(x * _SQRT_HALF))


def gelu_tanh(m: Math, x: Any) -> Any:
    """GELU's tanh approximation, ``x`` read four times (te has no common subexpressions)."""
    return 0.5 * x * (1.0 + m.tanh(x * (_GELU_TANH + (_GELU_TANH * 0.044715) * (x * x))))


def clip(m: Math, x: Any, lo: float, hi: float) -> Any:
    """``min(max(x, lo), hi)``; an infinite bound is left out (``np.clip`` when lo > hi)."""
    if lo != -math.inf:
        x = m.maximum(x, lo)
    if hi != math.inf:
        x = m.minimum(x, hi)
    return x
