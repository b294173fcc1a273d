"""Which of LLVM's vectorizers a CPU kernel is compiled with: SLP for register blocks, the loop
vectorizer otherwise, both where the main vector loop is unrolled before the loop vectorizer
would see it (``vectorizer``); and which one a cached kernel's source says (``header_vectorizer``).
"""

from __future__ import annotations

from ...lower.ir import Alloc, For
from ...lower.lower import LoweredFunc
from ...lower.nest import TUPLE_NEXT
from ...lower.visitor import StmtVisitor, walk_stmts
from ...te.expr import Const
from ..backend import BuildOptions
from .unroll import SLP_UNROLLED_FULLY, lane_cost, unrolled_early

__all__ = ["header_vectorizer", "vectorizer"]


def vectorizer(func: LoweredFunc, options: BuildOptions) -> str:
    """SLP for register blocks (short literal loops), LLVM's loop vectorizer otherwise.

    A register block is a local buffer other than one vector: one whose scope
    unrolls a loop, or that is more than one ``vectorize`` loop longer than
    ``SLP_UNROLLED_FULLY`` (a matmul's rows of vectors). Local partials of a long lane
    reduction (one row of 64 lanes) are not: with the loop
    vectorizer off, the rest of their kernel ran scalar (softmax's exp, 6.7
    against 1.1 ms). LLVM unrolls a shorter loop fully before its loop
    vectorizer runs, so short lanes are the SLP vectorizer's (a row sum's 8
    local lanes: 1.2 ms with it, 1.6 without).

    Without a register block, where the ``vectorize`` loop doing the most work
    (``_VectorLoops``) is one LLVM unrolls fully (``unroll.unrolled_early``), it is
    straight-line code by the time the loop vectorizer would see it: both
    vectorizers then run (``"both"``). A channels-last max pool's loop over 16 to
    32 channels ran scalar, 24 channels at 112 x 112 in 0.149 ms against 0.035
    for onnxruntime's; 48 channels and more were vectorized.
    """
    if options.vectorizer != "auto":
        return options.vectorizer
    stmts = list(walk_stmts(func.body))
    blocked = any(
        isinstance(s, Alloc)
        and s.buffer.scope == "local"
        and not s.buffer.name.endswith(TUPLE_NEXT)
        and _register_block(s)
        for s in stmts
    )
    if blocked:
        return "slp"
    loops = _VectorLoops()
    loops.visit(func.body)
    if not loops.found:
        return "loop"
    _, main = max(loops.found, key=lambda found: found[0])
    extent = main.extent
    short = isinstance(extent, Const) and unrolled_early(int(extent.value), main.body, main.var)
    return "both" if short else "loop"


#: The trips ``_VectorLoops`` counts for a loop whose extent is symbolic (a guess: more
#: than a register tile's, fewer than a long row's).
_SYMBOLIC_TRIPS = 16


class _VectorLoops(StmtVisitor):
    """Every ``vectorize`` loop with its work: lanes x lane cost x the trips around it.

    The vectorizer follows the loop that does the most work (a convolution's
    multiply-adds, not the zeroing of its accumulators): where that one stays
    rolled, the loop vectorizer alone did better (1 x 1 convolution of a pooled image,
    440 -> 448 channels in blocks of 56: 9.0 us against 9.9 with both vectorizers).
    """

    def __init__(self) -> None:
        self.found: list[tuple[float, For]] = []
        self.trips = 1.0

    def visit_For(self, s: For) -> None:
        n = int(s.extent.value) if isinstance(s.extent, Const) else _SYMBOLIC_TRIPS
        if s.kind == "vectorize":
            self.found.append((self.trips * n * max(lane_cost(s.body, s.var), 1), s))
        outer, self.trips = self.trips, self.trips * n
        try:
            super().visit_For(s)
        finally:
            self.trips = outer


def header_vectorizer(source: str) -> str:
    """The vectorizer a kernel's source says it was compiled with (its header line)."""
    for vec in ("slp", "both"):
        if f"# vectorizer={vec} " in source:
            return vec
    return "loop"


def _register_block(alloc: Alloc) -> bool:
    loops = [s for s in walk_stmts(alloc.body) if isinstance(s, For)]
    one_vector = any(
        s.kind == "vectorize"
        and isinstance(s.extent, Const)
        and SLP_UNROLLED_FULLY < int(s.extent.value) == alloc.buffer.size
        for s in loops
    )
    return not one_vector or any(s.kind == "unroll" for s in loops)
