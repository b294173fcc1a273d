"""Lowering: expression + schedule -> loop-nest IR.

For each stage, in dependency order, lowering makes one loop per leaf axis,
recovers the original axis values from the loop variables (``i = i_o*8 + i_i``),
adds bounds for splits that no factor divides (tightening the inner loop to
``min(8, M - i_o*8)`` where it can, an ``if`` where it cannot), places the
reduction's initialisation just above its outermost reduction loop, and
inserts the stages computed at a loop (``compute_at``) at the top of that
loop's body, in dependency order, sized by bounds inference to the region
used inside it.

A stage may be computed at a loop of a consumer's consumer (a softmax's max at
the output's row loop, where only the exp reads it) when every stage that reads
it runs inside that loop; its region is then inferred through the chain of
readers (``tuner.lower.attach``)::

    for i in range(M):                 # out's row loop
        mx[0] = max_k x[i, k]          # sized by e's reads: one element
        e[0, j] = exp(x[i, j] - mx[0]) # sized by out's and s's reads: one row
        s[0] = sum_k e[0, k]
        out[i, j] = e[0, j] / s[0]

Loops bound to GPU indices lower the same way, with three differences that
follow from the schedule, not the target: a bound loop keeps its whole
extent and guards its stores instead (every thread of a block must reach the
block's barriers); a buffer in a block's shared memory (a ``"shared"`` cache,
or an intermediate whose own loops are bound to threads) is sized over the
enclosing thread-bound loops too, for the whole block; and its nest is fenced
by barriers. ``tuner.lower.gpu`` splits the result into kernels and checks
it against a GPU target's limits.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..kinds import Scope
from ..schedule.schedule import Schedule
from ..schedule.state import ScheduleError, Stage, State
from ..schedule.steps import Step
from ..target import Target
from ..te.expr import (
    Binary,
    Const,
    Expr,
    TensorRead,
    TupleReduce,
    Var,
    substitute,
    transform,
    walk,
)
from ..te.tensor import ComputeOp, Tensor
from .context import Cache, Env, extent, forward, leaf_extents, root_values
from .extent import Ext, emax, emin, symbol_ranges, symbols_of
from .gpu import check_gpu
from .intrin import require
from .ir import Alloc, Buffer, For, Load, Stmt, Tensorized, seq
from .nest import _NestBuilder
from .simplify import Linear, linear, render_linear, simplify
from .visitor import walk_stmts

__all__ = ["LoweredFunc", "check_capabilities", "lower"]


@dataclass(frozen=True)
class LoweredFunc:
    """A kernel as a loop nest: its arguments (in call order) and body."""

    name: str
    args: tuple[Buffer, ...]
    body: Stmt
    #: The symbolic extents of the arguments' shapes, in the order the kernel takes them
    #: after its arrays (bound from the arrays' shapes at each call).
    symbols: tuple[Var, ...] = ()

    def __str__(self) -> str:
        from .printer import render

        return render(self)

    def with_output_pitch(self, pitch: int) -> LoweredFunc:
        """The same nest writing its output's rows ``pitch`` elements apart: its last
        argument stored as the leading rows of ``[..., pitch]``, of which it writes the
        first ``shape[-1]`` columns (a slice of a concatenation along the last axis, written
        in place). The caller passes the array from the slice's first element."""
        out = self.args[-1]
        width = out.shape[-1] if out.shape else None
        if not isinstance(width, int) or pitch < width:
            raise ValueError(f"output {out.name} of {width} columns cannot take a pitch of {pitch}")
        pitched = dataclasses.replace(out, shape=(*out.shape[:-1], pitch))
        return dataclasses.replace(self, args=(*self.args[:-1], pitched))


