"""Graph rewrites before fusion: each pass is a function Graph -> Graph, tested alone.

Every pass keeps the graph's meaning (``run_graph`` gives the same outputs on
any feeds) and its interface: inputs and outputs keep their names, so a pass
that removes the node defining a graph output renames the producer's output
rather than inserting a copy. New values take their dtype and shape from the
values they replace. Passes read what an operator is from the registry
(``opdef(op).kind``, ``opdef(op).evaluate``), never from tables of their own;
the few ONNX operator types they name are the ones a rewrite is about.
The recognisers of spelled-out operators (GELU, layer norm) are in
:mod:`~tuner.graph.patterns`; what every rewrite is built from (fresh names,
readers of a value, node replacement, dead-code elimination) is in
:mod:`~tuner.graph.rewrite`. This module holds the structural passes and the
:func:`optimize` pipeline over all of them.

>>> g = optimize(graph)   # simplify, fold, fold batch norm, recognise GELU and layer norm, CSE, DCE
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from .ir import FUSED, Graph, Node, Value
from .ops import OpKind, opdef
from .patterns import recognize_gelu, recognize_layer_norm
from .rewrite import Names, Uses, eliminate_dead_code, replace_nodes

__all__ = [
    "eliminate_common_subexpressions",
    "eliminate_dead_code",
    "fold_batchnorm",
    "fold_constants",
    "optimize",
    "simplify",
]

#: Constant folding leaves results bigger than this (elements) as nodes.
FOLD_LIMIT = 1 << 20
#: Equal constants up to this many elements are merged by CSE.
CSE_CONST_LIMIT = 4096
#: Operators whose result depends only on the shape of their input.
_SHAPE_READERS = frozenset({"Shape", "Size"})
#: Operators whose input 1 is a target shape that a static output shape can stand for.
_SHAPE_OPERAND = frozenset({"Reshape", "Expand"})


# -- small helpers -------------------------------------------------------------------


def _resolve(subst: Mapping[str, str], name: str) -> str:
    while name in subst:
        name = subst[name]
    return name


def _rewire(nodes: Iterable[Node], subst: Mapping[str, str]) -> tuple[Node, ...]:
    """Nodes with every input and output name followed through ``subst``."""
    if not subst:
        return tuple(nodes)
    out = []
    for n in nodes:
        ins = tuple(_resolve(subst, i) if i else i for i in n.inputs)
        outs = tuple(_resolve(subst, o) if o else o for o in n.outputs)
        out.append(dataclasses.replace(n, inputs=ins, outputs=outs))
    return tuple(out)


def _freeze(x: Any) -> Any:
    """A hashable stand-in for an attribute value (arrays by content)."""
    if isinstance(x, np.ndarray):
        return ("ndarray", x.dtype.str, x.shape, x.tobytes())
    if isinstance(x, list | tuple):
        return tuple(_freeze(i) for i in x)
    if isinstance(x, Mapping):
        return tuple(sorted((k, _freeze(v)) for k, v in x.items()))
    if isinstance(x, Graph):
        return ("graph", id(x))
    return (type(x).__name__, x)


def _signature(graph: Graph) -> Any:
    nodes = tuple((n.op, n.inputs, n.outputs, _freeze(n.attrs)) for n in graph.nodes)
    return graph.inputs, graph.outputs, nodes, tuple(sorted(graph.values))


# -- simplify ------------------------------------------------------------------------


def simplify(graph: Graph) -> Graph:
    """Drop nodes that pass a value through, and merge a Reshape into the view before it.

    Identity, Dropout in inference (no training mode, mask unused), Cast to the
    value's own dtype and views whose static output shape equals their input's
    go; their readers read the input instead. When the dropped node defines a
    graph output, the input's producer is renamed to the output's name (unless
    the input is a graph input, a constant or itself a graph output: then the
    node stays). ``Reshape(view(x))`` becomes ``Reshape(x)`` with a constant
    target shape (the static output shape when the old one could refer to the
    view's dims with 0).

    >>> simplify(g)   # y = Identity(Relu(x)) as output  ->  y = Relu(x)
    """
    names = Names(graph)
    uses = Uses(graph)
    subst: dict[str, str] = {}
    made: dict[str, Node] = {}
    kept: list[Node] = []
    new_values: list[Value] = []
    for node in graph.nodes:
        node = _rewire([node], subst)[0]
        src = _passes_through(graph, uses, node)
        if src is not None and _alias(graph, node.outputs[0], src, subst):
            continue
        if node.op == "Reshape":
            node = _merge_reshape(graph, node, made, names, new_values)
        kept.append(node)
        made.update((o, node) for o in node.outputs if o)
    g = graph.replace(nodes=_rewire(kept, subst), values=graph.with_values(new_values))
    return eliminate_dead_code(g)


def _passes_through(graph: Graph, uses: Uses, node: Node) -> str | None:
    """The input a node returns unchanged, or None."""
    if node.op == FUSED or not node.inputs or not node.inputs[0] or not node.outputs[0]:
        return None
    src, out = node.inputs[0], node.outputs[0]
    extra = [o for o in node.outputs[1:] if o and (o in uses.consumers or o in uses.outputs)]
    if extra:
        return None
    if node.op == "Identity":
        return src
    if node.op in ("Concat", "Sum", "Max", "Min", "Mean") and len(node.inputs) == 1:
        return src  # of one tensor: itself (a decoder's key cache with no past, say)
    if node.op == "Dropout":
        mode = node.inputs[2] if len(node.inputs) > 2 else ""
        training = graph.const(mode) if mode else np.array(False)
        return src if training is not None and not training.any() else None
    a, b = graph.value(src), graph.value(out)
    if node.op == "Cast":
        return src if a.dtype == b.dtype else None
    if opdef(node.op).kind == OpKind.VIEW and a.static and a.shape == b.shape:
        return src if a.dtype == b.dtype else None
    return None


def _alias(graph: Graph, out: str, src: str, subst: dict[str, str]) -> bool:
    """Make ``out`` stand for ``src`` (or ``src`` be renamed ``out``); False if it cannot."""
    if out not in graph.outputs:
        subst[out] = src
        return True
    if src in graph.inputs or src in graph.outputs or graph.const(src) is not None:
        return False
    subst[src] = out
    return True


def _merge_reshape(
    graph: Graph, node: Node, made: dict[str, Node], names: Names, new_values: list[Value]
) -> Node:
    inner = made.get(node.inputs[0])
    if inner is None or inner.op in (FUSED, "Dropout") or opdef(inner.op).kind != OpKind.VIEW:
        return node
    if len([o for o in inner.outputs if o]) != 1:
        return node
    shape = graph.const(node.inputs[1]) if len(node.inputs) > 1 else None
    target = node.inputs[1]
    if shape is None or (0 in shape.tolist() and not node.attr("allowzero", 0)):
        out = graph.value(node.outputs[0])
        if not out.static:
            return node
        v = Value.const(names(f"{node.outputs[0]}_shape"), np.array(out.shape, dtype=np.int64))
        new_values.append(v)
        target = v.name
    return dataclasses.replace(node, inputs=(inner.inputs[0], target))


# -- constant folding ----------------------------------------------------------------


def fold_constants(graph: Graph) -> Graph:
    """Evaluate nodes whose inputs are all constants, and shape reads of static values.

    A folded node's outputs become constants under the same names (results
    over :data:`FOLD_LIMIT` elements, and bigger than all their inputs together,
    stay nodes: rewriting a weight folds, expanding a constant does not). Shape and Size of a value
    with a static shape fold without its data. A Reshape or Expand whose
    target shape is still computed but whose output shape is static reads a
    constant instead, so Shape -> Gather -> Concat -> Reshape chains collapse
    and the arithmetic before them is dead.

    >>> fold_constants(g)   # Reshape(x, Concat(Gather(Shape(x), 0), [-1])) -> Reshape(x, [2, 12])
    """
    names = Names(graph)
    consts: dict[str, np.ndarray] = {
        v.name: v.data for v in graph.constants() if v.data is not None
    }
    kept: list[Node] = []
    new_values: list[Value] = []
    for node in graph.nodes:
        results = None if node.op == FUSED else _evaluate(graph, node, consts)
        if results is None:
            if node.op in _SHAPE_OPERAND and len(node.inputs) > 1:
                node = _static_target(graph, node, consts, names, new_values)
            kept.append(node)
            continue
        for name, arr in zip(node.outputs, results, strict=False):
            if not name:
                continue
            declared = graph.value(name)
            arr = np.asarray(arr, dtype=declared.dtype)
            new_values.append(Value(name, declared.dtype, tuple(arr.shape), arr))
            consts[name] = arr
    g = graph.replace(nodes=tuple(kept), values=graph.with_values(new_values))
    return eliminate_dead_code(g)


def _evaluate(
    graph: Graph, node: Node, consts: Mapping[str, np.ndarray]
) -> list[np.ndarray] | None:
    definition = opdef(node.op)
    if node.op in _SHAPE_READERS and node.inputs:
        x = graph.value(node.inputs[0])
        if not x.static:
            return None
        # A zero-stride array has the shape at no cost; the op reads nothing else.
        arrays: list[np.ndarray | None] = [
            np.broadcast_to(np.zeros((), dtype=x.dtype), tuple(int(d) for d in x.shape))
        ]
        limit = FOLD_LIMIT
    elif node.inputs or definition.kind == OpKind.SHAPE:
        if any(i and i not in consts for i in node.inputs):
            return None
        arrays = [consts[i] if i else None for i in node.inputs]
        # Rewriting a weight (Transpose, Cast) costs no memory; growing one does.
        limit = max(FOLD_LIMIT, sum(a.size for a in arrays if a is not None))
    else:
        return None
    if any(v.static and v.size > limit for v in (graph.value(o) for o in node.outputs if o)):
        return None
    results = definition.evaluate(node, arrays)
    if any(np.asarray(r).size > limit for r in results):
        return None
    return results


def _static_target(
    graph: Graph,
    node: Node,
    consts: Mapping[str, np.ndarray],
    names: Names,
    new_values: list[Value],
) -> Node:
    out = graph.value(node.outputs[0])
    if node.inputs[1] in consts or not out.static:
        return node
    v = Value.const(names(f"{node.outputs[0]}_shape"), np.array(out.shape, dtype=np.int64))
    new_values.append(v)
    return dataclasses.replace(node, inputs=(node.inputs[0], v.name, *node.inputs[2:]))


# -- batch norm into convolution -------------------------------------------------------


def fold_batchnorm(graph: Graph) -> Graph:
    """Fold an inference BatchNormalization into the Conv before it.

    Applies when the Conv's weights (and bias, if any) and every BN parameter
    are constants and the BN is the Conv output's only reader (and that output
    is no graph output). With ``s = scale / sqrt(var + eps)`` the Conv gets
    ``W' = W * s[k]`` and ``B' = (B - mean) * s + beta`` (in W's dtype) and
    defines the BN's output. Any other BN (after a graph input, a shared conv
    output, training mode) stays.

    >>> fold_batchnorm(g)   # y = BN(Conv(x, W, B), ...)  ->  y = Conv(x, W', B')
    """
    names = Names(graph)
    uses = Uses(graph)
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    replaced: dict[int, Node] = {}
    dropped: set[int] = set()
    values: list[Value] = []
    for bi, bn in enumerate(graph.nodes):
        if bn.op != "BatchNormalization" or bn.attr("training_mode", 0):
            continue
        if any(o and (o in uses.consumers or o in uses.outputs) for o in bn.outputs[1:]):
            continue
        conv = uses.made_by(bn.inputs[0], "Conv")
        if conv is None or uses.only(bn.inputs[0]) is not bn or index[id(conv)] in replaced:
            continue
        params = [graph.const(i) for i in bn.inputs[1:5]]
        w = graph.const(conv.inputs[1]) if len(conv.inputs) > 1 else None
        b_name = conv.inputs[2] if len(conv.inputs) > 2 else ""
        b = graph.const(b_name) if b_name else None
        if w is None or any(p is None for p in params) or (b_name and b is None):
            continue
        scale, beta, mean, var = (np.asarray(p, dtype=np.float64) for p in params if p is not None)
        s = scale / np.sqrt(var + float(bn.attr("epsilon", 1e-5)))
        bias = np.zeros(w.shape[0]) if b is None else b.astype(np.float64)
        w2 = (w * s.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
        b2 = ((bias - mean) * s + beta).astype(w.dtype)
        wv = Value.const(names(f"{conv.inputs[1]}_bn"), w2)
        bv = Value.const(names(f"{b_name or conv.inputs[1]}_bnbias"), b2)
        values += [wv, bv]
        ins = (conv.inputs[0], wv.name, bv.name)
        replaced[index[id(conv)]] = dataclasses.replace(conv, inputs=ins, outputs=(bn.outputs[0],))
        dropped.add(bi)
    return replace_nodes(graph, replaced, dropped, values)


# -- common subexpressions ------------------------------------------------------------


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    """Merge nodes of the same op, attributes and inputs, and equal small constants.

    Later duplicates read the first one's values; a duplicate that defines a
    graph output stays (outputs keep their names). Constants up to
    :data:`CSE_CONST_LIMIT` elements with equal dtype, shape and data become one.

    >>> eliminate_common_subexpressions(g)   # Add(Relu(x), Relu(x)) -> Add(r, r)
    """
    outputs = set(graph.outputs)
    subst: dict[str, str] = {}
    first_const: dict[Any, str] = {}
    for v in graph.constants():
        assert v.data is not None
        if v.data.size > CSE_CONST_LIMIT or v.name in outputs:
            continue
        key = (v.dtype, v.data.shape, v.data.tobytes())
        name = first_const.setdefault(key, v.name)
        if name != v.name:
            subst[v.name] = name
    seen: dict[Any, Node] = {}
    kept: list[Node] = []
    for node in graph.nodes:
        node = _rewire([node], subst)[0]
        if node.op == FUSED:
            kept.append(node)
            continue
        node_key = (node.op, node.inputs, len(node.outputs), _freeze(node.attrs))
        first = seen.get(node_key)
        pairs = [] if first is None else list(zip(node.outputs, first.outputs, strict=True))
        if first is not None and all(not o or (p and o not in outputs) for o, p in pairs):
            subst.update((o, p) for o, p in pairs if o)
            continue
        seen.setdefault(node_key, node)
        kept.append(node)
    return graph.replace(nodes=tuple(kept))


# -- the pipeline ----------------------------------------------------------------------

_PIPELINE: tuple[Callable[[Graph], Graph], ...] = (
    simplify,
    fold_constants,
    simplify,
    eliminate_common_subexpressions,
    fold_batchnorm,
    recognize_gelu,
    recognize_layer_norm,
    eliminate_dead_code,
)


def optimize(graph: Graph, max_rounds: int = 8) -> Graph:
    """Every pass in a sensible order, repeated until the graph stops changing.

    Simplify first (so patterns see through Identity and Dropout), fold
    constants (shape arithmetic), simplify again (reshapes whose targets just
    became constant), CSE, then the rewrites into bigger operators, then DCE.
    Running it on its own result changes nothing.

    >>> g = optimize(from_onnx("resnet18.onnx"))
    """
    for _ in range(max_rounds):
        before = _signature(graph)
        for p in _PIPELINE:
            graph = p(graph)
        if _signature(graph) == before:
            break
    return graph
