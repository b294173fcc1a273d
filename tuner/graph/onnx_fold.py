"""Shape arithmetic folded on the ONNX graph itself, before the importer reads ranks.

ONNX's shape inference knows a value's rank only where each operator's
inference rule can see it. Exporters compute the targets of ``Reshape``,
``Expand`` or ``ConstantOfShape`` with arithmetic on ``Shape`` (``Mod``,
``Div``, ``Gather``, ``Cast``, ``Range`` ...), and the rules' data
propagation covers only a few of those operators: one ``Mod`` between a
``Shape`` and a ``Reshape`` leaves the reshaped value without a rank
(torchvision's ViT attention does exactly that), and the import cannot go
on.

:func:`fold_static` does nothing where ONNX's inference already knows every
rank, and every extent when the inputs' shapes are static: the graph as
written is then what the bucket mode's soundness analysis reads (arithmetic
on a padded length must stay visible to it). Otherwise it evaluates, in graph order, every node whose inputs are
all known at compile time (initializers, ``Constant`` nodes, and ``Shape``
of a value whose inferred shape is static, or the static part of it that
``start``/``end`` select) with the operators' own NumPy semantics (the same
evaluation constant folding uses later), replaces each by a ``Constant``
node, infers shapes again and repeats until nothing more folds. Only small
results are folded here (shape-sized tensors); big constant subgraphs are
left to :func:`tuner.graph.passes.fold_constants`, which sees the whole IR.
Nothing in the model is executed: only registered operators' evaluations
run on its data.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from .ir import GraphError, Node
from .onnx_values import node_attrs
from .ops import opdef, supported
from .ops.shape import constant_value

__all__ = ["fold_static"]

#: Results up to this many elements are folded here (shape tensors, scales, masks of a few rows).
MAX_ELEMENTS = 4096
#: Operators never folded here: their outputs are big or their folding is the IR's business.
_KEEP = {"Constant", "Dropout"}


def fold_static(proto: onnx.ModelProto, infer: Any, rounds: int = 8) -> onnx.ModelProto:
    """``proto`` with its statically known shape arithmetic folded; ``infer(proto)`` infers shapes.

    Returns the model as ``infer`` (strict) inferred it after the last round, so the caller
    need not infer again. Between rounds inference is lenient: a half-folded chain can trip
    ONNX's data propagation (it treats a ``Range`` of constants as a shape vector and
    refuses to broadcast it in ``Add``), which the next round folds away.
    """
    try:
        inferred = infer(proto)
        if _fully_inferred(inferred):
            return inferred  # nothing to fold for: the graph as written is what is analysed
        proto = inferred
    except GraphError:
        proto = _lenient(proto)
    for _ in range(rounds):
        if _fold_once(proto) == 0:
            break
        proto = _lenient(proto)
    return infer(proto)


def _fully_inferred(proto: onnx.ModelProto) -> bool:
    """Every value has a rank, and, where the inputs' shapes are all static, static extents."""
    g = proto.graph
    inits = {t.name for t in g.initializer}
    infos = {
        v.name: v.type.tensor_type.shape
        for v in (*g.input, *g.value_info, *g.output)
        if v.type.WhichOneof("value") == "tensor_type" and v.type.tensor_type.HasField("shape")
    }

    def static(name: str) -> bool:
        return all(d.WhichOneof("value") == "dim_value" for d in infos[name].dim)

    all_static = all(i.name in inits or (i.name in infos and static(i.name)) for i in g.input)
    for n in g.node:
        for o in n.output:
            if o and (o not in infos or (all_static and not static(o))):
                return False
    return True


def _lenient(proto: onnx.ModelProto) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except Exception:
        return onnx.shape_inference.infer_shapes(proto)


