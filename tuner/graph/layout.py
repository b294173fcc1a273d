"""The channels-last layout pass: convolutional networks computed on ``[N, H, W, C]`` tensors.

ONNX convolutional networks are written in NCHW. A convolution computed in
NCHW either vectorizes along an image row (lanes wasted on 7 or 14 columns,
and a register tile that cannot reuse an input across output channels) or
copies its windows into a matrix first (``im2col``: the input read and
written R x S times over). Channels-last, every convolution is a direct
register-blocked kernel whose vectors run along the output channels (a
multiple of the lanes in every real network), reading its weight as packed
once at compile time; onnxruntime's NCHWc and TVM's ``conv2d_NCHWc`` make
the same move, with blocks of channels. A layout with all channels in one
block is the simplest of them: no channel padding, and an elementwise
operator between two convolutions needs no change at all.

The pass walks the graph once, in order, and keeps each value in the layout
its producer wrote:

- every 2-D ``Conv``, ``MaxPool``, ``AveragePool`` and global pool of a
  static float32 image becomes its channels-last twin
  (:mod:`tuner.graph.ops.channels_last`);
- an elementwise operator (``Add``, ``Relu``, ``Clip``, ``Mul`` ...; not
  ``BatchNormalization``, whose parameters run along axis 1) whose 4-D input
  is channels-last is computed channels-last: its other 4-D inputs are
  brought over, and a constant that broadcasts (a ``[C, 1, 1]`` scale) is
  permuted at compile time;
- ``Concat`` along the channels concatenates along the last axis;
- any other reader (a ``Flatten`` into a classifier, a ``Reshape``, a
  ``Transpose``, the graph's outputs) gets the NCHW value back from one
  ``Transpose`` inserted before its first reader, or from a ``Reshape`` where
  the image is one pixel or one channel (the same bytes in both layouts: a
  global pool into a classifier costs nothing).

A ``Transpose`` out of channels-last (a model exported from TensorFlow
takes NHWC images) is not written at all unless an NCHW reader needs it.
So a network converts once at its entry and once at its exit. The cost the
pass weighs: a window operator whose input is NCHW and whose output has no
channels-last reader would pay two transposes for one kernel, and is left
in NCHW unless it is a convolution (a convolution channels-last with packed
weights beats its NCHW kernel on every layer measured, by more than the
transposes cost). The pass does nothing on a target without vectors.

>>> g = channels_last(optimize(from_onnx("resnet18.onnx")))
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from .ir import Dim, Graph, Node, Value
from .ops import OpKind, opdef
from .ops.channels_last import NHWC_OPS

__all__ = ["LAYOUT_ATTR", "channels_last"]

#: The attribute that marks the transposes this pass inserts (the model's own are not
#: marked): they alone are computed by the CPU's copy templates (``tuner.model.templates``).
LAYOUT_ATTR = "tuner_layout"

_TO_NHWC = (0, 2, 3, 1)
_TO_NCHW = (0, 3, 1, 2)
#: Elementwise operators whose meaning depends on an axis of their input.
_AXIS_BOUND = frozenset({"BatchNormalization"})


def _image(v: Value) -> bool:
    return v.static and len(v.shape) == 4 and v.dtype == "float32" and not v.is_const


def _nhwc_shape(shape: tuple[Dim, ...]) -> tuple[Dim, ...]:
    return tuple(shape[a] for a in _TO_NHWC)


class _Pass:
    def __init__(self, graph: Graph) -> None:
        self.g = graph
        self.values: dict[str, Value] = dict(graph.values)
        self.nodes: list[Node] = []
        self.nhwc: dict[str, str] = {}  # NCHW name -> its channels-last twin's name
        self.nchw_written: set[str] = set()  # NCHW values some node still writes
        self.readers = graph.consumers()

    # -- values in either layout ------------------------------------------------

    def _new(
        self, name: str, like: Value, shape: tuple[Dim, ...], data: np.ndarray | None = None
    ) -> str:
        while name in self.values:
            name += "_"
        self.values[name] = Value(name, like.dtype, shape, data)
        return name

    def to_nhwc(self, name: str) -> str:
        """``name`` channels-last (a Transpose inserted the first time it is asked)."""
        if name not in self.nhwc:
            v = self.values[name]
            twin = self._new(f"{name}__nhwc", v, _nhwc_shape(v.shape))
            self.nodes.append(
                Node(
                    "Transpose",
                    (name,),
                    (twin,),
                    {"perm": _TO_NHWC, LAYOUT_ATTR: 1},
                    f"{name}__to_nhwc",
                )
            )
            self.nhwc[name] = twin
        return self.nhwc[name]

    def to_nchw(self, name: str) -> str:
        """``name`` in NCHW, for a reader that needs it: a Transpose, or a free Reshape where
        the layouts share their bytes; once per value."""
        if name in self.nchw_written or name not in self.nhwc:
            return name
        v = self.values[name]
        _, c, h, w = (int(d) for d in v.shape)
        twin = self.nhwc[name]
        if h * w == 1 or c == 1:
            shape = self._new(
                f"{name}__shape", Value(name, "int64", (4,)), (4,), np.asarray(v.shape, np.int64)
            )
            self.nodes.append(Node("Reshape", (twin, shape), (name,), {}, f"{name}__to_nchw"))
        else:
            self.nodes.append(
                Node(
                    "Transpose",
                    (twin,),
                    (name,),
                    {"perm": _TO_NCHW, LAYOUT_ATTR: 1},
                    f"{name}__to_nchw",
                )
            )
        self.nchw_written.add(name)
        return name

    def _const_nhwc(self, name: str) -> str | None:
        """A constant operand permuted for a channels-last elementwise node (None: cannot)."""
        v = self.values[name]
        if v.data is None or len(v.shape) > 4:
            return None
        if v.data.size == 1:
            return name
        data = v.data.reshape((1,) * (4 - v.data.ndim) + v.data.shape).transpose(_TO_NHWC)
        return self._new(f"{name}__nhwc", v, data.shape, np.ascontiguousarray(data))

    # -- nodes ---------------------------------------------------------------------

    def _outputs_nhwc(self, node: Node) -> tuple[str, ...]:
        outs = []
        for o in node.outputs:
            v = self.values[o]
            twin = self._new(f"{o}__nhwc", v, _nhwc_shape(v.shape))
            self.nhwc[o] = twin
            outs.append(twin)
        return tuple(outs)

    def window(self, node: Node) -> bool:
        x = self.values[node.inputs[0]]
        if node.op not in NHWC_OPS or not _image(x) or len(node.outputs) != 1:
            return False
        if node.op != "Conv" and node.inputs[0] not in self.nhwc and not self._nhwc_reader(node):
            return False  # two transposes for one pool
        inputs = (self.to_nhwc(node.inputs[0]), *node.inputs[1:])
        self.nodes.append(
            Node(NHWC_OPS[node.op], inputs, self._outputs_nhwc(node), node.attrs, node.name)
        )
        return True

    def _nhwc_reader(self, node: Node) -> bool:
        return any(
            r.op in NHWC_OPS or self._elementwise(r) for r in self.readers.get(node.outputs[0], [])
        )

    def _elementwise(self, node: Node) -> bool:
        return opdef(node.op).kind is OpKind.ELEMENTWISE and node.op not in _AXIS_BOUND

    def elementwise(self, node: Node) -> bool:
        if not self._elementwise(node) or len(node.outputs) != 1:
            return False
        out = self.values[node.outputs[0]]
        if not any(i in self.nhwc for i in node.inputs) or not _image(out):
            return False
        inputs = []
        for i in node.inputs:
            v = self.values.get(i) if i else None
            if v is None:
                inputs.append(i)
            elif v.is_const:
                const = self._const_nhwc(i)
                if const is None:
                    return False
                inputs.append(const)
            elif v.static and (
                tuple(v.shape) == tuple(out.shape) or math.prod(int(d) for d in v.shape) == 1
            ):
                inputs.append(i)
            else:
                return False
        inputs = [self.to_nhwc(i) if self._is_image_input(i, out) else i for i in inputs]
        self.nodes.append(
            Node(node.op, tuple(inputs), self._outputs_nhwc(node), node.attrs, node.name)
        )
        return True

    def _is_image_input(self, name: str, out: Value) -> bool:
        v = self.values.get(name) if name else None
        return v is not None and not v.is_const and tuple(v.shape) == tuple(out.shape)

    def concat(self, node: Node) -> bool:
        if node.op != "Concat" or not any(i in self.nhwc for i in node.inputs):
            return False
        ins = [self.values[i] for i in node.inputs]
        if not all(_image(v) for v in ins) or int(node.attr("axis", 0)) % 4 != 1:
            return False
        inputs = tuple(self.to_nhwc(i) for i in node.inputs)
        attrs = {**node.attrs, "axis": 3}
        self.nodes.append(Node("Concat", inputs, self._outputs_nhwc(node), attrs, node.name))
        return True

    def transpose(self, node: Node) -> bool:
        """A ``Transpose`` between the two layouts (a TensorFlow export's NHWC input and
        output). Out of channels-last: its input is the channels-last form of its output,
        written in NCHW only if a reader asks (``to_nchw``). Into it, of a value held
        channels-last: that value itself (a view)."""
        if node.op != "Transpose" or not _image(self.values[node.inputs[0]]):
            return False
        perm, (x,), (y,) = tuple(node.attr("perm", ())), node.inputs, node.outputs
        if perm == _TO_NCHW and x not in self.nhwc:
            self.nhwc[y] = x
            return True
        if perm == _TO_NHWC and x in self.nhwc:
            self.nodes.append(Node("Identity", (self.nhwc[x],), (y,), {}, node.name))
            self.nchw_written.add(y)
            return True
        return False

    def other(self, node: Node) -> None:
        inputs = tuple(self.to_nchw(i) if i else i for i in node.inputs)
        self.nodes.append(Node(node.op, inputs, node.outputs, node.attrs, node.name))
        self.nchw_written.update(o for o in node.outputs if o)

    def run(self) -> Graph:
        for node in self.g.nodes:
            if not (
                self.window(node)
                or self.elementwise(node)
                or self.concat(node)
                or self.transpose(node)
            ):
                self.other(node)
        outputs = tuple(self.to_nchw(o) for o in self.g.outputs)
        return self.g.replace(nodes=tuple(self.nodes), values=self.values, outputs=outputs)


def channels_last(graph: Graph, lanes: int = 8) -> Graph:
    """``graph`` with its convolutional part channels-last (see the module's docstring);
    unchanged without a convolution or on a target of one lane."""
    if lanes <= 1 or not any(n.op == "Conv" for n in graph.nodes):
        return graph
    return _Pass(graph).run()


def layouts(graph: Graph) -> Mapping[str, int]:
    """How many nodes of each channels-last twin ``graph`` has (for tests and summaries)."""
    counts: dict[str, int] = {}
    for n in graph.nodes:
        if n.op.startswith("tuner.Nhwc"):
            counts[n.op] = counts.get(n.op, 0) + 1
    return counts
