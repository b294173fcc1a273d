"""Software prefetch of what a loop's next iteration reads (the ``prefetch`` schedule step).

A loop that streams a tensor from memory (a convolution's weights, chunk by chunk,
cold at each inference: they do not stay in the caches between two) waits on each
chunk's first touch; the hardware's prefetchers start over at each 4 kB page. Here
each iteration of the loop prefetches the lines its next iteration reads, a share at
each iteration of the loop just inside it, so the lines arrive while this
iteration computes::

    for co in range(32):                          # the prefetching loop
        for row in range(7):                      # the loop just inside: 19 lines each
            for l in range(19):
                if 19 * row + l < 128:
                    prefetch(W, <element of line 19 * row + l of iteration co + 1>)
            ...                                   # the work, unchanged

The lines come from the read's index, affine in the loops inside (checked at
their ends): the loops whose steps are contiguous (the innermost first) make one
run, prefetched a line at a time; each of the others repeats the run. A read that
is not affine, loops of symbolic extent, or more lines than ``MOST_LINES`` leave
the loop as it was: a prefetch never changes what a kernel computes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping

import numpy as np

from ..kinds import LoopKind
from ..te.expr import Binary, Cast, Const, Expr, IterVar, Var, compare, substitute, walk
from .extent import Ext
from .ir import Alloc, For, If, Load, Prefetch, Seq, Stmt, Store, seq
from .visitor import StmtMutator, walk_stmts

__all__ = ["MOST_AT_ONCE", "MOST_LINES", "prefetch_next"]

#: Lines the next iteration may read at most for a prefetch (1 MB of 64-byte lines, half
#: of an L2): a larger region would evict what this iteration is still reading.
MOST_LINES = 16384

#: Lines one iteration of the spreading loop prefetches at most: more at once waited on
#: the cache's queue of misses (all 128 lines of a chunk of weights at the chunk's start:
#: 0.49 ms; 19 at each of its 7 row blocks: 0.38, 1 x 1 2048 -> 512 at 7 x 7, Xeon).
MOST_AT_ONCE = 64

_FOLD: dict[str, Callable[[int, int], int]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b,
    "mod": lambda a, b: a % b,
    "min": min,
    "max": max,
}


def _value(e: Expr, at: Mapping[str, int]) -> int | None:
    """``e`` as an integer with its variables at ``at`` (others 0); None where it is not one."""
    if isinstance(e, Const):
        return int(e.value) if float(e.value).is_integer() else None
    if isinstance(e, Var | IterVar):
        return at.get(e.name, 0)
    if isinstance(e, Cast):
        return _value(e.value, at)
    if isinstance(e, Binary) and e.op in _FOLD:
        a, b = _value(e.a, at), _value(e.b, at)
        if a is None or b is None or (e.op in ("floordiv", "mod") and b == 0):
            return None
        return _FOLD[e.op](a, b)
    return None


def _exprs(s: Stmt) -> Iterator[Expr]:
    if isinstance(s, Store):
        yield from (*s.indices, s.value)
    elif isinstance(s, If):
        yield s.cond


def prefetch_next(
    body: Stmt,
    var: str,
    buffer: str,
    shape: tuple[Ext, ...],
    spread: str | None = None,
    line_bytes: int = 64,
) -> Stmt:
    """``body`` (of loop ``var``) prefetching the lines of ``buffer`` (of ``shape``) that the
    iteration after this one reads, a share at each iteration of loop ``spread`` (None: the
    loop ``body`` starts with, or all at once where there is none); see the module's
    docstring."""
    dims = [d for d in shape if isinstance(d, int)]
    if len(dims) != len(shape):
        return body
    strides = [math.prod(dims[k + 1 :]) for k in range(len(dims))]
    extents: dict[str, int] = {}
    for s in walk_stmts(body):
        if isinstance(s, For):
            n = _value(s.extent, {})
            if n is None:
                return body
            extents[s.var] = max(n, extents.get(s.var, 0))
    loads = [
        e
        for s in walk_stmts(body)
        for x in _exprs(s)
        for e in walk(x)
        if isinstance(e, Load) and e.buffer == buffer
    ]

    def flat(load: Load, at: Mapping[str, int]) -> int | None:
        total = 0
        for i, stride in zip(load.indices, strides, strict=True):
            part = _value(i, at)
            if part is None:
                return None
            total += part * stride
        return total

    def inner(load: Load) -> dict[str, int]:
        names = {e.name for i in load.indices for e in walk(i) if isinstance(e, Var | IterVar)}
        return {v: n for v, n in extents.items() if v in names}

    if not loads:
        return body
    load = max(loads, key=lambda ld: math.prod(inner(ld).values()))
    loops = inner(load)
    origin = flat(load, {})
    step = flat(load, {var: 1})
    if origin is None or step is None or step == origin:
        return body
    coef: dict[str, int] = {}
    for v, n in loops.items():
        one, last = flat(load, {v: 1}), flat(load, {v: n - 1})
        if one is None or last is None or last - origin != (one - origin) * (n - 1):
            return body
        if one != origin:
            coef[v] = one - origin
    corner = flat(load, {v: loops[v] - 1 for v in coef})
    if corner is None or corner - origin != sum(a * (loops[v] - 1) for v, a in coef.items()):
        return body
    if any(a < 0 for a in coef.values()):
        return body
    order = sorted(coef, key=lambda v: coef[v])
    run, contiguous = 1, []
    for v in order:
        if coef[v] != run:
            break
        run *= loops[v]
        contiguous.append(v)
    repeats = [v for v in order if v not in contiguous]
    per_line = max(1, line_bytes // np.dtype(load.dtype).itemsize)
    lines = -(-run // per_line)
    total = lines * math.prod(loops[v] for v in repeats)
    over = _loop_named(body, spread) if spread else _first_loop(body)
    share = -(-total // over[1]) if over else total
    if total > MOST_LINES or share > MOST_AT_ONCE:
        return body
    count: Expr = Var(f"{var}_pf", "int64")
    if over:
        count = Var(over[0], "int64") * share + count
    at: dict[str, Expr] = {var: Var(var, "int64") + 1}
    rest = count // lines
    for v in repeats:
        at[v] = rest % loops[v]
        rest = rest // loops[v]
    element = (count % lines) * per_line
    for v in contiguous:
        at[v] = (element // coef[v]) % loops[v]
    for v in loops:
        at.setdefault(v, Const(0, "int64"))
    hint: Stmt = Prefetch(buffer, tuple(substitute(i, at) for i in load.indices))
    if share * (over[1] if over else 1) != total:
        hint = If(compare("lt", count, total), hint)
    fetch = For(f"{var}_pf", Const(share, "int64"), LoopKind.SERIAL, hint)
    if not over:
        return seq([fetch, body])
    return _FetchAt(over[0], fetch).visit(body)


def _serial(s: Stmt) -> int | None:
    """The extent of ``s`` where it is a serial loop of constant extent."""
    if isinstance(s, For) and s.kind == "serial" and isinstance(s.extent, Const):
        n = _value(s.extent, {})
        return n if n is not None and n > 0 else None
    return None


def _first_loop(body: Stmt) -> tuple[str, int] | None:
    """The serial loop of constant extent that ``body`` starts with (through allocations):
    its variable and extent; None where there is none."""
    s = body
    while isinstance(s, Alloc | Seq) and not (isinstance(s, Seq) and not s.body):
        s = s.body if isinstance(s, Alloc) else s.body[0]
    n = _serial(s)
    return (s.var, n) if isinstance(s, For) and n is not None else None


def _loop_named(body: Stmt, name: str) -> tuple[str, int] | None:
    """Loop ``name`` inside ``body`` (each copy of it, as an edge tile's, of one extent): its
    variable and extent; None where there is none or it is not a serial constant loop."""
    found = {_serial(s) for s in walk_stmts(body) if isinstance(s, For) and s.var == name}
    extent = found.pop() if len(found) == 1 else None
    return None if extent is None else (name, extent)


class _FetchAt(StmtMutator):
    """Puts ``fetch`` first in the body of each loop over ``var``."""

    def __init__(self, var: str, fetch: Stmt):
        self.var, self.fetch = var, fetch

    def visit_For(self, s: For) -> Stmt:
        if s.var == self.var:
            return For(s.var, s.extent, s.kind, seq([self.fetch, s.body]))
        return super().visit_For(s)
