"""Loop-nest features: a fixed-length vector describing one lowered program.

The cost model never sees configs, only what lowering made of them, so the
same features carry across workloads and across operators. The vector has
one slot per name in :data:`LOOP_FEATURE_NAMES`, always in that order.

What is measured, from a walk over the IR:

* every ``Store`` is an innermost statement; its *iterations* are the product
  of its enclosing loop extents, a bounded extent such as
  ``min(16, N - 16*jo)`` counting as its constant upper bound (16);
* the two branches of a full-tile / edge-tile ``if ... else`` each count
  half, so a specialised register tile does not double the work, and a
  branch whose condition simplifies to a constant is dropped (as LLVM
  drops it);
* the *hot* statement is the one with the most iterations: its innermost
  loop, vector length and unroll product describe the code that dominates;
* each access (loads in a store's value, and the store itself) is
  linearised row-major over its buffer's shape, and the coefficient of the
  innermost loop variable classifies it as invariant (0), contiguous (+-1)
  or strided; accesses are also counted per argument, in call order;
* traffic is estimated per access by a reuse model: the loops inside the
  outermost level whose footprint still fits a cache of ``C`` bytes are
  free, every level outside refetches it. Local (register-tile) buffers
  cost nothing.

Magnitudes are ``log2(1 + x)``; counts and fractions are plain.

>>> import tuner
>>> from search_spaces import matmul
>>> s, tensors = matmul.schedule(matmul.default_config(64, 64, 64), 64, 64, 64)
>>> x = loop_features(tuner.lower(s, tensors))
>>> x.shape == (len(LOOP_FEATURE_NAMES),)
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tuner.lower.ir import Alloc, Buffer, For, If, Load, Store
from tuner.lower.lower import LoweredFunc
from tuner.lower.simplify import Linear, Ranges, bounds, linear, simplify
from tuner.lower.visitor import StmtVisitor
from tuner.target import Target
from tuner.te.dtypes import is_float
from tuner.te.expr import Binary, Call, Const, Expr, Var, walk

__all__ = ["LOOP_FEATURE_NAMES", "loop_features"]

#: Argument slots with their own access features; later arguments only count in the totals.
MAX_ARGS = 4
#: Cache capacities (bytes) of the two traffic estimates, a core's L1 and L2, where
#: no target says its own (``loop_features(func, target)`` reads the target's).
CACHE_BYTES = {"l1": 32 * 1024, "l2": 1024 * 1024}
#: Bytes one strided access can waste at most (a cache line).
LINE_BYTES = 64

_KINDS = ("serial", "parallel", "vectorize", "unroll")
_SCOPES = ("global", "local", "shared")
_CLASSES = ("invariant", "contiguous", "strided")
_ITEMSIZE = {"bool": 1, "int8": 1, "int32": 4, "int64": 8, "float32": 4, "float64": 8}

LOOP_FEATURE_NAMES: list[str] = [
    # loop structure
    "log_iterations",
    "max_loop_depth",
    "n_loops",
    *(f"n_{kind}_loops" for kind in _KINDS),
    "n_thread_loops",
    "n_bounded_loops",
    "log_parallel_extent",
    "parallel_fraction",
    # the hot statement
    "hot_depth",
    "log_hot_inner_extent",
    *(f"hot_inner_{kind}" for kind in _KINDS),
    "hot_inner_const_extent",
    "log_vector_length",
    "log_unroll_product",
    "hot_float_ops",
    "hot_loads",
    # allocations
    *(f"n_alloc_{scope}" for scope in _SCOPES),
    *(f"log_alloc_bytes_{scope}" for scope in _SCOPES),
    "log_alloc_executions",
    # accesses in innermost bodies: static counts, then iteration-weighted fractions
    *(f"n_access_{c}" for c in _CLASSES),
    *(f"access_{c}_fraction" for c in _CLASSES),
    "access_local_fraction",
    *(f"arg{a}_{c}" for a in range(MAX_ARGS) for c in (*_CLASSES, "log_stride")),
    # compute and memory
    "n_stores",
    "log_flops",
    "log_bytes_unique",
    *(f"log_bytes_{level}" for level in CACHE_BYTES),
    *(f"log_intensity_{level}" for level in CACHE_BYTES),
    # guards
    "n_if",
    "n_if_else",
]


@dataclass(frozen=True)
class _Loop:
    var: str
    extent: int  # constant upper bound
    kind: str
    const: bool  # whether the extent is a literal


@dataclass(frozen=True)
class _Site:
    """One innermost statement and where it sits."""

    store: Store
    loops: tuple[_Loop, ...]
    weight: float

    @property
    def iterations(self) -> float:
        return _times(self.loops, self.weight)


def _times(loops: tuple[_Loop, ...], weight: float) -> float:
    """How often a statement under ``loops`` runs (upper bound), scaled by its branch weight."""
    n = weight
    for loop in loops:
        n *= loop.extent
    return n


class _Walk(StmtVisitor):
    """What one pass over the IR collects: innermost statements, loops, allocations, guards."""

    def __init__(self, buffers: dict[str, Buffer]):
        self.buffers = buffers
        self.sites: list[_Site] = []
        self.loops: list[_Loop] = []
        self.allocs: list[tuple[Buffer, float]] = []  # (buffer, executions)
        self.n_if = 0
        self.n_if_else = 0
        self.max_depth = 0
        # Where the walk is: the enclosing loops, their variables' ranges, the branch weight.
        self.around: tuple[_Loop, ...] = ()
        self.ranges: Ranges = {}
        self.weight = 1.0

    def visit_For(self, s: For) -> None:
        hi = _upper(s.extent, self.ranges)
        loop = _Loop(s.var, hi, s.kind, isinstance(s.extent, Const))
        self.loops.append(loop)
        self.max_depth = max(self.max_depth, len(self.around) + 1)
        saved = self.around, self.ranges
        self.around = (*self.around, loop)
        self.ranges = {**self.ranges, s.var: (0, max(hi - 1, 0))}
        self.visit(s.body)
        self.around, self.ranges = saved

    def visit_If(self, s: If) -> None:
        self.n_if += 1
        self.n_if_else += s.orelse is not None
        cond = simplify(s.cond, self.ranges)
        known = bool(cond.value) if isinstance(cond, Const) else None
        weight = self.weight
        self.weight = weight if s.orelse is None or known is not None else weight / 2
        if known is not False:
            self.visit(s.then)
        if s.orelse is not None and known is not True:
            self.visit(s.orelse)
        self.weight = weight

    def visit_Alloc(self, s: Alloc) -> None:
        self.buffers[s.buffer.name] = s.buffer
        self.allocs.append((s.buffer, _times(self.around, self.weight)))
        self.visit(s.body)

    def visit_Store(self, s: Store) -> None:
        self.sites.append(_Site(s, self.around, self.weight))


def _upper(extent: Expr, ranges: Ranges) -> int:
    """A constant upper bound of a loop extent; 1 where none can be found."""
    b = bounds(extent, ranges)
    if b is not None:
        return max(b[1], 0)
    if isinstance(extent, Binary) and extent.op == "min":
        known = [bounds(side, ranges) for side in (extent.a, extent.b)]
        highs = [k[1] for k in known if k is not None]
        if highs:
            return max(min(highs), 0)
    return 1


@dataclass(frozen=True)
class _Access:
    buffer: str
    indices: tuple[Expr, ...]


def _accesses(store: Store) -> list[_Access]:
    reads = [_Access(n.buffer, n.indices) for n in walk(store.value) if isinstance(n, Load)]
    return [_Access(store.buffer, store.indices), *reads]


def _strides(shape: tuple[int | Expr, ...], rank: int) -> list[int]:
    """Row-major element strides; a missing or mismatched shape is taken as all ones,
    and so is a symbolic extent (unknown until the kernel runs)."""
    if len(shape) != rank:
        return [1] * rank
    out = [1] * rank
    for d in range(rank - 2, -1, -1):
        out[d] = out[d + 1] * max(_known(shape[d + 1]), 1)
    return out


def _known(n: int | Expr) -> int:
    """An extent or size where it is constant; 0 (counted as nothing) where it is symbolic."""
    return n if isinstance(n, int) else 0


def _stride(access: _Access, buf: Buffer | None, var: str | None) -> tuple[str, int]:
    """The access's class and element stride with respect to loop variable ``var``."""
    if var is None:
        return "invariant", 0
    coef, irregular = 0, 0
    for idx, st in zip(
        access.indices, _strides(buf.shape if buf else (), len(access.indices)), strict=True
    ):
        lin: Linear = linear(idx)
        for atom, c in lin.terms.items():
            if isinstance(atom, Var) and atom.name == var:
                coef += c * st
            elif any(isinstance(n, Var) and n.name == var for n in walk(atom)):
                irregular = max(irregular, st)
    if irregular:
        return "strided", max(irregular, abs(coef))
    if coef == 0:
        return "invariant", 0
    return ("contiguous" if abs(coef) == 1 else "strided"), abs(coef)


