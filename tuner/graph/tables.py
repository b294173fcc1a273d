"""Elementwise chains between quantizers as table lookups (``tuner.Lookup``).

A QDQ model computes each activation between quantizers in float: EfficientNet's
SiLU is written ::

    q -> DQ -> Sigmoid -> Q -> DQ --.
    `--> DQ ---------------------> Mul -> Q -> q'

and a quantized hard-swish, GELU or LeakyReLU alike. Where such a chain reads one 8-bit
tensor and constants of one element, its output is a function of one byte: 256 values,
computed once at compile time by the chain's own NumPy evaluation, make it a
``tuner.Lookup(q, table)`` (``tuner.graph.ops.lookup``), one read of a 256-entry table
per element instead of a transcendental and three roundings. onnxruntime runs the same
chains as tables (QLinearSigmoid, QLinearLeakyRelu); so the results are those of the
float chain exactly, as this compiler's reference evaluates it.

A chain qualifies when every node is elementwise with one output, reads the key,
values of the chain or constants of one element, keeps the key's shape, and every value
inside is read only inside (no graph output); it ends at an int8 or uint8 value and holds
some operator besides the quantizers (a bare requantization stays arithmetic). Of the
chains from one key, the one with the most nodes is taken.

>>> g = tabulate(graph)   # after layout, before fusion
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .ir import Graph, GraphError, Node, Value
from .ops import OpKind, opdef
from .ops.lookup import KEYS, LOOKUP
from .rewrite import Names, Uses, replace_nodes

__all__ = ["tabulate"]

#: Operators that only convert between the 8-bit key and float: a chain of these alone
#: is left as arithmetic.
_PLAIN = frozenset({"DequantizeLinear", "QuantizeLinear", "Cast", "Identity"})


def tabulate(graph: Graph) -> Graph:
    """``graph`` with each qualifying chain (the module's docstring) one table lookup."""
    uses, names = Uses(graph), Names(graph)
    order = {id(n): i for i, n in enumerate(graph.nodes)}
    taken: set[int] = set()
    replaced: dict[int, Node] = {}
    values: list[Value] = []
    keys = [*graph.inputs, *(o for n in graph.nodes for o in n.outputs if o)]
    for key in keys:
        if graph.value(key).dtype not in KEYS or key not in uses.consumers:
            continue
        chain = _closure(graph, uses, order, key, taken)
        best = _longest(graph, uses, chain)
        if best is None:
            continue
        table = _table(graph, key, best)
        if table is None:
            continue
        end = best[-1]
        t = Value.const(names(f"{end.outputs[0]}_table"), table)
        values.append(t)
        replaced[order[id(end)]] = Node(LOOKUP, (key, t.name), end.outputs, {}, end.name)
        taken.update(order[id(n)] for n in best)
    if not replaced:
        return graph
    dropped = taken - set(replaced)
    return replace_nodes(graph, replaced, dropped, values)


def _closure(
    graph: Graph, uses: Uses, order: dict[int, int], key: str, taken: set[int]
) -> list[Node]:
    """The nodes computable from ``key`` and one-element constants alone, in graph order."""
    reached: dict[int, Node] = {}  # the elementwise nodes downstream of the key, by position
    stack = [key]
    while stack:
        for n in uses.consumers.get(stack.pop(), []):
            i = order[id(n)]
            if i in reached or i in taken or len(n.outputs) != 1 or not n.outputs[0]:
                continue
            if opdef(n.op).kind is OpKind.ELEMENTWISE:
                reached[i] = n
                stack.append(n.outputs[0])
    shape = graph.value(key).shape
    inside = {key}
    chain: list[Node] = []
    for i in sorted(reached):
        n = reached[i]
        keeps_shape = graph.value(n.outputs[0]).shape == shape
        if keeps_shape and all(x in inside or _scalar(graph, x) for x in n.inputs if x):
            inside.add(n.outputs[0])
            chain.append(n)
    return chain


def _scalar(graph: Graph, name: str) -> bool:
    data = graph.const(name)
    return data is not None and data.size == 1


def _longest(graph: Graph, uses: Uses, chain: list[Node]) -> list[Node] | None:
    """The qualifying chain of the most nodes: some node's ancestors in ``chain``, itself last."""
    made = {n.outputs[0]: n for n in chain}
    best: list[Node] | None = None
    for end in chain:
        if graph.value(end.outputs[0]).dtype not in KEYS:
            continue
        part = _ancestors(end, made)
        if best is not None and len(part) <= len(best):
            continue
        if all(n.op in _PLAIN for n in part):
            continue
        members = {id(n) for n in part}
        inner = [n.outputs[0] for n in part[:-1]]
        if all(
            v not in uses.outputs and all(id(r) in members for r in uses.consumers.get(v, []))
            for v in inner
        ):
            best = part
    return best


def _ancestors(end: Node, made: dict[str, Node]) -> list[Node]:
    """``end`` and the nodes of its chain it reads from, in the chain's order."""
    seen: dict[int, Node] = {}
    stack = [end]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen[id(n)] = n
        stack.extend(made[x] for x in n.inputs if x in made)
    index = {id(n): i for i, n in enumerate(made.values())}
    return sorted(seen.values(), key=lambda n: index[id(n)])


def _table(graph: Graph, key: str, part: Sequence[Node]) -> np.ndarray | None:
    """The chain's output for each of the key's 256 values (None if it will not evaluate)."""
    dtype = np.dtype(graph.value(key).dtype)
    lo = int(np.iinfo(dtype).min)
    env = {key: np.arange(lo, lo + 256).astype(dtype)}
    try:
        with np.errstate(all="ignore"):
            for n in part:
                args = [env[x] if x in env else graph.const(x) if x else None for x in n.inputs]
                env[n.outputs[0]] = np.asarray(opdef(n.op).evaluate(n, args)[0])
    except (GraphError, ValueError, TypeError):
        return None
    out = env[part[-1].outputs[0]]
    return out.reshape(-1) if out.size == 256 else None
