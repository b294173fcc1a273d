"""From fused groups to tasks: which template computes a group, with which epilogue.

Each fused group of a model (``tuner.graph.fusion``) becomes one kernel.
Where its anchor has a template (convolutions, dense and matmul, pools,
softmax, layer norm) the group's elementwise tail is written as the
template's epilogue (``search_spaces._epilogue``: ``"add@c;relu"``), so the
tuned nest computes it while the product is in cache. A tail the epilogue
language cannot say, and every group without a template, is lowered
generically: the ``fused`` operator over the group's canonical text. Both
are :class:`~tuner.task.Task` s, so identical groups share one task (and one
tuning record) and the key is stable across runs and machines.

>>> specs, consts, values = extract(fused_graph, target)
>>> specs[0].task.key
'conv2d(...,epilogue=relu,...)@cpu/threads=2'
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from search_spaces import OperatorError

from ..graph.ir import FUSED, Graph, Node, Value
from ..target import Target
from ..task import Task

__all__ = ["KernelSpec", "extract"]


@dataclass(frozen=True)
class KernelSpec:
    """One kernel of a model: ``task`` computes ``output`` from ``inputs`` (value names).

    ``inputs`` are in the order of the task's placeholders; each names a value
    of the model (an activation or a constant, possibly one made here: a
    transposed weight, a per-channel bias).
    """

    task: Task
    inputs: tuple[str, ...]
    output: str
    #: The ONNX operators it computes, in order ("Conv+Add+Relu").
    ops: str
    #: The names of the model's nodes it computes.
    nodes: tuple[str, ...] = ()


@dataclass
class _Builder:
    """The outputs of extraction being built: kernels, new constants and values."""

    target: Target
    values: dict[str, Value]
    specs: list[KernelSpec] = field(default_factory=list)
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    new_values: dict[str, Value] = field(default_factory=dict)

    def const(self, stem: str, data: np.ndarray) -> str:
        name = f"{stem}__{len(self.consts)}"
        arr = np.ascontiguousarray(data, dtype=np.float32)
        self.consts[name] = arr
        self.new_values[name] = Value(name, "float32", tuple(arr.shape), arr)
        return name

    def value(self, name: str) -> Value:
        return self.new_values.get(name) or self.values[name]


def extract(
    graph: Graph, target: Target
) -> tuple[list[KernelSpec], dict[str, np.ndarray], dict[str, Value]]:
    """Kernels for every fused node of ``graph``, in graph order.

    Returns the kernel specs, the constants they add (name → data) and the
    values they add (constants and intermediate values of split groups).
    """
    b = _Builder(target, dict(graph.values))
    for node in graph.nodes:
        if node.op == FUSED:
            _group_kernels(b, node)
    return b.specs, b.consts, b.new_values


def _group_kernels(b: _Builder, node: Node) -> None:
    group: Graph = node.attrs["group"]
    values = {**group.values, **b.values}  # the model's own: group inputs carry no data
    first, chain = group.nodes[0], list(group.nodes[1:])
    matcher = _TEMPLATES.get(first.op)
    made = matcher(b, first, values) if matcher is not None and _is_chain(group) else None
    if made is None:
        _generic(b, group, list(group.nodes))
        return
    steps, extras, used = list(made.steps), list(made.extras), 0
    if steps and not _takes_epilogue(made.op):
        _generic(b, group, list(group.nodes))
        return
    if _takes_epilogue(made.op):
        more, more_extras, used = _epilogue(
            b, chain, first.outputs[0], values, made.out_shape, made.channel_axis
        )
        steps, extras = steps + more, extras + more_extras
    args, inputs = dict(made.args), list(made.inputs)
    if made.op == "dense" and not args["bias"] and steps[:1] == ["add@c"]:
        args["bias"] = True  # dense's own bias: added before its activation, as the graph does
        inputs.append(extras.pop(0))
        steps = steps[1:]
    if steps:
        args["epilogue"] = ";".join(steps)
    elif args.get("channels") == "rows":  # no epilogue: the plain product, records shared
        del args["channels"]
    covered, rest = [first, *chain[:used]], chain[used:]
    final = group.outputs[0]
    out = _intermediate(b, covered[-1].outputs[0], values) if rest else final
    for name in (*inputs, *extras):  # constants the fusion copied into the group
        if name in b.values or name in b.new_values:
            continue
        v = values[name]
        if v.data is not None:
            b.new_values[name] = v
            b.consts[name] = v.data
    try:
        task = Task.make(made.op, args, b.target)
    except OperatorError:  # arguments the template does not take (a pool's wide padding)
        _generic(b, group, list(group.nodes))
        return
    if made.prologue is not None:
        b.specs.append(made.prologue)
    b.specs.append(
        KernelSpec(
            task,
            (*inputs, *extras),
            out,
            "+".join(n.op for n in covered),
            tuple(n.name for n in covered),
        )
    )
    if rest:
        _generic(b, _subgroup(rest, values, covered[-1].outputs[0], out, final), rest)


def _is_chain(group: Graph) -> bool:
    """Whether each node after the first reads the previous one's output (an epilogue chain)."""
    for prev, n in zip(group.nodes, group.nodes[1:], strict=False):
        if prev.outputs[0] not in n.inputs:
            return False
    return len(group.outputs) == 1 and group.outputs[0] == group.nodes[-1].outputs[0]


