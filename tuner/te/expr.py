"""Expression nodes of the tensor-expression language.

Nodes are small frozen dataclasses: structural equality and hashing come free,
so expressions can be compared, used as dictionary keys and simplified
without surprises. Python operators build nodes (``A[i, k] * 2 + 1``);
``==`` is structural equality, so use :func:`equal` for an equality test
inside an expression.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Union

from .dtypes import check_dtype, is_float, promote

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = [
    "Binary",
    "Call",
    "Cast",
    "Compare",
    "Const",
    "Expr",
    "ExprLike",
    "IterVar",
    "Logical",
    "Reduce",
    "Select",
    "TensorRead",
    "Var",
    "as_expr",
    "equal",
    "not_equal",
]

ExprLike = Union["Expr", int, float, bool]

ARITH_OPS = ("add", "sub", "mul", "div", "floordiv", "mod", "min", "max", "pow")
COMPARE_OPS = ("lt", "le", "gt", "ge", "eq", "ne")
LOGICAL_OPS = ("and", "or", "not")
REDUCERS = ("sum", "max", "min")


class Expr:
    """Base of all expression nodes; gives them arithmetic and comparison operators.

    ``child_fields`` names the fields that hold sub-expressions (an ``Expr`` or
    a tuple of them): :func:`children`, :func:`walk` and :func:`transform`
    read it, so a node defined elsewhere (the IR's ``Load``) is walked and
    rebuilt like the ones here.
    """

    dtype: str
    child_fields: ClassVar[tuple[str, ...]] = ()

    def __add__(self, other: ExprLike) -> Expr:
        return binary("add", self, other)

    def __radd__(self, other: ExprLike) -> Expr:
        return binary("add", other, self)

    def __sub__(self, other: ExprLike) -> Expr:
        return binary("sub", self, other)

    def __rsub__(self, other: ExprLike) -> Expr:
        return binary("sub", other, self)

    def __mul__(self, other: ExprLike) -> Expr:
        return binary("mul", self, other)

    def __rmul__(self, other: ExprLike) -> Expr:
        return binary("mul", other, self)

    def __truediv__(self, other: ExprLike) -> Expr:
        return binary("div", self, other)

    def __rtruediv__(self, other: ExprLike) -> Expr:
        return binary("div", other, self)

    def __floordiv__(self, other: ExprLike) -> Expr:
        return binary("floordiv", self, other)

    def __rfloordiv__(self, other: ExprLike) -> Expr:
        return binary("floordiv", other, self)

    def __mod__(self, other: ExprLike) -> Expr:
        return binary("mod", self, other)

    def __rmod__(self, other: ExprLike) -> Expr:
        return binary("mod", other, self)

    def __pow__(self, other: ExprLike) -> Expr:
        return binary("pow", self, other)

    def __neg__(self) -> Expr:
        return binary("sub", Const(0, self.dtype), self)

    def __lt__(self, other: ExprLike) -> Expr:
        return compare("lt", self, other)

    def __le__(self, other: ExprLike) -> Expr:
        return compare("le", self, other)

    def __gt__(self, other: ExprLike) -> Expr:
        return compare("gt", self, other)

    def __ge__(self, other: ExprLike) -> Expr:
        return compare("ge", self, other)

    def __and__(self, other: ExprLike) -> Expr:
        return Logical("and", (self, as_expr(other)))

    def __or__(self, other: ExprLike) -> Expr:
        return Logical("or", (self, as_expr(other)))

    def __invert__(self) -> Expr:
        return Logical("not", (self,))

    def __bool__(self) -> bool:
        raise TypeError(
            "a tensor expression has no truth value; use te.if_then_else for conditions"
        )

    def astype(self, dtype: str) -> Expr:
        """Convert to ``dtype`` (``A[i].astype("int32")`` widens int8 before a product)."""
        check_dtype(dtype, "astype")
        return self if dtype == self.dtype else Cast(dtype, self)


@dataclass(frozen=True, eq=True)
class Const(Expr):
    value: int | float | bool
    dtype: str = "int64"

    def __repr__(self) -> str:
        return repr(self.value)


@dataclass(frozen=True, eq=True)
class Var(Expr):
    """A named integer (a loop index or a symbolic extent such as ``te.var("n")``).

    A symbolic extent may carry what is known of it: its inclusive range
    (``lo``, ``hi``; ``hi`` None when unbounded) and a divisor of every value
    it takes (``multiple``). They are facts for simplification and checks at
    run time, not part of its identity: two ``Var("n")`` are the same variable.
    """

    name: str
    dtype: str = "int64"
    lo: int = field(default=0, compare=False)
    hi: int | None = field(default=None, compare=False)
    multiple: int = field(default=1, compare=False)

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, eq=True)
class IterVar(Expr):
    """An axis of a compute: ``kind`` is "spatial" (an output axis) or "reduce"."""

    name: str
    extent: Expr
    kind: str = "spatial"
    dtype: str = "int64"

    @property
    def var(self) -> Var:
        return Var(self.name)

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, eq=True)
class Binary(Expr):
    child_fields: ClassVar[tuple[str, ...]] = ("a", "b")

    op: str
    a: Expr
    b: Expr
    dtype: str

    def __repr__(self) -> str:
        if self.op in ("min", "max", "pow"):
            return f"{self.op}({self.a!r}, {self.b!r})"
        sym = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%"}
        return f"({self.a!r} {sym[self.op]} {self.b!r})"


@dataclass(frozen=True, eq=True)
class Compare(Expr):
    child_fields: ClassVar[tuple[str, ...]] = ("a", "b")

    op: str
    a: Expr
    b: Expr
    dtype: str = "bool"

    def __repr__(self) -> str:
        sym = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
        return f"({self.a!r} {sym[self.op]} {self.b!r})"


@dataclass(frozen=True, eq=True)
class Logical(Expr):
    child_fields: ClassVar[tuple[str, ...]] = ("args",)

    op: str
    args: tuple[Expr, ...]
    dtype: str = "bool"

    def __repr__(self) -> str:
        if self.op == "not":
            return f"(not {self.args[0]!r})"
        return "(" + f" {self.op} ".join(repr(a) for a in self.args) + ")"


@dataclass(frozen=True, eq=True)
class Select(Expr):
    child_fields: ClassVar[tuple[str, ...]] = ("cond", "true_value", "false_value")

    cond: Expr
    true_value: Expr
    false_value: Expr
    dtype: str

    def __repr__(self) -> str:
        return f"({self.true_value!r} if {self.cond!r} else {self.false_value!r})"


@dataclass(frozen=True, eq=True)
class Cast(Expr):
    child_fields: ClassVar[tuple[str, ...]] = ("value",)

    dtype: str
    value: Expr

    def __repr__(self) -> str:
        return f"{self.dtype}({self.value!r})"


@dataclass(frozen=True, eq=True)
class Call(Expr):
    """A math intrinsic (exp, log, sqrt, tanh, sigmoid, erf, abs)."""

    child_fields: ClassVar[tuple[str, ...]] = ("args",)

    name: str
    args: tuple[Expr, ...]
    dtype: str

    def __repr__(self) -> str:
        return f"{self.name}({', '.join(repr(a) for a in self.args)})"


@dataclass(frozen=True, eq=False)
class TensorRead(Expr):
    """``tensor[indices]``; tensors compare by identity, indices structurally."""

    child_fields: ClassVar[tuple[str, ...]] = ("indices",)

    tensor: Tensor
    indices: tuple[Expr, ...]
    dtype: str

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TensorRead)
            and other.tensor is self.tensor
            and other.indices == self.indices
        )

    def __hash__(self) -> int:
        return hash((id(self.tensor), self.indices))

    def __repr__(self) -> str:
        return f"{self.tensor.name}[{', '.join(repr(i) for i in self.indices)}]"


@dataclass(frozen=True, eq=True)
class Reduce(Expr):
    """A reduction of ``source`` over ``axes`` with ``combiner`` (sum, max, min)."""

    child_fields: ClassVar[tuple[str, ...]] = ("source",)

    combiner: str
    source: Expr
    axes: tuple[IterVar, ...]
    dtype: str

    def __repr__(self) -> str:
        axes = ", ".join(a.name for a in self.axes)
        return f"{self.combiner}({self.source!r}, axis=[{axes}])"


@dataclass(frozen=True, eq=True)
class TupleReduce(Reduce):
    """A reduction carrying several values of one dtype, combined by ``results``.

    ``te.comm_reducer`` makes it (as TVM's ``comm_reducer``). At each step of
    ``axes`` the accumulated values (``lhs``) and the incoming ones
    (``sources``, standing in for ``rhs``) give the new values ``results``,
    all computed from the old ones before any is stored; ``identity`` starts
    them. Its compute has one more, innermost axis, ``component``, over the
    values: ``source`` is the source of the component that axis names (what
    code that reads a reduction's ``source`` sees). ``combiner`` is the
    reducer's name.
    """

    child_fields: ClassVar[tuple[str, ...]] = ("sources",)

    sources: tuple[Expr, ...] = ()
    lhs: tuple[Var, ...] = ()
    rhs: tuple[Var, ...] = ()
    results: tuple[Expr, ...] = ()
    identity: tuple[Expr, ...] = ()
    component: IterVar | None = None

    @property
    def separable(self) -> bool:
        """Whether each combined value reads no other value's old state (a tuple of sums)."""
        old = {v.name for v in self.lhs}
        return all(
            {v.name for v in walk(r) if isinstance(v, Var)} & old <= {self.lhs[j].name}
            for j, r in enumerate(self.results)
        )

    def combine(self, old: tuple[Expr, ...], new: tuple[Expr, ...]) -> tuple[Expr, ...]:
        """The combined values with ``old`` for ``lhs`` and ``new`` for ``rhs``."""
        mapping = {v.name: e for v, e in zip((*self.lhs, *self.rhs), (*old, *new), strict=True)}
        return tuple(substitute(r, mapping) for r in self.results)

    def __repr__(self) -> str:
        axes = ", ".join(a.name for a in self.axes)
        values = ", ".join(repr(e) for e in self.sources)
        return f"{self.combiner}(({values}), axis=[{axes}])"


def as_expr(value: ExprLike, dtype: str | None = None) -> Expr:
    """Wrap a Python number as a constant; pass expressions through."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool):
        return Const(value, "bool")
    if isinstance(value, int):
        return Const(value, dtype or "int64")
    if isinstance(value, float):
        return Const(value, dtype if dtype and is_float(dtype) else "float32")
    raise TypeError(f"cannot use {value!r} ({type(value).__name__}) in a tensor expression")


def _pair(a: ExprLike, b: ExprLike) -> tuple[Expr, Expr]:
    """Give Python numbers the dtype of the expression beside them."""
    if isinstance(a, Expr) and not isinstance(b, Expr):
        b_expr = as_expr(b, a.dtype)
        if isinstance(b, int) and not isinstance(b, bool):
            b_expr = Const(b, a.dtype if a.dtype != "bool" else "int64")
        return a, b_expr
    if isinstance(b, Expr) and not isinstance(a, Expr):
        a2, b2 = _pair(b, a)
        return b2, a2
    return as_expr(a), as_expr(b)


def binary(op: str, a: ExprLike, b: ExprLike) -> Expr:
    x, y = _pair(a, b)
    dtype = promote(x.dtype, y.dtype)
    if op == "div" and not is_float(dtype):
        dtype = "float32"
    return Binary(op, x, y, dtype)


def compare(op: str, a: ExprLike, b: ExprLike) -> Expr:
    x, y = _pair(a, b)
    return Compare(op, x, y)


def equal(a: ExprLike, b: ExprLike) -> Expr:
    """``a == b`` inside an expression (``==`` on nodes is structural equality)."""
    return compare("eq", a, b)


def not_equal(a: ExprLike, b: ExprLike) -> Expr:
    return compare("ne", a, b)


def walk(expr: Expr) -> list[Expr]:
    """All nodes of ``expr``, parents before children."""
    out: list[Expr] = []
    stack: list[Expr] = [expr]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(reversed(children(node)))
    return out


def children(node: Expr) -> tuple[Expr, ...]:
    """The sub-expressions of ``node``, in field order (see ``Expr.child_fields``)."""
    out: list[Expr] = []
    for name in node.child_fields:
        value = getattr(node, name)
        if isinstance(value, tuple):
            out.extend(value)
        else:
            out.append(value)
    return tuple(out)


def substitute(expr: Expr, mapping: dict[str, Expr]) -> Expr:
    """Replace variables (by name) with expressions."""
    return transform(expr, lambda e: mapping.get(e.name) if isinstance(e, Var | IterVar) else None)


def transform(expr: Expr, fn: Callable[[Expr], Expr | None]) -> Expr:
    """Rebuild ``expr`` bottom-up; ``fn(node)`` may return a replacement or None.

    A node none of whose children changed is returned as it is, so an
    unchanged subtree costs no allocation.
    """
    replaced = fn(expr)
    if replaced is not None:
        return replaced
    changes: dict[str, Any] = {}
    for name in expr.child_fields:
        value = getattr(expr, name)
        if isinstance(value, tuple):
            new: Any = tuple(transform(v, fn) for v in value)
            same = all(a is b for a, b in zip(new, value, strict=True))
        else:
            new = transform(value, fn)
            same = new is value
        if not same:
            changes[name] = new
    if not changes:
        return expr
    # A copy with new children: nodes are frozen dataclasses without __post_init__,
    # and this is the hot path of lowering (dataclasses.replace re-runs __init__).
    node = object.__new__(type(expr))
    node.__dict__.update(expr.__dict__)
    node.__dict__.update(changes)
    return node
