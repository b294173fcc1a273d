"""Walking and rewriting loop nests: one visitor and one mutator base for every pass.

The printer, the backends, the cost model's features and the tests all walk
the IR through these classes, so a new statement kind (``Barrier``) is
taught to one place. Dispatch is by class name: ``visit_For`` handles a
``For``; the defaults recurse into the children.

>>> class CountLoops(StmtVisitor):
...     def __init__(self) -> None:
...         self.n = 0
...     def visit_For(self, s: For) -> None:
...         self.n += 1
...         super().visit_For(s)

Expressions inside statements (indices, values, extents, conditions) are
rewritten through ``StmtMutator.expr``; expression nodes themselves are
walked with ``tuner.te.expr.walk`` / ``transform``, which see the IR's ``Load``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..te.expr import Expr, transform
from .ir import Alloc, Barrier, For, If, Prefetch, Seq, Stmt, Store, Tensorized

__all__ = ["StmtMutator", "StmtVisitor", "substitute_stmt", "walk_stmts"]


class StmtVisitor:
    """Visits a statement tree; override ``visit_<Class>`` and call ``super()`` to recurse."""

    def visit(self, s: Stmt) -> Any:
        method: Callable[[Any], Any] = getattr(self, f"visit_{type(s).__name__}", None)  # type: ignore[assignment]
        if method is None:
            raise TypeError(f"{type(self).__name__} cannot visit {type(s).__name__}")
        return method(s)

    def visit_Seq(self, s: Seq) -> Any:
        for child in s.body:
            self.visit(child)

    def visit_For(self, s: For) -> Any:
        self.visit(s.body)

    def visit_If(self, s: If) -> Any:
        self.visit(s.then)
        if s.orelse is not None:
            self.visit(s.orelse)

    def visit_Alloc(self, s: Alloc) -> Any:
        self.visit(s.body)

    def visit_Store(self, s: Store) -> Any:
        return None

    def visit_Barrier(self, s: Barrier) -> Any:
        return None

    def visit_Prefetch(self, s: Prefetch) -> Any:
        return None

    def visit_Tensorized(self, s: Tensorized) -> Any:
        self.visit(s.loop)


class StmtMutator:
    """Rebuilds a statement tree bottom-up; ``expr`` rewrites every expression in it.

    A statement whose children and expressions are unchanged comes back as
    the same object.
    """

    def expr(self, e: Expr) -> Expr:
        """The rewrite of one expression (an index, a value, an extent, a condition)."""
        return e

    def visit(self, s: Stmt) -> Stmt:
        method: Callable[[Any], Stmt] = getattr(self, f"visit_{type(s).__name__}", None)  # type: ignore[assignment]
        if method is None:
            raise TypeError(f"{type(self).__name__} cannot rewrite {type(s).__name__}")
        return method(s)

    def visit_Seq(self, s: Seq) -> Stmt:
        body = tuple(self.visit(c) for c in s.body)
        return s if all(a is b for a, b in zip(body, s.body, strict=True)) else Seq(body)

    def visit_For(self, s: For) -> Stmt:
        extent, body = self.expr(s.extent), self.visit(s.body)
        return s if extent is s.extent and body is s.body else For(s.var, extent, s.kind, body)

    def visit_If(self, s: If) -> Stmt:
        cond, then = self.expr(s.cond), self.visit(s.then)
        orelse = None if s.orelse is None else self.visit(s.orelse)
        if cond is s.cond and then is s.then and orelse is s.orelse:
            return s
        return If(cond, then, orelse)

    def visit_Alloc(self, s: Alloc) -> Stmt:
        body = self.visit(s.body)
        return s if body is s.body else Alloc(s.buffer, body)

    def visit_Store(self, s: Store) -> Stmt:
        indices = tuple(self.expr(i) for i in s.indices)
        value = self.expr(s.value)
        if value is s.value and all(a is b for a, b in zip(indices, s.indices, strict=True)):
            return s
        return Store(s.buffer, indices, value)

    def visit_Barrier(self, s: Barrier) -> Stmt:
        return s

    def visit_Prefetch(self, s: Prefetch) -> Stmt:
        indices = tuple(self.expr(i) for i in s.indices)
        if all(a is b for a, b in zip(indices, s.indices, strict=True)):
            return s
        return Prefetch(s.buffer, indices)

    def visit_Tensorized(self, s: Tensorized) -> Stmt:
        loop = self.visit(s.loop)
        if loop is s.loop:
            return s
        if not isinstance(loop, For):  # a rewrite unrolled or removed the loop
            return loop
        return Tensorized(s.intrin, loop, s.edge)


class _Preorder(StmtVisitor):
    def __init__(self) -> None:
        self.out: list[Stmt] = []

    def visit(self, s: Stmt) -> Any:
        self.out.append(s)
        return super().visit(s)


def walk_stmts(s: Stmt) -> Iterator[Stmt]:
    """Every statement of ``s``, parents before children."""
    walker = _Preorder()
    walker.visit(s)
    return iter(walker.out)


class _Substitute(StmtMutator):
    def __init__(self, fn: Callable[[Expr], Expr | None], post: Callable[[Expr], Expr]):
        self.fn, self.post = fn, post

    def expr(self, e: Expr) -> Expr:
        new = transform(e, self.fn)
        return e if new is e else self.post(new)


def substitute_stmt(
    s: Stmt, fn: Callable[[Expr], Expr | None], post: Callable[[Expr], Expr] = lambda e: e
) -> Stmt:
    """``s`` with ``transform(e, fn)`` applied to each of its expressions, then ``post`` where one changed."""
    return _Substitute(fn, post).visit(s)
