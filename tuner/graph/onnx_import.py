"""Import an ONNX model as a :class:`~tuner.graph.Graph` (through the ``onnx`` package).

The importer checks everything a later stage would trip over, so that a
model this compiler cannot take fails here, in one sentence, before anything
is built:

1. load (a path, with external data from the model's folder, or a
   ``ModelProto``);
2. every node's operator must be supported (all nodes are checked first; the
   first unsupported one is reported with its node and opset);
3. ``onnx.checker``;
4. default-domain opset: below 13 the model is converted to 13 with
   ``onnx.version_converter``; 13 to 21 is taken as it is; above 21 is taken
   too but is **untested** (operators that changed after 21 may be misread);
   quantized operators (QLinearConv, MatMulInteger, ...) are rewritten into
   QuantizeLinear/DequantizeLinear around float ones (``onnx_quant``);
5. ``shapes`` fixes symbolic or unknown input extents (``{"data": (8, 3, 224,
   224)}``); extents left symbolic stay strings in ``Value.shape``;
6. shape inference (``data_prop=True``, so shape arithmetic is propagated);
   every value must end with a dtype this compiler has (float32, float64,
   int8, uint8, int32, int64, bool) and a known rank.

Initializers and ``Constant`` nodes become constant Values (owned, writable
arrays); a graph input that is also an initializer is a constant, not an
input. Attributes become plain Python values (int, float, str, tuples of
them, np.ndarray for tensors); nodes without a name are named
``f"{op}_{index}"`` and repeated names get a suffix.

>>> g = from_onnx("model.onnx", shapes={"data": (1, 3, 224, 224)})  # doctest: +SKIP
>>> g.inputs, g.opset  # doctest: +SKIP
(('data',), 13)
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from .ir import Dim, Graph, GraphError, Node, Value
from .onnx_fold import MAX_ELEMENTS, fold_static
from .onnx_quant import QUANTIZED_OPS, decompose_quantized
from .onnx_values import array_of, dtype_of, elem_type, first_line, node_attrs
from .ops import supported
from .ops.shape import constant_value

__all__ = ["MIN_OPSET", "TESTED_OPSET", "from_onnx"]

#: Models below this default-domain opset are converted to it.
MIN_OPSET = 13
#: The newest opset the operators are tested at; newer ones are taken untested.
TESTED_OPSET = 21

_DEFAULT_DOMAINS = ("", "ai.onnx")


def from_onnx(
    model: str | os.PathLike[str] | onnx.ModelProto,
    shapes: Mapping[str, Sequence[int] | int] | None = None,
) -> Graph:
    """The model as a graph; GraphError (one sentence) for anything this compiler cannot take."""
    proto = _load(model)
    opset = _default_opset(proto)
    _check_operators(proto, opset)
    _check_model(proto)
    if opset < MIN_OPSET:
        proto = _convert(proto, opset)
        opset = MIN_OPSET
        _check_operators(proto, opset)
    try:
        decompose_quantized(proto)
    except ValueError as exc:
        raise GraphError(str(exc)) from None
    if shapes:
        _fix_shapes(proto, shapes)
    _name_unknown_extents(proto)
    weights = _detach_weights(proto)
    proto = fold_static(proto, _infer)
    _attach_weights(proto, weights)
    return _Builder(proto, opset).graph()


def _detach_weights(proto: onnx.ModelProto) -> tuple[list[onnx.TensorProto], set[str]]:
    """Take the large initializers out of ``proto`` for shape inference, leaving their
    types and shapes as graph inputs; returns them and the inputs added for them. ONNX
    serializes the whole model for every inference round, and a BERT's weights made
    that most of an import (1.6 s of 2 for a new shape in ``generic``). Shape arithmetic
    never reads them (``onnx_fold`` folds values of at most ``MAX_ELEMENTS``)."""
    g = proto.graph
    big = [t for t in g.initializer if math.prod(t.dims) > MAX_ELEMENTS]
    if not big:
        return [], set()
    listed = {i.name for i in g.input}
    keep = [t for t in g.initializer if math.prod(t.dims) <= MAX_ELEMENTS]
    del g.initializer[:]
    g.initializer.extend(keep)
    added = {t.name for t in big if t.name not in listed}
    for t in big:
        if t.name in added:
            g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return big, added


def _attach_weights(
    proto: onnx.ModelProto, detached: tuple[list[onnx.TensorProto], set[str]]
) -> None:
    """The initializers ``_detach_weights`` took out, back in their place."""
    weights, added = detached
    if not weights:
        return
    g = proto.graph
    inputs = [i for i in g.input if i.name not in added]
    del g.input[:]
    g.input.extend(inputs)
    g.initializer.extend(weights)


def _infer(proto: onnx.ModelProto) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(
            proto, check_type=True, strict_mode=True, data_prop=True
        )
    except Exception as exc:
        raise GraphError(f"shape inference failed: {first_line(exc)}") from None


# -- loading and checking ------------------------------------------------------------


def _load(model: str | os.PathLike[str] | onnx.ModelProto) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(model)  # the caller's model is never changed
        return proto
    if not isinstance(model, str | os.PathLike):
        raise GraphError(f"expected a path or an onnx.ModelProto, got {type(model).__name__}")
    path = os.fspath(model)
    if not os.path.isfile(path):
        why = "a folder, not a file" if os.path.isdir(path) else "no such file"
        raise GraphError(f"cannot read ONNX model {path!r}: {why}")
    try:
        proto = onnx.load(path)  # external data is read from the model's folder
    except Exception as exc:
        raise GraphError(f"cannot read ONNX model {path!r}: {first_line(exc)}") from None
    if not proto.HasField("graph") or not proto.opset_import:
        raise GraphError(f"cannot read ONNX model {path!r}: not an ONNX model")
    return proto


def _default_opset(proto: onnx.ModelProto) -> int:
    for entry in proto.opset_import:
        if entry.domain in _DEFAULT_DOMAINS:
            return int(entry.version)
    raise GraphError("the model imports no opset of the default ONNX domain")


def _node_names(nodes: Sequence[onnx.NodeProto]) -> list[str]:
    """Non-empty, unique node names: ``f"{op}_{index}"`` for unnamed nodes, suffixes for repeats."""
    taken = {n.name for n in nodes if n.name}
    seen: set[str] = set()
    out = []
    for index, n in enumerate(nodes):
        name = n.name or f"{n.op_type}_{index}"
        if name in seen or (not n.name and name in taken):
            name = next(f"{name}_{k}" for k in itertools.count(1) if f"{name}_{k}" not in taken)
        seen.add(name)
        taken.add(name)
        out.append(name)
    return out


def _check_operators(proto: onnx.ModelProto, opset: int) -> None:
    ops = set(supported())
    versions = {e.domain: int(e.version) for e in proto.opset_import}
    nodes = list(proto.graph.node)
    for n, name in zip(nodes, _node_names(nodes), strict=True):
        if n.domain in _DEFAULT_DOMAINS and n.op_type in ops:
            continue
        if (n.domain if n.domain != "ai.onnx" else "", n.op_type) in QUANTIZED_OPS:
            continue  # rewritten into supported operators (onnx_quant)
        if n.domain in _DEFAULT_DOMAINS:
            op, version = n.op_type, opset
        else:
            op, version = f"{n.domain}.{n.op_type}", versions.get(n.domain, 1)
        raise GraphError(f"unsupported operator {op} (node {name!r}, opset {version})")


def _check_model(proto: onnx.ModelProto) -> None:
    try:
        onnx.checker.check_model(proto)
    except Exception as exc:
        raise GraphError(f"invalid ONNX model: {first_line(exc)}") from None


def _convert(proto: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    try:
        return onnx.version_converter.convert_version(proto, MIN_OPSET)
    except Exception as exc:
        raise GraphError(
            f"cannot convert the model from opset {opset} to {MIN_OPSET}: {first_line(exc)}"
        ) from None


def _fix_shapes(proto: onnx.ModelProto, shapes: Mapping[str, Sequence[int] | int]) -> None:
    """Give symbolic or unknown extents the values in ``shapes`` (in place): an input's name
    with its whole shape (``{"input": (8, 3, 224, 224)}``), or a symbol's name with its
    value (``{"batch": 8}``), as the model's inputs declare it."""
    graph = proto.graph
    inits = {t.name for t in graph.initializer}
    inputs = {i.name: i for i in graph.input if i.name not in inits}
    declared = {
        d.dim_param
        for i in inputs.values()
        for d in i.type.tensor_type.shape.dim
        if d.WhichOneof("value") == "dim_param"
    }
    symbols: dict[str, int] = {}
    for name, dims in shapes.items():
        if name not in inputs and name in declared and not isinstance(dims, int | np.integer):
            dims = _one_value(name, dims)  # the command line's --shape batch=8
        if name not in inputs and name in declared and isinstance(dims, int | np.integer):
            if isinstance(dims, bool) or dims < 1:
                raise GraphError(
                    f"shapes gives symbol {name!r} the value {dims!r}; it must be positive"
                )
            if symbols.setdefault(name, int(dims)) != int(dims):
                raise GraphError(
                    f"shapes gives symbol {name!r} two values: {symbols[name]} and {int(dims)}"
                )
            continue
        if name not in inputs:
            known = ", ".join(inputs) or "none"
            syms = f"; symbols: {', '.join(sorted(declared))}" if declared else ""
            raise GraphError(
                f"shapes names {name!r}, which is neither a graph input nor a symbol of one"
                f" (inputs: {known}{syms})"
            )
        if isinstance(dims, int | np.integer | str):
            raise GraphError(
                f"shapes gives input {name!r} {dims!r}; an input takes its whole shape,"
                " a sequence of extents"
            )
        values = tuple(dims)
        if not all(isinstance(d, int | np.integer) and d > 0 for d in values):
            raise GraphError(f"shapes gives input {name!r} extents {values}; they must be positive")
        ttype = inputs[name].type.tensor_type
        if not ttype.HasField("shape"):
            ttype.shape.SetInParent()
            for _ in values:
                ttype.shape.dim.add()
        if len(ttype.shape.dim) != len(values):
            raise GraphError(
                f"input {name!r} has rank {len(ttype.shape.dim)}, "
                f"but shapes gives {len(values)} extents {values}"
            )
        for axis, (dim, want) in enumerate(zip(ttype.shape.dim, values, strict=True)):
            kind = dim.WhichOneof("value")
            if kind == "dim_value" and dim.dim_value != want:
                raise GraphError(
                    f"input {name!r} has extent {dim.dim_value} in dimension {axis}, "
                    f"but shapes gives {want}"
                )
            if kind == "dim_param" and symbols.setdefault(dim.dim_param, int(want)) != want:
                raise GraphError(
                    f"shapes gives symbol {dim.dim_param!r} two values: "
                    f"{symbols[dim.dim_param]} and {want}"
                )
            dim.dim_value = int(want)
    # The same symbol elsewhere (other inputs, declared outputs and value types) is the same extent.
    for info in itertools.chain(graph.input, graph.output, graph.value_info):
        for dim in info.type.tensor_type.shape.dim:
            if dim.WhichOneof("value") == "dim_param" and dim.dim_param in symbols:
                dim.dim_value = symbols[dim.dim_param]


