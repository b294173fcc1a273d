"""Linear quantization's ONNX operators: QuantizeLinear and DequantizeLinear (the QDQ format).

What ``onnxruntime.quantization.quantize_static`` writes around float operators,
exactly as ONNX defines them (opsets 10 to 21)::

    DequantizeLinear(x, scale, zero_point=0)  ->  (x - zero_point) * scale         float32
    QuantizeLinear(x, scale, zero_point)      ->  saturate(round(x / scale) + zero_point)

``round`` is half to even; ``saturate`` clamps to the integer type of the zero
point (uint8 when it is omitted). A scale of one element is per tensor; a 1-D
scale is per axis (``axis``, default 1: a convolution's output channels), the
zero point shaped alike. Blocked quantization (opset 21's ``block_size``) and the
float8 types are refused with one line naming the node.

Both are elementwise: they fuse with their neighbours like any activation (the
quantize then dequantize after a convolution become its epilogue), and a
dequantized constant (an int8 weight with its scales) is folded into float32 at
compile time. The float computation between a dequantize and a quantize can
differ from onnxruntime's integer kernels by one quantization step where a value
lies on a rounding boundary (see ``tests/graph/test_quant.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ... import te
from ...te import Expr, Tensor
from ..ir import GraphError, Node
from . import LowerContext, OpKind, register
from .activations import TE
from .elementwise import input_array, te_shape

__all__ = ["quantize", "quantize_numpy"]

#: The integer types a quantized value may have.
_INTEGERS = ("int8", "uint8", "int32")


def _axis(node: Node, rank: int, scale_size: int) -> int | None:
    """The axis of a per-axis scale (normalised), or None for one scale for the tensor."""
    if int(node.attrs.get("block_size", 0) or 0):
        raise GraphError(f"{node.describe()} uses blocked quantization (block_size), not supported")
    if scale_size == 1:
        return None
    axis = int(node.attrs.get("axis", 1))
    if not -rank <= axis < rank:
        raise GraphError(f"{node.describe()} has axis {axis} for a rank-{rank} input")
    return axis % rank


def _check_int(node: Node, dtype: str, what: str) -> tuple[int, int]:
    """``dtype``'s range; GraphError unless it is one of ``_INTEGERS``."""
    if dtype not in _INTEGERS:
        raise GraphError(f"{node.describe()} has a {what} of type {dtype}; int8, uint8 or int32")
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _per_axis(v: np.ndarray, axis: int | None, rank: int) -> np.ndarray:
    """A scale or zero point shaped to broadcast against the tensor it applies to."""
    if axis is None:
        return v.reshape(())
    shape = [1] * rank
    shape[axis] = v.size
    return v.reshape(shape)


def _zero_point(node: Node, arrays: Sequence[np.ndarray | None], dtype: str) -> np.ndarray:
    zp = arrays[2] if len(arrays) > 2 and len(node.inputs) > 2 and node.inputs[2] else None
    return np.zeros(1, dtype) if zp is None else np.asarray(zp)


# -- evaluation (constant folding, the interpreter) -------------------------------------


