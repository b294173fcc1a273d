"""The generic operator: any fused group of graph nodes, given as its canonical text.

``fused`` takes one argument, ``graph``, the text of a group
(:func:`tuner.graph.canonical.encode`). Its definition (``_fused_define``)
lowers each node with its operator's te lowering (``tuner.graph.ops``), in
order; its tensors are
the group's inputs (placeholders ``x0, x1, ...``, rank 0 as shape ``(1,)``)
and the one output. Small embedded constants become stages that hold their
values (a select over the flat index), which inlining and the simplifier fold
into the expressions that read them.

One schedule serves every group (elementwise chains, broadcasts and
transposes, reductions with a prologue and an epilogue such as a softmax or
a layer norm over any axis, windows)::

    # output with rows (all axes but the last fused), reductions "at row":
    for ro in rows / rows_per_task:          # parallel if chosen
      for ri in rows_per_task:
        R[..] = reduce ...                   # each reduction: this row's part
        for co in cols / (vector * unroll):
          for cu in unroll:                  # unrolled
            for cv in vector:                # vectorized
              Y[row, col] = <every elementwise stage, inlined>

Every stage that is not a reduction is inlined. A reduction cannot be: it
is computed either at the output's row loop (``reductions="row"``, just the
part that row reads, while it is in cache) or as a pass of its own at the
root. ``flat`` puts all output axes in one loop instead (short rows; no row
loop, so reductions at the root). An output that is itself a reduction
keeps its reduction loops innermost (the innermost may be unrolled), with
its spatial axes fused into rows. Extents that no tile divides get guards.

>>> op = get_operator("fused")
>>> args = op.parse_args({"graph": encode(group)})
>>> sched, tensors = op.schedule(op.default_config(args, target), args, target)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuner import te
from tuner.graph.ir import Graph, GraphError, Value
from tuner.lower.ir import Alloc
from tuner.lower.lower import _inline, lower
from tuner.lower.visitor import walk_stmts
from tuner.schedule import Schedule
from tuner.space import ConfigSpace
from tuner.target import Target
from tuner.te import Tensor
from tuner.te.expr import Const, IterVar, Reduce, TensorRead, Var, walk
from tuner.te.tensor import ComputeOp, PlaceholderOp

from ._fused_define import MAX_EMBEDDED, define, define_graph, group, te_shape
from ._target import evenness, resolve

__all__ = [
    "MAX_EMBEDDED",
    "bytes_moved",
    "config_space",
    "default_config",
    "define",
    "define_graph",
    "flops",
    "reference",
    "schedule",
]

#: Traffic from which a group's default runs on every thread. Timed alone, such groups
#: scale poorly: two threads, Zen 4, an add and a relu channels-last: 1.7 MiB 31.8 us
#: serial, 27.0 parallel; 0.9 MiB 23.8 against 26.0 (the launch costs more). In a model
#: the input was written by a parallel kernel and lies half in each core's cache, which a
#: serial group reads across; split like its producer, each thread mostly reads its own
#: half. A 3 x 3 max pool of GoogLeNet's, 14 x 14 x 528, ran 13.7 us alone and 68 us in
#: the model. At 128 KiB rather than 2 MiB (Zen 5, 2 threads, whole models, same process):
#: GoogLeNet 7.45 -> 7.18 ms, ShuffleNetV2 2.63 -> 2.50, DenseNet-121 16.3 -> 15.3,
#: RegNetY 4.06 -> 3.78, SqueezeNet 2.15 -> 2.09, Inception v3 28.6 -> 28.1; ResNet-50,
#: EfficientNet-B0, MobileNetV3, BERT, GPT-2 and ConvNeXt within 1 %.
PARALLEL_FROM_BYTES = 128 << 10

_TASKS = (256, 1024, 4096, 16384, 65536, 262144)
_VECTORS = (1, 2, 4)
_UNROLLS = (1, 2, 4)


# -- the shape of the schedule ------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    """What the schedule reads of a group: its output's loops and its reductions."""

    rank: int  # spatial axes of the output
    shape: tuple[int, ...]  # the output's
    work: int  # the output's reduction extents, multiplied (1 without)
    inner: int  # extent of the last spatial axis
    size: int  # output elements
    reduce_out: bool  # the output itself reduces
    reduce_inner: int  # the output's innermost reduction extent (1 without)
    reductions: tuple[str, ...]  # the other reduction stages
    dtype: str
    bytes: int