def _intermediate(b: _Builder, name: str, values: Mapping[str, Value]) -> str:
    v = values[name]
    fresh = f"{name}__k{len(b.specs)}"
    b.new_values[fresh] = Value(fresh, v.dtype, v.shape)
    return fresh


def _subgroup(
    nodes: list[Node], values: Mapping[str, Value], old: str, new: str, out: str
) -> Graph:
    """The group of ``nodes`` alone, reading value ``old`` under the name ``new``."""
    renamed = [
        Node(n.op, tuple(new if i == old else i for i in n.inputs), n.outputs, n.attrs, n.name)
        for n in nodes
    ]
    defined = {o for n in renamed for o in n.outputs}
    inputs: list[Value] = []
    consts: list[Value] = []
    for n in renamed:
        for i in n.inputs:
            if not i or i in defined or any(v.name == i for v in (*inputs, *consts)):
                continue
            v = values[old] if i == new else values[i]
            if v.data is not None and v.data.size <= 16:
                consts.append(Value(i, v.dtype, v.shape, v.data))
            else:
                inputs.append(Value(i, v.dtype, v.shape))
    outs = [values[o] for n in renamed for o in n.outputs if o]
    return Graph.make(inputs, renamed, [*consts, *outs], [out])


def _generic(b: _Builder, group: Graph, nodes: Sequence[Node]) -> None:
    from ..graph.canonical import encode

    task = Task.make("fused", {"graph": encode(group)}, b.target)
    b.specs.append(
        KernelSpec(
            task,
            tuple(group.inputs),
            group.outputs[0],
            "+".join(n.op for n in nodes),
            tuple(n.name for n in nodes),
        )
    )


# -- the epilogue --------------------------------------------------------------------

_UNARY = {
    "Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log",
    "Sqrt": "sqrt", "Abs": "abs", "Neg": "neg", "Erf": "erf", "HardSwish": "hardswish",
}  # fmt: skip
#: ONNX binary op -> (step when the chain value is the left operand, when it is the right one).
_BINARY = {
    "Add": ("add", "add"), "Sub": ("sub", "rsub"), "Mul": ("mul", "mul"),
    "Div": ("div", "rdiv"), "Max": ("max", "max"), "Min": ("min", "min"), "Pow": ("pow", ""),
}  # fmt: skip
#: The same with a constant operand.
_CONST = {
    ("add", False): "addc", ("mul", False): "mulc", ("div", False): "divc",
    ("rdiv", False): "rdivc", ("rsub", False): "rsubc", ("max", False): "maxc",
    ("min", False): "minc", ("pow", False): "powc",
}  # fmt: skip


def _num(x: float) -> str:
    return repr(float(np.float32(x)))