def _depends(access: _Access) -> set[str]:
    return {n.name for i in access.indices for n in walk(i) if isinstance(n, Var)}


def _traffic(site: _Site, access: _Access, elem_bytes: float, cache: int) -> float:
    """Bytes ``access`` moves at ``site`` when reuse within ``cache`` bytes is free."""
    used = _depends(access)
    footprint = 1.0
    level = len(site.loops)
    for p in range(len(site.loops) - 1, -1, -1):
        loop = site.loops[p]
        grown = footprint * loop.extent if loop.var in used else footprint
        if grown * elem_bytes > cache:
            break
        footprint, level = grown, p
    return footprint * elem_bytes * _times(site.loops[:level], site.weight)


def _float_ops(e: Expr) -> int:
    return sum(isinstance(n, Binary | Call) and is_float(n.dtype) for n in walk(e))


def _log(x: float) -> float:
    return math.log2(1.0 + max(x, 0.0))


def loop_features(func: LoweredFunc, target: Target | None = None) -> np.ndarray:
    """The feature vector of ``func``: float64, shape ``(len(LOOP_FEATURE_NAMES),)``, finite.

    Deterministic (a pure function of the IR and the target's cache sizes)
    and total: any loop nest that lowering produces gives a vector, unknown
    constructs counting as nothing. The traffic estimates use ``target``'s
    L1d and L2 sizes (``CACHE_BYTES`` without one).

    >>> import tuner
    >>> from search_spaces import matmul
    >>> s, tensors = matmul.schedule(matmul.default_config(32, 32, 32), 32, 32, 32)
    >>> f = dict(zip(LOOP_FEATURE_NAMES, loop_features(tuner.lower(s, tensors)).tolist()))
    >>> f["n_parallel_loops"], f["n_alloc_local"], f["hot_float_ops"]
    (1.0, 1.0, 2.0)
    """
    w = _Walk({b.name: b for b in func.args})
    w.visit(func.body)
    f: dict[str, float] = dict.fromkeys(LOOP_FEATURE_NAMES, 0.0)
    _structure(f, w)
    _hot_statement(f, w)
    _allocations(f, w)
    _memory(f, w, {b.name: a for a, b in enumerate(func.args[:MAX_ARGS])}, _caches(target))
    out = np.array([f[name] for name in LOOP_FEATURE_NAMES], dtype=np.float64)
    return np.nan_to_num(out, nan=0.0, posinf=1e6, neginf=-1e6)