@functools.lru_cache(maxsize=64)
def _plan(text: str) -> _Plan:
    _, out = define(text)
    s = te.create_schedule(out)
    op = out.op
    assert isinstance(op, ComputeOp)
    reds = tuple(st.name for st in s.state.stages if not st.is_output and st.op.reduce_axis)
    shape = out.shape_ints
    inner_red = _extents(op.reduce_axis)
    return _Plan(
        rank=len(shape),
        shape=shape,
        work=math.prod(_extents(op.reduce_axis)),
        inner=shape[-1],
        size=math.prod(shape),
        reduce_out=bool(op.reduce_axis),
        reduce_inner=inner_red[-1] if inner_red else 1,
        reductions=reds,
        dtype=out.dtype,
        bytes=int(bytes_moved(text)),
    )


def _extents(axes: Sequence[Any]) -> list[int]:
    """The constant extents of loops (static shapes have no other kind)."""
    return [int(a.extent.value) if isinstance(a.extent, Const) else 0 for a in axes]


def _layouts(p: _Plan) -> list[bool]:
    """``flat`` choices: all output axes in one loop, or rows and a column loop."""
    if p.reduce_out:
        return [False]
    return [True] if p.rank == 1 else [False, True]


def config_space(text: str, target: Target | None = None) -> ConfigSpace:
    """Task size, parallelism, layout, where reductions live, vector width, unrolling."""
    tgt = resolve(target)
    p = _plan(text)
    lanes = tgt.lanes(p.dtype)
    sp = ConfigSpace()
    sp.define_knob("task", list(_TASKS))
    sp.define_knob("parallel", [True, False] if tgt.threads != 1 else [False])
    sp.define_knob("flat", _layouts(p))
    sp.define_knob("reductions", ["row", "root"] if p.reductions and p.rank > 1 else ["root"])
    sp.define_knob("vector", [1] if p.reduce_out else list(_VECTORS))
    sp.define_knob("unroll", list(_UNROLLS))
    work = p.size * (p.reduce_inner if p.reduce_out else 1)
    sp.add_constraint(
        lambda c: c["task"] <= max(work, _TASKS[0]), "a task is no bigger than the work"
    )
    sp.add_constraint(
        lambda c: not (c["flat"] and c["reductions"] == "row"),
        "a flat loop has no rows to compute reductions at",
    )
    sp.add_constraint(
        lambda c: c["vector"] == 1 or lanes * c["vector"] // 2 < _cols(p, c["flat"]),
        "a wider vector than the loop it splits repeats a narrower one",
    )
    sp.add_constraint(
        lambda c: c["unroll"] == 1 or c["unroll"] * _width(p, c, lanes) <= _cols(p, c["flat"]),
        "no more unrolled copies than the loop has",
    )
    return sp.freeze()


def _cols(p: _Plan, flat: bool) -> int:
    """The extent of the loop the vector and unroll split: the last axis, everything, or the
    output's innermost reduction."""
    if p.reduce_out:
        return p.reduce_inner
    return p.size if flat else p.inner


def _width(p: _Plan, c: Mapping[str, Any], lanes: int) -> int:
    return 1 if p.reduce_out else min(lanes * int(c["vector"]), _cols(p, bool(c["flat"])))


