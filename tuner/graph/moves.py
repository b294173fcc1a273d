"""Data movement between equal quantizers runs on the integers.

``quantize_static`` wraps every operator of a QDQ model in quantizers, data movement
included; ShuffleNet's channel shuffle is written ::

    q -> DQ(s, z) -> Reshape -> Q(s, z) -> DQ(s, z) -> Transpose -> Q(s, z) -> DQ(s, z) -> ...

Taken as written, each movement is a float kernel between a dequantize and a quantize:
four bytes a value, two roundings, for a result equal to its input's integers moved. A
movement only moves values, and quantizing a dequantized value with the same scale and
zero point gives the integer back, so ``Q(M(DQ(q)))`` is ``M(q)`` exactly: this pass
rewrites it so (onnxruntime's QDQ propagation does the same). It applies where a
movement's data input is dequantized with one constant scale and zero point and every
reader of its output quantizes with equal ones into the same type; the dequantized
value stays for any other reader.

>>> g = integer_moves(graph)   # first of the quantized passes
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .ir import Graph, Node, Value
from .rewrite import Uses, replace_nodes

__all__ = ["MOVES", "integer_moves"]

#: Operators whose output elements are copies of their first input's (the others are
#: shapes, permutations, axes or bounds).
MOVES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Slice", "Identity"})


def integer_moves(graph: Graph) -> Graph:
    """``graph`` with each qualifying movement on the integers (the module's docstring)."""
    uses = Uses(graph)
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    replaced: dict[int, Node] = {}
    values: list[Value] = []
    for i, m in enumerate(graph.nodes):
        if m.op not in MOVES or not m.inputs or len(m.outputs) != 1 or i in replaced:
            continue
        dq = uses.made_by(m.inputs[0], "DequantizeLinear")
        out = m.outputs[0]
        readers = uses.consumers.get(out, [])
        if dq is None or not readers or out in uses.outputs or not _per_tensor(graph, dq):
            continue
        q = graph.value(dq.inputs[0])
        if not all(r.op == "QuantizeLinear" and _inverse(graph, dq, r, out) for r in readers):
            continue
        replaced[i] = dataclasses.replace(m, inputs=(dq.inputs[0], *m.inputs[1:]))
        values.append(dataclasses.replace(graph.value(out), dtype=q.dtype))
        for r in readers:
            replaced[index[id(r)]] = Node("Identity", (out,), r.outputs, {}, r.name)
    if not replaced:
        return graph
    return replace_nodes(graph, replaced, set(), values)


def _params(graph: Graph, node: Node) -> tuple[np.ndarray, np.ndarray] | None:
    """A quantizer's constant scale and zero point (uint8 0 where omitted), or None."""
    scale = graph.const(node.inputs[1])
    zp = graph.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    if scale is None or (len(node.inputs) > 2 and node.inputs[2] and zp is None):
        return None
    return np.asarray(scale, np.float32), np.zeros(1, np.uint8) if zp is None else zp


def _per_tensor(graph: Graph, dq: Node) -> bool:
    p = _params(graph, dq)
    return p is not None and p[0].size == 1 and p[1].size == 1 and not dq.attr("block_size", 0)


def _inverse(graph: Graph, dq: Node, q: Node, value: str) -> bool:
    """Whether quantizer ``q`` reads ``value`` only, with ``dq``'s scale and zero point into
    ``dq``'s input type: then ``q(dq(x))`` is ``x``."""
    a, b = _params(graph, dq), _params(graph, q)
    if a is None or b is None or list(q.inputs).count(value) != 1 or q.inputs[0] != value:
        return False
    (sa, za), (sb, zb) = a, b  # dq's are one value each (_per_tensor)
    if not za.dtype == zb.dtype == np.dtype(graph.value(dq.inputs[0]).dtype):
        return False
    return sb.size == zb.size == 1 and sa.item() == sb.item() and za.item() == zb.item()
