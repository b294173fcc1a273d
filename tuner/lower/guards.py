"""Bounds of loops that a split leaves uneven: guards, tightened extents, clamped reads.

Splitting an extent that no factor divides leaves conditions ``e < bound`` on
the loops (``i_o*8 + i_i < M``). The nest builder (``tuner.lower.nest``) turns
each into the cheapest form the loops' ranges allow: nothing where they prove
it, a tighter loop extent (``min(8, M - i_o*8)``, :func:`tighten`), or an
``if`` (:func:`below`, :func:`guard`). A register tile's full version is
chosen by a condition at the least of the tile's own loops (:func:`least`),
and its padded edge version clamps reads into their buffers (:func:`clamp`).

Pure functions of expressions and the loops' ranges: they build no nest.
"""

from __future__ import annotations

from ..te.expr import Binary, Compare, Const, Expr, Var, walk
from .context import Env
from .extent import Ext, as_expr, proves
from .ir import If, Stmt
from .simplify import Linear, bounds, linear, render_linear, simplify
from .visitor import substitute_stmt

__all__ = ["assume_below", "below", "clamp", "free_names", "guard", "least", "tighten"]


def free_names(e: Expr) -> set[str]:
    """The names of the variables ``e`` reads."""
    return {v.name for v in walk(e) if isinstance(v, Var)}


def below(e: Expr, bound: Ext, env: Env) -> Expr:
    """The guard ``e < bound``, simplified with what the loops' ranges say."""
    return simplify(Binary("sub", e, as_expr(bound), "int64") < 0, env.ranges)


def guard(conds: list[Expr], body: Stmt) -> Stmt:
    """``body`` under ``if`` the conditions that are not plainly true (none: ``body``)."""
    live = [c for c in conds if not (isinstance(c, Const) and c.value)]
    if not live:
        return body
    cond = live[0]
    for c in live[1:]:
        cond = cond & c
    return If(cond, body)


def assume_below(s: Stmt, cond: Expr) -> Stmt:
    """``s`` where ``cond``, ``x >= c``, is known false: each ``min(c', x)`` with ``c' >= c`` is
    ``x`` (a full tile's extent, ``x`` the part of it the edge holds).

    The edge version of a register tile (``tile.register_tile``) runs where its full
    version's condition fails, yet its copies in and out bound their loops by
    ``min(c, x)``; the renderer writes such a loop twice, at ``c`` trips and at ``x``
    (``trip_versions``), and the first copy could never run there. A matmul 512
    candidate whose 48-column tile leaves an edge carried six dead vector statements
    and their tests through Numba's typing and lowering.
    """
    if not (isinstance(cond, Compare) and cond.op == "ge" and isinstance(cond.b, Const)):
        return s
    x, c = cond.a, cond.b.value

    def drop(e: Expr) -> Expr | None:
        if isinstance(e, Binary) and e.op == "min":
            for k, other in ((e.a, e.b), (e.b, e.a)):
                if isinstance(k, Const) and other == x and k.value >= c:
                    return x
        return None

    return substitute_stmt(s, drop)


def tighten(e: Expr, bound: Ext, var: Var, env: Env) -> Expr | None:
    """For ``e < bound`` with ``e = a*var + rest`` (a > 0): the loop bound on ``var``."""
    lin = linear(e)
    a = lin.terms.get(var, 0)
    if a <= 0 or any(var.name in free_names(atom) for atom in lin.terms if atom != var):
        return None
    rest = render_linear(Linear({k: c for k, c in lin.terms.items() if k != var}, lin.const))
    limit = (as_expr(bound) + (a - 1) - rest) // a if a != 1 else as_expr(bound) - rest
    out = simplify(limit, env.ranges)
    b = bounds(out, env.ranges)
    if b is not None and b[0] >= env.ranges[var.name][1] + 1:
        return Const(env.ranges[var.name][1] + 1)
    return out


def least(e: Expr, env: Env) -> Expr:
    """``e`` at its least over the tile's own loops (variables the full version cannot know).

    A bound on a tensorized vector's lanes depends on the unrolled loop over
    the tile's vectors (``16 * jvo + jvi < width``): at that loop's worst
    value, the condition is one the tile can be chosen by.
    """
    lin = linear(e)
    terms = dict(lin.terms)
    const = lin.const
    for atom, c in lin.terms.items():
        if isinstance(atom, Var) and atom.name not in env.specialize_known:
            span = env.ranges.get(atom.name)
            if span is None or not all(isinstance(x, int) for x in span):
                continue
            del terms[atom]
            const += c * (span[0] if c > 0 else span[1])
    return e if terms == lin.terms else simplify(render_linear(Linear(terms, const)), env.ranges)


def clamp(i: Expr, extent: Ext, env: Env) -> Expr:
    """``i`` kept inside ``[0, extent)`` where the loops' ranges let it leave."""
    b = bounds(i, env.ranges)
    if isinstance(extent, int):
        if b is None or b[1] >= extent:
            i = Binary("min", i, Const(extent - 1), "int64")
    elif b is None or not proves(b[1] + 1, "le", extent, env.ranges):
        i = Binary("min", i, simplify(extent - 1), "int64")
    if b is None or b[0] < 0:
        i = Binary("max", i, Const(0), "int64")
    return i
