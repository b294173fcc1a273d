"""Loops the CPU source writes differently from the loop nest: versioned by trip count,
unswitched, cut into chunks LLVM unrolls early, staged through a stack buffer.

``NumbaRenderer`` (``tuner.codegen.cpu.source``) asks these rewrites first for
every loop it renders; each returns ``False`` where it does not apply.
"""

from __future__ import annotations

from ...lower.ir import For, Load, Store
from ...lower.simplify import simplify
from ...lower.visitor import substitute_stmt
from ...te.expr import Const, Var, substitute, walk
from ..numba_source import NumbaSourceRenderer
from .threaded import binds
from .unroll import SLP_UNROLLED_FULLY, transcendental, unrolled_fully
from .unswitch import branches, invariant_select, trip_versions

__all__ = ["LoopRewrites"]

#: The longest SIMD loop staged through a stack buffer (see ``LoopRewrites._stage``).
_MAX_STAGED = 64


class LoopRewrites(NumbaSourceRenderer):
    """The loop rewrites of the CPU source (mixed into ``source.NumbaRenderer``)."""

    def _version_trips(self, s: For) -> bool:
        """A loop of ``min(c, e)`` trips as ``if e >= c:`` the loop of ``c`` trips, ``else:``
        the loop of ``e`` (``unswitch.trip_versions``)."""
        found = trip_versions(s)
        if found is None:
            return False
        rest, c = found
        self.emit(f"if {self.expr(rest)} >= {c}:")
        self.block(For(s.var, Const(c), s.kind, s.body))
        self.emit("else:")
        self.block(For(s.var, rest, s.kind, s.body))
        return True

    def _unswitch(self, s: For) -> bool:
        """An innermost loop under selects its iterations do not change: ``if cond:`` the
        loop with the select's first value, ``elif`` the next select's condition..., ``else:``
        the loop with what is left (``unswitch``). A chain of selects (a concat's pieces)
        becomes one ``if``/``elif`` chain, not a nest."""
        if s.kind not in ("serial", "vectorize"):
            return False
        found = invariant_select(s.body, s.var, s.extent)
        if found is None:
            return False
        keyword, rest = "if", s.body
        while found is not None:
            sel, cond = found
            then, left = branches(rest, sel)
            self.emit(f"{keyword} {self.expr(cond)}:")
            if then is None:
                self.emit("pass", self.depth + 1)
            else:
                self.block(For(s.var, s.extent, s.kind, then))
            if left is None:
                return True
            keyword, rest = "elif", left
            found = invariant_select(rest, s.var, s.extent)
        self.emit("else:")
        self.block(For(s.var, s.extent, s.kind, rest))
        return True

    def _chunk(self, s: For) -> bool:
        """A SIMD loop longer than LLVM unrolls early: as loops of at most ``SLP_UNROLLED_FULLY``.

        The SLP vectorizer packs straight-line code only, so a kernel compiled
        with it (a register tile) relies on LLVM unrolling its SIMD loops fully
        before the vectorizers run, and LLVM does that for loops of up to 32
        trips. A row of 48 or 64 lanes (three or four AVX-512 vectors) was left
        rolled, unrolled only after the vectorizers, and ran as scalar FMAs:
        matmul 128 x 3072 x 576 with a 4 x 48 tile at 7 GFLOP/s, 4 x 32 at 65
        (AMD Zen 4, 2 threads). Chunks ``for j in range(32): ...`` then
        ``for j in range(16): ...[j + 32]`` each unroll early, and the tile's
        accumulators stay in registers. LLVM's unroller also weighs the body: a
        lane that selects twice (an epilogue's ``clip``: max, then min) was
        unrolled by 8 only in a loop of 32, and the epilogue of a convolution
        ran scalar (16 -> 96 channels, 1 x 1, 112 x 112: 0.52 ms against
        relu's 0.32), and so did a residual add before a relu (1 x 1, 64 -> 256
        channels at 56 x 56: 0.37 ms against 0.21 without it). The chunk is the
        longest of 32, 16, 8... lanes whose total cost stays within what the
        unroller takes (``unroll.lane_cost``).
        """
        if s.kind != "vectorize" or not isinstance(s.extent, Const):
            return False
        n, chunk = int(s.extent.value), unrolled_fully(s.body, s.var)
        if n <= chunk:
            return False
        for lo in range(0, n, chunk):
            size = min(chunk, n - lo)
            body = (
                s.body
                if lo == 0
                else substitute_stmt(
                    s.body, binds(s.var, Var(s.var, "int64") + Const(lo)), simplify
                )
            )
            self.visit(For(s.var, Const(size), s.kind, body))
        return True

    def _stage(self, s: For) -> bool:
        """An innermost loop that stores to memory other buffers are read from: through a stack buffer.

        ``for v: Y[f(v)] = g(C[..v..], bias[..v..])`` becomes ``for v: t[v] = g(...)``
        then ``for v: Y[f(v)] = t[v]``. LLVM's SLP vectorizer (what register-blocked
        kernels are compiled with) does not know that ``Y`` and ``C`` are distinct
        arrays, so it cannot move the next iteration's loads above this one's store
        and leaves the loop scalar; the stack buffer is known to be distinct, so
        both loops vectorize. Packing B for matmul 1024^3 on one thread went from
        3.2 to 2.5 ms, and the whole kernel from 30.1 to 28.2 ms.

        Only an innermost serial or SIMD loop of constant extent whose body is one
        store that does not read its own buffer (a read-modify-write would see the
        old values) is staged; a parallel loop keeps its threads.
        """
        body = s.body
        if s.kind not in ("serial", "vectorize"):
            return False
        if not isinstance(s.extent, Const) or not isinstance(body, Store):
            return False
        n = int(s.extent.value)
        target = self.buffers[body.buffer]
        if n < 2 or n > _MAX_STAGED or target.scope == "local":
            return False
        loads = [e for e in walk(body.value) if isinstance(e, Load)]
        if not loads or any(e.buffer == body.buffer for e in loads):
            return False
        if all(self.buffers[e.buffer].scope == "local" for e in loads):
            return False
        tmp = f"{body.buffer}_{s.var}_v"
        dtype = target.dtype
        self.emit(f"{tmp} = carray(stack_empty({n}, np.{dtype}), ({n},))")
        if transcendental(body.value) and n <= SLP_UNROLLED_FULLY:
            # Unrolled here: LLVM does not unroll a loop this heavy before its SLP
            # vectorizer runs, and rolled, the lanes ran scalar (see ``unroll.transcendental``).
            for k in range(n):
                lane = substitute(body.value, {s.var: Const(k, "int64")})
                self.emit(f"{tmp}[{k}] = {self.expr(simplify(lane))}")
        else:
            self.emit(f"for {s.var} in range({n}):")
            self.emit(f"{tmp}[np.uint64({s.var})] = {self.expr(body.value)}", self.depth + 1)
        self.emit(f"for {s.var} in range({n}):")
        self.emit(
            f"{body.buffer}[{self.index(body.buffer, body.indices)}] = {tmp}[np.uint64({s.var})]",
            self.depth + 1,
        )
        return True