def _one_value(symbol: str, dims: Any) -> int:
    try:
        (value,) = tuple(dims)
    except (TypeError, ValueError):
        raise GraphError(
            f"shapes gives symbol {symbol!r} {dims!r}; a symbol takes one value"
        ) from None
    if not isinstance(value, int | np.integer):
        raise GraphError(f"shapes gives symbol {symbol!r} {dims!r}; a symbol takes one value")
    return int(value)


def _name_unknown_extents(proto: onnx.ModelProto) -> None:
    """Give inputs' unknown extents symbols (``x_d0``) so inference carries them through."""
    inits = {t.name for t in proto.graph.initializer}
    for info in proto.graph.input:
        if info.name in inits:
            continue
        for axis, dim in enumerate(info.type.tensor_type.shape.dim):
            if dim.WhichOneof("value") is None:
                dim.dim_param = f"{info.name}_d{axis}"


# -- building the graph ----------------------------------------------------------------


class _Builder:
    """Turns an inferred, checked model into the IR (one pass over its graph)."""

    def __init__(self, proto: onnx.ModelProto, opset: int):
        self.g = proto.graph
        self.opset = opset
        self.types = {i.name: i.type for i in (*self.g.input, *self.g.value_info, *self.g.output)}
        self.unknown = itertools.count()

    def graph(self) -> Graph:
        g = self.g
        if g.sparse_initializer:
            raise GraphError(
                f"sparse initializer {g.sparse_initializer[0].values.name!r} is not supported"
            )
        values: dict[str, Value] = {}
        for t in g.initializer:
            values[t.name] = Value.const(t.name, array_of(t, f"initializer {t.name!r}"))
        inputs = [
            self.value(i.name, f"graph input {i.name!r}") for i in g.input if i.name not in values
        ]
        nodes: list[Node] = []
        protos = list(g.node)
        for n, name in zip(protos, _node_names(protos), strict=True):
            node = Node(n.op_type, tuple(n.input), tuple(n.output), self.attrs(n, name), name)
            if node.op == "Constant":
                data = constant_value(node)
                dtype_of(elem_type(data), f"{node.describe()} value")
                values[node.outputs[0]] = Value.const(node.outputs[0], data)
                continue
            for out in node.outputs:
                if out:
                    values[out] = self.value(out, f"value {out!r} (output of {node.describe()})")
            nodes.append(node)
        outputs = [o.name for o in g.output]
        return Graph.make(inputs, nodes, values.values(), outputs, self.opset, g.name or "graph")

    def value(self, name: str, what: str) -> Value:
        t = self.types.get(name)
        if t is None or t.WhichOneof("value") != "tensor_type" or not t.tensor_type.elem_type:
            raise GraphError(f"the type of {what} cannot be inferred")
        tt = t.tensor_type
        if not tt.HasField("shape"):
            raise GraphError(f"the rank of {what} cannot be inferred")
        shape: list[Dim] = []
        for dim in tt.shape.dim:
            kind = dim.WhichOneof("value")
            if kind == "dim_value":
                if dim.dim_value <= 0:
                    raise GraphError(
                        f"{what} has an empty dimension; zero-size tensors are not supported"
                    )
                shape.append(int(dim.dim_value))
            else:  # symbolic, or unknown: a fresh symbol the module resolves later
                shape.append(dim.dim_param if kind == "dim_param" else f"unk__{next(self.unknown)}")
        return Value(name, dtype_of(tt.elem_type, what), tuple(shape))

    def attrs(self, n: onnx.NodeProto, name: str) -> dict[str, Any]:
        return node_attrs(n, f"{n.op_type} node {name!r}")
