"""The loop-nest IR that lowering produces and the backends consume.

Statements are frozen dataclasses with tuple children. Loops carry their kind
(``LoopKind``: serial, parallel, vectorize, unroll, or a GPU index) and
buffers their memory scope (``Scope``: global, local, shared), so backends
read both as data. Walk and rewrite statements with ``tuner.lower.visitor``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..kinds import LoopKind, Scope
from ..te.expr import Binary, Const, Expr

__all__ = [
    "Alloc",
    "Barrier",
    "Buffer",
    "For",
    "If",
    "Load",
    "Seq",
    "Stmt",
    "Store",
    "Tensorized",
    "seq",
]


@dataclass(frozen=True)
class Buffer:
    """A named array: a function argument, or a temporary allocated by the kernel."""

    name: str
    #: Extents: ints, or integer expressions of the kernel's symbolic extents.
    shape: tuple[int | Expr, ...]
    dtype: str
    scope: Scope = Scope.GLOBAL
    is_arg: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "scope", Scope(self.scope))

    @property
    def size(self) -> int | Expr:
        n: int | Expr = 1
        for d in self.shape:
            n = (
                n * d
                if isinstance(n, int) and isinstance(d, int)
                else Binary("mul", _e(n), _e(d), "int64")
            )
        return n

    @property
    def static(self) -> bool:
        """Whether every extent is a constant."""
        return all(isinstance(d, int) for d in self.shape)


def _e(x: int | Expr) -> Expr:
    return Const(x) if isinstance(x, int) else x


@dataclass(frozen=True, eq=True)
class Load(Expr):
    """``buffer[indices]``: a read of a buffer, in the buffer's own (multi-dimensional) indices."""

    child_fields: ClassVar[tuple[str, ...]] = ("indices",)

    buffer: str
    indices: tuple[Expr, ...]
    dtype: str

    def __repr__(self) -> str:
        return f"{self.buffer}[{', '.join(repr(i) for i in self.indices)}]"


class Stmt:
    """Base of statements."""


@dataclass(frozen=True)
class Store(Stmt):
    buffer: str
    indices: tuple[Expr, ...]
    value: Expr


@dataclass(frozen=True)
class For(Stmt):
    """``for var in range(extent)``, run as ``kind`` says (a string is read as a ``LoopKind``)."""

    var: str
    extent: Expr
    kind: LoopKind
    body: Stmt

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", LoopKind(self.kind))


@dataclass(frozen=True)
class If(Stmt):
    cond: Expr
    then: Stmt
    orelse: Stmt | None = None


@dataclass(frozen=True)
class Seq(Stmt):
    body: tuple[Stmt, ...]


@dataclass(frozen=True)
class Alloc(Stmt):
    """``buffer`` exists for the duration of ``body``."""

    buffer: Buffer
    body: Stmt


@dataclass(frozen=True)
class Barrier(Stmt):
    """Every thread of a block waits here until all have arrived and ``scope``'s writes are seen.

    GPU backends emit it between a cooperative copy into shared memory and
    the reads of that copy (and before the copy is overwritten); a backend
    whose loops are not threads has nothing to wait for.
    """

    scope: Scope = Scope.SHARED

    def __post_init__(self) -> None:
        object.__setattr__(self, "scope", Scope(self.scope))


@dataclass(frozen=True)
class Prefetch(Stmt):
    """A hint: bring the cache line holding ``buffer[indices]`` into the cache; no effect on
    what the kernel computes (a backend without the instruction emits nothing)."""

    buffer: str
    indices: tuple[Expr, ...]


@dataclass(frozen=True)
class Tensorized(Stmt):
    """``loop`` (and the reduction loop inside it) is the tensor intrinsic ``intrin``.

    A backend with the instruction emits it in place of the loops where they
    match it (``tuner.lower.intrin.match``); the loops are the meaning. In an
    edge tile's padded copy (``edge``), whose reads clamp their indices, loops
    that do not match stay loops; anywhere else they are an error.
    """

    intrin: str
    loop: For
    edge: bool = False


def seq(stmts: list[Stmt]) -> Stmt:
    flat: list[Stmt] = []
    for s in stmts:
        if isinstance(s, Seq):
            flat.extend(s.body)
        else:
            flat.append(s)
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))
