"""Selects whose condition an innermost loop does not change, taken out of the loop; and a
loop of ``min(c, e)`` trips versioned on ``e >= c`` (``trip_versions``).

A padded read tests a pixel's bounds in every lane of the channel loop below it::

    for c in range(24):                  # a max pool's window step, channels last
        R[c] = max(R[c], X[..c..] if h >= 1 and w >= 1 else -inf)

LLVM's vectorizers do not take a load under a condition (a select of a load
that may lie outside the array), so such loops ran scalar: a channels-last max
pool of 24 channels at 112 x 112 took 0.152 ms against onnxruntime's 0.035,
and every padded row copy of a depthwise convolution tested each channel. The
renderer asks for the condition once, outside the loop, and writes the loop
once per branch (``unswitch``), each a plain loop the vectorizers take; a
branch that only updates a buffer with its reduction's identity
(``max(R, -inf)``) has nothing to do and is left out.

Only conditions without loads are moved (they are pure integer tests of the
enclosing loops' variables), so evaluating one where the loop would not run
reads nothing.
"""

from __future__ import annotations

import math

from ...lower.ir import For, Load, Seq, Stmt, Store, seq
from ...lower.simplify import simplify
from ...lower.visitor import substitute_stmt, walk_stmts
from ...te.expr import Binary, Const, Expr, Select, Var, walk

__all__ = ["branches", "invariant_select", "trip_versions"]


def invariant_select(body: Stmt, var: str, extent: Expr) -> tuple[Select, Expr] | None:
    """The first select in a straight-line ``body`` (stores only) whose condition reads no
    memory and not ``var``, with that condition; None for a body that holds loops or has
    no such select. A loop of constant extent bounds ``var``, which may free a condition
    of it: ``c + 32*t < 288`` over ``c < 32`` is ``t < 9`` (``simplify``)."""
    stmts = list(walk_stmts(body))
    if not all(isinstance(s, (Store, Seq)) for s in stmts):
        return None
    ranges = {var: (0, int(extent.value) - 1)} if isinstance(extent, Const) else {}
    for s in stmts:
        if not isinstance(s, Store):
            continue
        for e in walk(s.value):
            if not isinstance(e, Select):
                continue
            cond = simplify(e.cond, ranges) if ranges else e.cond
            if _invariant(cond, var):
                return e, cond
    return None


def branches(body: Stmt, sel: Select) -> tuple[Stmt | None, Stmt | None]:
    """``body`` where ``sel``'s condition holds and where it does not, each without the
    stores that leave their buffer as it is (None where none is left)."""
    return _taking(body, sel, sel.true_value), _taking(body, sel, sel.false_value)


def _taking(body: Stmt, sel: Select, value: Expr) -> Stmt | None:
    def pick(e: Expr) -> Expr | None:
        return value if e == sel else None

    taken = substitute_stmt(body, pick, simplify)
    kept: list[Stmt] = [s for s in walk_stmts(taken) if isinstance(s, Store) and not _no_op(s)]
    return seq(kept) if kept else None


def _invariant(cond: Expr, var: str) -> bool:
    return not any(
        isinstance(x, Load) or (isinstance(x, Var) and x.name == var) for x in walk(cond)
    )


def _no_op(s: Store) -> bool:
    """``B[i] = max(B[i], -inf)`` and its kin: an update with the operation's identity."""
    v = s.value
    if not (isinstance(v, Binary) and v.op in _IDENTITY):
        return False
    own = Load(s.buffer, s.indices, v.dtype)
    for a, b in ((v.a, v.b), (v.b, v.a)):
        if a == own and isinstance(b, Const) and float(b.value) == _IDENTITY[v.op]:
            return True
    return False


_IDENTITY = {"max": -math.inf, "min": math.inf, "add": 0.0}


def trip_versions(s: For) -> tuple[Expr, int] | None:
    """``(e, c)`` for an innermost loop of ``min(c, e)`` trips (a block of ``c`` the extent
    leaves uneven), to be written ``if e >= c:`` the loop of ``c`` trips, ``else:`` the loop
    of ``e``; None for any other loop.

    A convolution of 58 channels in blocks of 16 copies its padded rows and
    stores its epilogue in loops of ``min(16, 58 - 16*k_o)`` trips, for every
    block, the full ones included. A kernel compiled with the SLP vectorizer
    only (register tiles) packs straight-line code, which a loop of unknown
    trips never becomes, so those loops ran scalar (eight ``vaddss`` a step):
    depthwise 3 x 3 of 58 channels at 28 x 28, 0.050 ms. At ``c`` trips the
    loop unrolls and vectorizes like any full block; the other branch runs on
    the last block only.
    """
    if s.kind not in ("serial", "vectorize") or not isinstance(s.extent, Binary):
        return None
    if s.extent.op != "min" or any(isinstance(x, For) for x in walk_stmts(s.body)):
        return None
    a, b = s.extent.a, s.extent.b
    c, rest = (a, b) if isinstance(a, Const) else (b, a)
    if not isinstance(c, Const) or isinstance(rest, Const) or int(c.value) < 2:
        return None
    return rest, int(c.value)
