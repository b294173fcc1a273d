"""What lowering carries while it walks the loop nests: environments, caches, axis maps."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..schedule.state import ScheduleError, Stage
from ..te.dtypes import is_float
from ..te.expr import Const, Expr
from .extent import Ext, ceildiv, divides, is_const, mul, normal
from .ir import Buffer
from .simplify import Ranges, simplify

__all__ = ["Cache", "Env", "Padding", "forward", "identity", "leaf_extents", "root_values"]


def identity(combiner: str, dtype: str) -> Const:
    if combiner == "sum":
        return Const(0.0 if is_float(dtype) else 0, dtype)
    if dtype == "bool":  # max is "any", min is "all"
        return Const(combiner == "min", dtype)
    big = {"int8": 127, "int32": 2**31 - 1, "int64": 2**63 - 1}
    if dtype == "uint8":
        return Const(0 if combiner == "max" else 255, dtype)
    if is_float(dtype):
        return Const(-math.inf if combiner == "max" else math.inf, dtype)
    return Const(-big[dtype] - 1 if combiner == "max" else big[dtype], dtype)


@dataclass
class Cache:
    """A compact buffer: reads of ``source`` at ``idx`` go to ``buffer`` at leaf(idx - base).

    ``packed`` false: the buffer keeps the tensor's own layout over the region
    (``idx - base``), as for a stage computed at a loop into a buffer the size
    of the region it computes there.
    """

    buffer: Buffer
    base: tuple[Expr, ...]
    stage: Stage
    root_extents: tuple[Ext, ...]
    packed: bool = True

    def relative(self, idx: tuple[Expr, ...], ranges: Ranges) -> tuple[Expr, ...]:
        """Absolute indices of the source as offsets from the region's base."""
        return tuple(simplify(i - b, ranges) for i, b in zip(idx, self.base, strict=True))


@dataclass
class Padding:
    """An edge tile computed whole: ``owner``'s spatial loops keep their full extent.

    ``last`` holds each such loop's last valid value (the tile runs only when
    every one is >= 0); reads clamp their indices into their buffers. ``ok``
    turns false when a store of the padded loops would leave its buffer (the
    tile's buffer is clipped to the tensor): the tile then keeps bounded loops.
    """

    owner: object
    last: dict[str, Expr] = field(default_factory=dict)
    ok: bool = True


@dataclass
class Env:
    ranges: Ranges = field(default_factory=dict)
    parallel: str = ""
    caches: dict[str, Cache] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)
    # While building the full-tile version of a register tile: the conditions
    # under which skipping a loop bound is exact (shared with child envs).
    specialize: list[Expr] | None = None
    # While building the padded edge version of a register tile (shared with child envs).
    pad: Padding | None = None
    # Stages computed into region-sized buffers, by name: where a cache stage that
    # copies one of them (a register tile's load and write-back) finds its offset.
    regions: dict[str, Cache] = field(default_factory=dict)
    # The enclosing loops bound to GPU thread indices (threadIdx.*): variable -> extent.
    # A buffer shared by a block's threads is sized over them (``tuner.lower.attach``).
    threads: dict[str, int] = field(default_factory=dict)
    # With ``specialize``: the variables known where the full version is chosen (outside
    # the tile). A condition over others (a loop inside the tile, such as a symbolic
    # reduction's last chunk) cannot choose it; that loop keeps its bound instead.
    specialize_known: frozenset[str] = frozenset()

    def child(self) -> Env:
        return Env(
            dict(self.ranges),
            self.parallel,
            dict(self.caches),
            set(self.names),
            self.specialize,
            self.pad,
            dict(self.regions),
            dict(self.threads),
            self.specialize_known,
        )


def const_int(e: Expr, what: str) -> int:
    if isinstance(e, Const):
        return int(e.value)
    raise ScheduleError(f"{what} has symbolic extent {e!r}; building needs concrete extents")


def extent(e: Expr) -> Ext:
    """An axis extent as lowering keeps it: an int, or an expression of symbolic extents."""
    return normal(e)


def leaf_extents(stage: Stage, root: dict[str, Ext]) -> dict[str, Ext]:
    ext = dict(root)
    for rel in stage.relations:
        if rel.kind == "split":
            parent = ext[rel.parents[0]]
            factor = const_int(rel.factor, f"split of {rel.parents[0]}")
            ext[rel.children[0]] = ceildiv(parent, factor)
            ext[rel.children[1]] = factor
        else:
            ext[rel.children[0]] = mul(ext[rel.parents[0]], ext[rel.parents[1]])
    return ext


def root_values(
    stage: Stage, leaf_vars: dict[str, Expr], ext: dict[str, Ext]
) -> tuple[dict[str, Expr], list[tuple[Expr, Ext]]]:
    """Axis values from loop variables, and the bounds (``value < extent``) splits need."""
    val = dict(leaf_vars)
    conds: list[tuple[Expr, Ext]] = []
    for rel in reversed(stage.relations):
        if rel.kind == "split":
            outer, inner = rel.children
            parent = rel.parents[0]
            factor = ext[inner]
            assert isinstance(factor, int)
            val[parent] = val[outer] * factor + val[inner]
            p = ext[parent]
            exact = mul(ext[outer], factor) == p if is_const(p) else divides(factor, p)
            if not exact:
                conds.append((val[parent], p))
        else:
            fused = val[rel.children[0]]
            inner_ext = ext[rel.parents[1]]
            val[rel.parents[0]] = fused // inner_ext
            val[rel.parents[1]] = fused % inner_ext
    return {r: val[r] for r in stage.root}, conds


def forward(stage: Stage, rel_idx: dict[str, Expr], ext: dict[str, Ext]) -> tuple[Expr, ...]:
    """Leaf coordinates of a root coordinate (the packed layout of a cache)."""
    val = dict(rel_idx)
    for rel in stage.relations:
        if rel.kind == "split":
            f = ext[rel.children[1]]
            val[rel.children[0]] = val[rel.parents[0]] // f
            val[rel.children[1]] = val[rel.parents[0]] % f
        else:
            val[rel.children[0]] = val[rel.parents[0]] * ext[rel.parents[1]] + val[rel.parents[1]]
    return tuple(val[leaf] for leaf in stage.leaves)
