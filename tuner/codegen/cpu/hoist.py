"""Quotients and remainders by a symbolic extent, computed once per iteration of the loop that
binds their variables instead of at every use.

A shape-generic kernel fuses loops whose extents are symbolic, so its indices
hold ``f // n`` and ``f % n`` with ``n`` an argument (``(seq + 31) // 32`` column
tiles). Numba compiles an integer division by a runtime value with its sign and
zero checks, and LLVM left it inside the innermost loops, where it kept the
register tile scalar: a generic attention score matmul ran 3.1 to 3.5 times
slower than the same schedule at constant extents. The renderer names each such
expression at the loop where the last of its loop variables is bound
(``d0_ = i0 // ((seq + 31) // 32)``) and writes the name wherever it occurs
below. A division by zero yields 0 under Numba's NumPy error model, so computing
one earlier than a guard would have never raises.
"""

from __future__ import annotations

from collections.abc import Collection

from ...lower.ir import Stmt
from ...lower.visitor import substitute_stmt
from ...te.expr import Binary, Const, Expr, Var, walk

__all__ = ["divisions"]


def divisions(
    body: Stmt, loop_var: str, bound: Collection[str], loop_vars: Collection[str]
) -> list[Expr]:
    """The quotients and remainders by a non-constant divisor in ``body`` that read
    ``loop_var`` and no loop variable outside ``bound`` (the enclosing loops' and
    ``loop_var`` itself), inner ones first (an outer one is written with their names)."""
    found: dict[Expr, None] = {}
    bound, loop_vars = set(bound), set(loop_vars)

    def visit(e: Expr) -> None:  # called on every node of every expression, returns no change
        if isinstance(e, Binary) and e.op in ("floordiv", "mod") and not isinstance(e.b, Const):
            names = {v.name for v in walk(e) if isinstance(v, Var)} & loop_vars
            if loop_var in names and names <= bound:
                found[e] = None

    substitute_stmt(body, visit)
    return sorted(found, key=lambda e: len(walk(e)))
