"""Loops the CPU source writes differently from the loop nest: versioned by trip count,
unswitched, cut into chunks LLVM unrolls early, staged through a stack buffer.

``NumbaRenderer`` (``tuner.codegen.cpu.source``) asks these rewrites first for
every loop it renders; each returns ``False`` where it does not apply.
"""

from __future__ import annotations

from ...lower.ir import For, Load, Seq, Stmt, Store
from ...lower.simplify import linear, simplify
from ...lower.visitor import substitute_stmt
from ...te.expr import Binary, Call, Cast, Const, Expr, Var, substitute, walk
from ..numba_source import NumbaSourceRenderer
from .tables import LANES as TABLE_LANES
from .threaded import binds
from .unroll import SLP_UNROLLED_FULLY, transcendental, unrolled_fully
from .unswitch import branches, invariant_select, trip_versions

__all__ = ["LoopRewrites"]

#: The integer types a table lookup reads and writes (``LoopRewrites._lookups``).
_BYTE = frozenset({"int8", "uint8"})
#: The longest SIMD loop staged through a stack buffer (see ``LoopRewrites._stage``).
_MAX_STAGED = 64

#: Float arithmetic a loop written in vectors may hold (``LoopRewrites._vectors``).
_VECTOR_OPS = {
    "add": "vadd", "sub": "vsub", "mul": "vmul", "div": "vdiv", "max": "vmax", "min": "vmin",
}  # fmt: skip
#: Float32 functions it may call: the scalar helpers of ``runtime`` in vectors (``vectors``).
_VECTOR_CALLS = {
    "abs": "vabs",
    "exp": "vexp",
    "erf": "verf",
    "tanh": "vtanh",
    "sigmoid": "vsigmoid",
}


