"""One walker that writes a loop nest as Python-syntax source; printers and backends subclass it.

What differs between the readable loop nest (``tuner.lower.printer``), Numba
CPU source and, later, ``cuda.jit`` source is a few hooks: how a constant,
a cast, an intrinsic call and a buffer index look, and what a loop, an
allocation and a barrier become. The walk itself (operators, statements,
indentation, the ``+=`` form of an accumulation) is written once, here.
"""

from __future__ import annotations

import math

from ..te.dtypes import is_float
from ..te.expr import (
    Binary,
    Call,
    Cast,
    Compare,
    Const,
    Expr,
    Logical,
    Select,
    Var,
)
from .ir import Alloc, Barrier, Buffer, For, If, Load, Prefetch, Stmt, Store, Tensorized
from .visitor import StmtVisitor

__all__ = ["BINOPS", "CMPOPS", "SourceRenderer"]

BINOPS = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "div": "/",
    "floordiv": "//",
    "mod": "%",
    "pow": "**",
}
CMPOPS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


class SourceRenderer(StmtVisitor):
    """Renders statements into ``self.lines`` at ``self.depth``; hooks say how each piece looks.

    ``self.parallel`` is the innermost enclosing parallel loop while its body
    is rendered (scratch buffers inside one need a slot per iteration).
    """

    def __init__(self, buffers: dict[str, Buffer]):
        self.buffers = dict(buffers)
        self.lines: list[str] = []
        self.depth = 1
        self.parallel: For | None = None
        #: Variables written under another name (a backend's symbolic extents).
        self.renamed: dict[str, str] = {}

    # -- expressions -------------------------------------------------------
    def expr(self, e: Expr) -> str:
        if isinstance(e, Const):
            return self.const(e)
        if isinstance(e, Var):
            return self.renamed.get(e.name, e.name)
        if isinstance(e, Load):
            return f"{e.buffer}[{self.index(e.buffer, e.indices)}]"
        if isinstance(e, Binary):
            return self.binary(e, self.expr(e.a), self.expr(e.b))
        if isinstance(e, Compare):
            return f"({self.expr(e.a)} {CMPOPS[e.op]} {self.expr(e.b)})"
        if isinstance(e, Logical):
            if e.op == "not":
                return f"(not {self.expr(e.args[0])})"
            return "(" + f" {e.op} ".join(self.expr(a) for a in e.args) + ")"
        if isinstance(e, Select):
            return f"({self.expr(e.true_value)} if {self.expr(e.cond)} else {self.expr(e.false_value)})"
        if isinstance(e, Cast):
            return self.cast(e, self.expr(e.value))
        if isinstance(e, Call):
            return self.call(e, ", ".join(self.expr(a) for a in e.args))
        raise TypeError(f"cannot render {e!r}")

    def const(self, e: Const) -> str:
        if e.dtype == "bool":
            return "True" if e.value else "False"
        if not is_float(e.dtype):
            return str(int(e.value))
        v = float(e.value)
        return ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)

    def binary(self, e: Binary, a: str, b: str) -> str:
        if e.op in ("min", "max"):
            return f"{e.op}({a}, {b})"
        return f"({a} {BINOPS[e.op]} {b})"

    def cast(self, e: Cast, value: str) -> str:
        return f"{e.dtype}({value})"

    def call(self, e: Call, args: str) -> str:
        return f"{e.name}({args})"

    def index(self, name: str, idx: tuple[Expr, ...]) -> str:
        return ", ".join(self.expr(i) for i in idx)

    # -- statements --------------------------------------------------------
    def emit(self, line: str, depth: int | None = None) -> None:
        self.lines.append("    " * (self.depth if depth is None else depth) + line)

    def block(self, s: Stmt) -> None:
        """Render ``s`` one level deeper."""
        self.depth += 1
        try:
            self.visit(s)
        finally:
            self.depth -= 1

    def visit_Store(self, s: Store) -> None:
        target = f"{s.buffer}[{self.index(s.buffer, s.indices)}]"
        v = s.value
        if (
            isinstance(v, Binary)
            and v.op == "add"
            and isinstance(v.a, Load)
            and v.a.buffer == s.buffer
            and v.a.indices == s.indices
        ):
            self.emit(f"{target} += {self.expr(v.b)}")
        else:
            self.emit(f"{target} = {self.expr(v)}")

    def visit_If(self, s: If) -> None:
        self.emit(f"if {self.expr(s.cond)}:")
        self.block(s.then)
        if s.orelse is not None:
            self.emit("else:")
            self.block(s.orelse)

    def visit_For(self, s: For) -> None:
        self.loop(s)

    def visit_Alloc(self, s: Alloc) -> None:
        self.buffers[s.buffer.name] = s.buffer
        self.alloc(s.buffer)
        self.visit(s.body)

    def visit_Barrier(self, s: Barrier) -> None:
        self.barrier(s)

    def visit_Prefetch(self, s: Prefetch) -> None:
        self.prefetch(s)

    def visit_Tensorized(self, s: Tensorized) -> None:
        self.emit(f"# tensorize: {s.intrin}")
        self.visit(s.loop)

    def loop_body(self, s: For) -> None:
        """The body of loop ``s``, one level deeper, with ``parallel`` tracking it."""
        outer = self.parallel
        if s.kind == "parallel":
            self.parallel = s
        try:
            self.block(s.body)
        finally:
            self.parallel = outer

    # -- hooks every renderer fills in ---------------------------------------
    def loop(self, s: For) -> None:
        self.emit(f"for {s.var} in range({self.expr(s.extent)}):")
        self.loop_body(s)

    def alloc(self, b: Buffer) -> None:
        raise NotImplementedError

    def barrier(self, s: Barrier) -> None:
        raise NotImplementedError

    def prefetch(self, s: Prefetch) -> None:
        raise NotImplementedError
