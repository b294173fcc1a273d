"""Readable loop nests, as ``print(tuner.lower(s, args))`` shows them.

Target-neutral: buffers keep their multi-dimensional indices, loops say how
they run in a comment, allocations name their scope. It imports no backend.

>>> print(tuner.lower(s, [A, B, C]))
def kernel(A, B, C):
    # A: float32[64, 32]
    ...
    for i in range(64):  # parallel
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .ir import Barrier, Buffer, For, Prefetch
from .render import SourceRenderer

if TYPE_CHECKING:
    from .lower import LoweredFunc

__all__ = ["LoopNestPrinter", "render"]


class LoopNestPrinter(SourceRenderer):
    """The loop nest for people: indices as written, kinds and scopes as comments."""

    def loop(self, s: For) -> None:
        extent = self.expr(s.extent)
        if s.kind.is_thread:
            note = f"  # bound to {s.kind}"
        else:
            note = f"  # {s.kind}" if s.kind != "serial" else ""
        self.emit(f"for {s.var} in range({extent}):{note}")
        self.loop_body(s)

    def alloc(self, b: Buffer) -> None:
        self.emit(
            f"{b.name} = allocate({b.dtype}[{', '.join(map(str, b.shape))}], scope={b.scope.value!r})"
        )

    def barrier(self, s: Barrier) -> None:
        self.emit(f"barrier({s.scope.value!r})")

    def prefetch(self, s: Prefetch) -> None:
        self.emit(f"prefetch({s.buffer}[{self.index(s.buffer, s.indices)}])")


def render(func: LoweredFunc) -> str:
    """The loop nest of ``func`` as text."""
    p = LoopNestPrinter({b.name: b for b in func.args})
    p.visit(func.body)
    params = ", ".join(b.name for b in func.args)
    head = [f"def {func.name}({params}):"]
    head += [f"    # {b.name}: {b.dtype}[{', '.join(map(str, b.shape))}]" for b in func.args]
    return "\n".join(head + p.lines) + "\n"
