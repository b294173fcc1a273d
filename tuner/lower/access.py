"""Which elements a loop nest reads and writes: whether an output may overwrite an input.

A kernel that adds a residual to its result (``Y = relu(conv(X) + E)``) reads each
element of ``E`` once, to compute the element of ``Y`` at the same place. Where
nothing reads ``E`` afterwards, ``Y`` can be computed into ``E``'s own buffer: no
second buffer to bring into the cache and write back (what onnxruntime's fused
``Conv`` with a ``Sum`` input does). That is sound when every element of ``E`` is
read only while computing the element of ``Y`` that overwrites it, before that
write, and no element of ``Y`` is written twice (a second write would read an
``E`` already overwritten). :func:`updates_in_place` proves it from the loop nest:

- ``Y`` is written by one store statement and never read;
- every read of ``E`` is inside that store's value, at the store's own indices
  (so the write of an element depends on the read of the same element);
- the store runs at most once per element: each of its indices is an affine
  function of the loops around it (``v // d`` and ``v % d`` of a loop taken as
  two loops), every loop of more than one trip appears in exactly one index,
  and in each index the loops' strides leave no overlap (mixed radix: each stride
  exceeds the reach of the smaller ones). Any other form is not proved, and the
  caller keeps two buffers.

The backends then compile the kernel as before: its reads of an element come before
its one write of it in every order a compiler may choose, since the write's value
depends on them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..te.expr import Binary, Const, Expr, Var, walk
from .ir import For, If, Load, Prefetch, Store
from .lower import LoweredFunc
from .simplify import bounds, linear
from .visitor import StmtVisitor

__all__ = ["updates_in_place"]


def updates_in_place(func: LoweredFunc, src: str, dst: str) -> bool:
    """Whether ``func`` may be run with its output ``dst`` in the same memory as its input
    ``src`` (the module's docstring): both arguments of the same shape, each element of
    ``src`` read only to compute the element of ``dst`` that replaces it."""
    args = {b.name: b for b in func.args}
    if src == dst or src not in args or dst not in args:
        return False
    if args[src].shape != args[dst].shape or args[src].dtype != args[dst].dtype:
        return False
    scan = _Scan(src, dst)
    scan.visit(func.body)
    if scan.bad or len(scan.stores) != 1:
        return False
    store, loops = scan.stores[0]
    return _once(store.indices, loops)


#: A loop as an index reads it: ``(loop, "" | "//" | "%", divisor)``.
_Part = tuple[str, str, int]


@dataclass(frozen=True)
class _Loop:
    var: str
    trips: int


class _Scan(StmtVisitor):
    """The stores to ``dst`` (with their loops), and whether any access breaks the rules."""

    def __init__(self, src: str, dst: str):
        self.src, self.dst = src, dst
        self.loops: list[_Loop | None] = []  # None: a loop of unknown trips
        self.stores: list[tuple[Store, list[_Loop | None]]] = []
        self.bad = False

    def _reads(self, e: Expr, allowed: tuple[Expr, ...] | None = None) -> None:
        for node in walk(e):
            if isinstance(node, Load) and node.buffer == self.dst:
                self.bad = True
            if isinstance(node, Load) and node.buffer == self.src and node.indices != allowed:
                self.bad = True

    def visit_For(self, s: For) -> None:
        self._reads(s.extent)
        ranges = {loop.var: (0, loop.trips - 1) for loop in self.loops if loop is not None}
        most = bounds(s.extent, ranges)  # an edge tile's min(48, K - 48 * k): at most 48
        self.loops.append(_Loop(s.var, most[1]) if most is not None and most[1] >= 1 else None)
        self.visit(s.body)
        self.loops.pop()

    def visit_If(self, s: If) -> None:
        self._reads(s.cond)
        super().visit_If(s)

    def visit_Store(self, s: Store) -> None:
        if s.buffer == self.src:
            self.bad = True
        for i in s.indices:
            self._reads(i)
        if s.buffer == self.dst:
            self.stores.append((s, list(self.loops)))
            self._reads(s.value, s.indices)
        else:
            self._reads(s.value)

    def visit_Prefetch(self, s: Prefetch) -> None:
        for i in s.indices:
            self._reads(i)


def _once(indices: tuple[Expr, ...], loops: list[_Loop | None]) -> bool:
    """Whether a store at ``indices`` inside ``loops`` writes each element at most once
    (a loop's trips may be an upper bound: the store's elements are fewer, still distinct)."""
    if any(loop is None for loop in loops):
        return False
    trips = {loop.var: loop.trips for loop in loops if loop is not None}
    seen: dict[str, set[_Part]] = {}  # loop -> the parts of it that appear
    for index in indices:
        terms = _terms(index, trips)
        if terms is None:
            return False
        reach = 0
        for stride, extent, part in sorted(terms):
            if part in seen.get(part[0], set()) or stride <= reach:
                return False
            seen.setdefault(part[0], set()).add(part)
            reach += stride * (extent - 1)
    return all(_whole(seen.get(v, set()), n) for v, n in trips.items() if n > 1)


def _whole(parts: set[_Part], n: int) -> bool:
    """Whether a loop of ``n`` trips appears whole: itself, or ``v // d`` and ``v % d`` for one
    ``d`` (either left out where it has one value)."""
    if {p[1] for p in parts} == {""}:
        return True
    divisors = {p[2] for p in parts}
    if len(divisors) != 1 or any(p[1] == "" for p in parts):
        return False
    (d,) = divisors
    kinds = {p[1] for p in parts}
    return ("//" in kinds or n <= d) and ("%" in kinds or min(d, n) == 1)


def _terms(index: Expr, trips: dict[str, int]) -> list[tuple[int, int, _Part]] | None:
    """``index`` as ``(|stride|, trips, part)`` terms, a part being a loop or its ``v // d``
    or ``v % d``; None where it is not affine in them. Parts of one value drop out."""
    out: list[tuple[int, int, _Part]] = []
    for atom, coeff in linear(index).terms.items():
        found = _atom(atom, trips)
        if found is None:
            return None
        part, n = found
        if n > 1:
            out.append((abs(coeff), n, part))
    return out


def _atom(atom: Expr, trips: dict[str, int]) -> tuple[_Part, int] | None:
    if isinstance(atom, Var) and atom.name in trips:
        return (atom.name, "", 0), trips[atom.name]
    if (
        isinstance(atom, Binary)
        and atom.op in ("floordiv", "mod")
        and isinstance(atom.a, Var)
        and atom.a.name in trips
        and isinstance(atom.b, Const)
        and int(atom.b.value) > 0
    ):
        v, d, n = atom.a.name, int(atom.b.value), trips[atom.a.name]
        if atom.op == "mod":
            return (v, "%", d), min(d, n)
        return (v, "//", d), -(-n // d)
    return None
