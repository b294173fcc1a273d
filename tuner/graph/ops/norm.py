"""Normalisations of neural networks: LRN, BatchNormalization and InstanceNormalization.

Each reads its statistics along the channel axis (axis 1) of an NCHW-style
input, in float32 or float64: LRN over a window of neighbouring channels,
BatchNormalization from its running mean and variance (inference only, so it
is elementwise), InstanceNormalization over the spatial axes of each ``(n,
c)``. The NumPy evaluations accumulate in float64. LayerNormalization, a
reduction over trailing axes, is in ``reduce``; the operators over windows
are in ``nn``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ... import te
from ...te import Tensor
from ..ir import GraphError, Node
from . import LowerContext, OpKind, register
from .nn import _float, _one_output


@dataclass(frozen=True)
class _Lrn:
    size: int
    alpha: float
    beta: float
    bias: float

    @classmethod
    def read(cls, node: Node, rank: int) -> _Lrn:
        if node.attr("size") is None or int(node.attr("size")) < 1:
            raise GraphError(f"{node.describe()} needs a positive size")
        if rank < 2:
            raise GraphError(f"{node.describe()} needs an input of rank 2 or more")
        return cls(
            int(node.attr("size")),
            float(node.attr("alpha", 1e-4)),
            float(node.attr("beta", 0.75)),
            float(node.attr("bias", 1.0)),
        )

    @property
    def before(self) -> int:
        """Channels of the window before the centre: floor((size - 1) / 2)."""
        return (self.size - 1) // 2


def _lower_lrn(ctx: LowerContext) -> list[Tensor]:
    """``Y = X / (bias + alpha / size * sum of X**2 over the channel window) ** beta``."""
    x = ctx.tensor(0)
    _float(ctx.node, x)
    a = _Lrn.read(ctx.node, x.ndim)
    shape = x.shape_ints
    r = te.reduce_axis(a.size, name=f"{ctx.name}_rc")

    def window(*i: te.Expr) -> te.Expr:
        ch = i[1] + r - a.before if a.before else i[1] + r
        v = x[(i[0], ch, *i[2:])]
        inside = (ch >= 0) & (ch < shape[1])
        return te.sum(te.if_then_else(inside, v * v, 0.0), axis=r)

    sq = te.compute(shape, window, name=f"{ctx.name}_sq")
    scale = a.alpha / a.size
    y = te.compute(shape, lambda *i: x[i] / te.pow(sq[i] * scale + a.bias, a.beta), name=ctx.name)
    return [y]


@register("LRN", OpKind.REDUCTION, lower=_lower_lrn)
def _lrn(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x = arrays[0]
    assert x is not None
    _float(node, x)
    a = _Lrn.read(node, x.ndim)
    sq = x.astype(np.float64) ** 2
    widths = [(0, 0), (a.before, a.size - 1 - a.before)] + [(0, 0)] * (x.ndim - 2)
    sq = np.pad(sq, widths)
    c = x.shape[1]
    window = sum(sq[:, r : r + c] for r in range(a.size))
    y = x / (a.bias + a.alpha / a.size * window) ** a.beta
    return [y.astype(x.dtype)]


def _bn_check(node: Node, rank: int) -> float:
    """BatchNormalization's epsilon; GraphError for what inference cannot do."""
    if int(node.attr("training_mode", 0)):
        raise GraphError(f"{node.describe()} is in training mode; only inference is supported")
    _one_output(node)
    if rank < 2:
        raise GraphError(f"{node.describe()} needs an input of rank 2 or more")
    return float(node.attr("epsilon", 1e-5))


def _lower_batch_norm(ctx: LowerContext) -> list[Tensor]:
    """``Y = (X - mean[c]) * (scale[c] / sqrt(var[c] + epsilon)) + B[c]`` with ``c`` axis 1."""
    x = ctx.tensor(0)
    _float(ctx.node, x)
    eps = _bn_check(ctx.node, x.ndim)
    scale, shift, mean, var = (ctx.tensor(i) for i in range(1, 5))
    dt = x.dtype

    def body(*i: te.Expr) -> te.Expr:
        c = i[1]
        gain = scale[c].astype(dt) / te.sqrt(var[c].astype(dt) + eps)
        return (x[i] - mean[c].astype(dt)) * gain + shift[c].astype(dt)

    return [te.compute(x.shape_ints, body, name=ctx.name)]


@register("BatchNormalization", OpKind.ELEMENTWISE, lower=_lower_batch_norm)
def _batch_norm(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x = arrays[0]
    assert x is not None
    _float(node, x)
    eps = _bn_check(node, x.ndim)
    scale, shift, mean, var = (
        np.asarray(a, np.float64).reshape(-1, *(1,) * (x.ndim - 2)) for a in arrays[1:5]
    )
    y = (x - mean) * (scale / np.sqrt(var + eps)) + shift
    return [y.astype(x.dtype)]


def _lower_instance_norm(ctx: LowerContext) -> list[Tensor]:
    """Mean and variance over the spatial axes of each ``(n, c)``, then scale and shift."""
    x, scale, shift = ctx.tensor(0), ctx.tensor(1), ctx.tensor(2)
    _float(ctx.node, x)
    shape = x.shape_ints
    if len(shape) < 3:
        raise GraphError(f"{ctx.node.describe()} needs an input of rank 3 or more, got {shape}")
    eps = float(ctx.node.attr("epsilon", 1e-5))
    size = float(np.prod(shape[2:]))
    r1 = [te.reduce_axis(e, name=f"{ctx.name}_m{j}") for j, e in enumerate(shape[2:])]
    r2 = [te.reduce_axis(e, name=f"{ctx.name}_v{j}") for j, e in enumerate(shape[2:])]
    total = te.compute(
        shape[:2], lambda n, c: te.sum(x[(n, c, *r1)], axis=r1), name=f"{ctx.name}_sum"
    )

    def dev(n: te.Expr, c: te.Expr) -> te.Expr:
        d = x[(n, c, *r2)] - total[n, c] / size
        return te.sum(d * d, axis=r2)

    sq = te.compute(shape[:2], dev, name=f"{ctx.name}_sq")

    def body(*i: te.Expr) -> te.Expr:
        n, c = i[0], i[1]
        gain = scale[c].astype(x.dtype) / te.sqrt(sq[n, c] / size + eps)
        return (x[i] - total[n, c] / size) * gain + shift[c].astype(x.dtype)

    return [te.compute(shape, body, name=ctx.name)]


@register("InstanceNormalization", OpKind.REDUCTION, lower=_lower_instance_norm)
def _instance_norm(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x, scale, shift = arrays[0], arrays[1], arrays[2]
    assert x is not None and scale is not None and shift is not None
    _float(node, x)
    if x.ndim < 3:
        raise GraphError(f"{node.describe()} needs an input of rank 3 or more, got {x.shape}")
    eps = float(node.attr("epsilon", 1e-5))
    axes = tuple(range(2, x.ndim))
    xf = x.astype(np.float64)
    mean = xf.mean(axis=axes, keepdims=True)
    var = ((xf - mean) ** 2).mean(axis=axes, keepdims=True)
    bshape = (-1, *(1,) * (x.ndim - 2))
    y = (xf - mean) / np.sqrt(var + eps) * scale.reshape(bshape) + shift.reshape(bshape)
    return [y.astype(x.dtype)]
