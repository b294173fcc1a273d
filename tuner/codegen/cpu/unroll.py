"""How many lanes of a SIMD loop LLVM unrolls fully before its SLP vectorizer runs.

A register-blocked kernel is compiled with LLVM's SLP vectorizer, which packs
straight-line code only: a SIMD loop becomes vectors only if LLVM's early full
unroll took it whole. That unroll is a cost budget (trip count times the cost
of one iteration), so the renderer cuts long SIMD loops into chunks short
enough for their body (``NumbaRenderer._chunk``), and unrolls in the source
the lanes whose calls no chunk makes cheap enough (``transcendental``).
"""

from __future__ import annotations

from ...lower.ir import Load, Stmt, Store
from ...lower.visitor import walk_stmts
from ...te.dtypes import is_float
from ...te.expr import Binary, Call, Cast, Expr, Select, Var, walk

__all__ = [
    "FLOAT32_HELPERS",
    "SLP_UNROLLED_FULLY",
    "lane_cost",
    "transcendental",
    "unrolled_early",
    "unrolled_fully",
]

#: The longest constant loop LLVM unrolls fully before its vectorizers run.
SLP_UNROLLED_FULLY = 32
#: What LLVM's early full unroll takes, in ``lane_cost`` units: lanes x cost of one lane.
#: Measured on its decisions (register tiles of 32 lanes at cost 8 and relu epilogues at 9
#: were unrolled fully; clip at 11 and a residual add with relu at 12 were not).
_UNROLL_BUDGET = 320
#: float32 intrinsics with a vectorizable inline version in ``runtime`` (``exp32``...).
FLOAT32_HELPERS = ("exp", "tanh", "sigmoid", "erf")


def lane_cost(body: Stmt, var: str) -> int:
    """What one lane of a SIMD loop over ``var`` costs LLVM's unroller, roughly.

    Only what varies with the lane counts (the rest is hoisted before the
    unroller runs): a load or a store 2 (the access and its address), a float
    operation 1, a min, max or select 2 (a compare and a select); integer index
    arithmetic folds into the addresses once the loop is unrolled.
    """

    def varies(e: Expr) -> bool:
        return any(isinstance(x, Var) and x.name == var for x in walk(e))

    def cost(e: Expr) -> int:
        if isinstance(e, Load):
            own = 2
        elif isinstance(e, Select) or (isinstance(e, Binary) and e.op in ("min", "max")):
            own = 2 if is_float(e.dtype) else 0
        elif isinstance(e, (Binary, Cast, Call)):
            own = 1 if is_float(e.dtype) else 0
        else:
            own = 0
        return own if varies(e) else 0

    return sum(
        2 + sum(cost(x) for x in walk(s.value)) for s in walk_stmts(body) if isinstance(s, Store)
    )


def transcendental(e: Expr) -> bool:
    """Whether ``e`` calls an inline float32 helper (``exp32``, ``erf32``...): dozens of
    operations a lane, more than LLVM's unroller takes whole before the SLP vectorizer of a
    register-blocked kernel runs. A dense layer's GELU epilogue, rolled, ran scalar: 784 x
    768 outputs took 3.4 ms against 1.4 without it (2 threads, Zen 4)."""
    return any(
        isinstance(x, Call) and x.dtype == "float32" and x.name in FLOAT32_HELPERS for x in walk(e)
    )


def unrolled_fully(body: Stmt, var: str) -> int:
    """The lanes of a SIMD loop over ``body`` that LLVM unrolls fully (``NumbaRenderer._chunk``)."""
    cost, chunk = max(lane_cost(body, var), 1), SLP_UNROLLED_FULLY
    while chunk > 4 and chunk * cost > _UNROLL_BUDGET:
        chunk //= 2
    return chunk


def unrolled_early(extent: int, body: Stmt, var: str) -> bool:
    """Whether LLVM's early full unroll takes a loop of ``extent`` lanes over ``body`` whole,
    so that its loop vectorizer, which runs later, never sees it: up to
    ``SLP_UNROLLED_FULLY`` trips, or as many as the unroll budget pays for.

    A squeeze-and-excitation 1 x 1 convolution of a pooled image in channel blocks of 40
    (2.5 AVX-512 vectors, about 7 a lane) was unrolled whole and, compiled with the loop
    vectorizer alone, ran scalar: 400 -> 440 channels 29 us against 7.5 with the SLP
    vectorizer too; blocks of 56 and 72, over the budget, stayed loops the loop
    vectorizer took (Zen 5, one thread).
    """
    return extent > 1 and (
        extent <= SLP_UNROLLED_FULLY or extent * max(lane_cost(body, var), 1) <= _UNROLL_BUDGET
    )