def default_config(text: str, target: Target | None = None) -> dict[str, Any]:
    """Parallel from 128 KiB of traffic on (``PARALLEL_FROM_BYTES``), 64K-element tasks,
    short rows flat, reductions at the row where that computes each element once,
    the widest vector the row fills."""
    tgt = resolve(target)
    p = _plan(text)
    lanes = tgt.lanes(p.dtype)
    work = p.size * (p.reduce_inner if p.reduce_out else 1)
    at_row = bool(p.reductions) and p.rank > 1 and _row_is_cheap(text, p)
    flat = not p.reduce_out and (p.rank == 1 or (not at_row and p.inner < 4 * lanes))
    if flat and p.rank > 1 and p.inner >= lanes and not _reads_in_order(text):
        flat = False  # rows that hold a vector each: no division of the flat index per element
    cols = _cols(p, flat)
    vector = 1 if p.reduce_out else next(f for f in (4, 2, 1) if f == 1 or lanes * f <= cols)
    period = 0 if flat or p.reduce_out else _concat_period(text)
    aligned = [f for f in (4, 2, 1) if f <= vector and period % (lanes * f) == 0]
    if period and aligned:
        vector = aligned[0]  # each vector tile inside one piece: its select is asked once
    parallel = tgt.threads != 1 and p.bytes >= PARALLEL_FROM_BYTES
    tasks = [t for t in _TASKS if t <= max(work, _TASKS[0]) and t <= 65536]
    return {
        "task": _balanced(p, flat, tasks, tgt.threads or tgt.cores) if parallel else max(tasks),
        "parallel": parallel,
        "flat": flat,
        "reductions": "row" if at_row else "root",
        "vector": vector,
        "unroll": 1,
    }


@functools.lru_cache(maxsize=64)
def _concat_period(text: str) -> int:
    """The greatest common divisor of the pieces of every concat along the output's last
    axis (0 without one). A column tile that divides it lies inside one piece, so which
    piece it reads is the same for the whole tile (``tuner.codegen.cpu.unswitch``): a
    DenseNet layer's batch norm and relu over the concat of 25 inputs tested the 24
    boundaries at every channel, 0.31 ms for 14 x 14 x 1024 floats."""
    g = group(text)
    rank = len(g.value(g.outputs[0]).shape)
    period = 0
    for n in g.nodes:
        if n.op != "Concat" or len(g.value(n.outputs[0]).shape) != rank:
            continue
        if int(n.attr("axis", 0)) % rank != rank - 1:
            continue
        for i in n.inputs:
            period = math.gcd(period, int(g.value(i).shape[-1]))
    return period


