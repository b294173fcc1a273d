"""The fused operator's definition: a group graph's nodes lowered to te, in order.

Each node goes through its operator's te lowering (``tuner.graph.ops``); the
group's inputs become placeholders (rank 0 as shape ``(1,)``), its small
constants stages that hold their values, and its output one compute stage
(a copy where the last node is a view, or where an input is read by nothing:
every group input stays a kernel argument). ``search_spaces.fused`` schedules
what this defines.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from tuner import te
from tuner.graph.canonical import decode
from tuner.graph.ir import Graph, GraphError, Value
from tuner.graph.ops import LowerContext, opdef
from tuner.lower.extent import normal
from tuner.te import Tensor
from tuner.te.tensor import ComputeOp, TensorError

__all__ = ["MAX_EMBEDDED", "define", "define_graph", "group", "te_shape"]

#: Constants of at most this many elements are embedded in the kernel; fusion
#: passes bigger ones (weights) as group inputs.
MAX_EMBEDDED = 16


@functools.lru_cache(maxsize=64)
def group(text: str) -> Graph:
    g = decode(text)
    if len(g.outputs) != 1:
        raise GraphError(f"a fused group has one output, this one has {len(g.outputs)}")
    for name in (*g.inputs, *(o for n in g.nodes for o in n.outputs if o)):
        if not g.value(name).static:
            raise GraphError(f"value {name} has a symbolic shape; the kernel needs static shapes")
    return g


def te_shape(shape: tuple[Any, ...]) -> tuple[Any, ...]:
    """A value's te shape: rank 0 is ``(1,)``; a symbolic extent (a ``te.var``) stays one."""
    return tuple(d if isinstance(d, te.Expr) else int(d) for d in shape) if shape else (1,)


def _const_stage(v: Value) -> Tensor:
    """A stage holding a small constant: its value, or a select over the flat index."""
    assert v.data is not None
    flat = v.data.reshape(-1)
    if flat.size > MAX_EMBEDDED:
        raise GraphError(
            f"constant {v.name} has {flat.size} elements; the generic operator embeds at most "
            f"{MAX_EMBEDDED} (bigger ones are group inputs)"
        )
    shape = te_shape(v.shape)
    strides = [math.prod(shape[d + 1 :]) for d in range(len(shape))]

    def element(k: int) -> te.Expr:
        return te.const(flat[k].item(), v.dtype)

    def body(*idx: Any) -> te.Expr:
        out = element(flat.size - 1)
        if flat.size == 1:
            return out
        index = sum((i * s for i, s in zip(idx, strides, strict=True)), te.const(0, "int64"))
        for k in reversed(range(flat.size - 1)):
            out = te.if_then_else(te.equal(index, k), element(k), out)
        return out

    return te.compute(shape, body, name=v.name)


def _lower_node(g: Graph, k: int, env: dict[str, Tensor]) -> None:
    node = g.nodes[k]
    d = opdef(node.op)
    if d.lower is None:
        raise GraphError(f"{node.describe()} has no kernel (its operator has no lowering)")
    named = [g.value(o) for o in node.outputs if o]
    outs = [g.value(o) if o else named[0] for o in node.outputs]
    ctx = LowerContext(
        node=node,
        inputs=[env[i] if i else None for i in node.inputs],
        consts=[g.const(i) for i in node.inputs],
        outputs=outs,
        name=f"t{k}",
    )
    try:
        results = d.lower(ctx)
    except (TensorError, TypeError) as exc:  # a lowering that rejects what it was given
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise GraphError(f"{node.describe()} does not lower: {first}") from None
    if len(results) != len(node.outputs):
        raise GraphError(f"{node.describe()} lowered to {len(results)} tensors for its outputs")
    for o, t in zip(node.outputs, results, strict=True):
        if not o:
            continue
        want = g.value(o)
        got = tuple(normal(e) for e in t.shape)
        if got != te_shape(want.shape) or t.dtype != want.dtype:
            raise GraphError(
                f"{node.describe()} lowered output {o} to {t.dtype}{list(got)}, "
                f"not {want.type_text()}"
            )
        env[o] = t


def _reachable(out: Tensor) -> set[str]:
    seen: set[str] = set()
    todo = [out]
    while todo:
        t = todo.pop()
        if t.name in seen:
            continue
        seen.add(t.name)
        if isinstance(t.op, ComputeOp):
            todo.extend(t.op.inputs)
    return seen


def define(text: str) -> tuple[list[Tensor], Tensor]:
    """The group's input placeholders (in order) and its output stage (always a compute)."""
    return define_graph(group(text))


def define_graph(g: Graph) -> tuple[list[Tensor], Tensor]:
    """:func:`define` for a group graph; its values' shapes may hold symbols (``te.var``).

    A symbolic group is the same group at every value of its symbols; the
    operators whose lowerings read only constant extents refuse one (a
    ``GraphError`` naming the node).
    """
    env: dict[str, Tensor] = {}
    placeholders = []
    for name in g.inputs:
        v = g.value(name)
        env[name] = te.placeholder(te_shape(v.shape), v.dtype, name=name)
        placeholders.append(env[name])
    for v in g.constants():
        env[v.name] = _const_stage(v)
    for k in range(len(g.nodes)):
        _lower_node(g, k, env)
    out = env[g.outputs[0]]
    unused = [p for p in placeholders if p.name not in _reachable(out)]
    if not isinstance(out.op, ComputeOp) or unused:
        # A copy; it also reads (never, after simplification) inputs nothing else
        # reads, so that every group input stays a kernel argument.
        src, never = out, te.const(False, "bool")

        def copy(*i: Any) -> te.Expr:
            value: te.Expr = src[i]
            for p in unused:
                value = te.if_then_else(never, p[(0,) * p.ndim].astype(src.dtype), value)
            return value

        out = te.compute(src.shape, copy, name="y")
    return placeholders, out
