"""Register tiles: a stage's ``cache_write`` computed at one of its loops, in full and edge versions.

The nest builder (``tuner.lower.nest``) hands a loop whose body holds the stage's
local cache to :func:`register_tile`: the tile's start (its partial sums loaded, or
the reduction's identity where :func:`tile_starts` says the tile starts its own
sums), its computation, and its write-back, as a version for tiles wholly inside
the tensor and one for edge tiles (see ``tuner.lower.guards``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..te.expr import Const, Expr, Reduce, Var
from .attach import attached_inside
from .context import Cache, Env, Padding, identity
from .extent import Ext
from .guards import assume_below, free_names, guard
from .ir import Barrier, If, Stmt, seq
from .simplify import linear, simplify
from .visitor import walk_stmts

if TYPE_CHECKING:
    from .nest import _NestBuilder

__all__ = ["register_tile", "tile_starts"]


def tile_starts(nb: _NestBuilder) -> int | None:
    """The loop of a register tile that starts its own sums, or None.

    A register tile (``cache_write``) computed inside a reduction loop loads
    the stage's partial sums and stores them back. At the first iteration of
    the reduction loops around it those sums are the identity the stage's
    init stored, so the tile starts from the identity itself there and the
    stage stores no init (TVM's ``decompose_reduction``): one pass over the
    output less, and none of the tile's loads where the reduction fits one
    block (a matmul whose K fits KC: every 1 x 1 convolution of a
    MobileNet). Not where a bound on the loops outside the tile depends on
    a reduction loop (a tile that bound skips at the first iteration would
    never be started), nor where the tile's box holds elements its loops do
    not compute (a strided tile: its write-back would store its start
    value over them, where a loaded tile stores back what it loaded).
    """
    if nb.stage.origin != "compute" or nb.first_reduce is None:
        return None
    if not isinstance(nb.body, Reduce):
        return None
    tile = next(
        (
            s
            for s in nb.lw.state.stages
            if s.origin == "cache_write"
            and s.source == nb.stage.name
            and s.attach.kind == "at"
            and s.attach.parent == nb.stage.name
        ),
        None,
    )
    if tile is None or tile.attach.axis not in nb.leaves:
        return None
    at = nb.leaves.index(tile.attach.axis)
    if at < nb.first_reduce:
        return None
    for q in range(nb.first_reduce, at + 1):
        if any(free_names(e) & nb.reduce_vars for e, _ in nb.conds.get(q, [])):
            return None
    return at if _dense(nb, at) else None


def _dense(nb: _NestBuilder, at: int) -> bool:
    """Whether the spatial loops inside loop ``at`` compute every element of the box
    they span (each axis an offset plus a dense range of their values)."""
    inner: dict[str, int] = {}
    for leaf in nb.leaves[at + 1 :]:
        n = nb.ext[leaf]
        if nb.stage.axis(leaf).kind != "reduce":
            if not isinstance(n, int):
                return False
            inner[nb.names[leaf].name] = n
    box = 1
    for a in nb.op_axes:
        width = 1
        for atom, c in linear(simplify(nb.absolute[a])).terms.items():
            if not free_names(atom) & inner.keys():
                continue
            if not isinstance(atom, Var):
                return False
            width += abs(c) * (inner[atom.name] - 1)
        box *= width
    return box == math.prod(inner.values())


def register_tile(nb: _NestBuilder, local: Cache, p: int, env: Env, mode: str) -> Stmt:
    """Load (if partial sums exist), compute and store back a cached tile.

    Tiles that lie wholly inside the tensor get a copy of the code with
    constant loop extents (unrolled and vectorized by LLVM). Edge tiles
    load and store back only their valid part, but compute the whole tile
    (``pad``): the spatial loops keep their constant extents and reads
    clamp their indices into their buffers, so the rows and columns past
    the edge compute throwaway values in the tile's spare registers. This
    keeps edge tiles vectorized; a bounded reduction loop stays bounded.
    """
    load_first = nb.first_reduce is not None and nb.first_reduce <= p
    region = (local.base, local.root_extents)

    def tile(spec: list[Expr] | None, pad: bool = False) -> Stmt | None:
        e = env.child()
        e.specialize = spec
        e.specialize_known = frozenset(env.ranges)
        if pad:
            e.pad = Padding(nb)
        parts = []
        if load_first:
            parts.append(_start(nb, local, p, e, region))
        compute = nb._loops(p + 1, e, mode)
        if e.pad is not None and e.pad.last:
            # A tile wholly past the edge has no valid index to clamp to.
            nonempty = [simplify(last >= 0, env.ranges) for last in e.pad.last.values()]
            if not e.pad.ok or any(not free_names(c) <= set(env.ranges) for c in nonempty):
                return None
            compute = guard(nonempty, compute)
        parts.append(compute)
        parts.append(_write_back(nb, local, e))
        return seq(parts)

    edge = None if attached_inside(nb, p) else tile(None, pad=True)
    edge = edge or tile(None)
    assert edge is not None
    if any(isinstance(x, Barrier) for x in walk_stmts(edge)):
        # A block's threads wait at its barriers together: one version of the tile for
        # all of them, not a full one for some threads and an edge one for the others.
        return edge
    conds: list[Expr] = []
    full = tile(conds)
    assert full is not None
    live = list(dict.fromkeys(c for c in conds if not (isinstance(c, Const) and c.value)))
    if not live:
        return full
    if any(not free_names(c) <= set(env.ranges) for c in live):
        return edge
    cond = live[0]
    for c in live[1:]:
        cond = cond & c
    return If(cond, full, assume_below(edge, cond) if len(live) == 1 else edge)


def _start(
    nb: _NestBuilder,
    local: Cache,
    p: int,
    env: Env,
    region: tuple[tuple[Expr, ...], tuple[Ext, ...]],
) -> Stmt:
    """A register tile inside a reduction loop: its partial sums loaded, or where it
    starts its own sums (:func:`tile_starts`) the identity at the first iteration."""
    e = _without(env, drop=local.stage.source)
    load = nb.lw.stage_nest(local.stage, e, region)
    if nb.tile_starts != p:
        return load
    assert isinstance(nb.body, Reduce)
    start = identity(nb.body.combiner, nb.body.dtype)
    fill = nb.lw.stage_nest(local.stage, e, region, fill=start)
    first: Expr = Const(True, "bool")
    for leaf in nb.leaves[nb.first_reduce : p + 1]:
        if nb.stage.axis(leaf).kind == "reduce":
            first = first & (nb.names[leaf] < 1)
    first = simplify(first, env.ranges)
    if isinstance(first, Const):
        return fill if first.value else load
    return If(first, fill, load)


def _without(env: Env, drop: str) -> Env:
    """``env`` without ``drop``'s cache: the tile's own nest addresses its source."""
    e = env.child()
    e.caches.pop(drop, None)
    return e


def _write_back(nb: _NestBuilder, local: Cache, env: Env) -> Stmt:
    lw = nb.lw
    e = _without(env, drop=local.stage.source)
    nest = lw.stage_nest(local.stage, e, (local.base, local.root_extents), write_back=True)
    return nest
