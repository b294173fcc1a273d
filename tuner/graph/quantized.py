"""Integer convolutions for quantized (QDQ) models: the graph pass that keeps them integer.

``onnxruntime.quantization.quantize_static`` writes each convolution of a CNN as float
operators between quantize and dequantize nodes::

    xq -> DequantizeLinear(x_scale, x_zero_point) -> Conv(., DequantizeLinear(wq, w_scale), b)

Taken as written, the weights fold to float32 and the convolution runs in float (what
the importer does on a target without an int8 dot product). Where the target has one
(x86 VNNI: 64 int8 multiply-adds per instruction, four times a float FMA's), this pass
rewrites each such convolution into ``tuner.QConv(xq, wq, x_scale, x_zero_point,
w_scale, b)`` (``tuner.graph.ops.quant_conv``): the int8 image and weights go to an
integer kernel, whose exact int32 sums are scaled to float and, with the bias, the
activation and the next QuantizeLinear fused after them, written as int8 again. The
float graph between quantized tensors (a residual add of two dequantized values) is left
as it is.

A convolution qualifies when its image is dequantized with one scale and zero point
(constants), its weight is a constant int8 tensor dequantized with zero zero points and
one scale or one per output channel, its bias a float constant or a dequantized int32
one, and it is 2-D with one group (the integer template's kind: a depthwise convolution
stays float, reading a dequantized image). Anything else is left unchanged.

>>> g = integer_convs(from_onnx("resnet50_int8.onnx"))
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .ir import Graph, Node, Value
from .ops import opdef
from .ops.quant_conv import QCONV
from .rewrite import Names, Uses, replace_nodes

__all__ = ["integer_convs"]

_DQ = "DequantizeLinear"


def _const(graph: Graph, name: str) -> np.ndarray | None:
    return graph.const(name) if name else None


def _dequantized(uses: Uses, name: str) -> Node | None:
    """The DequantizeLinear that makes ``name``, when it has no blocked quantization."""
    node = uses.made_by(name, _DQ)
    if node is None or int(node.attr("block_size", 0) or 0):
        return None
    return node


def _image(graph: Graph, uses: Uses, name: str) -> tuple[str, str, str] | None:
    """``(xq, x_scale, x_zero_point)`` of an image dequantized per tensor, else None."""
    dq = _dequantized(uses, name)
    if dq is None or len(dq.inputs) < 3 or not dq.inputs[2]:
        return None
    xq, scale, zp = (
        graph.value(dq.inputs[0]),
        _const(graph, dq.inputs[1]),
        _const(graph, dq.inputs[2]),
    )
    if xq.is_const or xq.dtype not in ("int8", "uint8") or scale is None or zp is None:
        return None
    if scale.size != 1 or zp.size != 1:
        return None
    return dq.inputs[0], dq.inputs[1], dq.inputs[2]


def _weight(graph: Graph, uses: Uses, name: str) -> tuple[str, str] | None:
    """``(wq, w_scale)`` of an int8 constant weight with zero zero points, else None."""
    dq = _dequantized(uses, name)
    if dq is None:
        return None
    wq, scale = _const(graph, dq.inputs[0]), _const(graph, dq.inputs[1])
    if wq is None or scale is None or wq.dtype != np.int8:
        return None
    zp = _const(graph, dq.inputs[2]) if len(dq.inputs) > 2 else None
    if len(dq.inputs) > 2 and dq.inputs[2] and (zp is None or np.any(zp != 0)):
        return None
    if scale.size != 1 and (scale.size != wq.shape[0] or int(dq.attr("axis", 1)) != 0):
        return None
    return dq.inputs[0], dq.inputs[1]


def _bias(graph: Graph, uses: Uses, name: str) -> np.ndarray | None:
    """The float bias: a constant, or a constant dequantized (int32 with its scale)."""
    data = _const(graph, name)
    if data is not None:
        return data.astype(np.float32) if data.dtype == np.float32 else None
    dq = _dequantized(uses, name)
    if dq is None:
        return None
    arrays = [_const(graph, i) if i else None for i in dq.inputs]
    if any(a is None for a, i in zip(arrays, dq.inputs, strict=True) if i):
        return None
    return np.asarray(opdef(_DQ).evaluate(dq, arrays)[0], np.float32)


def integer_convs(graph: Graph) -> Graph:
    """``graph`` with each qualifying convolution a ``tuner.QConv`` (the module's docstring)."""
    uses, names = Uses(graph), Names(graph)
    replaced: dict[int, Node] = {}
    values: list[Value] = []
    for i, node in enumerate(graph.nodes):
        if node.op != "Conv" or len(node.inputs) < 2 or int(node.attr("group", 1)) != 1:
            continue
        image, weight = _image(graph, uses, node.inputs[0]), _weight(graph, uses, node.inputs[1])
        if image is None or weight is None or len(graph.value(weight[0]).shape) != 4:
            continue
        bias = ""
        if len(node.inputs) > 2 and node.inputs[2]:
            data = _bias(graph, uses, node.inputs[2])
            if data is None:
                continue
            bv = Value.const(names(f"{node.inputs[2]}_float"), data.reshape(-1))
            values.append(bv)
            bias = bv.name
        xq, xs, xz = image
        wq, ws = weight
        inputs = (xq, wq, xs, xz, ws, bias) if bias else (xq, wq, xs, xz, ws)
        replaced[i] = dataclasses.replace(node, op=QCONV, inputs=inputs)
    if not replaced:
        return graph
    return replace_nodes(graph, replaced, set(), values)