class LoopRewrites(NumbaSourceRenderer):
    """The loop rewrites of the CPU source (mixed into ``source.NumbaRenderer``)."""

    #: float32 lanes of the target's vectors where SIMD loops are written in vectors (0: never).
    lanes = 0
    #: Whether byte table lookups are written in vectors (``tables``: AVX-512 VBMI).
    tables = False

    def _vectors(self, s: For) -> bool:
        """A SIMD loop of float32 arithmetic, ``lanes`` at a time, as explicit vectors
        (``vectors``): ``for j in range(32): acc[32*i + j] += a[i] * b[j]`` as two
        ``vstore16(acc, 32*i + 16*c, vadd16(vload16(acc, ...), vmul16(vbload16(a, i),
        vload16(b, 16*c))))``; the trips past the last whole vector stay a loop.

        It applies where the loop body is one store of float32 arithmetic (add,
        subtract, multiply, divide, min, max, and the helpers exp, erf, tanh, sigmoid and
        abs, as ``vectors`` writes them: an epilogue's ReLU, clip, SiLU or GELU) of loads
        and constants, every address moves by one element
        per trip or not at all (a broadcast), and the stored buffer is read only at the
        element stored: each lane then depends on nothing the others write, as the
        scalar loop. Anything else is left to the SLP vectorizer.
        """
        if not self._in_vectors(s):
            return False
        body, L = s.body, self.lanes
        assert isinstance(body, Store) and isinstance(s.extent, Const)
        n = int(s.extent.value)
        for c in range(n // L):
            at: dict[str, Expr] = {s.var: Const(c * L, "int64")}
            value = self._vector_expr(body.value, s.var, at)
            index = self._address(body.buffer, tuple(substitute(i, at) for i in body.indices))
            self.emit(f"vstore{L}({body.buffer}, {index}, {value})")
        rest = n % L
        if rest:
            shifted = binds(s.var, Var(s.var, "int64") + Const(n - rest))
            self.visit(For(s.var, Const(rest), s.kind, substitute_stmt(body, shifted, simplify)))
        return True

    def _lookups(self, s: For) -> bool:
        """A loop of byte table reads ``out[i] = table[x[i] + c]`` (``tuner.graph.ops.lookup``)
        as ``vlookup64`` / ``32`` / ``16`` calls (``tables``), the trips past the last whole
        vector a loop; where the target has them (``tables``: AVX-512 VBMI).

        It applies where the loop's trips are a constant of at least 16, its body is one store of
        8-bit integers, moving by one element per trip, of a read of a 256-entry 8-bit
        table (a buffer of its own) at a key of the same kind moving alike, plus 0 for
        a uint8 key or 128 for an int8 one (the index of its entry)."""
        found = _byte_lookup(s, self) if self.tables else None
        if found is None:
            return False
        table, key, flip = found
        body = s.body
        assert isinstance(body, Store) and isinstance(s.extent, Const)
        n, done = int(s.extent.value), 0

        def call(lanes: int, first: Expr) -> None:
            at = {s.var: first}
            out = self._address(body.buffer, tuple(substitute(i, at) for i in body.indices))
            x = self._address(key.buffer, tuple(substitute(i, at) for i in key.indices))
            self.emit(f"vlookup{lanes}({body.buffer}, {out}, {table}, {key.buffer}, {x}, {flip})")

        wide = TABLE_LANES[0]
        if n >= 2 * wide:  # whole vectors in a loop of their own
            self.emit(f"for {s.var}_v in range({n // wide}):")
            self.depth += 1
            call(wide, Var(f"{s.var}_v", "int64") * Const(wide, "int64"))
            self.depth -= 1
            done = n // wide * wide
        for lanes in TABLE_LANES:
            while n - done >= lanes:
                call(lanes, Const(done, "int64"))
                done += lanes
        if n > done:
            shifted = binds(s.var, Var(s.var, "int64") + Const(done))
            self.visit(
                For(s.var, Const(n - done), s.kind, substitute_stmt(body, shifted, simplify))
            )
        return True

    def _in_vectors(self, s: Stmt) -> bool:
        """Whether :meth:`_vectors` writes SIMD loop ``s`` in vectors (its docstring says when)."""
        if not self.lanes or not isinstance(s, For) or s.kind != "vectorize":
            return False
        body = s.body
        if not isinstance(s.extent, Const) or int(s.extent.value) < self.lanes:
            return False
        if not isinstance(body, Store) or self.buffers[body.buffer].dtype != "float32":
            return False
        store = simplify(self._offset(body.buffer, body.indices))
        return _stride(store, s.var) == 1 and _vectorizable(body.value, s.var, body, self)

    def _whole_vectors(self, s: Stmt) -> bool:
        """Whether every store of ``s`` is a SIMD loop :meth:`_vectors` writes in whole
        vectors, inside loops of constant trips only (a register tile's rows and the
        unrolled reduction steps around its vector multiply-adds).

        Such loops need no unrolling in the source: once LLVM unrolls them fully, the
        tile's vectors are at constant offsets of its stack buffer, which LLVM keeps in
        registers, as from the unrolled source; what no longer runs is Numba typing and
        lowering each copy (matmul 512, a 5 x 64 tile with the reduction unrolled 8 times:
        build 2.20 -> 0.66 s, the kernel as fast; Xeon with AVX-512)."""
        if isinstance(s, Seq):
            return all(self._whole_vectors(c) for c in s.body)
        if not isinstance(s, For) or not isinstance(s.extent, Const):
            return False
        if s.kind in ("serial", "unroll"):
            return self._whole_vectors(s.body)
        return self._in_vectors(s) and int(s.extent.value) % self.lanes == 0

    def _vector_expr(self, e: Expr, var: str, at: dict[str, Expr]) -> str:
        """``e`` as a vector whose first lane is ``var`` at ``at`` (``_vectorizable`` said it can be)."""
        L = self.lanes
        if isinstance(e, Load):
            index = self._address(e.buffer, tuple(substitute(i, at) for i in e.indices))
            if _stride(simplify(self._offset(e.buffer, e.indices)), var) == 1:
                return f"vload{L}({e.buffer}, {index})"
            return f"vbload{L}({e.buffer}, {index})"
        if isinstance(e, Binary):
            a, b = self._vector_expr(e.a, var, at), self._vector_expr(e.b, var, at)
            return f"{_VECTOR_OPS[e.op]}{L}({a}, {b})"
        if isinstance(e, Call):
            return f"{_VECTOR_CALLS[e.name]}{L}({self._vector_expr(e.args[0], var, at)})"
        return f"vbcast{L}({self.expr(e)})"  # a float32 constant

    def _address(self, name: str, idx: tuple[Expr, ...]) -> str:
        """A vector operation's element offset: the intrinsics compute the address
        themselves, so the offset needs no ``np.uint64`` (one call fewer for Numba to type
        per operand; typing was most of a vector kernel's build: matmul 512, 6 x 32 tile,
        reduction unrolled 8 times, 0.95 s of 3.3)."""
        return self.expr(simplify(self._offset(name, idx)))

    def _offset(self, name: str, idx: tuple[Expr, ...]) -> Expr:
        """Element ``idx`` of buffer ``name`` as an offset into the array the kernel holds."""
        raise NotImplementedError

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


def _stride(offset: Expr, var: str) -> int | None:
    """Elements ``offset`` moves per trip of ``var``; None where it is not affine in it."""
    if not any(isinstance(x, Var) and x.name == var for x in walk(offset)):
        return 0
    lin = linear(offset)
    coeff = lin.terms.get(Var(var, "int64"))
    rest = [a for a in lin.terms if a != Var(var, "int64")]
    if coeff is None or any(isinstance(x, Var) and x.name == var for a in rest for x in walk(a)):
        return None
    return coeff


def _vectorizable(e: Expr, var: str, store: Store, r: LoopRewrites) -> bool:
    """Whether ``e`` is float32 arithmetic ``_vectors`` writes in vectors (see there)."""
    if isinstance(e, Const):
        return e.dtype == "float32"
    if isinstance(e, Load):
        if e.dtype != "float32" or r.buffers[e.buffer].dtype != "float32":
            return False
        if e.buffer == store.buffer:
            return e.indices == store.indices
        return _stride(simplify(r._offset(e.buffer, e.indices)), var) in (0, 1)
    if isinstance(e, Binary):
        return (
            e.op in _VECTOR_OPS
            and e.dtype == "float32"
            and _vectorizable(e.a, var, store, r)
            and _vectorizable(e.b, var, store, r)
        )
    if isinstance(e, Call):
        return (
            e.name in _VECTOR_CALLS
            and e.dtype == "float32"
            and len(e.args) == 1
            and _vectorizable(e.args[0], var, store, r)
        )
    return False


def _byte_lookup(s: For, r: LoopRewrites) -> tuple[str, Load, int] | None:
    """``(table, key load, flip)`` where loop ``s`` is a byte table lookup (``_lookups``)."""
    body = s.body
    if s.kind == "parallel" or not isinstance(s.extent, Const) or not isinstance(body, Store):
        return None
    if int(s.extent.value) < TABLE_LANES[-1]:
        return None
    value = body.value
    if not isinstance(value, Load) or len(value.indices) != 1:
        return None
    table, out = r.buffers.get(value.buffer), r.buffers[body.buffer]
    if table is None or tuple(table.shape) != (256,) or not {table.dtype, out.dtype} <= _BYTE:
        return None
    if value.buffer == body.buffer:
        return None
    lin = linear(simplify(value.indices[0]))
    if len(lin.terms) != 1 or next(iter(lin.terms.values())) != 1:
        return None
    key = next(iter(lin.terms))
    key = key.value if isinstance(key, Cast) else key
    if not isinstance(key, Load) or key.buffer in (body.buffer, value.buffer):
        return None
    flip = {("uint8", 0): 0, ("int8", 128): 128}.get((r.buffers[key.buffer].dtype, lin.const))
    if flip is None:
        return None
    moves = [
        simplify(r._offset(b, i))
        for b, i in ((body.buffer, body.indices), (key.buffer, key.indices))
    ]
    if any(_stride(m, s.var) != 1 for m in moves):
        return None
    if simplify(r._offset(value.buffer, (Const(0, "int64"),))) != Const(0, "int64"):
        return None  # the table starts where its array does
    return value.buffer, key, flip
