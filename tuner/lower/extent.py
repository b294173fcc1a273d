"""Loop and buffer extents that are integers or, for symbolic shapes, integer expressions.

A tensor declared over ``te.var("n", max=4096)`` has extents such as ``n``
and, once split by 8, ``(n + 7) // 8``. Lowering keeps constant extents as
Python ints (most of them: tile sizes, reduction windows) and symbolic ones
as expressions; these helpers do arithmetic on either and answer, from the
symbols' declared bounds and divisibility, the questions lowering asks: is
this extent at most that one, does this factor divide it, what is its
largest value.
"""

from __future__ import annotations

from ..te.expr import Binary, Const, Expr, Var, substitute, walk
from .simplify import Ranges, bounds, simplify

__all__ = [
    "UNBOUNDED",
    "Ext",
    "as_expr",
    "ceildiv",
    "divides",
    "emax",
    "emin",
    "evaluate",
    "is_const",
    "mul",
    "normal",
    "proves",
    "symbol_ranges",
    "symbols_of",
    "upper",
]

#: An extent: an int, or an integer expression of symbolic extents.
Ext = int | Expr

#: The largest value assumed for a symbol declared without ``max``.
UNBOUNDED = 2**31 - 1


def normal(e: Ext) -> Ext:
    """``e`` as an int where it is constant, else simplified."""
    if isinstance(e, int):
        return e
    e = simplify(e)
    return int(e.value) if isinstance(e, Const) else e


def as_expr(e: Ext) -> Expr:
    return Const(e) if isinstance(e, int) else e


def is_const(e: Ext) -> bool:
    return isinstance(e, int)


def mul(a: Ext, b: Ext) -> Ext:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    return normal(Binary("mul", as_expr(a), as_expr(b), "int64"))


def ceildiv(a: Ext, b: int) -> Ext:
    if isinstance(a, int):
        return -(-a // b)
    if divides(b, a):
        return normal(Binary("floordiv", a, Const(b), "int64"))
    return normal(Binary("floordiv", Binary("add", a, Const(b - 1), "int64"), Const(b), "int64"))


def divides(f: int, e: Ext) -> bool:
    """Whether ``f`` divides every value ``e`` takes (a product of declared multiples)."""
    if isinstance(e, int):
        return e % f == 0
    return f == 1 or _multiple(e) % f == 0


def _multiple(e: Expr) -> int:
    """A number every value of ``e`` is a multiple of (1 when nothing is known)."""
    if isinstance(e, Const):
        return abs(int(e.value))
    if isinstance(e, Var):
        return e.multiple
    if isinstance(e, Binary) and e.op == "mul":
        return _multiple(e.a) * _multiple(e.b)
    return 1


def symbols_of(exprs: object) -> dict[str, Var]:
    """The symbolic extents in ``exprs`` (an expression or nested tuples of them), by name."""
    out: dict[str, Var] = {}
    stack = [exprs]
    while stack:
        x = stack.pop()
        if isinstance(x, tuple | list):
            stack.extend(x)
        elif isinstance(x, Expr):
            for n in walk(x):
                if isinstance(n, Var):
                    out.setdefault(n.name, n)
    return out


def symbol_ranges(symbols: dict[str, Var]) -> Ranges:
    return {n: (v.lo, UNBOUNDED if v.hi is None else v.hi) for n, v in symbols.items()}


def upper(e: Ext, ranges: Ranges) -> int:
    """The largest value of ``e`` (a symbol without ``max`` counts as ``UNBOUNDED``)."""
    if isinstance(e, int):
        return e
    b = bounds(simplify(e, ranges), ranges)
    if b is None:
        raise ValueError(f"extent {e!r} has no known upper bound")
    return b[1]


def proves(a: Ext, op: str, b: Ext, ranges: Ranges) -> bool:
    """Whether ``a <op> b`` (``"le"`` or ``"ge"``) holds for every value of the symbols."""
    if isinstance(a, int) and isinstance(b, int):
        return a <= b if op == "le" else a >= b
    diff = bounds(simplify(Binary("sub", as_expr(a), as_expr(b), "int64"), ranges), ranges)
    if diff is None:
        return as_expr(a) == as_expr(b)
    return diff[1] <= 0 if op == "le" else diff[0] >= 0


def emin(a: Ext, b: Ext, ranges: Ranges) -> Ext:
    return _extreme("min", a, b, ranges)


def emax(a: Ext, b: Ext, ranges: Ranges) -> Ext:
    return _extreme("max", a, b, ranges)


def _extreme(op: str, a: Ext, b: Ext, ranges: Ranges) -> Ext:
    """The smaller (``"min"``) or larger of two extents: one of them where the bounds say
    which, else a ``min``/``max`` expression."""
    first = "le" if op == "min" else "ge"
    if proves(a, first, b, ranges):
        return a
    if proves(b, first, a, ranges):
        return b
    return normal(Binary(op, as_expr(a), as_expr(b), "int64"))


def evaluate(e: Ext, values: dict[str, int]) -> int:
    """The value of ``e`` once its symbols have ``values``."""
    if isinstance(e, int):
        return e
    if isinstance(e, Var) and e.name in values:  # the common case, on every call: fast
        return values[e.name]
    out = simplify(substitute(e, {n: Const(v) for n, v in values.items()}))
    if not isinstance(out, Const):
        raise ValueError(f"extent {e!r} depends on symbols without a value: {out!r}")
    return int(out.value)