def _caches(target: Target | None) -> dict[str, int]:
    """The L1d and L2 capacities of ``target`` (the defaults where it records none usable)."""
    if target is None:
        return CACHE_BYTES
    try:
        return {"l1": target.l1d_bytes, "l2": target.l2_bytes}
    except (TypeError, ValueError):  # a capability a log recorded as something else
        return CACHE_BYTES


def _structure(f: dict[str, float], w: _Walk) -> None:
    total = sum(s.iterations for s in w.sites)
    f["log_iterations"] = _log(total)
    f["max_loop_depth"] = w.max_depth
    f["n_loops"] = len(w.loops)
    for loop in w.loops:
        f[f"n_{loop.kind}_loops" if loop.kind in _KINDS else "n_thread_loops"] += 1
        f["n_bounded_loops"] += not loop.const
        if loop.kind == "parallel":
            f["log_parallel_extent"] = max(f["log_parallel_extent"], _log(loop.extent))
    in_parallel = sum(s.iterations for s in w.sites if any(lp.kind == "parallel" for lp in s.loops))
    f["parallel_fraction"] = in_parallel / total if total > 0 else 0.0
    f["n_stores"] = len(w.sites)
    f["n_if"] = w.n_if
    f["n_if_else"] = w.n_if_else


def _hot_statement(f: dict[str, float], w: _Walk) -> None:
    """Features of the statement that runs most often (the first of equals)."""
    if not w.sites:
        return
    hot = max(w.sites, key=lambda s: s.iterations)
    f["hot_depth"] = len(hot.loops)
    if hot.loops:
        inner = hot.loops[-1]
        f["log_hot_inner_extent"] = _log(inner.extent)
        if inner.kind in _KINDS:
            f[f"hot_inner_{inner.kind}"] = 1.0
        f["hot_inner_const_extent"] = float(inner.const)
    lanes = [lp.extent for lp in hot.loops if lp.kind == "vectorize"]
    f["log_vector_length"] = _log(lanes[-1]) if lanes else 0.0
    unrolled = [lp.extent for lp in hot.loops if lp.kind == "unroll"]
    f["log_unroll_product"] = _log(math.prod(unrolled)) if unrolled else 0.0
    f["hot_float_ops"] = _float_ops(hot.store.value)
    f["hot_loads"] = sum(isinstance(n, Load) for n in walk(hot.store.value))


