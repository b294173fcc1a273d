"""Simplification of integer index arithmetic, using what is known of loop ranges.

Index expressions are brought to a canonical linear form (a sum of
``coefficient * atom`` plus a constant). With the ranges of loop variables,
``(16*jb + ji) // 16`` becomes ``jb`` and ``(16*jb + ji) % 16`` becomes ``ji``
when ``0 <= ji < 16``, which is what makes packed buffers index cheaply.

The other direction matters as much: a loop over a flat index ``f`` that a
tensor reads as ``[H, W, C]`` decomposes it (``f // C // W``, ``(f // C) % W``,
``f % C``) and the address recombines the parts. In a sum,
``c*a*((x // a) % b) + c*(x % a)`` is ``c*(x % (a*b))`` and
``c*a*(x // a) + c*(x % a)`` is ``c*x``: applied until nothing changes, the
address of an elementwise kernel over a flat loop is the flat index again
(contiguous, so it vectorizes) instead of a chain of divisions per element.
A chain ``x // a // b`` stays a chain: its first quotient is shared by every
part that divides further (a transpose's addresses ran four times slower
with each part divided from ``x`` afresh).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..te.dtypes import is_int
from ..te.expr import (
    Binary,
    Cast,
    Compare,
    Const,
    Expr,
    Logical,
    Select,
    Var,
    children,
    transform,
    walk,
)

__all__ = ["Linear", "Ranges", "bounds", "linear", "render_linear", "simplify"]

#: Known inclusive integer ranges of variables, by name.
Ranges = dict[str, tuple[int, int]]


@dataclass
class Linear:
    terms: dict[Expr, int]
    const: int

    def add(self, other: Linear, sign: int = 1) -> Linear:
        terms = dict(self.terms)
        for atom, c in other.terms.items():
            terms[atom] = terms.get(atom, 0) + sign * c
        return Linear({a: c for a, c in terms.items() if c}, self.const + sign * other.const)

    def scale(self, k: int) -> Linear:
        return Linear({a: c * k for a, c in self.terms.items() if c * k}, self.const * k)


def linear(expr: Expr) -> Linear:
    """``expr`` as ``sum(c * atom) + const``; non-linear parts become atoms."""
    if isinstance(expr, Const) and is_int(expr.dtype):
        return Linear({}, int(expr.value))
    if isinstance(expr, Binary) and is_int(expr.dtype):
        if expr.op in ("add", "sub"):
            return linear(expr.a).add(linear(expr.b), 1 if expr.op == "add" else -1)
        if expr.op == "mul":
            a, b = linear(expr.a), linear(expr.b)
            if not b.terms:
                return a.scale(b.const)
            if not a.terms:
                return b.scale(a.const)
    return Linear({expr: 1}, 0)


def render_linear(lin: Linear, dtype: str = "int64") -> Expr:
    out: Expr | None = None
    for atom, c in sorted(lin.terms.items(), key=lambda t: (t[1] < 0, repr(t[0]))):
        term: Expr = (
            atom if c == 1 else Binary("mul", Const(c, dtype), atom, dtype) if c > 0 else atom
        )
        if c < 0:
            term = atom if c == -1 else Binary("mul", Const(-c, dtype), atom, dtype)
            out = Binary("sub", out if out is not None else Const(0, dtype), term, dtype)
            continue
        out = term if out is None else Binary("add", out, term, dtype)
    if out is None:
        return Const(lin.const, dtype)
    if lin.const > 0:
        return Binary("add", out, Const(lin.const, dtype), dtype)
    if lin.const < 0:
        return Binary("sub", out, Const(-lin.const, dtype), dtype)
    return out


def bounds(expr: Expr, ranges: Ranges) -> tuple[int, int] | None:
    """Inclusive constant bounds of an integer expression, or None if unknown."""
    if isinstance(expr, Const):
        return int(expr.value), int(expr.value)
    if isinstance(expr, Var):
        return ranges.get(expr.name)
    if isinstance(expr, Binary) and expr.op in ("floordiv", "mod") and isinstance(expr.b, Const):
        inner, d = bounds(expr.a, ranges), int(expr.b.value)
        if d <= 0:
            return None
        if expr.op == "floordiv":
            return None if inner is None else (inner[0] // d, inner[1] // d)
        # A non-negative range that does not wrap around d keeps its order under % d.
        if inner is not None and inner[0] >= 0 and inner[0] // d == inner[1] // d:
            return inner[0] % d, inner[1] % d
        return 0, d - 1
    if isinstance(expr, Binary) and expr.op in ("floordiv", "mod"):
        # A symbolic divisor (a shape-generic kernel's tile count, ``(seq + 31) // 32``):
        # bounded by its own range where that is positive and the dividend is not negative.
        # Unproven, the guards ``index >= 0`` of a fused loop's quotient and remainder stayed
        # inside register tiles and kept them scalar (a generic attention matmul, 90x).
        num, div = bounds(expr.a, ranges), bounds(expr.b, ranges)
        if num is None or div is None or div[0] <= 0 or num[0] < 0:
            return None
        if expr.op == "floordiv":
            return num[0] // div[1], num[1] // div[0]
        return 0, min(div[1] - 1, num[1])
    if isinstance(expr, Binary) and expr.op in ("min", "max"):
        a, b = bounds(expr.a, ranges), bounds(expr.b, ranges)
        if a is None or b is None:
            return None
        f = min if expr.op == "min" else max
        return f(a[0], b[0]), f(a[1], b[1])
    if isinstance(expr, Binary) and expr.op == "mul" and is_int(expr.dtype):
        a, b = bounds(expr.a, ranges), bounds(expr.b, ranges)
        if a is not None and b is not None:  # a product of two unknowns (symbolic extents)
            products = [x * y for x in a for y in b]
            return min(products), max(products)
    lin = linear(expr)
    if (
        len(lin.terms) == 1
        and next(iter(lin.terms.values())) == 1
        and next(iter(lin.terms)) == expr
    ):
        return None
    lo = hi = lin.const
    for atom, c in lin.terms.items():
        b = bounds(atom, ranges)
        if b is None:
            return None
        lo += min(c * b[0], c * b[1])
        hi += max(c * b[0], c * b[1])
    return lo, hi


def _divmod(op: str, num: Expr, d: int, ranges: Ranges, dtype: str) -> Expr | None:
    """``(d*q + r) // d -> q + r // d`` style rewrites, exact when r's range allows."""
    if d == 1:
        return num if op == "floordiv" else Const(0, dtype)
    lin = linear(num)
    whole = Linear({a: c // d for a, c in lin.terms.items() if c % d == 0}, 0)
    rest = Linear({a: c for a, c in lin.terms.items() if c % d != 0}, lin.const)
    q, r = divmod(rest.const, d)
    whole.const, rest.const = q, r
    rb = bounds(render_linear(rest, dtype), ranges)
    if rb is not None and rb[0] >= 0 and rb[1] < d:
        if op == "floordiv":
            return render_linear(whole, dtype)
        return render_linear(rest, dtype)
    if whole.terms or whole.const:
        if op == "floordiv":
            return render_linear(
                whole.add(
                    Linear(
                        {Binary("floordiv", render_linear(rest, dtype), Const(d, dtype), dtype): 1},
                        0,
                    )
                ),
                dtype,
            )
        return Binary("mod", render_linear(rest, dtype), Const(d, dtype), dtype)
    return None


def _divisor(e: Expr, op: str) -> int | None:
    """``d`` when ``e`` is ``x // d`` or ``x % d`` (``op``) with a constant ``d > 0``."""
    if isinstance(e, Binary) and e.op == op and isinstance(e.b, Const) and int(e.b.value) > 0:
        return int(e.b.value)
    return None


def _divmod_expr(op: str, x: Expr, d: int, ranges: Ranges, dtype: str) -> Expr:
    done = _divmod(op, x, d, ranges, dtype)
    return Binary(op, x, Const(d, dtype), dtype) if done is None else done


def _chain(e: Expr) -> tuple[Expr, int]:
    """``e`` as ``(x, d)`` with ``e == x // d``: a chain ``x // a // b`` is ``(x, a*b)``."""
    d = 1
    while (q := _divisor(e, "floordiv")) is not None:
        assert isinstance(e, Binary)
        d, e = d * q, e.a
    return e, d


def _merge(lin: Linear, ranges: Ranges, dtype: str) -> Linear:
    """Recombine the parts of a decomposed index (see the module's docstring)."""
    changed = True
    while changed:
        changed = False
        for atom, c in lin.terms.items():
            a = _divisor(atom, "mod")
            if a is None:
                continue
            assert isinstance(atom, Binary)
            x = atom.a
            base, q = _chain(x)
            for other, k in lin.terms.items():
                if k != c * a or other is atom:
                    continue
                if _chain(other) == (base, q * a):  # c*a*(x // a) + c*(x % a) = c*x
                    merged = linear(x).scale(c)
                else:
                    b = _divisor(other, "mod")
                    if b is None or not isinstance(other, Binary):
                        continue
                    if _chain(other.a) != (base, q * a):
                        continue
                    merged = Linear({_divmod_expr("mod", x, a * b, ranges, dtype): c}, 0)
                    merged = linear(render_linear(merged, dtype))
                kept = {t: v for t, v in lin.terms.items() if t not in (atom, other)}
                lin = Linear(kept, lin.const).add(merged)
                changed = True
                break
            if changed:
                break
    return lin


def _fold(e: Expr, ranges: Ranges) -> Expr | None:
    if isinstance(e, Binary) and is_int(e.dtype):
        if e.op in ("add", "sub", "mul"):
            return render_linear(_merge(linear(e), ranges, e.dtype), e.dtype)
        if e.op in ("floordiv", "mod") and isinstance(e.b, Const):
            d = int(e.b.value)
            if isinstance(e.a, Const):
                a = int(e.a.value)
                return Const(a // d if e.op == "floordiv" else a % d, e.dtype)
            if d > 0:
                return _divmod(e.op, e.a, d, ranges, e.dtype)
        if e.op in ("min", "max"):
            ba, bb = bounds(e.a, ranges), bounds(e.b, ranges)
            if ba is not None and bb is not None:
                if ba[1] <= bb[0]:  # a <= b everywhere
                    return e.a if e.op == "min" else e.b
                if bb[1] <= ba[0]:  # b <= a everywhere
                    return e.b if e.op == "min" else e.a
    if (
        isinstance(e, Binary)
        and isinstance(e.a, Const)
        and isinstance(e.b, Const)
        and not is_int(e.dtype)
    ):
        return None
    if isinstance(e, Compare) and is_int(e.a.dtype) and is_int(e.b.dtype):
        diff = bounds(render_linear(linear(Binary("sub", e.a, e.b, "int64"))), ranges)
        if diff is not None:
            lo, hi = diff
            truth = {
                "lt": (hi < 0, lo >= 0),
                "le": (hi <= 0, lo > 0),
                "gt": (lo > 0, hi <= 0),
                "ge": (lo >= 0, hi < 0),
                "eq": (lo == hi == 0, lo > 0 or hi < 0),
                "ne": (lo > 0 or hi < 0, lo == hi == 0),
            }[e.op]
            if truth[0]:
                return Const(True, "bool")
            if truth[1]:
                return Const(False, "bool")
        coarse = _coarse_compare(e, ranges)
        if coarse is not None:
            return coarse
    if isinstance(e, Logical):
        args = e.args
        if e.op in ("and", "or"):
            # ``absorbing`` decides the result outright; the other constant is a no-op.
            absorbing = e.op == "or"
            if any(isinstance(a, Const) and bool(a.value) == absorbing for a in args):
                return Const(absorbing, "bool")
            keep = tuple(a for a in args if not isinstance(a, Const))
            if not keep:
                return Const(not absorbing, "bool")
            return keep[0] if len(keep) == 1 else Logical(e.op, keep)
        if e.op == "not" and isinstance(args[0], Const):
            return Const(not args[0].value, "bool")
    if isinstance(e, Select) and isinstance(e.cond, Const):
        return e.true_value if e.cond.value else e.false_value
    if (
        isinstance(e, Cast)
        and isinstance(e.value, Const)
        and is_int(e.dtype)
        and is_int(e.value.dtype)
    ):
        return Const(int(e.value.value), e.dtype)
    return None


def _coarse_compare(e: Compare, ranges: Ranges) -> Expr | None:
    """``x + m*Q + c < 0`` as ``Q < -(c // m)`` where the bounded part ``x + c % m`` stays
    within ``[0, m)``, so it cannot move the sum across a multiple of ``m``.

    A channels-last concat read by a tile of 32 channels, ``c + 32*t < 288`` with ``c``
    in ``[0, 31]``, is ``t < 9``: the same for the whole tile, which the renderer can then
    ask once, outside the tile's loop (``tuner.codegen.cpu.unswitch``). ``m`` is the
    greatest common divisor of the unbounded terms' coefficients.
    """
    if e.op not in ("lt", "le", "gt", "ge"):
        return None
    lin = linear(Binary("sub", e.a, e.b, "int64"))
    if e.op in ("le", "gt"):  # d <= 0 is d - 1 < 0; d > 0 is d - 1 >= 0
        lin = Linear(lin.terms, lin.const - 1)
    known = {a: c for a, c in lin.terms.items() if bounds(a, ranges) is not None}
    rest = {a: c for a, c in lin.terms.items() if a not in known}
    if not known or not rest:
        return None
    m = math.gcd(*rest.values())
    if m <= 1:
        return None
    q, r = divmod(lin.const, m)
    small = bounds(render_linear(Linear(known, r)), ranges)
    if small is None or small[0] < 0 or small[1] >= m:
        return None
    coarse = render_linear(Linear({a: c // m for a, c in rest.items()}, 0))
    op = "lt" if e.op in ("lt", "le") else "ge"
    return Compare(op, coarse, Const(-q, "int64"))


#: Simplifications made, by expression, by what is known of its variables (the ranges given
#: for them, all that ``simplify`` reads of ``ranges``, and a symbolic extent's own bounds and
#: divisor, which ``Var`` equality ignores but the result carries into run-time checks).
#: Lowering simplifies the same index expressions over and over (a tile's addresses in each
#: version of its loop, the configs of one workload a search ranks): a 512^3 matmul config
#: lowered for its loop features took 9.9 ms before, 5.3 after; a 3 x 3 convolution's 7.5
#: and 4.6 (AMD Zen 4, the same features). It forgets everything past 20,000 entries.
_MEMO: dict[tuple[Expr, tuple[tuple[Any, ...], ...]], Expr] = {}


def simplify(expr: Expr, ranges: Ranges | None = None) -> Expr:
    """Simplify bottom-up; ``ranges`` gives the inclusive bounds of loop variables."""
    r = ranges or {}
    facts = {
        (v.name, v.lo, v.hi, v.multiple, r.get(v.name)) for v in walk(expr) if isinstance(v, Var)
    }
    key = (expr, tuple(sorted(facts, key=repr)))
    found = _MEMO.get(key)
    if found is None:
        if len(_MEMO) > 20_000:
            _MEMO.clear()
        found = _MEMO[key] = _simplify(expr, r)
    return found


def _simplify(expr: Expr, r: Ranges) -> Expr:

    def go(e: Expr) -> Expr:
        if children(e):
            e = transform(e, lambda x: None if x is e else go(x))
        folded = _fold(e, r)
        return e if folded is None else folded

    return go(expr)
