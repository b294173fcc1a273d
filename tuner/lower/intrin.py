"""Tensorized loops in lowering and codegen: the target check and the match.

The intrinsics, and the computation each one stands for, are the schedule's
table (``tuner.schedule.intrin``). A ``tensorize`` step marks a loop and the
reduction loop directly inside it as one instruction. Lowering wraps that
pair of loops in a ``Tensorized`` statement and refuses a target without the
instruction (:func:`require`); a backend that has it checks that the loops'
body is the intrinsic's computation with its memory layout (:func:`match`)
and emits one call in place of both loops, and renders the loops as they are
where they are not (the padded copy of an edge tile, whose reads clamp their
indices). A tensorized loop that matches nowhere is a ``ScheduleError``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..schedule.intrin import INTRINSICS, TensorIntrin
from ..schedule.state import ScheduleError
from ..target import Target
from ..te.expr import Binary, Cast, Const, Expr, Var, transform, walk
from .ir import For, Load, Store
from .simplify import simplify

__all__ = ["Match", "dot_intrinsic", "intrinsic", "match", "require"]


def intrinsic(name: str) -> TensorIntrin:
    """The intrinsic a tensorized loop names (the tensorize step checked the name)."""
    return INTRINSICS[name]


def require(name: str, target: Target) -> None:
    """Refuse ``target`` if it lacks the instruction behind intrinsic ``name``."""
    t = intrinsic(name)
    have = target.get(t.capability, 0)
    if not isinstance(have, int | float) or have < t.minimum:
        raise ScheduleError(
            f"tensor intrinsic {name} needs {t.capability} >= {t.minimum}, and target"
            f" {target} has {have!r}; drop the tensorize step on this target"
        )


def dot_intrinsic(target: Target) -> str | None:
    """The int8 dot-product intrinsic as wide as ``target``'s int32 vectors, if it has one."""
    lanes = target.lanes("int32")
    for t in INTRINSICS.values():
        have = target.get(t.capability, 0)
        if t.lanes == lanes and isinstance(have, int | float) and have >= t.minimum:
            return t.name
    return None


@dataclass(frozen=True)
class Match:
    """The buffers and flat offsets (at lane 0, step 0) of a matched intrinsic."""

    out: tuple[str, Expr]
    a: tuple[str, Expr]
    b: tuple[str, Expr]


def match(
    intrin: TensorIntrin,
    loop: For,
    flat: Callable[[str, tuple[Expr, ...]], Expr],
    dtype: Callable[[str], str],
) -> Match | str:
    """``loop`` (and the loop inside it) as ``intrin``, or why it is not.

    ``flat`` gives a buffer access's element offset in the backend's flat
    layout, ``dtype`` a buffer's dtype. Offsets must be affine in the two
    loop variables with the intrinsic's constant strides.
    """
    inner = loop.body
    if not isinstance(inner, For):
        return f"the body of loop {loop.var} is not one loop"
    for f, n in ((loop, intrin.lanes), (inner, intrin.depth)):
        if not (isinstance(f.extent, Const) and int(f.extent.value) == n):
            return f"loop {f.var} does not run exactly {n} times"
    store = inner.body
    if not isinstance(store, Store):
        return f"the body of loop {inner.var} is not one store"
    operands = _product_update(store)
    if operands is None:
        return f"{store.buffer}'s update is not {store.buffer} += int32(a) * int32(b)"
    a, b = operands
    if dtype(b.buffer) == intrin.a and dtype(a.buffer) == intrin.b:
        a, b = b, a
    want = (intrin.out, intrin.a, intrin.b)
    got = (dtype(store.buffer), dtype(a.buffer), dtype(b.buffer))
    if got != want:
        return f"operand dtypes {got} are not {want}"
    lane, step = loop.var, inner.var
    found: dict[str, tuple[str, Expr]] = {}
    for role, buf, idx in (
        ("out", store.buffer, store.indices),
        ("a", a.buffer, a.indices),
        ("b", b.buffer, b.indices),
    ):
        offset = flat(buf, idx)
        base = _at(offset, {lane: 0, step: 0})
        for var, want_stride in zip((lane, step), intrin.strides[role], strict=True):
            if _nonlinear(offset, var):
                return f"{buf}'s index is not affine in {var}"
            stride = simplify(_at(offset, {lane: 0, step: 0, var: 1}) - base)
            if not (isinstance(stride, Const) and int(stride.value) == want_stride):
                return f"{buf} has stride {stride!r} along {var}, not {want_stride}"
        found[role] = (buf, base)
    return Match(found["out"], found["a"], found["b"])


def _product_update(store: Store) -> tuple[Load, Load] | None:
    """The two loads of ``buf[i] = buf[i] + int32(x) * int32(y)`` (either order), if it is one."""
    v = store.value
    if not (isinstance(v, Binary) and v.op == "add"):
        return None
    for acc, prod in ((v.a, v.b), (v.b, v.a)):
        if not (
            isinstance(acc, Load) and acc.buffer == store.buffer and acc.indices == store.indices
        ):
            continue
        if not (isinstance(prod, Binary) and prod.op == "mul"):
            return None
        loads = []
        for x in (prod.a, prod.b):
            if not (isinstance(x, Cast) and x.dtype == "int32" and isinstance(x.value, Load)):
                return None
            loads.append(x.value)
        return loads[0], loads[1]
    return None


def _at(e: Expr, values: dict[str, int]) -> Expr:
    return simplify(
        transform(
            e, lambda x: Const(values[x.name]) if isinstance(x, Var) and x.name in values else None
        )
    )


def _nonlinear(e: Expr, var: str) -> bool:
    """Whether ``var`` appears under an operation that is not affine (min, max, div, mod)."""
    for x in walk(e):
        if (
            isinstance(x, Binary)
            and x.op not in ("add", "sub", "mul")
            and any(isinstance(y, Var) and y.name == var for y in walk(x))
        ):
            return True
        if isinstance(x, Binary) and x.op == "mul":
            sides = [any(isinstance(y, Var) and y.name == var for y in walk(s)) for s in (x.a, x.b)]
            if all(sides):
                return True
    return False
