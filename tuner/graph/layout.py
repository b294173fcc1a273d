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
its producer wrote. A layout is a permutation (:mod:`tuner.graph.perms`): a
value held in ``perm`` is stored as ``logical.transpose(perm)``, channels-last
being ``(0, 2, 3, 1)``.

- every 2-D ``Conv``, ``MaxPool``, ``AveragePool`` and global pool of a
  static float32 image becomes its channels-last twin
  (:mod:`tuner.graph.ops.channels_last`);
- an elementwise operator (``Add``, ``Relu``, ``Clip``, ``Mul`` ...; not
  ``BatchNormalization``, whose parameters run along axis 1) with a held
  input of its output's shape is computed in that input's layout: its other
  inputs are brought over (a broadcast ``[N, C, 1, 1]`` operand, a
  squeeze-and-excitation scale, by a free reshape: axes of extent 1 carry no
  bytes), and a constant (a ``[C, 1, 1]`` scale) is permuted at compile time;
- an inference ``BatchNormalization`` that no convolution absorbed is that
  elementwise ``x * s + t`` with per-channel constants;
- ``Concat``, ``Slice``, ``Split`` and the ``Reduce*`` operators of held
  values work on the stored axes; a ``Transpose`` of a held value moves no byte (its output is held in
  the composed layout); a ``Reshape`` of one keeps the layout where the axes
  it merges or splits lie together in storage, and moves the stored bytes
  once where they do not (ShuffleNet's channel shuffle: ``[N, C, H, W]`` to
  ``[N, 2, C/2, H, W]``, transposed, merged back: one small copy of the
  stored ``[N, H, W, 2, C/2]`` instead of two 4-D transposes around it);
