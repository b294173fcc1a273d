"""Graph rewrites before fusion: each pass is a function Graph -> Graph, tested alone.

Every pass keeps the graph's meaning (``run_graph`` gives the same outputs on
any feeds) and its interface: inputs and outputs keep their names, so a pass
that removes the node defining a graph output renames the producer's output
rather than inserting a copy. New values take their dtype and shape from the
values they replace. Passes read what an operator is from the registry
(``opdef(op).kind``, ``opdef(op).evaluate``), never from tables of their own;
the few ONNX operator types they name are the ones a rewrite is about.

>>> g = optimize(graph)   # simplify, fold, fold batch norm, recognise GELU and layer norm, CSE, DCE
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from .ir import FUSED, Graph, Node, Value
from .ops import OpKind, opdef

__all__ = [
    "eliminate_common_subexpressions",
    "eliminate_dead_code",
    "fold_batchnorm",
    "fold_constants",
    "optimize",
    "recognize_gelu",
    "recognize_layer_norm",
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


class _Names:
    """Fresh value names that collide with nothing in the graph or made before."""

    def __init__(self, graph: Graph) -> None:
        self.taken = set(graph.values)

    def __call__(self, base: str) -> str:
        name, k = base, 1
        while name in self.taken:
            name, k = f"{base}_{k}", k + 1
        self.taken.add(name)
        return name


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


def _scalar(graph: Graph, name: str) -> float | None:
    """The value of a one-element constant, else None."""
    data = graph.const(name)
    if data is None or data.size != 1:
        return None
    return float(data.reshape(()))


def _near(x: float | None, target: float, rtol: float = 1e-4) -> bool:
    return x is not None and abs(x - target) <= rtol * abs(target)


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


class _Uses:
    """Who reads each value, and which values the caller sees."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.consumers = graph.consumers()
        self.producers = graph.producers()
        self.outputs = set(graph.outputs)

    def only(self, name: str) -> Node | None:
        """The one node reading ``name`` when there is exactly one and it is no graph output."""
        cons = self.consumers.get(name, [])
        if len(cons) != 1 or name in self.outputs:
            return None
        return cons[0]

    def made_by(self, name: str, op: str) -> Node | None:
        n = self.producers.get(name)
        return n if n is not None and n.op == op else None


def _other(node: Node, name: str) -> str | None:
    """The other operand of a binary node that reads ``name`` once."""
    a, b = (*node.inputs, "", "")[:2]
    if a == name and b != name:
        return b
    if b == name and a != name:
        return a
    return None


def _rewrite(
    graph: Graph, replaced: dict[int, Node], dropped: set[int], values: list[Value]
) -> Graph:
    """Replace nodes (by position) and drop others, then remove what is dead."""
    nodes = []
    for i, n in enumerate(graph.nodes):
        if i in replaced:
            nodes.append(replaced[i])
        elif i not in dropped:
            nodes.append(n)
    g = graph.replace(nodes=tuple(nodes), values=graph.with_values(values))
    return eliminate_dead_code(g)


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
    names = _Names(graph)
    uses = _Uses(graph)
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


def _passes_through(graph: Graph, uses: _Uses, node: Node) -> str | None:
    """The input a node returns unchanged, or None."""
    if node.op == FUSED or not node.inputs or not node.inputs[0] or not node.outputs[0]:
        return None
    src, out = node.inputs[0], node.outputs[0]
    extra = [o for o in node.outputs[1:] if o and (o in uses.consumers or o in uses.outputs)]
    if extra:
        return None
    if node.op == "Identity":
        return src
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
    graph: Graph, node: Node, made: dict[str, Node], names: _Names, new_values: list[Value]
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
    names = _Names(graph)
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
    names: _Names,
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
    names = _Names(graph)
    uses = _Uses(graph)
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
    return _rewrite(graph, replaced, dropped, values)


# -- common subexpressions and dead code ------------------------------------------------


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


def eliminate_dead_code(graph: Graph) -> Graph:
    """Drop nodes none of whose outputs reach a graph output (and values nothing reads).

    >>> eliminate_dead_code(g)   # an unused branch goes
    """
    live = set(graph.outputs)
    kept: list[Node] = []
    for node in reversed(graph.nodes):
        if any(o in live for o in node.outputs if o):
            kept.append(node)
            live.update(i for i in node.inputs if i)
    return graph.replace(nodes=tuple(reversed(kept)))


# -- pattern recognition ----------------------------------------------------------------

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
    uses = _Uses(graph)
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
    return _rewrite(graph, replaced, dropped, [])


def _match_gelu(graph: Graph, uses: _Uses, erf: Node) -> tuple[str, list[Node]] | None:
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
    names = _Names(graph)
    uses = _Uses(graph)
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
    return _rewrite(graph, replaced, dropped, values)


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


def _affine(graph: Graph, uses: _Uses, chain: list[Node], op: str, width: Any) -> str | None:
    """The parameter of ``op(last, p)`` with p of shape ``(width,)`` after the chain (appended)."""
    last = chain[-1].outputs[0]
    nxt = uses.only(last)
    param = None if nxt is None or nxt.op != op else _other(nxt, last)
    if nxt is None or param is None or graph.value(param).shape != (width,):
        return None
    chain.append(nxt)
    return param


def _match_layer_norm(
    graph: Graph, uses: _Uses, mean: Node
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