class _Lowerer:
    def __init__(self, state: State, args: list[Tensor]):
        self.state = state
        self.bodies = _inline(state)
        self.read_sets = {
            name: {n.tensor.name for n in walk(body) if isinstance(n, TensorRead)}
            for name, body in self.bodies.items()
        }
        self.temps: list[Buffer] = []
        self.arg_names = [t.name for t in args]
        self.shapes: dict[str, tuple[Ext, ...]] = {
            t.name: tuple(extent(d) for d in t.shape) for t in state.inputs
        }
        for s in state.stages:
            self.shapes[s.name] = tuple(extent(d) for d in s.tensor.shape)
        self.symbols = _symbols(state, args)
        self._check_attachments()

    def _check_attachments(self) -> None:
        for s in self.state.stages:
            if s.origin == "cache_write" and s.attach.kind != "at":
                raise ScheduleError(
                    f"cache {s.name} must be computed at a loop of {s.source} (compute_at)"
                )
            if s.attach.kind == "at" and s.origin != "cache_write":
                self._check_readers(s)
            if s.is_output and s.name not in self.arg_names:
                raise ScheduleError(f"output {s.name} is not in the argument list")

    def _check_readers(self, s: Stage) -> None:
        """Every reader of ``s`` runs inside the loop ``s`` is computed at.

        A reader is the parent itself, or a stage computed at that loop or a
        deeper one of the parent, directly or inside another such stage (a
        softmax's max at the output's row loop, read by the exp computed
        there). A reader elsewhere would see only the last region computed.
        """
        parent = self.state.stage(s.attach.parent)
        depth = parent.leaves.index(s.attach.axis)
        step = f"compute_at({s.name}, {parent.name})"
        outside = []
        for c in self.state.stages:
            if c.name == parent.name or c.attach.kind == "inline" or s.name not in self._reads(c):
                continue
            top = self._top(c, parent.name)
            if top is None:
                outside.append(c.name)
            elif parent.leaves.index(top.attach.axis) < depth:
                raise ScheduleError(
                    f"{step}: {c.name} reads {s.name} at loop {top.attach.axis}, outside the "
                    f"loop {s.name} is computed in; compute {s.name} at {top.attach.axis} "
                    "or further out"
                )
        if outside:
            names = ", ".join(outside)
            also = "also " if s.name in self._reads(parent) else ""
            movable = not any(self.state.stage(c).is_output for c in outside)
            raise ScheduleError(
                f"{step}: {s.name} is {also}read by {names}, which "
                f"{'is' if len(outside) == 1 else 'are'} not computed inside {parent.name}'s "
                f"loop {s.attach.axis}; compute {s.name} at the root"
                + (f", or {names} inside that loop" if movable else "")
            )

    def _top(self, st: Stage, parent: str) -> Stage | None:
        """The stage attached to ``parent`` that ``st`` is computed inside (or is), if any."""
        while st.attach.kind == "at":
            if st.attach.parent == parent:
                return st
            st = self.state.stage(st.attach.parent)
        return None

    def _reads(self, stage: Stage) -> set[str]:
        """The tensors ``stage`` reads once inlined stages are substituted in."""
        return self.read_sets[stage.name]

    # -- reads -------------------------------------------------------------
    def load(self, read: TensorRead, env: Env) -> Expr:
        idx = tuple(simplify(self.expr(i, env), env.ranges) for i in read.indices)
        name = read.tensor.name
        cache = env.caches.get(name)
        if cache is None:
            return Load(name, idx, read.dtype)
        if not cache.packed:
            at = _at_zero(cache.relative(idx, env.ranges), cache.buffer.shape)
            return Load(cache.buffer.name, at, read.dtype)
        rel = {
            r: simplify(i - b, env.ranges)
            for r, i, b in zip(cache.stage.root, idx, cache.base, strict=True)
        }
        ext = leaf_extents(
            cache.stage, dict(zip(cache.stage.root, cache.root_extents, strict=True))
        )
        leaf_idx = tuple(simplify(e, env.ranges) for e in forward(cache.stage, rel, ext))
        return Load(cache.buffer.name, leaf_idx, read.dtype)

    def expr(self, e: Expr, env: Env) -> Expr:
        return transform(e, lambda n: self.load(n, env) if isinstance(n, TensorRead) else None)

    # -- stages ------------------------------------------------------------
    def lower_root(self) -> Stmt:
        env = Env(ranges=symbol_ranges(self.symbols), names=set(self.symbols))
        stmts: list[Stmt] = []
        for s in self.state.stages:
            if s.attach.kind == "root":
                stmts.append(self.stage_nest(s, env, None))
                if s.origin == "cache_read":
                    env.caches[s.name] = self._root_cache(s)
        body = seq(stmts)
        for s in self.state.stages:
            if (
                s.attach.kind != "inline"
                and s.origin == "compute"
                and s.name not in self.arg_names
                and not self.region_buffered(s)
            ):
                body = Alloc(Buffer(s.name, self.shapes[s.name], s.tensor.dtype), body)
        for s in self.state.stages:
            if s.attach.kind == "root" and s.origin == "cache_read":
                body = Alloc(env.caches[s.name].buffer, body)
        return body

    def region_buffered(self, s: Stage) -> bool:
        """Whether ``s`` gets a buffer the size of its region where it is computed.

        True for an intermediate computed at a loop, unless a ``cache_read``
        stage copies it (its copy addresses the source by absolute index). A
        register tile (``cache_write``) loads and stores back relative to the
        region (``Env.regions``).
        """
        return (
            s.attach.kind == "at"
            and s.origin == "compute"
            and s.name not in self.arg_names
            and not any(c.origin == "cache_read" and c.source == s.name for c in self.state.stages)
        )

    def _root_cache(self, s: Stage) -> Cache:
        shape = self.shapes[s.source]
        ext = leaf_extents(s, dict(zip(s.root, shape, strict=True)))
        buf = Buffer(s.name, tuple(ext[leaf] for leaf in s.leaves), s.tensor.dtype, s.scope)
        return Cache(buf, tuple(Const(0) for _ in shape), s, shape)

    def stage_nest(
        self,
        stage: Stage,
        env: Env,
        region: tuple[tuple[Expr, ...], tuple[Ext, ...]] | None,
        write_back: bool = False,
        fill: Expr | None = None,
    ) -> Stmt:
        """``stage``'s loop nest over ``region`` (its whole shape when None).

        A register tile's stage (a ``cache_write``) loads its source's region, or
        with ``write_back`` stores the tile back to it, or with ``fill`` stores
        that value into the tile (a tile starting its own sums: ``tuner.lower.nest``).
        """
        body_expr = self.bodies[stage.name]
        shape = self.shapes[stage.source if stage.origin != "compute" else stage.name]
        base, widths = region if region else (tuple(Const(0) for _ in shape), shape)
        op_axes = [a.name for a in stage.tensor.op.axis]  # type: ignore[union-attr]
        reduce_axes = [a.name for a in stage.tensor.op.reduce_axis]  # type: ignore[union-attr]
        root_ext = dict(zip(op_axes, widths, strict=True))
        for a in reduce_axes:
            root_ext[a] = extent(stage.axis(a).extent)
        ext = leaf_extents(stage, root_ext)
        env = env.child()
        names: dict[str, Var] = {}
        for leaf in stage.leaves:
            name = leaf if leaf not in env.names else f"{stage.name}_{leaf}"
            names[leaf] = Var(name)
            env.names.add(name)
        rel_vals, conds = root_values(stage, dict(names), ext)
        absolute = {a: simplify(b + rel_vals[a]) for a, b in zip(op_axes, base, strict=True)}
        for a in reduce_axes:
            absolute[a] = rel_vals[a]
        if region:
            for a, dim in zip(op_axes, shape, strict=True):
                conds.append((absolute[a], dim))
                conds.append((Const(-1) - absolute[a], 1))  # absolute >= 0
        outer = env.regions.get(stage.source) if stage.origin != "compute" else None
        if outer is not None:  # a tile of a region buffer: load and store inside the region
            for a, b, w in zip(op_axes, outer.base, outer.root_extents, strict=True):
                conds.append((absolute[a] - b, w))
                conds.append((b - absolute[a], 1))
        return _NestBuilder(
            self, stage, env, names, ext, absolute, conds, body_expr, write_back, fill
        ).build()

    def region(
        self,
        producer: Stage,
        consumer: Stage,
        exprs: list[tuple[Expr, ...]],
        inner: dict[str, Ext],
        env: Env,
    ) -> tuple[tuple[Expr, ...], tuple[Ext, ...]]:
        """Bounds inference: the box of ``producer`` that ``exprs`` touch while ``inner`` loops run."""
        shape = self.shapes[producer.source if producer.origin != "compute" else producer.name]
        # The inner loops' ranges too: ``(8*co + ci) // 8`` is ``co`` while ``ci`` runs 0..7.
        r = dict(env.ranges)
        r.update({name: (0, n - 1) for name, n in inner.items() if isinstance(n, int)})
        bases: list[Expr] = []
        widths: list[Ext] = []
        # A tuple reduction computes all its values together: its buffer holds them all.
        values = isinstance(producer.tensor.op, ComputeOp) and isinstance(
            producer.tensor.op.body, TupleReduce
        )
        for d, dim in enumerate(shape):
            if values and d == len(shape) - 1:
                bases.append(Const(0))
                widths.append(dim)
                continue
            lo_base: Expr | None = None
            lo: Ext | None = None
            hi: Ext | None = None
            ok = True
            for idx in exprs:
                lin = linear(simplify(idx[d], r))
                off_lo: Ext = lin.const
                off_hi: Ext = lin.const
                outer_terms = {}
                for atom, c in lin.terms.items():
                    free = {v.name for v in walk(atom) if isinstance(v, Var)}
                    if free & set(inner):
                        if not isinstance(atom, Var):
                            ok = False
                            break
                        span = _span(c, inner[atom.name])
                        if c < 0:
                            off_lo = _plus(off_lo, span)
                        else:
                            off_hi = _plus(off_hi, span)
                    else:
                        outer_terms[atom] = c
                if not ok:
                    break
                b = simplify(render_linear(Linear(outer_terms, 0)))
                if lo_base is None:
                    lo_base, lo, hi = b, off_lo, off_hi
                elif b == lo_base and lo is not None and hi is not None:
                    lo, hi = emin(lo, off_lo, r), emax(hi, off_hi, r)
                else:
                    ok = False
                    break
            if not ok or lo_base is None or lo is None or hi is None or not isinstance(lo, int):
                bases.append(Const(0))
                widths.append(dim)
            else:
                bases.append(simplify(lo_base + lo))
                span = _plus(hi, 1 - lo)
                # A constant span over a symbolic dimension stays constant (a register
                # tile): where the dimension is smaller, the nest's bound checks keep
                # the tile's loops inside it.
                const_span = isinstance(span, int) and not isinstance(dim, int)
                widths.append(span if const_span else emin(span, dim, r))
        return tuple(bases), tuple(widths)