def _allocations(f: dict[str, float], w: _Walk) -> None:
    nbytes = dict.fromkeys(_SCOPES, 0)
    for temp, _ in w.allocs:
        scope = temp.scope if temp.scope in _SCOPES else "global"
        f[f"n_alloc_{scope}"] += 1
        nbytes[scope] += _known(temp.size) * _ITEMSIZE.get(temp.dtype, 4)
    for scope in _SCOPES:
        f[f"log_alloc_bytes_{scope}"] = _log(nbytes[scope])
    f["log_alloc_executions"] = _log(sum(times for _, times in w.allocs))


def _memory(
    f: dict[str, float], w: _Walk, arg_slot: dict[str, int], caches: dict[str, int]
) -> None:
    """Access patterns, flops, traffic and intensity."""
    weighted = dict.fromkeys(_CLASSES, 0.0)
    local = 0.0
    per_arg = [dict.fromkeys((*_CLASSES, "stride"), 0.0) for _ in range(MAX_ARGS)]
    traffic = dict.fromkeys(caches, 0.0)
    flops = 0.0
    for site in w.sites:
        n = site.iterations
        flops += n * _float_ops(site.store.value)
        var = site.loops[-1].var if site.loops else None
        for acc in _accesses(site.store):
            buf = w.buffers.get(acc.buffer)
            cls, stride = _stride(acc, buf, var)
            f[f"n_access_{cls}"] += 1
            weighted[cls] += n
            slot = arg_slot.get(acc.buffer)
            if slot is not None:
                per_arg[slot][cls] += n
                per_arg[slot]["stride"] = max(per_arg[slot]["stride"], float(stride))
            if buf is not None and buf.scope == "local":
                local += n
                continue
            size = _ITEMSIZE.get(buf.dtype if buf else "", 4)
            elem = size if cls != "strided" else min(LINE_BYTES, size * max(stride, 1))
            for level, cap in caches.items():
                traffic[level] += _traffic(site, acc, elem, cap)

    n_acc = sum(weighted.values())
    for cls in _CLASSES:
        f[f"access_{cls}_fraction"] = weighted[cls] / n_acc if n_acc > 0 else 0.0
    f["access_local_fraction"] = local / n_acc if n_acc > 0 else 0.0
    for a, counts in enumerate(per_arg):
        total = sum(counts[c] for c in _CLASSES)
        for cls in _CLASSES:
            f[f"arg{a}_{cls}"] = counts[cls] / total if total > 0 else 0.0
        f[f"arg{a}_log_stride"] = _log(counts["stride"])

    f["log_flops"] = _log(flops)
    unique = sum(
        _known(b.size) * _ITEMSIZE.get(b.dtype, 4) for b in w.buffers.values() if b.scope != "local"
    )
    f["log_bytes_unique"] = _log(unique)
    for level in caches:
        f[f"log_bytes_{level}"] = _log(traffic[level])
        f[f"log_intensity_{level}"] = _log(flops / traffic[level]) if traffic[level] > 0 else 0.0