def _balanced(p: _Plan, flat: bool, tasks: Sequence[int], threads: int) -> int:
    """The largest task size whose tasks share out evenly over ``threads``.

    Each thread runs one contiguous run of tasks (``tuner.codegen.cpu.launch``), so
    four tasks of 1024 pixels over a 3136-pixel max pool gave one thread 2048 and the
    other 1088. A size is taken when the busiest thread does at most a ninth more than
    an even share; else the most even one."""

    def split(task: int) -> tuple[int, int]:  # (units, units per task), as ``schedule`` splits
        if p.reduce_out:
            return p.size, min(max(1, task // p.work), p.size)
        if flat:
            return p.size, min(task, p.size)
        rows = p.size // p.inner
        return rows, min(max(1, task // p.inner), rows)

    def even(task: int) -> float:
        return evenness(*split(task), threads)

    good = [t for t in tasks if even(t) >= 0.9]
    return max(good) if good else max(tasks, key=lambda t: (even(t), t))


@functools.lru_cache(maxsize=64)
def _reads_in_order(text: str) -> bool:
    """Whether the output reads every tensor at its own index (or at a constant one), so a
    flat loop addresses them all by the flat index. A broadcast operand (a squeeze-and-
    excitation scale ``[N, 1, 1, C]``), a transpose or a slice is read at a decomposed flat
    index instead, a division and a remainder per element: rows then index it directly
    (a channels-last SE multiply at 112 x 112 x 32 ran 5.5 times slower than onnxruntime's
    flat)."""
    cfg = {"task": _TASKS[0], "parallel": False, "flat": True, "reductions": "root"}
    s, tensors = schedule({**cfg, "vector": 1, "unroll": 1}, text)
    out = tensors[-1]
    assert isinstance(out.op, ComputeOp)
    axes = [a.name for a in out.op.axis]
    for node in walk(_inline(s.state)[out.name]):
        if not isinstance(node, TensorRead):
            continue
        idx = node.indices
        if all(isinstance(i, Const) for i in idx):
            continue
        names = [i.name if isinstance(i, (Var, IterVar)) else None for i in idx]
        if names != axes:
            return False
    return True


def _row_is_cheap(text: str, p: _Plan) -> bool:
    """Whether every reduction computed at the output's row loop is computed about once.

    A reduction over the last axis is read one element per row; one over the
    first axis would be recomputed whole for every row. Lowering tells which:
    the buffer of a stage computed at a loop is the region used there.
    """
    cfg = {"task": _TASKS[0], "parallel": False, "flat": False, "reductions": "row"}
    s, tensors = schedule({**cfg, "vector": 1, "unroll": 1}, text)
    rows = p.size // (1 if p.reduce_out else p.inner)
    region = {
        st.buffer.name: math.prod(st.buffer.shape)
        for st in walk_stmts(lower(s, tensors).body)
        if isinstance(st, Alloc)
    }
    shapes = {st.name: math.prod(st.tensor.shape_ints) for st in s.state.stages}
    return all(region.get(r, shapes[r]) * rows <= 2 * shapes[r] for r in p.reductions)


def schedule(
    cfg: Mapping[str, Any], text: str, target: Target | None = None, graph: Graph | None = None
) -> tuple[Schedule, list[Tensor]]:
    """The schedule for ``cfg`` (validate configs from outside against config_space first).

    ``graph``: the same group with symbolic extents (``define_graph``), to be
    scheduled as ``text`` would be: ``text`` is the group at one shape, whose
    extents size the tasks and vectors (a tile that does not divide a symbolic
    extent gets guards).
    """
    plan = _plan(text)
    lanes = resolve(target).lanes(plan.dtype)
    placeholders, out = define(text) if graph is None else define_graph(graph)
    s = te.create_schedule(out)
    reds = []
    for st in s.state.stages:
        if st.is_output:
            continue
        if st.op.reduce_axis:
            reds.append(st.name)
        else:
            s[st.name].compute_inline()
    O = s[out]
    axes = list(O.op.axis)
    shape = plan.shape
    parallel = bool(cfg["parallel"])
    task = int(cfg["task"])
    unroll = int(cfg["unroll"])
    row_loop = None
    if O.op.reduce_axis:
        rows = O.fuse(*axes) if len(axes) > 1 else axes[0]
        work = plan.work
        ro, row_loop = O.split(rows, factor=min(max(1, task // work), math.prod(shape)))
        if parallel:
            O.parallel(ro)
        if unroll > 1:
            _, ku = O.split(O.op.reduce_axis[-1], factor=unroll)
            O.unroll(ku)
    else:
        width = min(lanes * int(cfg["vector"]), math.prod(shape) if cfg["flat"] else shape[-1])
        if cfg["flat"]:
            flat = O.fuse(*axes) if len(axes) > 1 else axes[0]
            to, cols = O.split(flat, factor=min(task, math.prod(shape)))
        else:
            rows = O.fuse(*axes[:-1]) if len(axes) > 2 else axes[0]
            per_task = min(max(1, task // shape[-1]), math.prod(shape[:-1]))
            to, row_loop = O.split(rows, factor=per_task)
            cols = axes[-1]
        if parallel:
            O.parallel(to)
        if width > 1:
            cols, cv = O.split(cols, factor=width)
            O.vectorize(cv)
        if unroll > 1:
            _, cu = O.split(cols, factor=unroll)
            O.unroll(cu)
    bodies = _inline(s.state) if reds else {}
    for name in reds:
        op = s.state.stage(name).tensor.op
        assert isinstance(op, ComputeOp)
        column = _contiguous_axis(bodies[name], op)
        if column is not None:
            _sum_along(s, name, column)
        if cfg["reductions"] == "row" and row_loop is not None:
            s[name].compute_at(O, row_loop)
        elif parallel:
            first = s[name].op.axis[0]
            along = column is not None and first.name == column.name
            if not along and _extents([s.state.stage(name).axis(first.name)])[0] > 1:
                s[name].parallel(first)
    return s, [*placeholders, out]


def _contiguous_axis(body: Any, op: ComputeOp) -> Any:
    """The spatial axis of a reduction stage that every input it reads (through the stages
    inlined into it) runs along contiguously, when no reduction axis does: the channels of
    a channels-last global pool, the columns of a sum over rows. None otherwise."""
    if not isinstance(body, Reduce):
        return None
    spatial = {a.name: a for a in op.axis}
    reduce = {a.name for a in op.reduce_axis}
    found = None
    for node in walk(body):
        if not (isinstance(node, TensorRead) and isinstance(node.tensor.op, PlaceholderOp)):
            continue
        free = {v.name for v in walk(node.indices[-1]) if isinstance(v, (Var, IterVar))}
        names = free & spatial.keys()
        if free & reduce or len(names) != 1 or found not in (None, *names):
            return None
        found = next(iter(names))
    if found is None or _extents([spatial[found]])[0] <= 1:
        return None
    return spatial[found]


def _sum_along(s: Schedule, name: str, column: Any) -> None:
    """The reduction loops outside ``column``, which is innermost and vectorized whole: each
    step of the reduction adds a contiguous row into the accumulators. Unsplit: LLVM's loop
    vectorizer takes any width, and a split into vectors of 16 (a max pool's 64 channels
    as 4 x 16) ran five times slower than the one loop of 64."""
    st = s[name]
    others = [a for a in st.op.axis if a.name != column.name]
    st.reorder(*others, *st.op.reduce_axis, column)
    st.vectorize(column)


# -- reference and costs ------------------------------------------------------------------------


def reference(*inputs: np.ndarray, graph: str) -> np.ndarray:
    """The group run by the graph interpreter (each operator's NumPy evaluation)."""
    from tuner.graph.interpret import run_graph

    g = group(graph)
    feeds = {
        name: np.asarray(x).reshape(_np_shape(g.value(name)))
        for name, x in zip(g.inputs, inputs, strict=True)
    }
    (result,) = run_graph(g, feeds)
    out = g.value(g.outputs[0])
    return np.asarray(result, dtype=out.dtype).reshape(te_shape(out.shape))


def _np_shape(v: Value) -> tuple[int, ...]:
    return tuple(int(d) for d in v.shape)


def flops(text: str) -> float:
    """Approximate: one operation per output element per node."""
    g = group(text)
    return float(g.value(g.outputs[0]).size * max(1, len(g.nodes)))


def bytes_moved(text: str) -> float:
    """Compulsory traffic: every input read once, the output written once."""
    g = group(text)
    names = [*g.inputs, g.outputs[0]]
    return float(sum(g.value(n).size * np.dtype(g.value(n).dtype).itemsize for n in names))


def _register() -> None:
    from . import Operator, OperatorError, Param, register_operator

    def check(a: Mapping[str, Any]) -> None:
        try:
            _plan(a["graph"])
        except GraphError as exc:
            raise OperatorError(f"fused argument graph: {exc}") from None

    register_operator(
        Operator(
            name="fused",
            doc="a fused group of graph nodes, lowered node by node (the generic operator)",
            params=(Param("graph", str, doc="the group's canonical text (tuner.graph.canonical)"),),
            space=lambda a, target: config_space(a["graph"], target),
            schedule=lambda cfg, a, target: schedule(cfg, a["graph"], target),
            default_config=lambda a, target: default_config(a["graph"], target),
            reference=lambda *inputs, **a: reference(*inputs, graph=a["graph"]),
            flops=lambda a: flops(a["graph"]),
            bytes_moved=lambda a: bytes_moved(a["graph"]),
            check=check,
        )
    )


_register()