def _epilogue(
    b: _Builder,
    chain: Sequence[Node],
    start: str,
    values: Mapping[str, Value],
    out_shape: tuple[int, ...],
    channel_axis: int,
) -> tuple[list[str], list[str], int]:
    """The epilogue steps for the longest expressible prefix of ``chain``.

    Returns the steps, the extra inputs they read (value names, in order)
    and how many nodes of the chain they cover.
    """
    steps: list[str] = []
    extras: list[str] = []
    cur = start
    used = 0
    for n in chain:
        made = None
        if values[n.outputs[0]].dtype == "float32":
            made = _node_steps(b, n, cur, values, out_shape, channel_axis)
        if made is None:
            break
        steps.extend(made[0])
        extras.extend(made[1])
        cur = n.outputs[0]
        used += 1
    return steps, extras, used


def _node_steps(
    b: _Builder,
    n: Node,
    cur: str,
    values: Mapping[str, Value],
    out_shape: tuple[int, ...],
    channel_axis: int,
) -> tuple[list[str], list[str]] | None:
    """The steps (and extra inputs) of one node of the tail, None if the language lacks it."""
    step = _unary_step(n, values)
    if step is not None:
        return [step], []
    if n.op == "BatchNormalization":
        return _batchnorm_steps(b, n, values, out_shape, channel_axis)
    if n.op not in _BINARY or len([i for i in n.inputs if i]) != 2:
        return None
    left = n.inputs[0] == cur
    other = n.inputs[1] if left else n.inputs[0]
    name = _BINARY[n.op][0 if left else 1]
    if other == cur or not name:
        return None
    made = _operand(b, name, other, values, out_shape, channel_axis)
    if made is None:
        return None
    text, extra = made
    return [text], [extra] if extra else []


def _unary_step(n: Node, values: Mapping[str, Value]) -> str | None:
    if n.op in _UNARY:
        return _UNARY[n.op]
    if n.op == "LeakyRelu":
        return f"leaky:{_num(n.attr('alpha', 0.01))}"
    if n.op == "HardSigmoid":
        return f"hardsigmoid:{_num(n.attr('alpha', 0.2))}:{_num(n.attr('beta', 0.5))}"
    if n.op == "Gelu":
        return "gelu_tanh" if n.attr("approximate", "none") == "tanh" else "gelu"
    if n.op == "Clip":
        lo, hi = n.attr("min", -math.inf), n.attr("max", math.inf)
        for pos in (1, 2):
            if len(n.inputs) > pos and n.inputs[pos]:
                v = values[n.inputs[pos]]
                if v.data is None:
                    return None
                if pos == 1:
                    lo = float(v.data.reshape(-1)[0])
                else:
                    hi = float(v.data.reshape(-1)[0])
        return f"clip:{_num(lo)}:{_num(hi)}"
    return None


def _broadcast_kind(shape: tuple[Any, ...], out_shape: tuple[int, ...], channel_axis: int) -> str:
    if math.prod(int(d) for d in shape) == 1:
        return "s"
    if len(shape) > len(out_shape):
        return ""
    padded = (1,) * (len(out_shape) - len(shape)) + tuple(int(d) for d in shape)
    axis = channel_axis % len(out_shape)
    # Per channel first: a classifier's bias [N] over a batch of one output [1, N] is both.
    if padded[axis] == out_shape[axis] and all(d == 1 for i, d in enumerate(padded) if i != axis):
        return "c"
    if padded == tuple(out_shape):
        return "f"
    return ""


def _operand(
    b: _Builder,
    name: str,
    other: str,
    values: Mapping[str, Value],
    out_shape: tuple[int, ...],
    channel_axis: int,
) -> tuple[str, str] | None:
    v = values[other]
    if v.dtype != "float32":
        return None
    kind = _broadcast_kind(v.shape, out_shape, channel_axis)
    if not kind:
        return None
    if v.data is not None and kind == "s" and (name, False) in _CONST:
        return f"{_CONST[(name, False)]}:{_num(float(v.data.reshape(-1)[0]))}", ""
    if v.data is not None:
        shape = {"s": (1,), "c": (out_shape[channel_axis],), "f": tuple(out_shape)}[kind]
        return f"{name}@{kind}", b.const(other, v.data.reshape(shape))
    return f"{name}@{kind}", other


