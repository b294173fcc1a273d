"""The one pure function that applies a schedule step to a state.

``apply_step(state, step)`` either returns a new state or raises
:class:`ScheduleError` naming the step and the reason. Every legality rule is
one ``check(cond, why)`` line in the small handler of its step: together they
are the schedule language's legality rules, read in one place.
"""

from __future__ import annotations

from dataclasses import replace

from ..kinds import AttachKind, LoopKind, Scope
from ..te.expr import Const, Expr, IterVar, TensorRead, transform
from ..te.tensor import ComputeOp, Tensor
from .intrin import INTRINSICS
from .state import MAX_UNROLL, Attach, Axis, Relation, ScheduleError, Stage, State, _Illegal, check
from .steps import (
    ANNOTATIONS,
    SCOPES,
    THREAD_TAGS,
    Annotate,
    Bind,
    CacheRead,
    CacheWrite,
    ComputeAt,
    ComputeInline,
    ComputeRoot,
    Fuse,
    Prefetch,
    Reorder,
    Split,
    Step,
    Tensorize,
)

__all__ = ["apply_step"]


def _fresh(stage: Stage, name: str) -> str:
    taken = {a.name for a in stage.axes}
    if name not in taken:
        return name
    n = 1
    while f"{name}{n}" in taken:
        n += 1
    return f"{name}{n}"


def _leaf(stage: Stage, axis: str) -> Axis:
    if axis in stage.leaves:
        return stage.axis(axis)
    known = {a.name for a in stage.axes}
    check(
        axis not in known,
        f"axis {axis} of stage {stage.name} was already split or fused; use the axes that replaced it",
    )
    raise _Illegal(f"{axis} is not an axis of stage {stage.name} (axes: {', '.join(stage.leaves)})")


def _int(e: Expr) -> int | None:
    return int(e.value) if isinstance(e, Const) else None