@register("DequantizeLinear", OpKind.ELEMENTWISE, lower=lambda ctx: _lower_dequantize(ctx))
def _eval_dequantize(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x, scale = input_array(node, arrays, 0), input_array(node, arrays, 1)
    _check_int(node, x.dtype.name, "quantized input")
    zp = _zero_point(node, arrays, x.dtype.name)
    axis = _axis(node, max(x.ndim, 1), scale.size)
    wide = x.astype(np.int64) - _per_axis(zp.astype(np.int64), axis, x.ndim)
    return [(wide.astype(np.float32) * _per_axis(scale.astype(np.float32), axis, x.ndim))]


@register("QuantizeLinear", OpKind.ELEMENTWISE, lower=lambda ctx: _lower_quantize(ctx))
def _eval_quantize(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x, scale = input_array(node, arrays, 0), input_array(node, arrays, 1)
    zp = _zero_point(node, arrays, "uint8")
    _check_int(node, zp.dtype.name, "zero point")
    axis = _axis(node, max(x.ndim, 1), scale.size)
    return [
        quantize_numpy(
            x, _per_axis(scale, axis, x.ndim), _per_axis(zp, axis, x.ndim), zp.dtype.name
        )
    ]


def quantize_numpy(x: np.ndarray, scale: Any, zero_point: Any, dtype: str) -> np.ndarray:
    """ONNX's QuantizeLinear of ``x`` (float32 division, half to even, saturated to ``dtype``)."""
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    with np.errstate(all="ignore"):
        q = np.rint(np.asarray(x, np.float32) / np.asarray(scale, np.float32))
    q = q + np.asarray(zero_point).astype(np.float32)
    return np.clip(q, lo, hi).astype(dtype)


# -- lowering --------------------------------------------------------------------------


def _param(t: Tensor | None, axis: int | None, idx: Sequence[Expr]) -> Expr | None:
    """A scale's or zero point's element for the output element at ``idx``."""
    if t is None:
        return None
    zero = te.const(0, "int64")
    return t[(idx[axis] if axis is not None else zero,) + (zero,) * (t.ndim - 1)]


def _scale_axis(ctx: LowerContext) -> tuple[Tensor, int | None]:
    scale = ctx.tensor(1)
    size = int(np.prod(scale.shape_ints))
    rank = len(ctx.outputs[0].shape) or 1
    return scale, _axis(ctx.node, rank, size)


def _zero_point_tensor(ctx: LowerContext) -> Tensor | None:
    has = len(ctx.node.inputs) > 2 and bool(ctx.node.inputs[2])
    return ctx.tensor(2) if has else None


def _lower_dequantize(ctx: LowerContext) -> list[Tensor]:
    x = ctx.tensor(0)
    _check_int(ctx.node, x.dtype, "quantized input")
    scale, axis = _scale_axis(ctx)
    zp = _zero_point_tensor(ctx)
    shape = te_shape(ctx.outputs[0].shape)

    def body(*idx: Expr) -> Expr:
        q = x[idx].astype("int32")
        z = _param(zp, axis, idx)
        if z is not None:
            q = q - z.astype("int32")
        s = _param(scale, axis, idx)
        assert s is not None
        return q.astype("float32") * s.astype("float32")

    return [te.compute(shape, body, name=ctx.name, dtype="float32")]


def _lower_quantize(ctx: LowerContext) -> list[Tensor]:
    x = ctx.tensor(0)
    out = ctx.outputs[0]
    _check_int(ctx.node, out.dtype, "zero point")
    scale, axis = _scale_axis(ctx)
    zp = _zero_point_tensor(ctx)
    shape = te_shape(out.shape)

    def body(*idx: Expr) -> Expr:
        s = _param(scale, axis, idx)
        assert s is not None
        return quantize(x[idx], s, _param(zp, axis, idx), out.dtype)

    return [te.compute(shape, body, name=ctx.name, dtype=out.dtype)]


def quantize(x: Expr, scale: Expr | float, zero_point: Expr | float | None, dtype: str) -> Expr:
    """ONNX's QuantizeLinear of the element ``x`` into ``dtype`` (int8, uint8 or int32):
    ``saturate(round(x / scale) + zero_point)``, half to even. What QuantizeLinear lowers to,
    and the epilogue step that ends a kernel with a quantized output (``search_spaces._epilogue``).
    """
    lo, hi = (int(b) for b in (np.iinfo(dtype).min, np.iinfo(dtype).max))
    s = _f(scale) if isinstance(scale, float | int) else scale.astype("float32")
    v = x.astype("float32") / s
    if zero_point is None:
        zf = te.const(0.0, "float32")
    elif isinstance(zero_point, float | int):
        zf = _f(zero_point)
    else:
        zf = zero_point.astype("float32")
    # Saturating before rounding is the same (the bounds are integers), and keeps
    # the value where adding 1.5 * 2^23 rounds it half to even in one addition.
    v = te.minimum(te.maximum(v, _f(lo) - zf), _f(hi) - zf)
    return (_round(v, dtype) + zf).astype(dtype)


def _f(value: float) -> Expr:
    return te.const(float(value), "float32")


#: Adding then subtracting 1.5 * 2^23 rounds a float32 of magnitude below 2^22 to an
#: integer, half to even, in two additions (the FPU's own rounding).
_ROUNDER = 1.5 * 2.0**23


def _round(v: Expr, dtype: str) -> Expr:
    """``v`` rounded half to even: by ``_ROUNDER`` for int8 and uint8 (saturated below 2^22,
    ``v`` used once: a chain of quantizations stays linear in size), else ``TE.round``."""
    if dtype in ("int8", "uint8"):
        return (v + _f(_ROUNDER)) - _f(_ROUNDER)
    return TE.round(v)
