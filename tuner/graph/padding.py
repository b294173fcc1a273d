"""Convolution padding that is not one number made explicit, so the convolution templates take it.

The conv2d templates take one padding for every side (``pad``), as most
convolutions have. Others do not: Inception's factorised ``1 x 7`` and
``7 x 1`` convolutions pad ``(0, 3)``, TensorFlow's ``SAME`` padding at stride 2
pads one side more than the other. Such a convolution found no template and
ran as the generic fused kernel, about a hundred times slower (Inception v3's
``1 x 7`` layers, 78 ms each against onnxruntime's 0.7).

:func:`explicit_padding` rewrites each into a ``Pad`` of its input by exactly
its pads (zeros; a copy of one activation, cheap beside the convolution)
and the convolution with no padding, which the template takes. Strides and
dilations that differ per axis are left as they are (no template takes those
either; they are rare).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .ir import Graph, Node, Value
from .ops.windows import conv_params

__all__ = ["explicit_padding"]

#: Convolutions and where their spatial axes are: NCHW's Conv, the layout pass's twin.
_SPATIAL = {"Conv": (2, 3), "tuner.NhwcConv": (1, 2)}


def explicit_padding(graph: Graph) -> Graph:
    """``graph`` with every 2-d convolution whose pads are not one number padded explicitly."""
    values = dict(graph.values)
    nodes: list[Node] = []
    changed = False
    for n in graph.nodes:
        new = _split(n, values)
        changed |= len(new) > 1
        nodes.extend(new)
    if not changed:
        return graph
    return graph.replace(nodes=tuple(nodes), values=values)


def _split(n: Node, values: dict[str, Value]) -> list[Node]:
    axes = _SPATIAL.get(n.op)
    if axes is None or len(n.inputs) < 2:
        return [n]
    x, w = values[n.inputs[0]], values[n.inputs[1]]
    if len(x.shape) != 4 or not x.static or not w.static:
        return [n]
    shape = tuple(int(d) for d in x.shape)
    nchw = shape if n.op == "Conv" else (shape[0], shape[3], shape[1], shape[2])
    p = conv_params(n, nchw, tuple(int(d) for d in w.shape))
    if p.uniform() is not None or len({*p.strides}) != 1 or len({*p.dilations}) != 1:
        return [n]
    if min(*p.pads_begin, *p.pads_end) < 0:
        return [n]
    begin, end = [0, 0, 0, 0], [0, 0, 0, 0]
    padded = list(shape)
    for k, a in enumerate(axes):
        begin[a], end[a] = p.pads_begin[k], p.pads_end[k]
        padded[a] += begin[a] + end[a]
    name = _fresh(f"{n.inputs[0]}__padded_{n.name}", values)
    pads = _fresh(f"{name}_pads", values)
    values[pads] = Value.const(pads, np.array(begin + end, np.int64))
    values[name] = Value(name, x.dtype, tuple(padded))
    pad = Node("Pad", (n.inputs[0], pads), (name,), {"mode": "constant"}, f"{n.name}__pad")
    attrs = {k: v for k, v in n.attrs.items() if k != "auto_pad"}
    attrs["pads"] = (0, 0, 0, 0)
    conv = dataclasses.replace(n, inputs=(name, *n.inputs[1:]), attrs=attrs)
    return [pad, conv]


def _fresh(name: str, values: dict[str, Value]) -> str:
    while name in values:
        name += "_"
    return name
