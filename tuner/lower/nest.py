"""One stage's loop nest: loops, reduction init, stores, register tiles, tensorized loops.

The stages computed at its loops come from ``tuner.lower.attach`` (their
regions by bounds inference), the bounds of splits that no factor divides
from ``tuner.lower.guards``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..kinds import Scope
from ..schedule.state import ScheduleError, Stage
from ..te.expr import (
    Binary,
    Const,
    Expr,
    IterVar,
    Reduce,
    TensorRead,
    TupleReduce,
    Var,
    substitute,
    transform,
    walk,
)
from .attach import attached_at
from .context import Env, identity
from .extent import Ext, as_expr, proves, upper
from .guards import below, clamp, free_names, guard, least, tighten
from .intrin import intrinsic
from .ir import Alloc, Buffer, For, Load, Stmt, Store, Tensorized, seq
from .prefetch import prefetch_next
from .simplify import simplify
from .tile import register_tile, tile_starts
from .visitor import walk_stmts

if TYPE_CHECKING:
    from .lower import _Lowerer


#: The suffix of a tuple reduction's buffer of combined values (see ``_tuple_step``).
TUPLE_NEXT = "__next"


class _NestBuilder:
    def __init__(
        self,
        lw: _Lowerer,
        stage: Stage,
        env: Env,
        names: dict[str, Var],
        ext: dict[str, Ext],
        absolute: dict[str, Expr],
        conds: list[tuple[Expr, Ext]],
        body: Expr,
        write_back: bool = False,
        fill: Expr | None = None,
    ):
        self.lw, self.stage, self.env, self.names, self.ext = lw, stage, env, names, ext
        self.absolute, self.body, self.write_back, self.fill = absolute, body, write_back, fill
        self.op_axes = [a.name for a in stage.tensor.op.axis]  # type: ignore[union-attr]
        self.leaves = stage.leaves
        kinds = [stage.axis(leaf).kind for leaf in self.leaves]
        self.first_reduce = kinds.index("reduce") if "reduce" in kinds else None
        pos = {names[leaf].name: p for p, leaf in enumerate(self.leaves)}
        self.reduce_vars = {
            names[leaf].name for leaf in self.leaves if stage.axis(leaf).kind == "reduce"
        }
        self.conds: dict[int, list[tuple[Expr, Ext]]] = {}
        for e, bound in conds:
            e = simplify(e)
            at = max((pos[v] for v in free_names(e) if v in pos), default=-1)
            if at >= 0 and stage.axis(self.leaves[at]).thread is not None:
                # A loop bound to GPU threads keeps its whole extent (its iterations are the
                # launch's threads, and all of them must reach a block's barriers): the
                # bound guards the stores instead, as predication (see ``_loops``).
                at = len(self.leaves)
            self.conds.setdefault(at, []).append((e, bound))
        self.tuple = body if isinstance(body, TupleReduce) else None
        if self.tuple is not None:
            self._check_tuple(self.tuple)
        self.tile_starts = tile_starts(self)

    def _check_tuple(self, body: TupleReduce) -> None:
        """A tuple reduction's values are combined together: their axis is not a loop of its own."""
        assert body.component is not None
        v, stage = body.component.name, self.stage
        if stage.origin != "compute":
            raise ScheduleError(f"stage {stage.name}: a tuple reduction cannot be a {stage.origin}")
        if self.leaves[-1] != v:
            raise ScheduleError(
                f"tuple reduction {stage.name}: its values' axis {v} must stay the innermost"
                " loop, unsplit and unfused (the values are combined together at each step)"
            )
        kind = stage.axis(v).thread or stage.axis(v).annotation
        if kind not in ("serial", "unroll"):
            raise ScheduleError(
                f"tuple reduction {stage.name}: its values' axis {v} cannot be {kind}"
            )

    def build(self) -> Stmt:
        inner = self._loops(0, self.env, "update")
        guards = [below(e, bound, self.env) for e, bound in self.conds.get(-1, [])]
        return guard(guards, inner)

    def _loops(self, p: int, env: Env, mode: str) -> Stmt:
        if self.tuple is not None and p == len(self.leaves) - 1:
            return self._tuple_step(self.tuple, env, mode)
        if p == len(self.leaves):
            guards = [
                below(e, bound, env)
                for e, bound in self.conds.get(p, [])
                if not (mode == "init" and free_names(e) & self.reduce_vars)
            ]
            return guard(guards, self._store(env, mode))
        if mode == "update" and p == self.first_reduce and self.tile_starts is None:
            return seq([self._loops(p, env, "init"), self._loop(p, env, "update")])
        if mode == "init" and self.stage.axis(self.leaves[p]).kind == "reduce":
            return self._loops(p + 1, env, mode)
        return self._loop(p, env, mode)

    def _loop(self, p: int, env: Env, mode: str) -> Stmt:
        leaf = self.leaves[p]
        axis = self.stage.axis(leaf)
        var = self.names[leaf]
        env = env.child()
        full = self.ext[leaf]
        env.ranges[var.name] = (0, upper(full, env.ranges) - 1)
        kind = axis.thread or axis.annotation
        if kind.is_thread and not isinstance(full, int):
            raise ScheduleError(
                f"loop {leaf} of {self.stage.name} is bound to {kind} but has symbolic extent"
                f" {full!r}; a GPU launch needs concrete extents"
            )
        if kind.value.startswith("threadIdx."):
            assert isinstance(full, int)
            env.threads[var.name] = full
        if kind == "parallel":
            if env.parallel:
                raise ScheduleError(
                    f"stage {self.stage.name}: parallel loop {leaf} is nested inside parallel loop {env.parallel}"
                )
            env.parallel = var.name
        extent: Expr = as_expr(full)
        guards: list[Expr] = []
        pad = env.pad.last if env.pad and env.pad.owner is self and axis.kind != "reduce" else None
        for e, bound in self.conds.get(p, []):
            if mode == "init" and free_names(e) & self.reduce_vars:
                continue
            tight = tighten(e, bound, var, env)
            covers = tight is not None and proves(_ext(tight), "ge", full, env.ranges)
            if tight is not None and env.specialize is not None and not covers:
                cond = simplify(least(tight, env) >= as_expr(full), env.ranges)
                if free_names(cond) <= env.specialize_known:
                    env.specialize.append(cond)
                    continue
            if tight is None:
                guards.append(below(e, bound, env))
            elif covers:
                continue
            elif pad is not None:
                last = simplify(tight - 1, env.ranges)
                pad[var.name] = (
                    simplify(Binary("min", pad[var.name], last, "int64"), env.ranges)
                    if var.name in pad
                    else last
                )
            else:
                extent = simplify(Binary("min", extent, tight, "int64"), env.ranges)
        stmts: list[Stmt] = []
        allocs: list[Buffer] = []
        if mode == "update" and not self.write_back:
            stmts = attached_at(self, p, env, allocs)
        local = env.caches.get(self.stage.name)
        if (
            local is not None
            and local.buffer.name in {b.name for b in allocs}
            and local.stage.origin == "cache_write"
        ):
            body = seq([*stmts, register_tile(self, local, p, env, mode)])
        else:
            body = seq([*stmts, self._loops(p + 1, env, mode)])
        if mode == "update":
            for tensor, spread in axis.prefetch:
                shape = self._shape(tensor, env)
                inside = self.names[spread].name if spread else None
                if shape is not None:
                    body = prefetch_next(body, var.name, tensor, shape, inside)
        body = guard(guards, body)
        for buf in reversed(allocs):
            body = Alloc(buf, body)
        loop = For(var.name, extent, kind, body)
        if axis.intrin and mode == "update":
            return self._tensorized(axis.intrin, p, loop, env)
        return loop

    def _tensorized(self, name: str, p: int, loop: For, env: Env) -> Stmt:
        """``loop`` and the reduction loop inside it as tensor intrinsic ``name``.

        The pair must be the stage's two innermost loops, the inner one a
        reduction of the intrinsic's depth. A lane loop bounded at an edge
        runs all its lanes where that stays inside every buffer and the
        lanes past the edge land in a register tile (whose write-back is
        bounded); otherwise it stays plain loops.
        """
        intrin = intrinsic(name)
        leaf = self.leaves[p]
        inner = self.leaves[p + 1] if p + 1 < len(self.leaves) else None
        if (
            inner is None
            or p + 2 != len(self.leaves)
            or self.stage.axis(inner).kind != "reduce"
            or self.ext[inner] != intrin.depth
        ):
            raise ScheduleError(
                f"stage {self.stage.name}: tensorized loop {leaf} must have one reduction loop"
                f" of {intrin.depth} iterations inside it, innermost"
            )
        edge = env.pad is not None
        if isinstance(loop.extent, Const) and int(loop.extent.value) == intrin.lanes:
            return Tensorized(name, loop, edge)
        whole = For(loop.var, Const(intrin.lanes), loop.kind, loop.body)
        return Tensorized(name, whole, True) if self._lanes_fit(whole, env) else loop

    def _lanes_fit(self, loop: For, env: Env) -> bool:
        """Whether the accesses of ``loop``'s body that its lanes index stay in their
        buffers over all its lanes, and its stores go to a register tile."""
        e = env.child()
        e.ranges[loop.var] = (0, int(loop.extent.value) - 1)  # type: ignore[attr-defined]
        for s in walk_stmts(loop.body):
            if isinstance(s, For):
                if not isinstance(s.extent, Const):
                    return False
                e.ranges[s.var] = (0, int(s.extent.value) - 1)
        local = {c.buffer.name for c in env.caches.values() if c.buffer.scope == Scope.LOCAL}
        for s in walk_stmts(loop.body):
            if isinstance(s, Store):
                target = Load(s.buffer, s.indices, "int32")
                loads = [x for x in walk(s.value) if isinstance(x, Load)]
                if s.buffer not in local:
                    return False
                for x in [target, *loads]:  # those the extra lanes reach
                    lanes = any(loop.var in free_names(i) for i in x.indices)
                    if lanes and not self._inside(x, e):
                        return False
        return True

    def _store(self, env: Env, mode: str) -> Stmt:
        stage = self.stage
        if stage.origin != "compute":
            leaf_idx = tuple(self.names[leaf] for leaf in self.leaves)
            src = tuple(self.absolute[a] for a in self.op_axes)
            region = env.regions.get(stage.source)
            if region is not None:  # the source holds just its region here
                src = region.relative(src, env.ranges)
            if self.write_back:
                return Store(stage.source, src, Load(stage.name, leaf_idx, stage.tensor.dtype))
            if self.fill is not None:
                return Store(stage.name, leaf_idx, self.fill)
            return Store(stage.name, leaf_idx, Load(stage.source, src, stage.tensor.dtype))
        idx = tuple(self.absolute[a] for a in self.op_axes)
        target = self.lw.load(_read(stage, idx), env)
        assert isinstance(target, Load)
        padded = env.pad is not None and env.pad.owner is self and bool(env.pad.last)
        if padded:
            assert env.pad is not None
            env.pad.ok &= self._inside(target, env)
        if isinstance(self.body, Reduce) and mode == "init":
            return Store(
                target.buffer, target.indices, identity(self.body.combiner, self.body.dtype)
            )
        value = self.body.source if isinstance(self.body, Reduce) else self.body
        if padded:
            value = self._padded(value, env)
        else:
            value = self.lw.expr(substitute(value, self.absolute), env)
        value = simplify(value, env.ranges)
        if not isinstance(self.body, Reduce):
            return Store(target.buffer, target.indices, value)
        op = {"sum": "add", "max": "max", "min": "min"}[self.body.combiner]
        return Store(target.buffer, target.indices, Binary(op, target, value, self.body.dtype))

    def _tuple_step(self, body: TupleReduce, env: Env, mode: str) -> Stmt:
        """All values of a tuple reduction at once, written out over its values' axis.

        ``init`` stores the identity. ``update`` computes every combined value
        from the old ones into a small local buffer (``<stage>__next``, which
        LLVM keeps in registers), then stores them: a value stored first must
        not be read as new by the next. Values that each read only their own
        old value (a tuple of sums) are stored in turn, with no buffer.
        """
        if env.pad is not None:
            raise ScheduleError(f"tuple reduction {self.stage.name} cannot be a register tile")
        assert body.component is not None
        var = self.names[body.component.name].name
        n, stage = len(body.sources), self.stage
        last = len(self.leaves)
        conds = [c for p in (last - 1, last) for c in self.conds.get(p, [])]
        guards = [  # a bound on the values' axis holds for each value (its region is whole)
            below(substitute(e, {var: Const(j)}), bound, env)
            for e, bound in conds
            if not (mode == "init" and free_names(e) & self.reduce_vars)
            for j in range(n)
        ]
        targets: list[Load] = []
        values: list[Expr] = []
        for j in range(n):
            at = {k: substitute(e, {var: Const(j)}) for k, e in self.absolute.items()}
            target = self.lw.load(_read(stage, tuple(at[a] for a in self.op_axes)), env)
            assert isinstance(target, Load)
            targets.append(target)
            if mode == "update":
                value = self.lw.expr(substitute(body.sources[j], at), env)
                values.append(simplify(value, env.ranges))
        stores: list[Stmt]
        if mode == "init":
            stores = [
                Store(t.buffer, t.indices, v) for t, v in zip(targets, body.identity, strict=True)
            ]
            return guard(guards, seq(stores))
        new = body.combine(tuple(targets), tuple(values))
        if body.separable:  # each value reads only its own old value (sums): stored in turn
            stores = [
                Store(t.buffer, t.indices, simplify(e, env.ranges))
                for t, e in zip(targets, new, strict=True)
            ]
            return guard(guards, seq(stores))
        nxt = Buffer(f"{stage.name}{TUPLE_NEXT}", (n,), body.dtype, Scope.LOCAL)
        stmts: list[Stmt] = [
            Store(nxt.name, (Const(j),), simplify(e, env.ranges)) for j, e in enumerate(new)
        ]
        stmts += [
            Store(t.buffer, t.indices, Load(nxt.name, (Const(j),), body.dtype))
            for j, t in enumerate(targets)
        ]
        return guard(guards, Alloc(nxt, seq(stmts)))

    def _padded(self, e: Expr, env: Env) -> Expr:
        """``e`` at the loops' values, each read's indices clamped into its buffer.

        A valid iteration reads inside every buffer, so the clamps change
        nothing there; past the edge they keep the padded lanes' reads in
        bounds. Only a bound the loops' ranges could cross is clamped, so a
        vector read along the tile stays a vector read.
        """

        def read(n: Expr) -> Expr | None:
            if isinstance(n, Var | IterVar):
                return self.absolute.get(n.name)
            if not isinstance(n, TensorRead):
                return None
            idx = tuple(transform(i, read) for i in n.indices)
            load = self.lw.load(TensorRead(n.tensor, idx, n.dtype), env)
            assert isinstance(load, Load)
            shape = self._shape(load.buffer, env)
            assert shape is not None, f"a read of {n.tensor.name} has no buffer"
            return Load(
                load.buffer,
                tuple(clamp(i, d, env) for i, d in zip(load.indices, shape, strict=True)),
                load.dtype,
            )

        return transform(e, read)

    def _shape(self, buffer: str, env: Env) -> tuple[Ext, ...] | None:
        return next(
            (c.buffer.shape for c in env.caches.values() if c.buffer.name == buffer),
            self.lw.shapes.get(buffer),
        )

    def _inside(self, load: Load, env: Env) -> bool:
        """Whether ``load`` stays inside its buffer over the loops' full ranges."""
        shape = self._shape(load.buffer, env)
        return shape is not None and all(
            clamp(i, d, env) is i for i, d in zip(load.indices, shape, strict=True)
        )


def _ext(e: Expr) -> Ext:
    return int(e.value) if isinstance(e, Const) else e


def _read(stage: Stage, idx: tuple[Expr, ...]) -> TensorRead:
    return TensorRead(stage.tensor, idx, stage.tensor.dtype)
