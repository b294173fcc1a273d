"""Integer convolutions and matrix products for quantized models: the graph pass that keeps
them integer.

``onnxruntime.quantization.quantize_static`` writes each convolution of a CNN as float
operators between quantize and dequantize nodes::

    xq -> DequantizeLinear(x_scale, x_zero_point) -> Conv(., DequantizeLinear(wq, w_scale), b)

and ``quantize_dynamic`` each matrix product of a transformer as ``MatMulInteger`` of
``DynamicQuantizeLinear``'s output (the importer writes it in the same form, its scale 1,
cast to int32 and back before the scales multiply it). Taken as written, the weights fold
to float32 and the products run in float (what happens on a target without an int8 dot
product). Where the target has one (x86 VNNI: 64 int8 multiply-adds per instruction, four
times a float FMA's), this pass rewrites each such convolution into ``tuner.QConv(xq, wq,
x_scale, x_zero_point, w_scale, b)`` and each such matrix product into ``tuner.QMatMul(aq,
wq, a_scale, a_zero_point, w_scale)`` (``tuner.graph.ops.quant_linear``): the int8
operands go to an integer kernel, whose exact int32 sums are scaled to float and, with
the bias, the activation and the next QuantizeLinear fused after them, written as int8
again. The casts to int32 and back after a matrix product go (its sums are integers).
A Gemm of such operands (a classifier: ``quantize_static`` writes Linear layers so)
becomes a ``tuner.QMatMul`` of its weight transposed once where ``transB`` says, and the
add of its bias. The float graph between quantized tensors (a residual add of two
dequantized values) is left as it is.

First, each int8 activation becomes uint8 (:func:`unsigned_activations`): the
instruction multiplies unsigned bytes by signed ones, and an int8 image had to be copied
with 128 added before every product; a uint8 one is read where it is.

A convolution qualifies when its image is dequantized with one scale and zero point
(constants), its weight is a constant int8 tensor dequantized with zero zero points and
one scale or one per output channel, and its bias is a float constant or a dequantized
int32 one; it is 2-D. A matrix product qualifies when its left operand is dequantized
with one scale and zero point (constants or values computed at run time) and its right
one is a constant int8 ``[K, N]`` matrix with zero zero points and one scale or one per
column. Anything else is left unchanged. The templates (``tuner.model.quantized``) run
a convolution of one group and a matrix product as an integer matrix product, a grouped
or depthwise convolution as a float kernel reading the int8 image.

>>> g = integer_linear(from_onnx("resnet50_int8.onnx"))
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .ir import Graph, Node, Value
from .ops import opdef
from .ops.quant_linear import QCONV, QMATMUL
from .rewrite import Names, Uses, replace_nodes

__all__ = ["integer_linear", "unsigned_activations"]

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


def _one_value(graph: Graph, name: str) -> bool:
    """Whether ``name`` holds one value (a scalar or a one-element tensor)."""
    v = graph.value(name)
    return v.static and int(np.prod([int(d) for d in v.shape])) == 1


def _activation(graph: Graph, uses: Uses, name: str) -> tuple[str, str, str] | None:
    """``(aq, a_scale, a_zero_point)`` of a matrix dequantized with one scale and zero point,
    constants or values computed at run time (``DynamicQuantizeLinear``'s)."""
    dq = _dequantized(uses, name)
    if dq is None or len(dq.inputs) < 3 or not dq.inputs[2]:
        return None
    aq = graph.value(dq.inputs[0])
    if aq.is_const or aq.dtype not in ("int8", "uint8"):
        return None
    if not (_one_value(graph, dq.inputs[1]) and _one_value(graph, dq.inputs[2])):
        return None
    return dq.inputs[0], dq.inputs[1], dq.inputs[2]


def _matrix(graph: Graph, uses: Uses, name: str) -> tuple[str, str] | None:
    """``(wq, w_scale)`` of a constant int8 ``[K, N]`` matrix with zero zero points and one
    scale or one per column."""
    dq = _dequantized(uses, name)
    if dq is None:
        return None
    wq, scale = _const(graph, dq.inputs[0]), _const(graph, dq.inputs[1])
    if wq is None or scale is None or wq.dtype != np.int8 or wq.ndim != 2:
        return None
    zp = _const(graph, dq.inputs[2]) if len(dq.inputs) > 2 else None
    if len(dq.inputs) > 2 and dq.inputs[2] and (zp is None or np.any(zp != 0)):
        return None
    if scale.size != 1 and (scale.size != wq.shape[1] or int(dq.attr("axis", 1)) % 2 != 1):
        return None
    return dq.inputs[0], dq.inputs[1]


def _round_trip(uses: Uses, name: str) -> list[Node]:
    """The ``Cast`` to int32 of ``name`` whose every reader casts back to float32 (what
    ``MatMulInteger`` between its dequantized inputs and its scale becomes at import):
    the products of integers are integers, so both casts go. Empty where it is not that."""
    cast = uses.only(name)
    if cast is None or cast.op != "Cast" or int(cast.attr("to", 0)) != _INT32:
        return []
    back = uses.consumers.get(cast.outputs[0], [])
    if not back or cast.outputs[0] in uses.outputs:
        return []
    if any(n.op != "Cast" or int(n.attr("to", 0)) != _FLOAT for n in back):
        return []
    return [cast, *back]


#: ONNX's TensorProto codes of the two casts :func:`_round_trip` removes.
_FLOAT, _INT32 = 1, 6


#: What an int8 value adds to become the uint8 value of the same real number.
_SHIFT = 128


def unsigned_activations(graph: Graph) -> Graph:
    """``graph`` with each int8 activation quantized to uint8 instead, its zero points 128 more.

    A QuantizeLinear with a constant int8 zero point ``z`` whose output only
    DequantizeLinears read (and the caller does not see) writes uint8 with zero
    point ``z + 128``, and its readers dequantize with theirs 128 more: ``q' = q +
    128`` exactly (the rounding and the clamp move with it), and ``(q' - (z' + 128))
    * s`` is ``(q - z') * s``. Everything after reads the same real numbers.
    """
    uses, names = Uses(graph), Names(graph)
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    replaced: dict[int, Node] = {}
    values: list[Value] = []
    shifted: dict[str, str] = {}  # an int8 zero point's uint8 twin

    def twin(name: str) -> str:
        zp = _const(graph, name) if name else np.zeros(1, np.int8)
        assert zp is not None and zp.dtype == np.int8
        if name not in shifted:
            data = (zp.astype(np.int16) + _SHIFT).astype(np.uint8)
            v = Value.const(names(f"{name or 'zero_point'}_uint8"), data)
            values.append(v)
            shifted[name] = v.name
        return shifted[name]

    for i, q in enumerate(graph.nodes):
        if q.op != "QuantizeLinear" or len(q.inputs) < 3 or q.outputs[0] in uses.outputs:
            continue
        readers = uses.consumers.get(q.outputs[0], [])
        zero = _const(graph, q.inputs[2])
        if not readers or zero is None or zero.dtype != np.int8:
            continue
        if any(r.op != _DQ or list(r.inputs).count(q.outputs[0]) != 1 for r in readers):
            continue
        zps = [r.inputs[2] if len(r.inputs) > 2 else "" for r in readers]
        if any(z and (_const(graph, z) is None or graph.value(z).dtype != "int8") for z in zps):
            continue  # a reader's zero point computed at run time, or of another type
        attrs = {k: v for k, v in q.attrs.items() if k != "output_dtype"}
        replaced[i] = dataclasses.replace(q, inputs=(*q.inputs[:2], twin(q.inputs[2])), attrs=attrs)
        values.append(dataclasses.replace(graph.value(q.outputs[0]), dtype="uint8"))
        for r, z in zip(readers, zps, strict=True):
            at = index[id(r)]
            new = (*r.inputs[:2], twin(z), *r.inputs[3:])
            replaced[at] = dataclasses.replace(replaced.get(at, r), inputs=new)
    if not replaced:
        return graph
    return replace_nodes(graph, replaced, set(), values)


def integer_linear(graph: Graph) -> Graph:
    """``graph`` with each qualifying convolution a ``tuner.QConv`` and each qualifying
    matrix product a ``tuner.QMatMul`` (the module's docstring), its int8 activations
    uint8 (:func:`unsigned_activations`) when any is."""
    return _integer_linear(unsigned_activations(graph))


def _integer_linear(graph: Graph) -> Graph:
    uses, names = Uses(graph), Names(graph)
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    replaced: dict[int, Node | tuple[Node, ...]] = {}
    dropped: set[int] = set()
    values: list[Value] = []
    for i, node in enumerate(graph.nodes):
        made: Node | tuple[Node, ...] | None
        if node.op == "Conv" and len(node.inputs) >= 2:
            made = _conv(graph, uses, names, node, values)
        elif node.op == "MatMul":
            made = _matmul(graph, uses, node)
        elif node.op == "Gemm":
            made = _gemm(graph, uses, names, node, values)
        else:
            continue
        if made is None:
            continue
        replaced[i] = made
        trip = _round_trip(uses, node.outputs[0]) if node.op == "MatMul" else []
        if trip:  # the casts back alias the product itself
            cast, *back = trip
            dropped.add(index[id(cast)])
            for b in back:
                replaced[index[id(b)]] = Node("Identity", (node.outputs[0],), b.outputs, {}, b.name)
    if not replaced:
        return graph
    return replace_nodes(graph, replaced, dropped, values)


def _conv(graph: Graph, uses: Uses, names: Names, node: Node, values: list[Value]) -> Node | None:
    image, weight = _image(graph, uses, node.inputs[0]), _weight(graph, uses, node.inputs[1])
    if image is None or weight is None or len(graph.value(weight[0]).shape) != 4:
        return None
    bias = ""
    if len(node.inputs) > 2 and node.inputs[2]:
        data = _bias(graph, uses, node.inputs[2])
        if data is None:
            return None
        bv = Value.const(names(f"{node.inputs[2]}_float"), data.reshape(-1))
        values.append(bv)
        bias = bv.name
    xq, xs, xz = image
    wq, ws = weight
    inputs = (xq, wq, xs, xz, ws, bias) if bias else (xq, wq, xs, xz, ws)
    return dataclasses.replace(node, op=QCONV, inputs=inputs)


def _gemm(
    graph: Graph, uses: Uses, names: Names, node: Node, values: list[Value]
) -> tuple[Node, ...] | None:
    """A Gemm of a dequantized activation and a dequantized int8 constant (a classifier:
    ``quantize_static`` writes every Linear layer so) as ``QMatMul`` and the add of its
    bias: ``transB`` transposes the weight once, here. Only the plain kind (``alpha`` and
    ``beta`` 1, ``A`` not transposed, a float bias of one value per column)."""
    if float(node.attr("alpha", 1.0)) != 1.0 or int(node.attr("transA", 0)):
        return None
    a, weight = _activation(graph, uses, node.inputs[0]), node.inputs[1]
    if a is None or len(graph.value(node.inputs[0]).shape) != 2:
        return None
    if int(node.attr("transB", 0)):
        w = _weight(graph, uses, weight)  # [N, K], one scale or one per row
        if w is None or len(graph.value(w[0]).shape) != 2:
            return None
        wq = graph.const(w[0])
        assert wq is not None
        t = Value.const(names(f"{w[0]}_t"), np.ascontiguousarray(wq.T))
        values.append(t)
        w, n = (t.name, w[1]), wq.shape[0]
    else:
        w = _matrix(graph, uses, weight)
        n = graph.value(w[0]).shape[1] if w is not None else 0
    if w is None:
        return None
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else ""
    data = _bias(graph, uses, bias) if bias else None
    if bias and (data is None or data.size != n or float(node.attr("beta", 1.0)) != 1.0):
        return None
    (aq, a_scale, a_zero_point), (wq_name, w_scale) = a, w
    inputs = (aq, wq_name, a_scale, a_zero_point, w_scale)
    out = node.outputs[0]
    if data is None:
        return (dataclasses.replace(node, op=QMATMUL, inputs=inputs, attrs={}),)
    product = dataclasses.replace(graph.value(out), name=names(f"{out}_product"))
    b = Value.const(names(f"{bias}_float"), data.reshape(-1))
    values += [product, b]
    mm = dataclasses.replace(node, op=QMATMUL, inputs=inputs, outputs=(product.name,), attrs={})
    return (mm, Node("Add", (product.name, b.name), (out,), {}, f"{node.name}_bias"))


def _matmul(graph: Graph, uses: Uses, node: Node) -> Node | None:
    a, w = _activation(graph, uses, node.inputs[0]), _matrix(graph, uses, node.inputs[1])
    if a is None or w is None:
        return None
    (aq, a_scale, a_zero_point), (wq, w_scale) = a, w
    return dataclasses.replace(node, op=QMATMUL, inputs=(aq, wq, a_scale, a_zero_point, w_scale))