def _ceildiv(a: Expr, b: int) -> Expr:
    value = _int(a)
    if value is not None:
        return Const(-(-value // b))
    return (a + (b - 1)) // b


def _split(state: State, st: Split) -> State:
    stage = state.stage(st.stage)
    ax = _leaf(stage, st.axis)
    check((st.factor is None) != (st.nparts is None), "give exactly one of factor and nparts")
    amount = st.factor if st.factor is not None else st.nparts
    check(
        isinstance(amount, int) and amount > 0,
        f"the split amount must be a positive integer, got {amount!r}",
    )
    assert amount is not None
    if st.factor is not None:
        factor: Expr = Const(amount)
        outer_ext = _ceildiv(ax.extent, amount)
    else:
        inner = _ceildiv(ax.extent, amount)
        inner_int = _int(inner)
        factor = inner
        outer_ext = Const(amount) if inner_int is None else _ceildiv(ax.extent, inner_int)
    outer = Axis(_fresh(stage, f"{ax.name}_o"), outer_ext, ax.kind)
    inner_axis = Axis(
        _fresh(replace(stage, axes=(*stage.axes, outer)), f"{ax.name}_i"), factor, ax.kind
    )
    pos = stage.leaves.index(ax.name)
    leaves = (*stage.leaves[:pos], outer.name, inner_axis.name, *stage.leaves[pos + 1 :])
    rel = Relation("split", (ax.name,), (outer.name, inner_axis.name), factor)
    stage = replace(
        stage,
        axes=(*stage.axes, outer, inner_axis),
        leaves=leaves,
        relations=(*stage.relations, rel),
    )
    return _move_attachments(state.with_stage(stage), stage.name, ax.name, inner_axis.name)


def _move_attachments(state: State, parent: str, old: str, new: str) -> State:
    """Stages computed at a loop that was split now sit at its inner loop."""
    for s in state.stages:
        if s.attach.kind == "at" and s.attach.parent == parent and s.attach.axis == old:
            state = state.with_stage(replace(s, attach=Attach(AttachKind.AT, parent, new)))
    return state


def _fuse(state: State, st: Fuse) -> State:
    stage = state.stage(st.stage)
    check(len(st.axes) >= 2, "fuse needs at least two axes")
    axes = [_leaf(stage, a) for a in st.axes]
    check(len(set(st.axes)) == len(st.axes), "an axis is named twice")
    pos = [stage.leaves.index(a) for a in st.axes]
    check(
        pos == list(range(pos[0], pos[0] + len(pos))),
        "fused axes must be adjacent loops, outermost first",
    )
    check(len({a.kind for a in axes}) == 1, "cannot fuse a reduction axis with a spatial axis")
    while len(axes) > 1:
        outer, inner = axes[0], axes[1]
        lo, li = _int(outer.extent), _int(inner.extent)
        extent = (
            Const(lo * li) if lo is not None and li is not None else outer.extent * inner.extent
        )
        fused = Axis(_fresh(stage, f"{outer.name}_{inner.name}_f"), extent, outer.kind)
        p = stage.leaves.index(outer.name)
        stage = replace(
            stage,
            axes=(*stage.axes, fused),
            leaves=(*stage.leaves[:p], fused.name, *stage.leaves[p + 2 :]),
            relations=(
                *stage.relations,
                Relation("fuse", (outer.name, inner.name), (fused.name,), inner.extent),
            ),
        )
        state = _move_attachments(state.with_stage(stage), stage.name, inner.name, fused.name)
        state = _move_attachments(state, stage.name, outer.name, fused.name)
        axes = [fused, *axes[2:]]
    return state


def _reorder(state: State, st: Reorder) -> State:
    stage = state.stage(st.stage)
    for a in st.axes:
        _leaf(stage, a)
    check(len(set(st.axes)) == len(st.axes), "an axis is named twice")
    slots = sorted(stage.leaves.index(a) for a in st.axes)
    leaves = list(stage.leaves)
    for slot, name in zip(slots, st.axes, strict=True):
        leaves[slot] = name
    return state.with_stage(replace(stage, leaves=tuple(leaves)))


def _annotate(state: State, st: Annotate) -> State:
    stage = state.stage(st.stage)
    ax = _leaf(stage, st.axis)
    check(
        st.annotation in ANNOTATIONS,
        f"unknown annotation {st.annotation!r}; use one of {ANNOTATIONS}",
    )
    if st.annotation == "parallel":
        check(
            ax.kind != "reduce", f"axis {ax.name} is a reduction axis; parallel updates would race"
        )
        others = [a.name for a in stage.axes if a.annotation == "parallel" and a.name != ax.name]
        check(not others, f"stage {stage.name} already has parallel axis {', '.join(others)}")
    if st.annotation == "vectorize":
        check(
            ax.kind != "reduce",
            f"axis {ax.name} is a reduction axis; vectorizing it would reorder the reduction",
        )
        check(
            _int(ax.extent) is not None,
            f"axis {ax.name} has a symbolic extent; only constant loops vectorize",
        )
    if st.annotation == "unroll":
        extent = _int(ax.extent)
        check(
            extent is not None, f"axis {ax.name} has a symbolic extent; only constant loops unroll"
        )
        check(
            extent is not None and extent <= MAX_UNROLL,
            f"axis {ax.name} has {extent} iterations; unroll at most {MAX_UNROLL}",
        )
    return state.with_stage(stage._set_axis(replace(ax, annotation=LoopKind(st.annotation))))


def _prefetch(state: State, st: Prefetch) -> State:
    stage = state.stage(st.stage)
    ax = _leaf(stage, st.axis)
    check(
        st.tensor in stage.reads(),
        f"stage {stage.name} does not read {st.tensor} (it reads {', '.join(sorted(stage.reads()))})",
    )
    check(
        ax.annotation in ("serial", "parallel") and ax.thread is None,
        f"axis {ax.name} is {ax.thread or ax.annotation}; only a serial loop, or a parallel"
        " one whose threads each run a run of its iterations, runs them in turn",
    )
    if st.spread:
        _leaf(stage, st.spread)
        check(
            stage.leaves.index(st.spread) > stage.leaves.index(ax.name),
            f"axis {st.spread} is not inside {ax.name}; a prefetch spreads over a loop inside",
        )
    pair = (st.tensor, st.spread)
    if pair in ax.prefetch:
        return state
    return state.with_stage(stage._set_axis(replace(ax, prefetch=(*ax.prefetch, pair))))


def _tensorize(state: State, st: Tensorize) -> State:
    stage = state.stage(st.stage)
    ax = _leaf(stage, st.axis)
    check(
        st.intrin in INTRINSICS,
        f"unknown tensor intrinsic {st.intrin!r}; use one of {', '.join(INTRINSICS)}",
    )
    intrin = INTRINSICS[st.intrin]
    check(ax.kind != "reduce", f"axis {ax.name} is a reduction axis; {st.intrin} runs over lanes")
    check(
        _int(ax.extent) == intrin.lanes,
        f"axis {ax.name} has extent {ax.extent!r}; {st.intrin} covers {intrin.lanes} lanes",
    )
    check(
        ax.annotation == "serial" and ax.thread is None,
        f"axis {ax.name} is already {ax.thread or ax.annotation}",
    )
    return state.with_stage(stage._set_axis(replace(ax, intrin=st.intrin)))


def _bind(state: State, st: Bind) -> State:
    stage = state.stage(st.stage)
    ax = _leaf(stage, st.axis)
    check(
        st.thread in THREAD_TAGS,
        f"unknown thread tag {st.thread!r}; use one of {', '.join(THREAD_TAGS)}",
    )
    check(
        ax.kind != "reduce", f"axis {ax.name} is a reduction axis; binding it to threads would race"
    )
    used = [a.name for a in stage.axes if a.thread == st.thread]
    check(not used, f"{st.thread} is already bound to axis {', '.join(used)}")
    return state.with_stage(stage._set_axis(replace(ax, thread=LoopKind(st.thread))))


def _ancestors(state: State, stage: Stage) -> list[str]:
    """Stages whose loops enclose ``stage`` (through compute_at), innermost first."""
    out, cur = [], stage
    while cur.attach.kind == "at":
        out.append(cur.attach.parent)
        cur = state.stage(cur.attach.parent)
    return out


def _depends(state: State, consumer: Stage, producer: str) -> bool:
    """Whether ``consumer`` reads ``producer``, directly or through the stages it reads.

    ``compute_at`` accepts a consumer's consumer (a softmax's max at the
    output's row loop, where only the exp reads it). Which readers end up
    inside the loop is known only once the whole trace is applied (a trace may
    attach a producer before its consumer), so lowering checks that part.
    """
    seen: set[str] = set()
    todo = [consumer]
    while todo:
        for name in todo.pop().reads():
            if name == producer:
                return True
            if name not in seen and state.has(name):
                seen.add(name)
                todo.append(state.stage(name))
    return False


def _compute_at(state: State, st: ComputeAt) -> State:
    stage, parent = state.stage(st.stage), state.stage(st.parent)
    check(not stage.is_output, f"stage {stage.name} is an output; outputs are computed at the root")
    check(stage.attach.kind != "inline", f"stage {stage.name} was inlined")
    if stage.origin == "cache_write":
        check(
            parent.name == stage.source,
            f"cache {stage.name} can only be computed inside {stage.source}",
        )
    else:
        check(
            _depends(state, parent, stage.name),
            f"stage {parent.name} does not read {stage.name}, directly or through other "
            "stages; compute_at needs a consumer",
        )
    _leaf(parent, st.axis)
    check(
        stage.name not in _ancestors(state, parent),
        f"stage {parent.name} is already computed inside {stage.name}",
    )
    return state.with_stage(replace(stage, attach=Attach(AttachKind.AT, parent.name, st.axis)))


def _compute_inline(state: State, st: ComputeInline) -> State:
    stage = state.stage(st.stage)
    check(stage.origin == "compute", f"cache stage {stage.name} cannot be inlined")
    check(not stage.is_output, f"stage {stage.name} is an output and must be stored")
    check(not stage.op.reduce_axis, f"stage {stage.name} is a reduction and cannot be inlined")
    inner = [
        s.name for s in state.stages if s.attach.kind == "at" and s.attach.parent == stage.name
    ]
    check(not inner, f"stages {', '.join(inner)} are computed inside {stage.name}")
    return state.with_stage(replace(stage, attach=Attach(AttachKind.INLINE)))


def _compute_root(state: State, st: ComputeRoot) -> State:
    stage = state.stage(st.stage)
    return state.with_stage(replace(stage, attach=Attach()))


def _copy_stage(name: str, source: Tensor, origin: str, scope: str) -> Stage:
    """A stage that copies ``source``; its axes take the names of the source's axes."""
    src_op = source.op
    labels = [a.name for a in src_op.axis] if isinstance(src_op, ComputeOp) else []
    if len(labels) != source.ndim:
        labels = [f"ax{d}" for d in range(source.ndim)]
    axis = tuple(IterVar(n, e, "spatial") for n, e in zip(labels, source.shape, strict=True))
    copy = Tensor(name, source.shape, source.dtype, ComputeOp(name, axis, source[axis]))
    axes = tuple(Axis(a.name, a.extent, "spatial") for a in axis)
    names = tuple(a.name for a in axes)
    return Stage(name, copy, origin, names, axes, names, scope=Scope(scope), source=source.name)


def _cache_read(state: State, st: CacheRead) -> State:
    check(st.scope in SCOPES, f"unknown scope {st.scope!r}; use one of {', '.join(SCOPES)}")
    source = _tensor(state, st.tensor)
    name = f"{st.tensor}_{st.scope}"
    check(not state.has(name), f"tensor {st.tensor} already has a {st.scope} cache")
    check(bool(st.readers), "name at least one reader")
    for r in st.readers:
        check(st.tensor in state.stage(r).reads(), f"stage {r} does not read {st.tensor}")
    cache = _copy_stage(name, source, "cache_read", st.scope)
    stages = []
    for s in state.stages:
        if s.name in st.readers:
            s = replace(s, tensor=_redirect(s.tensor, st.tensor, cache.tensor))
        stages.append(s)
        if s.name == st.tensor:
            stages.append(cache)
    if not state.has(st.tensor):
        stages.insert(0, cache)
    return replace(state, stages=tuple(stages))


def _cache_write(state: State, st: CacheWrite) -> State:
    check(st.scope in SCOPES, f"unknown scope {st.scope!r}; use one of {', '.join(SCOPES)}")
    stage = state.stage(st.tensor)
    check(stage.origin == "compute", f"stage {stage.name} is a cache itself")
    name = f"{st.tensor}_{st.scope}"
    check(not state.has(name), f"tensor {st.tensor} already has a {st.scope} cache")
    cache = _copy_stage(name, stage.tensor, "cache_write", st.scope)
    pos = state.stages.index(stage)
    return replace(state, stages=(*state.stages[: pos + 1], cache, *state.stages[pos + 1 :]))


def _tensor(state: State, name: str) -> Tensor:
    for t in state.inputs:
        if t.name == name:
            return t
    return state.stage(name).tensor


def _redirect(tensor: Tensor, old: str, new: Tensor) -> Tensor:
    op = tensor.op
    assert isinstance(op, ComputeOp)

    def swap(e: Expr) -> Expr | None:
        if isinstance(e, TensorRead) and e.tensor.name == old:
            return TensorRead(new, tuple(transform(i, swap) for i in e.indices), e.dtype)
        return None

    return replace(tensor, op=ComputeOp(op.name, op.axis, transform(op.body, swap)))


_APPLY = {
    Split: _split,
    Fuse: _fuse,
    Reorder: _reorder,
    Annotate: _annotate,
    Prefetch: _prefetch,
    Bind: _bind,
    Tensorize: _tensorize,
    ComputeAt: _compute_at,
    ComputeInline: _compute_inline,
    ComputeRoot: _compute_root,
    CacheRead: _cache_read,
    CacheWrite: _cache_write,
}


def apply_step(state: State, step: Step) -> State:
    """Apply one step; raise ScheduleError('<step>: <reason>') if it is illegal."""
    try:
        if not isinstance(step, CacheRead | ComputeRoot) and hasattr(step, "stage"):
            stage = state.stage(step.stage)
            check(stage.attach.kind != "inline", f"stage {stage.name} was inlined")
        return _APPLY[type(step)](state, step)  # type: ignore[operator]
    except _Illegal as exc:
        raise ScheduleError(f"{step.describe()}: {exc}") from None
