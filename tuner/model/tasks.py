"""From fused groups to tasks: which template computes a group, with which epilogue.

Each fused group of a model (``tuner.graph.fusion``) becomes one kernel.
Where its anchor has a template (convolutions, dense and matmul, pools,
softmax, layer norm) the group's elementwise tail is written as the
template's epilogue (``search_spaces._epilogue``: ``"add@c;relu"``), so the
tuned nest computes it while the product is in cache. A tail the epilogue
language cannot say, and every group without a template, is lowered
generically: the ``fused`` operator over the group's canonical text (the
matchers that pick a template are in ``templates``). Both
are :class:`~tuner.task.Task` s, so identical groups share one task (and one
tuning record) and the key is stable across runs and machines.

>>> specs, consts, values = extract(fused_graph, target)
>>> specs[0].task.key
'conv2d(...,epilogue=relu,...)@cpu/threads=2'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from search_spaces import OperatorError

from ..graph.ir import FUSED, Graph, Node, Value
from ..graph.ops.channels_last import nhwc_op
from ..target import Target
from ..task import Task
from .spec import Builder, KernelSpec, broadcast_kind
from .templates import TEMPLATES, takes_epilogue

__all__ = ["KernelSpec", "extract"]


def op_text(op: str) -> str:
    """How a kernel's operators are named to users: ONNX's names (a channels-last twin as
    the operator it stands for; the shapes say the layout)."""
    return nhwc_op(op) or op


def extract(
    graph: Graph, target: Target, layout: bool = True
) -> tuple[list[KernelSpec], dict[str, np.ndarray], dict[str, Value]]:
    """Kernels for every fused node of ``graph``, in graph order (``layout``: templates may
    choose channels-last kernels, ``Builder.layout``).

    Returns the kernel specs, the constants they add (name → data) and the
    values they add (constants and intermediate values of split groups).
    """
    b = Builder(target, dict(graph.values), layout)
    for node in graph.nodes:
        if node.op == FUSED:
            _group_kernels(b, node)
    return b.specs, b.consts, b.new_values


def _group_kernels(b: Builder, node: Node) -> None:
    group: Graph = node.attrs["group"]
    values = {**group.values, **b.values}  # the model's own: group inputs carry no data
    first, chain = group.nodes[0], list(group.nodes[1:])
    matcher = TEMPLATES.get(first.op)
    made = matcher(b, first, values) if matcher is not None and _is_chain(group) else None
    if made is None:
        _generic(b, group, list(group.nodes))
        return
    steps, extras, used = list(made.steps), list(made.extras), 0
    if steps and not takes_epilogue(made.op):
        _generic(b, group, list(group.nodes))
        return
    if takes_epilogue(made.op):
        more, more_extras, used = _epilogue(
            b, chain, first.outputs[0], values, made.out_shape, made.channel_axis, len(steps)
        )
        steps, extras = steps + more, extras + more_extras
        steps, extras = requantized(b, steps, extras, values)
    args, inputs = dict(made.args), list(made.inputs)
    if (
        made.op in ("dense", "conv2d")
        and not args["bias"]
        and steps[:1] == ["add@c"]
        and "@v" not in str(steps)
    ):
        args["bias"] = (
            True  # the template's own bias: added before its activation, as the graph does
        )
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
            "+".join(op_text(n.op) for n in covered),
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


def _intermediate(b: Builder, name: str, values: Mapping[str, Value]) -> str:
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


def _generic(b: Builder, group: Graph, nodes: Sequence[Node]) -> None:
    from ..graph.canonical import encode

    task = Task.make("fused", {"graph": encode(group)}, b.target)
    b.specs.append(
        KernelSpec(
            task,
            tuple(group.inputs),
            group.outputs[0],
            "+".join(op_text(n.op) for n in nodes),
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


def requantized(
    b: Builder, steps: list[str], extras: list[str], values: Mapping[str, Value]
) -> tuple[list[str], list[str]]:
    """An epilogue that ends by quantizing with scale ``s`` after a constant per-channel
    multiply (and constant adds after it) as one multiply by ``m / s`` (the adds by
    ``a / s``) and a quantization of scale 1: what onnxruntime's QLinearConv computes,
    ``(acc + bias) * float32(x_scale * w_scale / y_scale)``, rounded half to even, without
    a division per element. The steps are unchanged where they are anything else."""
    if not steps or not steps[-1].startswith("quant_"):
        return steps, extras
    kind, scale, zero = steps[-1].split(":")
    s = np.float32(float(scale))
    if s == 1 or not np.isfinite(s) or s <= 0:
        return steps, extras
    at: list[int | None] = []  # the extra each step reads
    for step in steps[:-1]:
        at.append(sum(i is not None for i in at) if "@" in step and "@v" not in step else None)
    divided: dict[int, str] = {}
    for j in range(len(steps) - 2, -1, -1):
        e = at[j]
        if e is None or steps[j] not in ("add@c", "mul@c"):
            return steps, extras
        v = b.new_values.get(extras[e]) or values.get(extras[e])
        data = v.data if v is not None else None
        if data is None:
            return steps, extras
        divided[e] = b.const(f"{extras[e]}_requant", np.asarray(data, np.float32) / s)
        if steps[j] == "mul@c":
            break
    else:
        return steps, extras  # no multiply to take the scale
    out = [divided.get(i, name) for i, name in enumerate(extras)]
    return [*steps[:-1], f"{kind}:1.0:{zero}"], out


def _epilogue(
    b: Builder,
    chain: Sequence[Node],
    start: str,
    values: Mapping[str, Value],
    out_shape: tuple[int, ...],
    channel_axis: int,
    before: int = 0,
) -> tuple[list[str], list[str], int]:
    """The epilogue steps for the longest expressible prefix of ``chain``.

    ``start`` is the value after ``before`` steps (the anchor's own). A node may read
    an earlier value of the chain besides the previous one (``mul@v0``: a diamond);
    the prefix ends where the rest reads no value of it but its last.
    Returns the steps, the extra inputs they read (value names, in order)
    and how many nodes of the chain they cover.
    """
    steps: list[str] = []
    extras: list[str] = []
    at = {start: before}  # each chain value: after how many steps
    ends = [(0, 0)]  # the lengths of steps and extras after each covered node
    for n in chain:
        made = None
        if values[n.outputs[0]].dtype == "float32":
            made = _node_steps(b, n, at, values, out_shape, channel_axis)
        elif n.op == "QuantizeLinear" and list(at)[-1] == n.inputs[0]:
            made = _quantize_step(n, values)
        if made is None:
            break
        steps.extend(made[0])
        extras.extend(made[1])
        at[n.outputs[0]] = before + len(steps)
        ends.append((len(steps), len(extras)))
    used = len(ends) - 1
    while used and _reads_inside(chain[used:], [start, *(n.outputs[0] for n in chain[: used - 1])]):
        used -= 1
    return steps[: ends[used][0]], extras[: ends[used][1]], used


def _reads_inside(rest: Sequence[Node], inner: Sequence[str]) -> bool:
    """Whether a node of ``rest`` reads one of the covered values that stay inside the kernel."""
    return any(i in inner for n in rest for i in n.inputs)


def _node_steps(
    b: Builder,
    n: Node,
    at: dict[str, int],
    values: Mapping[str, Value],
    out_shape: tuple[int, ...],
    channel_axis: int,
) -> tuple[list[str], list[str]] | None:
    """The steps (and extra inputs) of one node of the tail, None if the language lacks it.

    ``at`` holds the chain's values so far, the last one the node's main operand."""
    cur = list(at)[-1]
    if cur not in n.inputs:
        return None
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
    if not name:
        return None
    if other in at:  # x * sigmoid(x): an earlier value of the chain
        return [f"{name}@v{at[other]}"], []
    made = _operand(b, name, other, values, out_shape, channel_axis)
    if made is None:
        return None
    text, extra = made
    return [text], [extra] if extra else []


def _quantize_step(n: Node, values: Mapping[str, Value]) -> tuple[list[str], list[str]] | None:
    """A QuantizeLinear by one constant scale and zero point into int8 or uint8: the step
    ``quant_<type>:<scale>:<zero_point>`` that ends an epilogue."""
    out = values[n.outputs[0]].dtype
    scale = values[n.inputs[1]].data
    zp = values[n.inputs[2]].data if len(n.inputs) > 2 and n.inputs[2] else np.zeros(1)
    if out not in ("int8", "uint8") or scale is None or zp is None:
        return None
    if scale.size != 1 or zp.size != 1 or int(n.attr("block_size", 0) or 0):
        return None
    s, z = float(np.float32(scale.reshape(-1)[0])), float(zp.reshape(-1)[0])
    return [f"quant_{out}:{_num(s)}:{_num(z)}"], []


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


def _operand(
    b: Builder,
    name: str,
    other: str,
    values: Mapping[str, Value],
    out_shape: tuple[int, ...],
    channel_axis: int,
) -> tuple[str, str] | None:
    v = values[other]
    if v.dtype != "float32":
        return None
    kind = broadcast_kind(v.shape, out_shape, channel_axis)
    if not kind:
        return None
    if v.data is not None and kind == "s" and (name, False) in _CONST:
        return f"{_CONST[(name, False)]}:{_num(float(v.data.reshape(-1)[0]))}", ""
    if v.data is not None:
        shape = {"s": (1,), "c": (out_shape[channel_axis],), "f": tuple(out_shape)}[kind]
        return f"{name}@{kind}", b.const(other, v.data.reshape(shape))
    return f"{name}@{kind}", other


def _batchnorm_steps(
    b: Builder, n: Node, values: Mapping[str, Value], out_shape: tuple[int, ...], channel_axis: int
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
