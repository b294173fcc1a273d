"""Serving a model's symbolic dimensions by buckets: inputs padded up, softmax masked, outputs sliced.

With ``compile_model(..., dynamic="bucket")`` a symbolic input dimension
(``seq`` in ``input: float32[batch, seq, 768]``) is padded with zeros up to
its next bucket, the model runs as compiled for the bucket, and each output
is sliced back. Padding is sound only where no operator mixes padded
positions into real ones, so :func:`analyse` checks the model once, before
anything is built:

- Which axes of which values follow each symbol is found by importing the
  model at two probe shapes that differ in that symbol alone: an axis whose
  extent changes follows it, and equals it where the extent is the symbol's
  value at both probes.
- Operators that keep positions apart along such an axis are sound:
  elementwise ones, views (a merged ``batch*seq`` axis keeps its rows
  apart), Transpose, and reductions and products over other axes.
- A Softmax over the axis is **masked**: a zero-or-``-inf`` mask, one more
  model input of the bucket's length, is added to its operand, so padded
  positions get probability zero. A MatMul contracting over the axis is
  sound when its operand there is such a softmax's output (attention's
  ``P @ V``).
- Everything else that crosses a padded axis (a ReduceMean over the
  sequence, a convolution over a padded image size (a padded batch of images
  is sound), a Concat or Slice along
  it, arithmetic on the padded length read through Shape) is refused in one
  line naming the node: ``dynamic="specialize"`` serves such a model.
- Except where the model, run padded, shows otherwise (``bucket_probe``): a node
  that only moves values or computes on integers (``transformers``' attention
  mask, the flat ``[batch, seq]`` mask read at ``b * seq + j``; a scale from a
  head size read through Shape) passes when its real positions come out the
  same on a random input zero-padded past the probe shape.

>>> padding = analyse("encoder.onnx", {"seq": Var("seq", lo=1, hi=512)})  # doctest: +SKIP
>>> padding.masks  # doctest: +SKIP
(('Softmax_41', 'seq', 3), ('Softmax_97', 'seq', 3))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..graph.ir import Graph, GraphError, Node, Value
from ..graph.ops import OpKind, opdef
from ..graph.ops.reduce import reduce_args
from ..te import Var
from .bucket_probe import Probe

__all__ = ["MaskInput", "Padding", "analyse", "masked"]

#: A softmax to mask: (its node's name, the symbol, the axis it normalises).
Mask = tuple[str, str, int]


@dataclass(frozen=True)
class Padding:
    """How a model is served padded: the softmaxes to mask and the output axes to slice back."""

    masks: tuple[Mask, ...]
    #: Per graph output: (axis, symbol) for each axis that is a symbol's extent.
    slices: tuple[tuple[tuple[int, str], ...], ...]


def probe_values(symbols: Mapping[str, Var]) -> tuple[dict[str, int], dict[str, int]]:
    """A base value for each symbol and, per symbol, another value to vary it to."""
    base, other = {}, {}
    for name, v in symbols.items():
        hi = v.hi if v.hi is not None else max(v.lo, 64)
        b = min(max(v.lo, 7), hi)
        base[name] = b
        if b + 1 <= hi:
            other[name] = b + 1
        elif b - 1 >= v.lo:
            other[name] = b - 1
        else:
            other[name] = b  # a symbol with a single value: nothing follows it
    return base, other


def analyse(
    source: Any,
    symbols: Mapping[str, Var],
    input_shapes: Mapping[str, Sequence[Any]],
    outputs: Sequence[str],
) -> Padding:
    """Where ``source``'s symbols go, whether padding them is sound, and what to mask and slice.

    ``input_shapes``: each graph input's declared shape (strings for symbols).
    Raises GraphError (one line naming the node) where padding would change
    results.
    """
    from ..graph.onnx_import import from_onnx

    base, other = probe_values(symbols)

    def shapes_at(values: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
        return {
            name: tuple(values[d] if isinstance(d, str) else int(d) for d in shape)
            for name, shape in input_shapes.items()
        }

    graph = from_onnx(source, shapes_at(base))
    follows: dict[str, dict[str, dict[int, bool]]] = {}  # value -> symbol -> axis -> identity
    for name in symbols:
        if other[name] == base[name]:
            continue
        moved = from_onnx(source, shapes_at({**base, name: other[name]}))
        for vname, v in graph.values.items():
            w = moved.values.get(vname)
            if w is None or len(w.shape) != len(v.shape) or v.is_const:
                continue
            for axis, (a, b) in enumerate(zip(v.shape, w.shape, strict=True)):
                if a != b:
                    same = a == base[name] and b == other[name]
                    follows.setdefault(vname, {}).setdefault(name, {})[axis] = same
    limits = {n: (v.lo, v.hi) for n, v in symbols.items()}
    masks = _check_nodes(graph, follows, Probe(source, graph, base, limits, shapes_at, follows))
    slices = []
    for out in outputs:
        cut = []
        for sym, axes in follows.get(out, {}).items():
            for axis, same in sorted(axes.items()):
                if not same:
                    raise GraphError(
                        f"bucket: output {out!r} axis {axis} is a function of {sym} other than"
                        f" {sym} itself, so it cannot be sliced back; use dynamic='specialize'"
                    )
                cut.append((axis, sym))
        slices.append(tuple(sorted(cut)))
    return Padding(tuple(masks), tuple(slices))


def _check_nodes(
    graph: Graph,
    follows: Mapping[str, Mapping[str, Mapping[int, bool]]],
    probe: Callable[[Node, Sequence[Mask]], bool] | None = None,
) -> list[Mask]:
    """The softmaxes to mask; GraphError at the first node that would mix padded positions.

    A node the rules below would refuse is first put to ``probe`` (a ``bucket_probe.Probe``:
    the model run padded), and passes where its real positions come out unchanged."""
    masks: list[Mask] = []
    zero: set[tuple[str, int]] = set()  # (value, axis): zero at every padded position there

    def padded(value: str) -> dict[int, tuple[str, bool]]:
        out: dict[int, tuple[str, bool]] = {}
        for sym, axes in follows.get(value, {}).items():
            for axis, same in axes.items():
                out[axis] = (sym, same)
        return out

    def refuse(node: Node, why: str) -> GraphError:
        return GraphError(
            f"bucket: {node.describe()} {why}, so padding would change its results;"
            " use dynamic='specialize'"
        )

    for node in graph.nodes:
        ins = [i for i in node.inputs if i]
        if not any(padded(i) for i in ins):
            continue
        kind = opdef(node.op).kind
        first = padded(node.inputs[0]) if node.inputs and node.inputs[0] else {}
        rank = len(graph.value(node.inputs[0]).shape) if node.inputs and node.inputs[0] else 0
        if kind is OpKind.ELEMENTWISE or node.op in ("Identity", "Dropout"):
            if node.op in ("Identity", "Dropout") or node.op == "Cast":
                zero.update((node.outputs[0], a) for v, a in zero.copy() if v == node.inputs[0])
            continue
        if kind is OpKind.VIEW or node.op == "Transpose":
            continue
        if node.op == "Shape":
            _check_shape_use(
                graph, node, refuse, lambda user: probe is not None and probe(user, masks)
            )
            continue
        if node.op in ("Softmax", "LogSoftmax"):
            axis = _axis(node, int(node.attr("axis", -1)), rank)
            if axis in first:
                sym, same = first[axis]
                if not same:
                    raise refuse(node, f"normalises over an axis made of {sym} and more")
                masks.append((node.name, sym, axis))
                if node.op == "Softmax":
                    zero.add((node.outputs[0], axis))
            continue
        if node.op in ("MatMul", "Gemm"):
            _check_product(graph, node, padded, zero, refuse)
            continue
        mixed = _mixed_axes(graph, node, rank)
        crossed = sorted(set(first) & mixed)
        if crossed and not (probe is not None and probe(node, masks)):
            sym = first[crossed[0]][0]
            raise refuse(node, f"works across axis {crossed[0]}, which is padded ({sym})")
        if (
            any(padded(i) for i in node.inputs[1:] if i)
            and node.op not in ("Gather", "Expand")
            and not (probe is not None and probe(node, masks))
        ):
            raise refuse(node, "reads a padded value as a parameter")
    return masks


def _axis(node: Node, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise GraphError(f"{node.describe()} has axis {axis} out of range for rank {rank}")
    return axis % rank if rank else 0


#: Operators over NCHW images that never combine two images of a batch.
_PER_IMAGE = frozenset(
    ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")
)


def _mixed_axes(graph: Graph, node: Node, rank: int) -> set[int]:
    """The axes of input 0 along which ``node`` combines positions (every axis when unknown)."""
    every = set(range(rank))
    op = node.op
    if op.startswith("Reduce"):
        axes_input = graph.const(node.inputs[1]) if len(node.inputs) > 1 else None
        return set(reduce_args(node, axes_input, rank)[0])
    if op == "LayerNormalization":
        return set(range(_axis(node, int(node.attr("axis", -1)), rank), rank))
    if op == "Concat" and len([i for i in node.inputs if i]) == 1:
        return set()  # a concat of one tensor is that tensor
    if op in ("Concat", "Split", "Gather", "CumSum", "Flatten"):
        if op == "Flatten":  # a view in all but name: keeps positions apart
            return set()
        return {_axis(node, int(node.attr("axis", 0)), rank)}
    if op in ("Slice", "Pad", "Tile", "Expand"):
        return _reshaped_axes(graph, node, rank)
    if op == "BatchNormalization":
        return set()
    if op in _PER_IMAGE:  # each image of a batch on its own: channels and pixels mix, images not
        return every - {0}
    if op == "InstanceNormalization":
        return set(range(2, rank))
    if op == "LRN":
        return {1}
    if op == "GatherElements":
        return {_axis(node, int(node.attr("axis", 0)), rank)}
    return every  # anything else: refuse


def _reshaped_axes(graph: Graph, node: Node, rank: int) -> set[int]:
    """Axes a Slice, Pad, Tile or Expand changes (compared by extent), else every axis."""
    x = graph.value(node.inputs[0])
    y = graph.value(node.outputs[0])
    if node.op == "Slice" or len(y.shape) != rank:
        if node.op == "Slice" and len(y.shape) == rank:
            return {a for a in range(rank) if x.shape[a] != y.shape[a]} | _slice_axes(graph, node)
        return set(range(rank))
    if node.op == "Expand":  # broadcasting an extent-1 axis keeps positions apart
        return {a for a in range(rank) if x.shape[a] != y.shape[a] and x.shape[a] != 1}
    return {a for a in range(rank) if x.shape[a] != y.shape[a]}


def _slice_axes(graph: Graph, node: Node) -> set[int]:
    rank = len(graph.value(node.inputs[0]).shape)
    axes = graph.const(node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] else None
    if axes is None:
        return set(range(rank))
    return {_axis(node, int(a), rank) for a in np.asarray(axes).reshape(-1)}


def _check_product(
    graph: Graph, node: Node, padded: Any, zero: set[tuple[str, int]], refuse: Any
) -> None:
    """A MatMul or Gemm contracting over a padded axis needs an operand that is zero there."""
    a, b = node.inputs[0], node.inputs[1]
    ra, rb = len(graph.value(a).shape), len(graph.value(b).shape)
    if node.op == "Gemm":
        ka = 0 if node.attr("transA", 0) else 1
        kb = 1 if node.attr("transB", 0) else 0
    else:
        ka, kb = ra - 1, (rb - 2 if rb >= 2 else 0)
    crossed = ka in padded(a) or kb in padded(b)
    if crossed and (a, ka) not in zero and (b, kb) not in zero:
        sym = (padded(a).get(ka) or padded(b)[kb])[0]
        raise refuse(node, f"sums over a padded axis ({sym}) that no masked softmax zeroes")


def _check_shape_use(
    graph: Graph, node: Node, refuse: Any, unchanged: Callable[[Node], bool]
) -> None:
    """A padded value's Shape may only size other tensors, never enter arithmetic on floats,
    unless the result comes out the same padded (``unchanged``: a head size's square root)."""
    consumers = graph.consumers()
    todo, seen = [node.outputs[0]], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for user in consumers.get(name, []):
            positions = [k for k, i in enumerate(user.inputs) if i == name]
            sizes = user.op in ("ConstantOfShape", "Range") or (
                user.op in ("Reshape", "Expand", "Tile") and all(k >= 1 for k in positions)
            )
            if sizes:
                continue
            outs = [graph.value(o) for o in user.outputs if o]
            # integer arithmetic and comparisons on lengths (the exporters' Where(Equal(s, -1),
            # 1, s) before an Expand) stay shape arithmetic: followed to their uses
            if all(o.dtype in ("int64", "int32", "bool") for o in outs) and user.op != "Size":
                todo.extend(o.name for o in outs)
                continue
            if not unchanged(user):
                raise refuse(user, "computes with the length of a padded dimension (from Shape)")


# -- serving --------------------------------------------------------------------------------


@dataclass(frozen=True)
class MaskInput:
    """A mask the padded graph takes as an input: ``0`` at real positions, ``-inf`` past them."""

    name: str
    symbol: str
    dtype: str
    #: Extent-1 axes after the masked one (the mask broadcasts over them).
    trailing: int

    def array(self, value: int, served: int) -> np.ndarray:
        row = np.zeros(served, self.dtype)
        row[value:] = -np.inf
        return row.reshape((served,) + (1,) * self.trailing)


def masked(graph: Graph, padding: Padding) -> tuple[Graph, list[MaskInput]]:
    """``graph`` with each masked softmax reading its operand plus a mask, and the masks it takes."""
    if not padding.masks:
        return graph, []
    by_node = {node: (sym, axis) for node, sym, axis in padding.masks}
    if not set(by_node) <= {n.name for n in graph.nodes}:
        raise GraphError("bucket: the model's softmax nodes differ between shapes")
    nodes: list[Node] = []
    masks: dict[str, MaskInput] = {}
    new_values: list[Value] = []
    for node in graph.nodes:
        if node.name not in by_node:
            nodes.append(node)
            continue
        sym, axis = by_node[node.name]
        x = graph.value(node.inputs[0])
        trailing = len(x.shape) - 1 - axis
        name = f"tuner_mask__{sym}__{trailing}__{x.dtype}"
        if name in graph.values:
            raise GraphError(f"bucket: the model already has a value named {name!r}")
        masks.setdefault(name, MaskInput(name, sym, x.dtype, trailing))
        new_values.append(Value(name, x.dtype, (int(x.shape[axis]),) + (1,) * trailing))
        plus = f"{node.inputs[0]}__masked{len(nodes)}"
        new_values.append(Value(plus, x.dtype, x.shape))
        nodes.append(Node("Add", (node.inputs[0], name), (plus,), {}, f"{node.name}__mask"))
        nodes.append(Node(node.op, (plus, *node.inputs[1:]), node.outputs, node.attrs, node.name))
    inputs = [graph.value(i) for i in graph.inputs]
    inputs += [v for v in new_values if v.name in masks and v not in inputs]
    inputs = list({v.name: v for v in inputs}.values())
    values = [*graph.values.values(), *new_values]
    padded = Graph.make(inputs, nodes, values, graph.outputs, graph.opset, graph.name)
    return padded, list(masks.values())