def _batchnorm_steps(
    b: _Builder, n: Node, values: Mapping[str, Value], out_shape: tuple[int, ...], channel_axis: int
) -> tuple[list[str], list[str]] | None:
    """An unfolded inference BatchNormalization as a per-channel multiply-add."""
    if channel_axis % len(out_shape) != 1 or n.attr("training_mode", 0):
        return None
    datas = [values[i].data for i in n.inputs[1:5]]
    if any(d is None for d in datas):
        return None
    gamma, beta, mean, var = (np.asarray(d, np.float64) for d in datas)  # type: ignore[arg-type]
    scale = gamma / np.sqrt(var + float(n.attr("epsilon", 1e-5)))
    shift = beta - mean * scale
    return ["mul@c", "add@c"], [b.const("bn_scale", scale), b.const("bn_shift", shift)]


# -- templates -------------------------------------------------------------------------


@dataclass(frozen=True)
class Match:
    """A template for a group's anchor: its operator, arguments and input values."""

    op: str
    args: dict[str, Any]
    inputs: list[str]
    out_shape: tuple[int, ...]
    #: The output axis a per-channel epilogue operand runs along (NCHW: 1; rows: -1).
    channel_axis: int
    #: Epilogue steps the anchor itself needs (depthwise's bias), and their inputs.
    steps: tuple[str, ...] = ()
    extras: tuple[str, ...] = ()
    #: A kernel that runs first and makes one of ``inputs`` (a convolution's im2col).
    prologue: KernelSpec | None = None


Matcher = Callable[[_Builder, Node, Mapping[str, Value]], Match | None]


def _f32(*vs: Value) -> bool:
    return all(v.dtype == "float32" and v.static for v in vs)


def _shape(v: Value) -> tuple[int, ...]:
    return tuple(int(d) for d in v.shape)


def _conv(b: _Builder, n: Node, values: Mapping[str, Value]) -> Match | None:
    from ..graph.ops.windows import conv_params

    x, w, y = values[n.inputs[0]], values[n.inputs[1]], values[n.outputs[0]]
    if not _f32(x, w, y) or len(x.shape) != 4:
        return None
    p = conv_params(n, _shape(x), _shape(w))
    pads = {*p.pads_begin, *p.pads_end}
    if len(pads) != 1 or len(set(p.strides)) != 1 or len(set(p.dilations)) != 1:
        return None
    N, C, H, W = _shape(x)
    K, _, R, S = _shape(w)
    window = {"R": R, "S": S, "stride": p.strides[0], "pad": pads.pop(), "dilation": p.dilations[0]}
    bias = len(n.inputs) > 2 and bool(n.inputs[2])
    if p.group == C == K and w.shape[1] == 1:
        inputs = [n.inputs[0], n.inputs[1]]
        args = {"N": N, "C": C, "H": H, "W": W, **window}
        if bias:  # depthwise has no bias argument: the epilogue adds it
            return Match("depthwise_conv2d", args, inputs, _shape(y), 1, ("add@c",), (n.inputs[2],))
        return Match("depthwise_conv2d", args, inputs, _shape(y), 1)
    if N == 1 and p.group == 1:
        if R == S == 1 and window["stride"] == 1 and not window["pad"]:
            return _pointwise_conv(n, n.inputs[0], K, C, H * W, bias, _shape(y))
        if C >= _IM2COL_FROM_CHANNELS:
            image = {"N": N, "C": C, "H": H, "W": W, **window}
            return _im2col_conv(b, n, image, K, bias, _shape(y))
    args = {"N": N, "C": C, "H": H, "W": W, "K": K, "groups": p.group, "bias": bias, **window}
    inputs = [n.inputs[0], n.inputs[1], *([n.inputs[2]] if bias else [])]
    return Match("conv2d", args, inputs, _shape(y), 1)


def _pointwise_conv(
    n: Node, x: str, K: int, C: int, pixels: int, bias: bool, out_shape: tuple[int, ...]
) -> Match:
    """A 1 x 1 convolution of one image as the matmul ``W[K, C] @ X[C, H*W]`` (the same
    buffers, flat), its output channels the rows an epilogue's channel inputs run along.

    The matmul nest beat conv2d's direct kernel (both defaults, two threads) on 19
    of the 21 pointwise convolutions of ResNet-50 and MobileNetV2, by up to 2.9x
    where the image is 7 x 7 (512 x 49 x 2048: 0.91 against 2.64 ms) and within
    7 % on the other two.
    """
    args = {"M": K, "N": pixels, "K": C, "channels": "rows"}
    if bias:  # matmul has no bias argument: the epilogue adds it
        return Match("matmul", args, [n.inputs[1], x], out_shape, 1, ("add@c",), (n.inputs[2],))
    return Match("matmul", args, [n.inputs[1], x], out_shape, 1)


