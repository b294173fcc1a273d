"""``tuner.QConv`` and ``tuner.QMatMul``: a convolution and a matrix product of quantized
operands with a float output, what a QDQ model's ``Conv(DequantizeLinear(x),
DequantizeLinear(w), b)`` and ``MatMul(DequantizeLinear(a), DequantizeLinear(w))``
compute, kept integer.

::

    QConv(xq, wq, x_scale, x_zero_point, w_scale, b)
      = float32(sum (int32(xq) - x_zero_point) * int32(wq)) * float32(x_scale * w_scale[k]) + b[k]

``xq`` is int8 or uint8 with one scale and zero point; ``wq`` an int8 constant with
zero zero points and a scale per output channel (or one); ``b`` float32 (or ``''``).
The sum is exact (int32), so the result is the float convolution of the dequantized
operands up to float32's rounding of the product: what onnxruntime's QLinearConv
computes before it requantizes. The graph pass ``tuner.graph.quantized`` makes these
where the target has an int8 dot product; the layout pass makes them channels-last
(``tuner.NhwcQConv``), and the model compiler runs them as ``im2col_nhwc`` and
``matmul_integer``, the scale, bias, activation and the next QuantizeLinear fused.

::

    QMatMul(aq, wq, a_scale, a_zero_point, w_scale)
      = float32(sum_k (int32(aq[..., k]) - a_zero_point) * int32(wq[k, j])) * float32(a_scale * w_scale[j])

``aq`` has any batch axes; ``wq`` is an int8 ``[K, N]`` constant with zero zero points and
a scale per column (or one); ``a_scale`` and ``a_zero_point`` are one value each, constants
of a static model or computed at run time by a dynamic one (``DynamicQuantizeLinear``).
The model compiler runs it as ``matmul_integer``, its scales the epilogue's first steps.

The NumPy evaluations are exact (int64 sums); the plain lowerings pad with the zero point
and sum in int32.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ... import te
from ...te import Tensor
from ..ir import GraphError, Node
from . import LowerContext, OpKind, register
from .nn import _conv_np, conv_sum
from .windows import conv_params

__all__ = ["QCONV", "QMATMUL"]

#: The operators' names.
QCONV = "tuner.QConv"
QMATMUL = "tuner.QMatMul"


def _check(node: Node, x_dtype: str) -> None:
    if x_dtype not in ("int8", "uint8"):
        raise GraphError(f"{node.describe()} reads a {x_dtype} image; int8 or uint8")


def _scales(x_scale: np.ndarray, w_scale: np.ndarray, channels: int) -> np.ndarray:
    """``x_scale * w_scale`` per output channel, float32 (as the kernel multiplies)."""
    s = np.float32(np.asarray(x_scale).reshape(-1)[0]) * np.asarray(w_scale, np.float32).reshape(-1)
    return np.broadcast_to(s, (channels,)).astype(np.float32)


@register(QCONV, OpKind.ANCHOR, lower=lambda ctx: _lower(ctx), const_inputs=(2, 3, 4))
def _evaluate(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    xq, wq, xs, xz, ws = arrays[:5]
    b = arrays[5] if len(arrays) > 5 else None
    assert xq is not None and wq is not None and xs is not None and xz is not None
    assert ws is not None
    _check(node, xq.dtype.name)
    p = conv_params(node, xq.shape, wq.shape)
    x = xq.astype(np.int64) - np.int64(np.asarray(xz).reshape(-1)[0])
    acc = _conv_np(x.astype(np.float64), wq.astype(np.float64), None, p)  # exact in float64
    y = acc.astype(np.int64).astype(np.float32)
    shape = (1, -1) + (1,) * p.rank
    y = y * _scales(xs, ws, wq.shape[0]).reshape(shape)
    if b is not None:
        y = y + np.asarray(b, np.float32).reshape(shape)
    return [y.astype(np.float32)]


def _lower(ctx: LowerContext) -> list[Tensor]:
    x, w = ctx.tensor(0), ctx.tensor(1)
    _check(ctx.node, x.dtype)
    zero = int(np.asarray(ctx.const(3)).reshape(-1)[0])

    def product(xv: te.Expr, wv: te.Expr) -> te.Expr:
        return (xv.astype("int32") - zero) * wv.astype("int32")

    acc = conv_sum(ctx, x, w, zero, f"{ctx.name}_acc", product)
    xs, ws = ctx.tensor(2), ctx.tensor(4)
    per_channel = int(np.prod(ws.shape_ints)) > 1
    bias = ctx.inputs[5] if len(ctx.inputs) > 5 else None
    zero_index = te.const(0, "int64")

    def out(*i: te.Expr) -> te.Expr:
        k = i[1]
        w_scale = ws[(k if per_channel else zero_index,) + (zero_index,) * (ws.ndim - 1)]
        x_scale = xs[(zero_index,) * xs.ndim]
        y = acc[i].astype("float32") * (x_scale.astype("float32") * w_scale.astype("float32"))
        return y if bias is None else y + bias[k]

    return [te.compute(acc.shape_ints, out, name=ctx.name)]


# -- QMatMul ---------------------------------------------------------------------------


@register(QMATMUL, OpKind.ANCHOR, lower=lambda ctx: _lower_matmul(ctx))
def _evaluate_matmul(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    aq, wq, a_s, a_z, ws = arrays[:5]
    assert aq is not None and wq is not None and a_s is not None and a_z is not None
    assert ws is not None
    _check(node, aq.dtype.name)
    a = aq.astype(np.int64) - np.int64(np.asarray(a_z).reshape(-1)[0])
    acc = np.matmul(a, wq.astype(np.int64))
    y = acc.astype(np.float32) * _scales(a_s, ws, wq.shape[1])
    return [y.astype(np.float32)]


def _lower_matmul(ctx: LowerContext) -> list[Tensor]:
    a, w = ctx.tensor(0), ctx.tensor(1)
    _check(ctx.node, a.dtype)
    a_s, a_z, ws = ctx.tensor(2), ctx.tensor(3), ctx.tensor(4)
    K = a.shape_ints[-1]
    k = te.reduce_axis(K, name=f"{ctx.name}_k")
    zero = te.const(0, "int64")
    shape = (*a.shape_ints[:-1], w.shape_ints[1])

    def body(*i: te.Expr) -> te.Expr:
        x = a[(*i[:-1], k)].astype("int32") - a_z[(zero,) * a_z.ndim].astype("int32")
        return te.sum(x * w[k, i[-1]].astype("int32"), axis=k)

    acc = te.compute(shape, body, name=f"{ctx.name}_acc")
    per_column = int(np.prod(ws.shape_ints)) > 1

    def out(*i: te.Expr) -> te.Expr:
        w_scale = ws[(i[-1] if per_column else zero,) + (zero,) * (ws.ndim - 1)]
        scale = a_s[(zero,) * a_s.ndim].astype("float32") * w_scale.astype("float32")
        return acc[i].astype("float32") * scale

    return [te.compute(shape, out, name=ctx.name)]