- any other reader (a ``Flatten`` into a classifier, a ``Gather``, the
  graph's outputs) gets the value in its own layout from one ``Transpose``
  inserted before its first reader, or from a ``Reshape`` where the bytes are
  the same (a global pool into a classifier costs nothing).

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
from typing import Any

import numpy as np

from .ir import Dim, Graph, Node, Value
from .ops import OpKind, opdef
from .ops.channels_last import NHWC_OPS
from .ops.movement import perm_of, slice_params
from .ops.reduce import reduce_args
from .perms import Perm, compose, identity, inverse, reshape_layout, same_bytes

__all__ = ["LAYOUT_ATTR", "channels_last"]

#: The attribute that marks the transposes this pass inserts (the model's own are not
#: marked): they alone are computed by the CPU's copy templates (``tuner.model.templates``).
LAYOUT_ATTR = "tuner_layout"

_TO_NHWC = (0, 2, 3, 1)
_TO_NCHW = (0, 3, 1, 2)
#: Elementwise operators whose meaning depends on an axis of their input.
_AXIS_BOUND = frozenset({"BatchNormalization"})
#: Far enough past either end of any axis to mean "to the end" in a Slice.
_END = np.iinfo(np.int64).max // 2


def _image(v: Value, dtypes: tuple[str, ...] = ("float32",)) -> bool:
    return v.static and len(v.shape) == 4 and v.dtype in dtypes and not v.is_const


#: What each window operator's image may be: a quantized convolution's is int8 or uint8.
_IMAGE_DTYPES = {"tuner.QConv": ("int8", "uint8")}
#: The operators the layout pass always makes channels-last (their NCHW kernels lose more
#: than two transposes cost).
_CONVS = ("Conv", "tuner.QConv")


def _dims(v: Value) -> tuple[int, ...]:
    return tuple(int(d) for d in v.shape)


class _Pass:
    def __init__(self, graph: Graph) -> None:
        self.g = graph
        self.values: dict[str, Value] = dict(graph.values)
        self.nodes: list[Node] = []
        #: logical name -> (the value its producer wrote, that value's layout)
        self.held: dict[str, tuple[str, Perm]] = {}
        #: (logical name, layout) -> a value holding it so, made on a reader's request
        self.forms: dict[tuple[str, Perm], str] = {}
        self.logical: set[str] = set()  # values some node writes in their own layout
        self.readers = graph.consumers()

    # -- values in any layout -------------------------------------------------------

    def _new(self, name: str, like: Value, shape: tuple[Dim, ...], data: Any = None) -> str:
        while name in self.values:
            name += "_"
        self.values[name] = Value(name, like.dtype, shape, data)
        return name

    def _const(self, name: str, data: Any) -> str:
        data = np.asarray(data, np.int64)
        return self._new(name, Value(name, "int64", data.shape), data.shape, data)

    def _move(self, src: str, t: Perm, dst: str, tag: str) -> None:
        """``dst = src.transpose(t)``: a free Reshape where no axis longer than 1 moves."""
        shape = _dims(self.values[src])
        if same_bytes(shape, t, identity(len(t))):
            target = self._const(f"{dst}__shape", [shape[a] for a in t])
            self.nodes.append(Node("Reshape", (src, target), (dst,), {}, f"{dst}__{tag}"))
            return
        attrs: dict[str, Any] = {"perm": t}
        if t in (_TO_NHWC, _TO_NCHW):
            attrs[LAYOUT_ATTR] = 1  # between the two layouts of an image: a copy template
        self.nodes.append(Node("Transpose", (src,), (dst,), attrs, f"{dst}__{tag}"))

    def to(self, name: str, perm: Perm) -> str:
        """A value holding logical ``name`` in layout ``perm`` (inserted the first time it is
        asked: a free reshape or a transpose of what the producer wrote)."""
        v = self.values[name]
        if perm == identity(len(perm)):
            return self.to_logical(name)
        if v.data is not None:  # a constant: permuted now
            data = np.ascontiguousarray(v.data.transpose(perm))
            return self._new(f"{name}__p", v, data.shape, data)
        src, have = self.held.get(name, (name, identity(len(perm))))
        if have == perm:
            return src
        if (name, perm) not in self.forms:
            twin = self._new(f"{name}__{''.join(map(str, perm))}", v, _permuted(v.shape, perm))
            self._move(src, compose(inverse(have), perm), twin, "layout")
            self.forms[(name, perm)] = twin
        return self.forms[(name, perm)]

    def to_logical(self, name: str) -> str:
        """``name`` in its own layout, for a reader that needs it; once per value."""
        if name in self.logical or name not in self.held:
            return name
        src, have = self.held[name]
        self._move(src, inverse(have), name, "logical")
        self.logical.add(name)
        return name

    def _hold(self, node: Node, perm: Perm) -> tuple[str, ...]:
        """Names for ``node``'s outputs written in layout ``perm``."""
        outs: list[str] = []
        for o in node.outputs:
            if not o:
                outs.append(o)
                continue
            v = self.values[o]
            twin = self._new(f"{o}__{''.join(map(str, perm))}", v, _permuted(v.shape, perm))
            self.held[o] = (twin, perm)
            outs.append(twin)
        return tuple(outs)

    def _emit(self, node: Node, inputs: Any, perm: Perm, **attrs: Any) -> bool:
        outs = self._hold(node, perm)
        self.nodes.append(Node(node.op, tuple(inputs), outs, {**node.attrs, **attrs}, node.name))
        return True

    def _layout_of(self, names: Any, shape: tuple[Dim, ...]) -> Perm | None:
        """The layout of the first held input of logical ``shape`` (None: none is held)."""
        for i in names:
            if i in self.held and tuple(self.values[i].shape) == tuple(shape):
                return self.held[i][1]
        return None

    # -- nodes ---------------------------------------------------------------------

    def window(self, node: Node) -> bool:
        x = self.values[node.inputs[0]]
        if node.op not in NHWC_OPS or len(node.outputs) != 1:
            return False
        if not _image(x, _IMAGE_DTYPES.get(node.op, ("float32",))):
            return False
        if (
            node.op not in _CONVS
            and node.inputs[0] not in self.held
            and not self._nhwc_reader(node)
        ):
            return False  # two transposes for one pool
        inputs = (self.to(node.inputs[0], _TO_NHWC), *node.inputs[1:])
        outs = self._hold(node, _TO_NHWC)
        self.nodes.append(Node(NHWC_OPS[node.op], inputs, outs, node.attrs, node.name))
        return True

    def _nhwc_reader(self, node: Node) -> bool:
        return any(
            r.op in NHWC_OPS or self._elementwise(r) for r in self.readers.get(node.outputs[0], [])
        )

    def _feeds_convolutions(self, value: str, depth: int = 3) -> bool:
        """Whether ``value`` (an image) is read only by convolutions, directly or through
        elementwise operators (a quantized network's input: quantize, dequantize, then its
        first convolution). Computed channels-last, the transpose moves to the float image
        before them, a copy template's work, instead of fusing with them into a generic
        kernel that scatters its writes (MobileNetV2's quantized input: 0.44 ms)."""
        v = self.values[value]
        readers = self.readers.get(value, [])
        if depth == 0 or not readers or value in self.g.outputs or len(v.shape) != 4:
            return False
        for r in readers:
            if r.op in _CONVS and r.inputs[0] == value:
                continue
            if not (self._elementwise(r) and self._feeds_convolutions(r.outputs[0], depth - 1)):
                return False
        return True

    def _elementwise(self, node: Node) -> bool:
        return opdef(node.op).kind is OpKind.ELEMENTWISE and node.op not in _AXIS_BOUND

    def elementwise(self, node: Node) -> bool:
        """Computed in the layout of its first held full-shape input; the others follow (a
        broadcast ``[N, C, 1, 1]`` operand by a free reshape, a constant permuted now)."""
        if not self._elementwise(node) or len(node.outputs) != 1:
            return False
        out = self.values[node.outputs[0]]
        perm = self._layout_of(node.inputs, out.shape)
        if perm is None and self._feeds_convolutions(node.outputs[0]):
            perm = _TO_NHWC  # its image transposed first, by the copy template
        if perm is None or not out.static:
            return False
        rank = len(out.shape)
        inputs = []
        for i in node.inputs:
            v = self.values.get(i) if i else None
            if v is None:
                inputs.append(i)
            elif not v.static or len(v.shape) > rank:
                return False
            elif math.prod(_dims(v)) == 1 and i not in self.held:
                inputs.append(i)  # a scalar broadcasts in any layout
            else:
                inputs.append(self.to(self._ranked(i, rank), perm))
        return self._emit(node, inputs, perm)

    def _ranked(self, name: str, rank: int) -> str:
        """``name`` with leading axes of 1 up to ``rank`` (ONNX's broadcast), a view."""
        v = self.values[name]
        if len(v.shape) == rank:
            return name
        shape = (1,) * (rank - len(v.shape)) + _dims(v)
        if v.data is not None:
            return self._new(f"{name}__r{rank}", v, shape, v.data.reshape(shape))
        out = self._new(f"{name}__r{rank}", v, shape)
        src = self.to_logical(name)
        self.nodes.append(
            Node("Reshape", (src, self._const(f"{out}__shape", shape)), (out,), {}, f"{out}__rank")
        )
        self.logical.add(out)
        return out

    def batchnorm(self, node: Node) -> bool:
        """An inference ``BatchNormalization`` of a held value that no convolution absorbed
        (DenseNet's, after each concatenation) as ``x * s + t``, its per-channel constants
        ``s = scale / sqrt(var + eps)`` and ``t = beta - mean * s`` permuted to the layout."""
        if node.op != "BatchNormalization" or node.inputs[0] not in self.held:
            return False
        if node.attr("training_mode", 0) or any(node.outputs[1:]):
            return False
        params = [self.values[i].data for i in node.inputs[1:5]]
        x = self.values[node.inputs[0]]
        if any(p is None for p in params) or x.dtype != "float32" or not x.static:
            return False
        scale, beta, mean, var = (np.asarray(p, np.float64).reshape(-1) for p in params)
        s = scale / np.sqrt(var + float(node.attr("epsilon", 1e-5)))
        t = beta - mean * s
        shape = (1, -1) + (1,) * (len(x.shape) - 2)
        perm = self.held[node.inputs[0]][1]
        name = node.outputs[0]
        s_name, t_name = (
            self._new(f"{name}__{k}", x, data.shape, data)
            for k, data in (("s", s.astype(np.float32).reshape(shape)),
                            ("t", t.astype(np.float32).reshape(shape)))
        )  # fmt: skip
        scaled = self._new(f"{name}__scaled", x, _permuted(x.shape, perm))
        src = self.held[node.inputs[0]][0]
        self.nodes.append(
            Node("Mul", (src, self.to(s_name, perm)), (scaled,), {}, f"{node.name}__scale")
        )
        outs = self._hold(node, perm)
        self.nodes.append(Node("Add", (scaled, self.to(t_name, perm)), outs, {}, node.name))
        return True

    def concat(self, node: Node) -> bool:
        out = self.values[node.outputs[0]]
        if node.op != "Concat" or not out.static:
            return False
        rank = len(out.shape)
        perm = next((self.held[i][1] for i in node.inputs if i in self.held), None)
        if perm is None or any(not self.values[i].static for i in node.inputs):
            return False
        inputs = [self.to(i, perm) for i in node.inputs]
        axis = perm.index(int(node.attr("axis", 0)) % rank)
        return self._emit(node, inputs, perm, axis=axis)

    def transpose(self, node: Node) -> bool:
        """A ``Transpose`` of a held value moves no byte: its output is held in the layout
        that makes the stored bytes its own. Out of channels-last of a value not held (a
        TensorFlow export's NHWC input), the same: its input is the channels-last form of
        its output, written in NCHW only if a reader asks."""
        if node.op != "Transpose" or len(node.outputs) != 1:
            return False
        (x,), (y,) = node.inputs, node.outputs
        v = self.values[x]
        if not v.static:
            return False
        t = perm_of(node, len(v.shape))
        if x in self.held:
            src, have = self.held[x]
            perm = compose(inverse(t), have)
            if same_bytes(_dims(self.values[y]), perm, identity(len(perm))):
                self._move(src, compose(inverse(have), t), y, "view")
                self.logical.add(y)
            else:
                self.held[y] = (src, perm)
            return True
        if t == _TO_NCHW and _image(v):
            self.held[y] = (x, _TO_NHWC)
            return True
        return False

    def reshape(self, node: Node) -> bool:
        """A ``Reshape`` of a held value keeps its layout where the axes it merges or splits
        lie together (ShuffleNet's channel shuffle: ``[N, C, H, W]`` to ``[N, 2, C/2, H, W]``
        splits the last axis of the stored ``[N, H, W, C]``); a transpose of the stored
        bytes brings them together where they do not."""
        if node.op != "Reshape" or node.inputs[0] not in self.held:
            return False
        x, y = self.values[node.inputs[0]], self.values[node.outputs[0]]
        if not (x.static and y.static):
            return False
        plan = reshape_layout(_dims(x), self.held[node.inputs[0]][1], _dims(y))
        if plan is None:
            return False
        source, perm = plan
        src = self.to(node.inputs[0], source)
        if same_bytes(_dims(y), perm, identity(len(perm))):
            shape = self._const(f"{y.name}__shape", _dims(y))
            self.nodes.append(Node("Reshape", (src, shape), (y.name,), {}, node.name))
            self.logical.add(y.name)
            return True
        shape = self._const(f"{y.name}__shape", _permuted(_dims(y), perm))
        self.nodes.append(Node("Reshape", (src, shape), self._hold(node, perm), {}, node.name))
        return True

    def slice(self, node: Node) -> bool:
        """A ``Slice`` of a held value slices the stored axes (its bounds made explicit)."""
        if node.op != "Slice" or node.inputs[0] not in self.held:
            return False
        x = self.values[node.inputs[0]]
        consts = []
        for i in node.inputs[1:5]:
            v = self.values.get(i) if i else None
            if i and (v is None or v.data is None):
                return False
            consts.append(None if v is None else v.data)
        consts += [None] * (4 - len(consts))
        if not x.static:
            return False
        params = slice_params(node, _dims(x), *consts)
        src, perm = self.held[node.inputs[0]]
        axes = [i for i, a in enumerate(perm) if params[a] != (0, 1, int(x.shape[a]))]
        starts = [params[perm[i]][0] for i in axes]
        steps = [params[perm[i]][1] for i in axes]
        ends = [s + st * n if s + st * n >= 0 else -_END
                for s, st, n in (params[perm[i]] for i in axes)]  # fmt: skip
        name = node.outputs[0]
        ins = (src, *(self._const(f"{name}__{k}", d) for k, d in
                     (("starts", starts), ("ends", ends), ("axes", axes), ("steps", steps))))  # fmt: skip
        self.nodes.append(Node("Slice", ins, self._hold(node, perm), {}, node.name))
        return True

    def split(self, node: Node) -> bool:
        """A ``Split`` of a held value splits the stored axis."""
        if node.op != "Split" or node.inputs[0] not in self.held:
            return False
        x = self.values[node.inputs[0]]
        if not x.static or not all(self.values[o].static for o in node.outputs if o):
            return False
        src, perm = self.held[node.inputs[0]]
        axis = perm.index(int(node.attr("axis", 0)) % len(x.shape))
        ins = (src, *node.inputs[1:])
        outs = self._hold(node, perm)
        self.nodes.append(Node("Split", ins, outs, {**node.attrs, "axis": axis}, node.name))
        return True

    def reduce(self, node: Node) -> bool:
        """A ``Reduce*`` of a held value reduces the stored axes; its output stays in the
        layout what is left of the axes is stored in (a mean over ``H, W`` of channels-last
        ``[N, H, W, C]`` is ``[N, C]`` as it stands: MNASNet's and ShuffleNet's ends, which
        paid a transpose of the last feature map before their pool)."""
        if not node.op.startswith("Reduce") or len(node.outputs) != 1:
            return False
        x, y = node.inputs[0], node.outputs[0]
        if x not in self.held or not self.values[x].static:
            return False
        src, perm = self.held[x]
        rank = len(perm)
        has_input = len(node.inputs) > 1 and bool(node.inputs[1])
        given = self.g.const(node.inputs[1]) if has_input else None
        if has_input and given is None:
            return False
        axes, keep = reduce_args(node, given, rank)
        stored = sorted(perm.index(a) for a in axes)
        inputs: tuple[str, ...] = (src,)
        attrs: dict[str, Any] = {}
        if has_input:
            inputs = (src, self._const(f"{y}__axes", stored))
        else:
            attrs["axes"] = tuple(stored)
        if keep:
            return self._emit(node, inputs, perm, **attrs)
        left = [a for a in range(rank) if a not in axes]
        order = tuple(left.index(a) for a in perm if a not in axes)  # stored order of the rest
        if order == identity(len(order)):
            self.nodes.append(Node(node.op, inputs, (y,), {**node.attrs, **attrs}, node.name))
            self.logical.add(y)
            return True
        return self._emit(node, inputs, order, **attrs)

    def other(self, node: Node) -> None:
        inputs = tuple(self.to_logical(i) if i else i for i in node.inputs)
        self.nodes.append(Node(node.op, inputs, node.outputs, node.attrs, node.name))
        self.logical.update(o for o in node.outputs if o)

    def run(self) -> Graph:
        for node in self.g.nodes:
            if not (
                self.window(node)
                or self.elementwise(node)
                or self.batchnorm(node)
                or self.concat(node)
                or self.transpose(node)
                or self.reshape(node)
                or self.slice(node)
                or self.split(node)
                or self.reduce(node)
            ):
                self.other(node)
        outputs = tuple(self.to_logical(o) for o in self.g.outputs)
        return self.g.replace(nodes=tuple(self.nodes), values=self.values, outputs=outputs)


def _permuted(shape: tuple[Dim, ...], perm: Perm) -> tuple[Dim, ...]:
    return tuple(shape[a] for a in perm)


def channels_last(graph: Graph, lanes: int = 8) -> Graph:
    """``graph`` with its convolutional part channels-last (see the module's docstring);
    unchanged without a convolution or on a target of one lane."""
    if lanes <= 1 or not any(n.op in _CONVS for n in graph.nodes):
        return graph
    return _Pass(graph).run()


def layouts(graph: Graph) -> Mapping[str, int]:
    """How many nodes of each channels-last twin ``graph`` has (for tests and summaries)."""
    counts: dict[str, int] = {}
    for n in graph.nodes:
        if n.op.startswith("tuner.Nhwc"):
            counts[n.op] = counts.get(n.op, 0) + 1
    return counts