#: Input channels from which a convolution's windows are copied for the matmul nest.
_IM2COL_FROM_CHANNELS = 16


def _im2col_conv(
    b: _Builder, n: Node, args: dict[str, Any], K: int, bias: bool, out_shape: tuple[int, ...]
) -> Match:
    """Any other convolution of one image: its windows as a ``[C*R*S, OH*OW]`` matrix
    (the ``im2col`` kernel, first), then the product with the ``[K, C*R*S]`` weight.

    Against conv2d's direct kernel, both defaults, two threads, the copy included
    (bias on the rows): ResNet-50's 3 x 3 convolutions 1.6x (64 x 56 x 56: 3.66
    against 2.28 ms) to 1.95x (128 x 28 x 28: 3.68 against 1.89), its strided
    1 x 1 ones 1.16x (256 x 56 x 56) and 3.17x (1024 x 14 x 14: 6.55 against
    2.06). Not for an image's first convolution: with 3 channels the copy is the
    work (ResNet-50's 7 x 7 stem 1.77 against 3.06 ms; MobileNetV2's 1.09x).
    """
    from search_spaces.conv2d import Conv2d

    p = Conv2d.from_args({**args, "K": K})
    rows, cols = p.C * p.R * p.S, p.OH * p.OW
    name = f"{n.outputs[0]}__im2col{len(b.specs)}"
    b.new_values[name] = Value(name, "float32", (rows, cols))
    task = Task.make("im2col", args, b.target)
    first = KernelSpec(task, (n.inputs[0],), name, "Im2col", (n.name,))
    return dataclasses.replace(
        _pointwise_conv(n, name, K, rows, cols, bias, out_shape), prologue=first
    )


def _matmul(b: _Builder, n: Node, values: Mapping[str, Value]) -> Match | None:
    a, w, y = values[n.inputs[0]], values[n.inputs[1]], values[n.outputs[0]]
    if not _f32(a, w, y) or len(a.shape) < 2 or len(w.shape) < 2:
        return None
    ash, wsh = _shape(a), _shape(w)
    K = ash[-1]
    if len(wsh) == 2:
        M, N = math.prod(ash[:-1]), wsh[1]
        if w.data is not None:  # a weight: dense reads it as [N, K] rows
            wt = b.const(n.inputs[1], np.ascontiguousarray(w.data.T))
            args = {"batch": M, "in_features": K, "out_features": N, "bias": False}
            return Match("dense", args, [n.inputs[0], wt], _shape(y), -1)
        return Match("matmul", {"M": M, "N": N, "K": K}, [n.inputs[0], n.inputs[1]], _shape(y), -1)
    if ash[:-2] == wsh[:-2]:
        args = {"B": math.prod(ash[:-2]), "M": ash[-2], "N": wsh[-1], "K": K}
        return Match("batch_matmul", args, [n.inputs[0], n.inputs[1]], _shape(y), -1)
    return None


def _gemm(b: _Builder, n: Node, values: Mapping[str, Value]) -> Match | None:
    a, w, y = values[n.inputs[0]], values[n.inputs[1]], values[n.outputs[0]]
    if not _f32(a, w, y) or n.attr("transA", 0) or w.data is None:
        return None
    alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0))
    weight = w.data if n.attr("transB", 0) else w.data.T
    M, K = _shape(a)
    N = weight.shape[0]
    inputs = [n.inputs[0], b.const(n.inputs[1], weight * np.float32(alpha))]
    args: dict[str, Any] = {"batch": M, "in_features": K, "out_features": N, "bias": False}
    if len(n.inputs) > 2 and n.inputs[2]:
        c = values[n.inputs[2]]
        if c.data is None or _broadcast_kind(c.shape, (M, N), -1) not in ("c", "s"):
            return None
        bias = np.broadcast_to(c.data.reshape(-1) * np.float32(beta), (N,))
        args["bias"] = True
        inputs.append(b.const(n.inputs[2], bias))
    return Match("dense", args, inputs, (M, N), -1)


