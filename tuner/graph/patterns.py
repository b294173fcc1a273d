"""Pattern recognisers: spelled-out GELU and layer norm become one operator each.

Exporters write GELU as ``Erf`` arithmetic and layer norm as a chain of
``ReduceMean`` / ``Sub`` / ``Pow`` / ``Sqrt`` / ``Div``; one ``Gelu`` or
``LayerNormalization`` node is one kernel and what the templates match. Each
recogniser is a pass (Graph -> Graph, meaning and interface kept, see
:mod:`~tuner.graph.passes`) that :func:`~tuner.graph.passes.optimize` runs;
they are apart from the other passes because they are about operator
patterns, not about graph structure.

>>> g = recognize_layer_norm(recognize_gelu(graph))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .ir import Graph, Node, Value
from .rewrite import Names, Uses, replace_nodes

__all__ = ["recognize_gelu", "recognize_layer_norm"]

_SQRT2 = float(np.sqrt(2.0))


def recognize_gelu(graph: Graph) -> Graph:
    """Replace the exact GELU that exporters spell out with one ``Gelu(approximate='none')``.

    Matches ``x * 0.5 * (1 + Erf(x / sqrt(2)))`` with the divide also written
    as ``x * 0.7071...`` and the three products in any of the orders PyTorch
    and Hugging Face export: ``(x * (1 + e)) * 0.5``, ``(0.5 * (1 + e)) * x``
    and ``(x * 0.5) * (1 + e)``, operands either way round. Intermediate values
    must have no other reader.

    >>> recognize_gelu(g)   # Mul(Mul(x, Add(Erf(Div(x, 1.414)), 1)), 0.5) -> Gelu(x)
    """
    uses = Uses(graph)
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    replaced: dict[int, Node] = {}
    dropped: set[int] = set()
    for erf in graph.nodes:
        if erf.op != "Erf":
            continue
        match = _match_gelu(graph, uses, erf)
        if match is None:
            continue
        x, chain = match
        final = chain[-1]
        if any(index[id(n)] in dropped or index[id(n)] in replaced for n in chain):
            continue
        dropped.update(index[id(n)] for n in chain[:-1])
        gelu = Node("Gelu", (x,), (final.outputs[0],), {"approximate": "none"}, final.name)
        replaced[index[id(final)]] = gelu
    return replace_nodes(graph, replaced, dropped, [])


def _match_gelu(graph: Graph, uses: Uses, erf: Node) -> tuple[str, list[Node]] | None:
    """``(x, nodes of the pattern, the last one defining the result)`` or None."""
    scaled = uses.producers.get(erf.inputs[0])
    if scaled is None or uses.only(scaled.outputs[0]) is not erf:
        return None
    x = None
    if scaled.op == "Div" and _near(_scalar(graph, scaled.inputs[1]), _SQRT2):
        x = scaled.inputs[0]
    elif scaled.op == "Mul":
        for a, c in (scaled.inputs, scaled.inputs[::-1]):
            if _near(_scalar(graph, c), 1 / _SQRT2):
                x = a
    if x is None:
        return None
    add = uses.only(erf.outputs[0])
    if (
        add is None
        or add.op != "Add"
        or not _near(_scalar(graph, _other(add, erf.outputs[0]) or ""), 1.0)
    ):
        return None
    m1 = uses.only(add.outputs[0])
    t = None if m1 is None or m1.op != "Mul" else _other(m1, add.outputs[0])
    if m1 is None or t is None:
        return None
    chain = [scaled, erf, add, m1]
    if t == x or _near(_scalar(graph, t), 0.5):  # (x * a) * 0.5 or (0.5 * a) * x
        m2 = uses.only(m1.outputs[0])
        rest = None if m2 is None or m2.op != "Mul" else _other(m2, m1.outputs[0])
        if m2 is None or rest is None:
            return None
        if not (rest == x if t != x else _near(_scalar(graph, rest), 0.5)):
            return None
        chain.append(m2)
    else:  # (x * 0.5) * a
        half = uses.made_by(t, "Mul")
        k = None if half is None else _other(half, x)
        if half is None or k is None or uses.only(t) is not m1 or not _near(_scalar(graph, k), 0.5):
            return None
        chain.insert(0, half)
    final = chain[-1]
    xv, yv = graph.value(x), graph.value(final.outputs[0])
    if (xv.dtype, xv.shape) != (yv.dtype, yv.shape):
        return None
    return x, chain


def recognize_layer_norm(graph: Graph) -> Graph:
    """Replace a spelled-out layer norm over the last axis with one ``LayerNormalization``.

    Matches ``d = x - ReduceMean(x)``, ``v = ReduceMean(Pow(d, 2))`` (or
    ``d * d``), ``n = d / Sqrt(v + eps)``, optionally ``n * gamma`` and then
    ``+ beta`` with gamma and beta of shape ``(D,)``, both means over the last
    axis only with keepdims (axes as attribute or, from opset 18, as a constant
    input). The result is ``LayerNormalization(x, gamma, beta, axis=-1,
    epsilon=eps)``, gamma a constant of ones when the model has none.

    >>> recognize_layer_norm(g)   # ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add -> LayerNormalization
    """
    names = Names(graph)
    uses = Uses(graph)
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    replaced: dict[int, Node] = {}
    dropped: set[int] = set()
    values: list[Value] = []
    for mean in graph.nodes:
        if mean.op != "ReduceMean":
            continue
        match = _match_layer_norm(graph, uses, mean)
        if match is None:
            continue
        x, eps, gamma, beta, chain = match
        if any(index[id(n)] in dropped or index[id(n)] in replaced for n in chain):
            continue
        xv = graph.value(x)
        if gamma is None:
            ones = Value.const(names(f"{x}_ln_scale"), np.ones(int(xv.shape[-1]), dtype=xv.dtype))
            values.append(ones)
            gamma = ones.name
        final = chain[-1]
        ins = (x, gamma) if beta is None else (x, gamma, beta)
        if graph.value(x).dtype == "float32":  # 1e-06, not 9.999999974752427e-07
            eps = float(str(np.float32(eps)))
        attrs = {"axis": -1, "epsilon": eps}
        dropped.update(index[id(n)] for n in chain[:-1])
        replaced[index[id(final)]] = Node(
            "LayerNormalization", ins, (final.outputs[0],), attrs, final.name
        )
    return replace_nodes(graph, replaced, dropped, values)


def _reduces_last_axis(graph: Graph, node: Node) -> bool:
    rank = len(graph.value(node.inputs[0]).shape)
    if node.attr("keepdims", 1) != 1 or rank == 0:
        return False
    if len(node.inputs) > 1 and node.inputs[1]:
        data = graph.const(node.inputs[1])
        axes = None if data is None else tuple(int(a) for a in data.reshape(-1))
    else:
        raw = node.attr("axes")
        axes = None if raw is None else tuple(int(a) for a in raw)
    return axes is not None and tuple(a % rank for a in axes) == (rank - 1,)


def _affine(graph: Graph, uses: Uses, chain: list[Node], op: str, width: Any) -> str | None:
    """The parameter of ``op(last, p)`` with p of shape ``(width,)`` after the chain (appended)."""
    last = chain[-1].outputs[0]
    nxt = uses.only(last)
    param = None if nxt is None or nxt.op != op else _other(nxt, last)
    if nxt is None or param is None or graph.value(param).shape != (width,):
        return None
    chain.append(nxt)
    return param


def _match_layer_norm(
    graph: Graph, uses: Uses, mean: Node
) -> tuple[str, float, str | None, str | None, list[Node]] | None:
    x = mean.inputs[0]
    if not _reduces_last_axis(graph, mean):
        return None
    sub = uses.only(mean.outputs[0])
    if sub is None or sub.op != "Sub" or sub.inputs != (x, mean.outputs[0]):
        return None
    d = sub.outputs[0]
    readers = uses.consumers.get(d, [])
    if d in uses.outputs or len(readers) != 2:
        return None
    square = next((n for n in readers if n.op in ("Pow", "Mul")), None)
    if square is None:
        return None
    if square.op == "Pow" and not (
        square.inputs[0] == d and _scalar(graph, square.inputs[1]) == 2.0
    ):
        return None
    if square.op == "Mul" and square.inputs != (d, d):
        return None
    var = uses.only(square.outputs[0])
    if var is None or var.op != "ReduceMean" or not _reduces_last_axis(graph, var):
        return None
    add = uses.only(var.outputs[0])
    eps = (
        None
        if add is None or add.op != "Add"
        else _scalar(graph, _other(add, var.outputs[0]) or "")
    )
    sqrt = None if add is None or eps is None else uses.only(add.outputs[0])
    if add is None or eps is None or sqrt is None or sqrt.op != "Sqrt":
        return None
    div = uses.only(sqrt.outputs[0])
    if div is None or div.op != "Div" or div.inputs != (d, sqrt.outputs[0]) or div not in readers:
        return None
    chain: list[Node] = [mean, sub, square, var, add, sqrt, div]
    width = graph.value(x).shape[-1]
    gamma = _affine(graph, uses, chain, "Mul", width)
    beta = _affine(graph, uses, chain, "Add", width)
    if gamma is None and not isinstance(width, int):
        return None
    return x, eps, gamma, beta, chain


# -- small helpers -------------------------------------------------------------------


def _scalar(graph: Graph, name: str) -> float | None:
    """The value of a one-element constant, else None."""
    data = graph.const(name)
    if data is None or data.size != 1:
        return None
    return float(data.reshape(()))


def _near(x: float | None, target: float, rtol: float = 1e-4) -> bool:
    return x is not None and abs(x - target) <= rtol * abs(target)


def _other(node: Node, name: str) -> str | None:
    """The other operand of a binary node that reads ``name`` once."""
    a, b = (*node.inputs, "", "")[:2]
    if a == name and b != name:
        return b
    if b == name and a != name:
        return a
    return None