def _fold_once(proto: onnx.ModelProto) -> int:
    g = proto.graph
    known: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    shapes = _static_dims(g)
    ops = set(supported())
    out_nodes: list[onnx.NodeProto] = []
    count = 0
    for n in g.node:
        values = _evaluate(n, known, shapes, ops)
        if values is None:
            if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
                value = _constant(n)
                if value is not None:
                    known[n.output[0]] = value
            out_nodes.append(n)
            continue
        values = _as_inferred(values, [shapes.get(o) for o in n.output])
        if values is None:
            out_nodes.append(n)
            continue
        for name, value in zip(n.output, values, strict=True):
            known[name] = value
            out_nodes.append(
                onnx.helper.make_node(
                    "Constant", [], [name], name=f"{n.name or n.op_type}_folded_{name}",
                    value=numpy_helper.from_array(np.array(value), name),  # keeps rank 0
                )
            )  # fmt: skip
        count += 1
    if count:
        del g.node[:]
        g.node.extend(out_nodes)
        del g.value_info[:]  # inferred afresh: facts derived from the folded nodes may be stale
    return count


def _as_inferred(
    values: list[np.ndarray], dims: list[list[int | None] | None]
) -> list[np.ndarray] | None:
    """The values in the shapes ONNX inferred for them (the evaluations keep the IR's convention
    that a scalar is a vector of one); None where ONNX inferred no static shape or one that
    contradicts a value: only values whose type ONNX knows are folded, so that folding never
    changes a type that later inference relies on."""
    out = []
    for v, d in zip(values, dims, strict=True):
        if d is None or any(x is None for x in d):
            return None  # ONNX's own rank and extents are what the rest of the import reads
        static = [int(x) for x in d if x is not None]
        if tuple(v.shape) != tuple(static):
            if int(np.prod(static, dtype=np.int64)) != v.size:
                return None
            v = v.reshape(static)
        out.append(v)
    return out


def _evaluate(
    n: onnx.NodeProto,
    known: dict[str, np.ndarray],
    shapes: dict[str, list[int | None]],
    ops: set[str],
) -> list[np.ndarray] | None:
    """The outputs of ``n`` if they are known and small, else None (the node stays)."""
    if n.domain not in ("", "ai.onnx") or n.op_type in _KEEP or n.op_type not in ops:
        return None
    if n.op_type == "Shape":
        dims = shapes.get(n.input[0])
        if dims is None:
            return None
        node = _node(n)
        if node is None:
            return None
        start, end = node.attr("start", 0), node.attr("end", len(dims))
        part = dims[slice(start, end)]
        if any(d is None for d in part):
            return None
        return [np.array(part, dtype=np.int64)]
    if not all(not i or i in known for i in n.input):
        return None
    node = _node(n)
    if node is None:
        return None
    arrays = [known[i] if i else None for i in n.input]
    try:
        outs = opdef(n.op_type).evaluate(node, arrays)
    except (GraphError, ValueError, TypeError, IndexError, OverflowError):
        return None  # the import will report it with the node's name, as for any other node
    if any(np.asarray(o).size > MAX_ELEMENTS for o in outs) or len(outs) != len(n.output):
        return None
    return [np.asarray(o) for o in outs]


def _static_dims(g: onnx.GraphProto) -> dict[str, list[int | None]]:
    """Each value's inferred dims (None where symbolic or unknown); absent without a rank."""
    out: dict[str, list[int | None]] = {}
    for v in (*g.input, *g.value_info, *g.output):
        t = v.type
        if t.WhichOneof("value") != "tensor_type" or not t.tensor_type.HasField("shape"):
            continue
        out[v.name] = [
            int(d.dim_value) if d.WhichOneof("value") == "dim_value" else None
            for d in t.tensor_type.shape.dim
        ]
    for t in g.initializer:
        out[t.name] = [int(d) for d in t.dims]
    return out


def _node(n: onnx.NodeProto) -> Node | None:
    """``n`` as the IR's node (the evaluations' view); None if an attribute is of a kind the
    compiler does not read (a node that then stays for the import to report)."""
    try:
        attrs = node_attrs(n, f"{n.op_type} node {n.name!r}")
    except GraphError:
        return None
    return Node(n.op_type, tuple(n.input), tuple(n.output), attrs, n.name or n.op_type)


def _constant(n: onnx.NodeProto) -> np.ndarray | None:
    node = _node(n)
    try:
        return None if node is None else constant_value(node)
    except GraphError:
        return None