def _pool(b: _Builder, n: Node, values: Mapping[str, Value]) -> Match | None:
    from ..graph.ops.windows import pool_params

    x, y = values[n.inputs[0]], values[n.outputs[0]]
    if not _f32(x, y) or len(x.shape) != 4:
        return None
    p = pool_params(n, _shape(x))
    pads = {*p.pads_begin, *p.pads_end}
    kernel = set(p.kernel)
    if len(pads) != 1 or len(kernel) != 1 or len(set(p.strides)) != 1 or {*p.dilations} != {1}:
        return None
    pad, k, stride = pads.pop(), kernel.pop(), p.strides[0]
    N, C, H, W = _shape(x)
    expect = ((H + 2 * pad - k) // stride + 1, (W + 2 * pad - k) // stride + 1)
    if _shape(y)[2:] != expect:
        return None  # ceil_mode changed the output
    kind = "max" if n.op == "MaxPool" else "avg"
    if kind == "avg" and pad and not p.count_include_pad:
        return None
    args = {"N": N, "C": C, "H": H, "W": W, "kernel": k, "stride": stride, "pad": pad}
    return Match(f"{kind}_pool2d", args, [n.inputs[0]], _shape(y), 1)


def _global_pool(b: _Builder, n: Node, values: Mapping[str, Value]) -> Match | None:
    x, y = values[n.inputs[0]], values[n.outputs[0]]
    if not _f32(x, y) or len(x.shape) != 4:
        return None
    N, C, H, W = _shape(x)
    return Match("global_avg_pool2d", {"N": N, "C": C, "H": H, "W": W}, [n.inputs[0]], _shape(y), 1)


def _rows(x: Value, axis: int) -> tuple[int, int] | None:
    shape = _shape(x)
    if axis % len(shape) != len(shape) - 1:
        return None
    return math.prod(shape[:-1]), shape[-1]


def _softmax(b: _Builder, n: Node, values: Mapping[str, Value]) -> Match | None:
    x, y = values[n.inputs[0]], values[n.outputs[0]]
    rows = _rows(x, int(n.attr("axis", -1))) if _f32(x, y) else None
    if rows is None:
        return None
    op = "softmax" if n.op == "Softmax" else "log_softmax"
    return Match(op, {"M": rows[0], "N": rows[1]}, [n.inputs[0]], _shape(y), -1)


def _layer_norm(b: _Builder, n: Node, values: Mapping[str, Value]) -> Match | None:
    x, y = values[n.inputs[0]], values[n.outputs[0]]
    rows = _rows(x, int(n.attr("axis", -1))) if _f32(x, y) else None
    if rows is None or len([o for o in n.outputs if o]) != 1:
        return None
    M, N = rows
    gamma = n.inputs[1] if len(n.inputs) > 1 and n.inputs[1] else b.const("ln_gamma", np.ones(N))
    beta = n.inputs[2] if len(n.inputs) > 2 and n.inputs[2] else b.const("ln_beta", np.zeros(N))
    if any(_shape(values.get(g) or b.value(g)) != (N,) for g in (gamma, beta)):
        return None
    args = {"M": M, "N": N, "eps": repr(float(n.attr("epsilon", 1e-5)))}
    return Match("layer_norm", args, [n.inputs[0], gamma, beta], _shape(y), -1)


_TEMPLATES: dict[str, Matcher] = {
    "Conv": _conv,
    "MatMul": _matmul,
    "Gemm": _gemm,
    "MaxPool": _pool,
    "AveragePool": _pool,
    "GlobalAveragePool": _global_pool,
    "Softmax": _softmax,
    "LogSoftmax": _softmax,
    "LayerNormalization": _layer_norm,
}


def _takes_epilogue(op: str) -> bool:
    """Whether the template has an ``epilogue`` argument (pools and row operators have none)."""
    from search_spaces import get_operator

    return any(p.name == "epilogue" for p in get_operator(op).params)