def _at_zero(idx: tuple[Expr, ...], shape: tuple[Ext, ...]) -> tuple[Expr, ...]:
    """``idx`` with 0 along every axis of one element, where any read lands.

    For the buffer of a stage computed at a loop (its region there): read at
    ``row // 784 - base`` along a batch of one (the row of a 28 x 28 image), the
    index was one LLVM could not prove constant, so the max pool's accumulator of
    one pixel's channels, a stack buffer it would keep in registers, was loaded
    and stored at every window step (GoogLeNet's 3 x 3 over 192 channels at
    28 x 28: 66 against 24 us on one thread, Zen 5). Reads of a whole tensor keep
    their index, which the simplifier folds with the others into one offset."""
    return tuple(Const(0) if d == 1 else i for i, d in zip(idx, shape, strict=True))


def _span(c: int, n: Ext) -> Ext:
    """``c * (n - 1)``: how far an index moves while a loop of ``n`` iterations runs."""
    if isinstance(n, int):
        return c * (n - 1)
    return simplify(Const(c) * (n - 1))


def _plus(a: Ext, b: Ext) -> Ext:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    out = simplify(
        Binary(
            "add",
            a if isinstance(a, Expr) else Const(a),
            b if isinstance(b, Expr) else Const(b),
            "int64",
        )
    )
    return int(out.value) if isinstance(out, Const) else out


