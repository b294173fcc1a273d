"""The loop-nest IR that lowering produces and code generation consumes.

Statements are frozen dataclasses with tuple children. Loops carry their kind
(serial, parallel, vectorize, unroll, or a GPU thread tag) and buffers their
memory scope (global, local, shared), so targets read both as data.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..te.expr import Expr

__all__ = ["Alloc", "Buffer", "For", "If", "Load", "Seq", "Stmt", "Store"]


@dataclass(frozen=True)
class Buffer:
    """A named array: a function argument, or a temporary allocated by the kernel."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    scope: str = "global"
    is_arg: bool = False

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True, eq=True)
class Load(Expr):
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
    var: str
    extent: Expr
    kind: str  # serial, parallel, vectorize, unroll, or a thread tag such as threadIdx.x
    body: Stmt


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


def seq(stmts: list[Stmt]) -> Stmt:
    flat: list[Stmt] = []
    for s in stmts:
        if isinstance(s, Seq):
            flat.extend(s.body)
        else:
            flat.append(s)
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))
