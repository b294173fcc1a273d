"""Channels-last twins of the window operators: ``tuner.NhwcConv``, ``tuner.NhwcMaxPool`` ...

The layout pass (:mod:`tuner.graph.layout`) rewrites a convolutional
network's 2-D windows to read and write ``[N, H, W, C]`` tensors. Each twin
has its ONNX operator's attributes and meaning, with the first input and
the output channels-last; a Conv's weight and bias stay as ONNX has them
(``[K, C/group, R, S]`` and ``[K]``): the template that computes it packs
the constant weight once, at compile time (``tuner.model.templates``).

The NumPy evaluation and the plain lowering are the ONNX operator's,
between a transpose in and a transpose out: these are the reference and the
fallback; the fast path is the template.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from ... import te
from ...te import Tensor
from ..ir import Node, Value
from . import LowerContext, OpKind, opdef, register

__all__ = ["NHWC_OPS", "nhwc_op"]

#: ONNX operator -> its channels-last twin.
NHWC_OPS = {
    "Conv": "tuner.NhwcConv",
    "MaxPool": "tuner.NhwcMaxPool",
    "AveragePool": "tuner.NhwcAveragePool",
    "GlobalAveragePool": "tuner.NhwcGlobalAveragePool",
    "GlobalMaxPool": "tuner.NhwcGlobalMaxPool",
    "tuner.QConv": "tuner.NhwcQConv",
}
_BASE = {twin: base for base, twin in NHWC_OPS.items()}


def nhwc_op(op: str) -> str | None:
    """The ONNX operator a channels-last twin stands for (None for any other operator)."""
    return _BASE.get(op)


def _base(node: Node) -> Node:
    return dataclasses.replace(node, op=_BASE[node.op])


def _evaluate(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x, *rest = arrays
    assert x is not None
    ys = opdef(_BASE[node.op]).evaluate(_base(node), [x.transpose(0, 3, 1, 2), *rest])
    return [np.ascontiguousarray(y.transpose(0, 2, 3, 1)) for y in ys]


def _lower(ctx: LowerContext) -> list[Tensor]:
    x = ctx.tensor(0)
    n, h, w, c = x.shape_ints
    xt = te.compute((n, c, h, w), lambda b, k, i, j: x[b, i, j, k], name=f"{ctx.name}_nchw")
    outs = [
        Value(v.name, v.dtype, (v.shape[0], v.shape[3], v.shape[1], v.shape[2]))
        for v in ctx.outputs
    ]
    base = dataclasses.replace(
        ctx, node=_base(ctx.node), inputs=[xt, *ctx.inputs[1:]], outputs=outs, name=f"{ctx.name}_b"
    )
    lower = opdef(_BASE[ctx.node.op]).lower
    assert lower is not None
    ys = lower(base)
    return [_to_nhwc(y, ctx.name if len(ys) == 1 else f"{ctx.name}_{o}") for o, y in enumerate(ys)]


def _to_nhwc(y: Tensor, name: str) -> Tensor:
    n, c, h, w = y.shape_ints
    return te.compute((n, h, w, c), lambda b, i, j, k: y[b, k, i, j], name=name)


def _register() -> None:
    for base, twin in NHWC_OPS.items():
        anchors = ("Conv", "tuner.QConv", "MaxPool", "AveragePool")
        kind = OpKind.ANCHOR if base in anchors else OpKind.REDUCTION
        register(twin, kind, lower=_lower)(_evaluate)


_register()
