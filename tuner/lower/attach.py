"""Stages computed at a loop of another stage's nest: their region there, buffer and fences.

A stage attached at loop ``p`` of a consumer's nest (by ``compute_at``, or a
cache stage) runs at the top of that loop's body, over the region used inside
it. Bounds inference finds that region through every reader of the stage
inside the loop: the consumer's own reads over its inner loops, or a stage
computed inside the loop, directly or through a chain of attachments, over
its own box there (``lower.py``'s docstring shows a softmax). A buffer in a
GPU block's shared memory is sized over the block and fenced by barriers.

The nest builder (``tuner.lower.nest``) asks :func:`attached_at` for the
stages at each of its loops and :func:`attached_inside` whether a register
tile encloses any; these functions read its state and build the attached
stages' nests through the lowerer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..kinds import Scope
from ..schedule.state import ScheduleError, Stage
from ..te.expr import Expr, TensorRead, Var, substitute, walk
from .context import Cache, Env, extent, leaf_extents
from .extent import Ext
from .ir import Barrier, Buffer, Stmt
from .simplify import simplify

if TYPE_CHECKING:
    from .nest import _NestBuilder

__all__ = ["attached_at", "attached_inside"]


def attached_at(nb: _NestBuilder, p: int, env: Env, allocs: list[Buffer]) -> list[Stmt]:
    """The nests of the stages computed at loop ``p`` of ``nb``, in order, their buffers
    added to ``allocs``."""
    leaf = nb.leaves[p]
    stmts: list[Stmt] = []
    for child in nb.lw.state.stages:
        if (
            child.attach.kind == "at"
            and child.attach.parent == nb.stage.name
            and child.attach.axis == leaf
        ):
            stmts.extend(_attached(nb, child, p, env, allocs))
    return _one_barrier(stmts)


def _attached(nb: _NestBuilder, child: Stage, p: int, env: Env, allocs: list[Buffer]) -> list[Stmt]:
    """The nest of ``child`` computed at loop ``p``, and its buffer (added to ``allocs``).

    A buffer in a GPU block's shared memory (a ``"shared"`` cache, or an
    intermediate whose own loops are bound to threads: its threads write it
    together and read each other's parts) is sized over the block: over the
    enclosing thread-bound loops too, not just the loops inside ``p``. Its
    nest is fenced by barriers: before it (the previous iteration's reads
    are done) and after it (its writes are seen).
    """
    inner: dict[str, Ext] = {nb.names[leaf].name: nb.ext[leaf] for leaf in nb.leaves[p + 1 :]}
    shared = child.scope == Scope.SHARED or (
        child.origin == "compute"
        and nb.lw.region_buffered(child)
        and any(a.thread is not None for a in child.axes)
    )
    if shared and child.origin != "cache_write":
        inner.update({v: n for v, n in env.threads.items() if v not in inner})
    if child.origin == "cache_write":
        exprs = [tuple(nb.absolute[a] for a in nb.op_axes)]
        base, widths = nb.lw.region(child, nb.stage, exprs, inner, env)
    else:
        base, widths = _region_in_loop(nb, child, p, inner, env, {})
    fence = (lambda nest: [Barrier(), nest, Barrier()]) if shared else (lambda nest: [nest])
    if child.origin == "compute":
        if nb.lw.region_buffered(child):
            scope = Scope.SHARED if shared else Scope.GLOBAL
            buf = Buffer(child.name, widths, child.tensor.dtype, scope)
            allocs.append(buf)
            env.caches[child.name] = Cache(buf, base, child, widths, packed=False)
            env.regions[child.name] = env.caches[child.name]
        return fence(nb.lw.stage_nest(child, env, (base, widths)))
    ext = leaf_extents(child, dict(zip(child.root, widths, strict=True)))
    buf = Buffer(
        child.name, tuple(ext[leaf] for leaf in child.leaves), child.tensor.dtype, child.scope
    )
    allocs.append(buf)
    cache = Cache(buf, base, child, widths)
    if child.origin == "cache_read":
        nest = nb.lw.stage_nest(child, env, (base, widths))
        env.caches[child.name] = cache
        return fence(nest)
    env.caches[child.source] = cache
    return []


def _region_in_loop(
    nb: _NestBuilder,
    r: Stage,
    p: int,
    inner: dict[str, Ext],
    env: Env,
    boxes: dict[str, dict[str, Expr]],
) -> tuple[tuple[Expr, ...], tuple[Ext, ...]]:
    """Bounds inference: the box of ``r`` read inside loop ``p`` over that loop's body.

    Every reader of ``r`` runs inside this loop (lowering checks that):
    ``nb``'s stage, whose loops below ``p`` are ``inner``, or a stage computed
    inside the loop, directly or through a chain of attachments, which
    reads ``r`` over its own box there (``_box``). So a softmax's max
    computed at the output's row loop is sized by the exp's row box, which
    the output's and the sum's reads of the exp give.
    """
    lw = nb.lw
    exprs: list[tuple[Expr, ...]] = []
    for c in lw.state.stages:
        if c.attach.kind == "inline" or r.name not in lw._reads(c):
            continue
        if c.name == nb.stage.name:
            exprs += _reads_of(nb, r.name)
            continue
        if c.origin == "cache_write":  # its own source's tile, inside that source's region
            continue
        if not _inside_loop(nb, c, p):
            raise ScheduleError(
                f"compute_at({r.name}, {r.attach.parent}): {c.name} reads {r.name} outside "
                f"loop {nb.leaves[p]} of {nb.stage.name}; compute {c.name} inside that loop"
            )
        values = _box(nb, c, p, inner, env, boxes)
        for n in walk(lw.bodies[c.name]):
            if isinstance(n, TensorRead) and n.tensor.name == r.name:
                exprs.append(tuple(simplify(substitute(i, values)) for i in n.indices))
    return lw.region(r, nb.stage, exprs, inner, env)


def _box(
    nb: _NestBuilder,
    r: Stage,
    p: int,
    inner: dict[str, Ext],
    env: Env,
    boxes: dict[str, dict[str, Expr]],
) -> dict[str, Expr]:
    """Values of ``r``'s axes over the iterations it runs inside loop ``p``.

    Each axis becomes base + a new inner variable (added to ``inner``)
    over ``r``'s region there; each reduction axis a variable over its
    extent. Readers come after their producers, so the recursion through
    readers ends; ``boxes`` keeps each stage's box once computed.
    """
    if r.name not in boxes:
        base, widths = _region_in_loop(nb, r, p, inner, env, boxes)
        values: dict[str, Expr] = {}
        axes = [a.name for a in r.tensor.op.axis]  # type: ignore[union-attr]
        for a, b, w in zip(axes, base, widths, strict=True):
            v = f"{r.name}.{a}"
            inner[v] = w
            values[a] = b + Var(v)
        for ra in r.tensor.op.reduce_axis:  # type: ignore[union-attr]
            v = f"{r.name}.{ra.name}"
            inner[v] = extent(r.axis(ra.name).extent)
            values[ra.name] = Var(v)
        boxes[r.name] = values
    return boxes[r.name]


def _reads_of(nb: _NestBuilder, name: str) -> list[tuple[Expr, ...]]:
    """Where the body of ``nb``'s stage reads tensor ``name``, in absolute coordinates."""
    reads = [n for n in walk(nb.body) if isinstance(n, TensorRead) and n.tensor.name == name]
    return [tuple(substitute(i, nb.absolute) for i in r.indices) for r in reads]


def _inside_loop(nb: _NestBuilder, r: Stage, p: int) -> bool:
    """Whether ``r`` runs inside loop ``p``: computed at it or deeper, or in a stage there."""
    top = r
    while top.attach.kind == "at" and top.attach.parent != nb.stage.name:
        top = nb.lw.state.stage(top.attach.parent)
    return top.attach.kind == "at" and top.attach.axis in nb.leaves[p:]


def attached_inside(nb: _NestBuilder, p: int) -> bool:
    """Whether another stage is computed at one of ``nb``'s loops below ``p``."""
    inside = set(nb.leaves[p + 1 :])
    return any(
        c.attach.kind == "at" and c.attach.parent == nb.stage.name and c.attach.axis in inside
        for c in nb.lw.state.stages
    )


def _one_barrier(stmts: list[Stmt]) -> list[Stmt]:
    """``stmts`` without a barrier right after another (the second waits for nothing new)."""
    out: list[Stmt] = []
    for x in stmts:
        if not (isinstance(x, Barrier) and out and isinstance(out[-1], Barrier)):
            out.append(x)
    return out