def _symbols(state: State, args: list[Tensor]) -> dict[str, Var]:
    """The symbolic extents of the computation; each must be readable from an argument's shape.

    A kernel learns a symbol's value from the arrays it is called with, so a
    symbol must be a whole dimension of some argument (``A[n, 64]``), not only
    part of one (``A[2*n]``) or of an intermediate's shape.
    """
    reduce_extents = [
        a.extent
        for s in state.stages
        if isinstance(s.tensor.op, ComputeOp)
        for a in s.tensor.op.reduce_axis
    ]
    used = symbols_of(
        [*(t.shape for t in state.inputs), *(s.tensor.shape for s in state.stages), reduce_extents]
    )
    readable = {d.name: d for t in args for d in t.shape if isinstance(d, Var)}
    missing = sorted(set(used) - set(readable))
    if missing:
        raise ScheduleError(
            f"symbolic extent {missing[0]} is not a whole dimension of any argument; "
            "a kernel reads each symbol from its arguments' shapes"
        )
    return {n: readable[n] for n in sorted(readable)}


def _inline(state: State) -> dict[str, Expr]:
    """Each stage's body with inlined stages substituted in."""
    bodies: dict[str, Expr] = {}
    inlined: dict[str, tuple[tuple[str, ...], Expr]] = {}
    for s in state.stages:
        op = s.tensor.op
        assert isinstance(op, ComputeOp)

        def sub(e: Expr) -> Expr | None:
            if isinstance(e, TensorRead) and e.tensor.name in inlined:
                params, body = inlined[e.tensor.name]
                idx = [transform(i, sub) for i in e.indices]
                return substitute(body, dict(zip(params, idx, strict=True)))
            return None

        body = transform(op.body, sub)
        bodies[s.name] = body
        if s.attach.kind == "inline":
            inlined[s.name] = (tuple(a.name for a in op.axis), body)
    return bodies


def lower(
    sched: Schedule, args: list[Tensor], name: str = "kernel", target: Target | None = None
) -> LoweredFunc:
    """Lower ``sched`` to a loop nest whose arguments are ``args`` (inputs and outputs).

    Given a ``target``, the loop nest is checked against its capabilities
    (``ScheduleError`` where it asks for what the target lacks); the loop nest
    itself does not depend on the target.
    """
    lw = _Lowerer(sched.state, args)
    body = lw.lower_root()
    for t in args:
        if t.name not in lw.shapes:
            raise ScheduleError(f"argument {t.name} is not part of the scheduled computation")
    params = tuple(Buffer(t.name, lw.shapes[t.name], t.dtype, Scope.GLOBAL, True) for t in args)
    func = LoweredFunc(name, params, body, tuple(lw.symbols.values()))
    if target is not None:
        check_capabilities(func, target, sched.trace)
    return func


def check_capabilities(func: LoweredFunc, target: Target, trace: tuple[Step, ...] = ()) -> None:
    """Refuse a loop nest that needs what ``target`` does not have.

    A target with GPU threads (``max_threads_per_block``) checks the kernels'
    blocks against its limits (``tuner.lower.gpu.check_gpu``); one without
    refuses loops bound to GPU indices. ``trace`` names the step at fault.
    """
    for s in walk_stmts(func.body):
        if isinstance(s, Tensorized):
            require(s.intrin, target)
    threads = int(target.get("max_threads_per_block", 0))
    if threads:
        check_gpu(func.body, target, trace)
        return
    for s in walk_stmts(func.body):
        if isinstance(s, For) and s.kind.is_thread and not threads:
            raise ScheduleError(
                f"loop {s.var} is bound to {s.kind}, but target {target} has no GPU threads"
                " (no max_threads_per_block capability); remove the bind"
            )
