"""Numba CPU source for a lowered loop nest, ready for ``numba.njit``.

It differs from the printed loop nest (``tuner.lower.printer``) in a few
hooks of the shared walker (``tuner.lower.render``): every buffer is
flattened to one dimension with constant strides, indices are cast to
unsigned so that Numba emits no negative-index wrap-around (which blocks
vectorization), parallel loops become ``prange`` or thread-pool chunks,
``unroll`` loops are unrolled in the source, and ``local`` buffers live on
the stack.
"""

from __future__ import annotations

import numpy as np

from ...lower.extent import Ext, emax, mul, normal, symbol_ranges, upper
from ...lower.intrin import intrinsic, match
from ...lower.ir import Alloc, Barrier, Buffer, For, Load, Prefetch, Store, Tensorized
from ...lower.lower import LoweredFunc
from ...lower.simplify import simplify
from ...lower.visitor import substitute_stmt, walk_stmts
from ...schedule.state import ScheduleError
from ...te.dtypes import is_float
from ...te.expr import Binary, Call, Cast, Const, Expr, Var, walk
from .hoist import divisions
from .loops import LoopRewrites
from .threaded import (
    FP_STATE,
    binds,
    fp_state,
    has_parallel,
    python_entry,
    render_threaded,
    top_level,
)
from .unroll import FLOAT32_HELPERS

__all__ = ["render"]

#: Above this, per-iteration scratch of a parallel loop is allocated inside the loop instead.
_MAX_SCRATCH_BYTES = 256 * 1024 * 1024
#: Scratch of at most this many bytes lives on the stack of the function that uses it
#: (``_on_stack``); larger scratch is allocated once by the entry function.
_STACK_SCRATCH = 16 * 1024


class NumbaRenderer(LoopRewrites):
    def __init__(
        self, func: LoweredFunc, stage_vectors: bool = False, lanes: int = 0, tables: bool = False
    ):
        super().__init__({b.name: b for b in func.args})
        self.func = func
        self.stage_vectors = stage_vectors
        self.lanes = lanes if stage_vectors else 0
        self.tables = tables
        # Scratch allocated once by the entry function: name -> (elements, dtype).
        # The same buffer may be met twice (full and edge copies of a tile).
        self.hoisted: dict[str, tuple[Ext, str]] = {}
        self.ranges = symbol_ranges({v.name: v for v in func.symbols})
        self.renamed = _symbol_names(func)
        #: The symbolic extents' parameter names, in the order the kernel takes them.
        self.symbols = [self.renamed[v.name] for v in func.symbols]
        # Scratch buffers of parallel loops: name -> (loop variable, slot size).
        self.slots: dict[str, tuple[str, Ext]] = {}
        self.has_prange = False
        # Stack buffers declared at the top of the function being rendered: name -> (size, dtype).
        self.stack: dict[str, tuple[int, str]] = {}
        self.prange_depth = 0
        #: Divisions by a symbolic extent named once per loop iteration (``hoist``).
        self.divs: dict[Expr, str] = {}
        self.loop_vars = {s.var for s in walk_stmts(func.body) if isinstance(s, For)}
        self.bound: list[str] = []  # the enclosing loops' variables

    # -- expressions -------------------------------------------------------
    def expr(self, e: Expr) -> str:
        name = self.divs.get(e) if isinstance(e, Binary) else None
        return name if name is not None else super().expr(e)

    def loop_body(self, s: For) -> None:
        outer = self.parallel
        if s.kind == "parallel":
            self.parallel = s
        self.depth += 1
        try:
            self.hoisted_body(s)
        finally:
            self.depth -= 1
            self.parallel = outer

    def hoisted_body(self, s: For) -> None:
        """``s``'s body at ``self.depth``, after naming its divisions by a symbolic extent
        that only its loop and the enclosing ones bind (``tuner.codegen.cpu.hoist``; a kernel
        without symbolic extents has none, and skips the search)."""
        self.bound.append(s.var)
        named = []
        found = divisions(s.body, s.var, self.bound, self.loop_vars) if self.symbols else []
        for e in found:
            if e not in self.divs:
                name = f"d{len(self.divs)}_"
                self.emit(f"{name} = {self.expr(e)}")
                self.divs[e] = name
                named.append(e)
        try:
            self.visit(s.body)
        finally:
            for e in named:
                del self.divs[e]
            self.bound.pop()

    def cast(self, e: Cast, value: str) -> str:
        return f"np.{'bool_' if e.dtype == 'bool' else e.dtype}({value})"

    def call(self, e: Call, args: str) -> str:
        if e.name == "abs":
            return f"abs({args})"
        if e.dtype == "float32" and e.name in FLOAT32_HELPERS:
            return f"{e.name}32({args})"
        if e.name == "sigmoid":
            return f"sigmoid64({args})"
        if e.dtype == "float32":
            return f"np.float32(math.{e.name}({args}))"
        return f"math.{e.name}({args})"

    def visit_Store(self, s: Store) -> None:
        """A float min or max folded into the element it reads, ``acc[i] = max(acc[i], x)``,
        through ``runtime.maxnum`` / ``minnum``: no select that LLVM turns into a masked
        store (see ``runtime._fold``)."""
        v = s.value
        if (
            isinstance(v, Binary)
            and v.op in ("min", "max")
            and v.a.dtype == v.b.dtype == self.buffers[s.buffer].dtype
            and is_float(v.dtype)
            and any(_same_element(x, s) for x in (v.a, v.b))
        ):
            target = f"{s.buffer}[{self.index(s.buffer, s.indices)}]"
            a, b = (f"np.{v.dtype}({self.expr(x)})" for x in (v.a, v.b))  # a constant is a float64
            self.emit(f"{target} = {v.op}num({a}, {b})")
            return
        super().visit_Store(s)

    def index(self, name: str, idx: tuple[Expr, ...]) -> str:
        return f"np.uint64({self.expr(simplify(self._offset(name, idx)))})"

    def _offset(self, name: str, idx: tuple[Expr, ...]) -> Expr:
        """Element ``idx`` of buffer ``name`` as an offset into the array the kernel holds."""
        flat = self.flat_index(name, idx)
        if name in self.slots:
            var, size = self.slots[name]
            flat = flat + Var(var) * size
        return flat

    def visit_Tensorized(self, s: Tensorized) -> None:
        """One call of the intrinsic's helper in ``runtime``, or the loops where they do not match."""
        found = match(
            intrinsic(s.intrin), s.loop, self._offset, lambda name: self.buffers[name].dtype
        )
        if isinstance(found, str):
            if s.edge:
                self.visit(s.loop)
                return
            raise ScheduleError(f"tensorize {s.intrin} at loop {s.loop.var}: {found}")
        args = [
            f"{buf}, np.uint64({self.expr(simplify(offset))})"
            for buf, offset in (found.out, found.a, found.b)
        ]
        self.emit(f"{s.intrin}({', '.join(args)})")

    # -- statements --------------------------------------------------------
    def loop(self, s: For) -> None:
        if s.kind.is_thread:  # lowering for a CPU target refuses this first
            raise ScheduleError(
                f"loop {s.var} is bound to {s.kind}, which the cpu target does not have; remove the bind"
            )
        # A loop that runs once is its body at 0: an edge tile's extent such as
        # ``52 - 64*k_o`` under ``for k_o in range(1)`` becomes the constant 52, which the
        # vectorizers take (a 1x1 convolution of a 1x1 image, 440 -> 52 channels, ran its
        # only tile scalar: 17 us).
        # An unrolled loop is copies of its body in the source, except one whose body is
        # whole vectors (``_whole_vectors``: LLVM unrolls it as well, and Numba types and
        # lowers one copy).
        trips = s.extent
        if isinstance(trips, Const) and (
            (s.kind == "unroll" and (int(trips.value) == 1 or not self._whole_vectors(s.body)))
            or (s.kind == "serial" and int(trips.value) == 1)
        ):
            for k in range(int(trips.value)):
                self.visit(substitute_stmt(s.body, binds(s.var, Const(k)), simplify))
            return
        if self._version_trips(s):
            return
        if self._unswitch(s):
            return
        if self._vectors(s) or self._lookups(s):
            return
        if self.stage_vectors and self._chunk(s):
            return
        if self.stage_vectors and self._stage(s):
            return
        extent = self.expr(s.extent)
        if s.kind == "parallel":
            self.has_prange = True
            self.emit(f"for {s.var} in prange({extent}):")
            self.prange_depth += 1
            self.depth += 1  # each iteration may run on another thread: its own FP state
            self.emit(f"{FP_STATE}p = flush_denormals()")
            self.depth -= 1
            try:
                self.loop_body(s)
            finally:
                self.prange_depth -= 1
            self.depth += 1
            self.emit(f"restore_fp({FP_STATE}p)")
            self.depth -= 1
            return
        self.emit(f"for {s.var} in range({extent}):")
        self.loop_body(s)

    def _parallel_scratch(self, b: Buffer, loop: For) -> None:
        """A slot per chunk of the parallel loop, allocated by the entry function.

        The entry holds a slot for every iteration, and a chunk (one thread's
        run of iterations ``lo_ <= i < hi_``) uses the slot of its first one,
        iteration after iteration: chunks never share a slot, so threads need
        no coordination, the loop nest's function allocates nothing (which
        keeps it vectorizable), and the scratch a thread reuses stays in its
        cache. A slot per iteration walked a thread through fresh memory, a
        softmax 4096 x 1024 of 4-row tasks through 4 MB of stored rows
        against the core's 2 MB of L2. The slots no chunk starts
        at are never touched, so their pages are never faulted in.
        """
        slots = normal(loop.extent)
        size = normal(b.size)
        free = {
            v.name
            for e in (loop.extent, size)
            if not isinstance(e, int)
            for v in walk(e)
            if isinstance(v, Var)
        }
        itemsize = np.dtype(b.dtype).itemsize
        if (  # the symbols' largest values must fit too: the entry knows only them
            not free <= set(self.ranges)
            or upper(slots, self.ranges) * upper(size, self.ranges) * itemsize > _MAX_SCRATCH_BYTES
        ):
            self.emit(f"{b.name} = np.empty({self.size_text(size)}, np.{b.dtype})")
            return
        # A prange has no chunks to see: there the slot is the iteration's.
        self.slots[b.name] = (loop.var if self.prange_depth else "lo_", size)
        self.hoist(b.name, mul(slots, size), b.dtype)

    def hoist(self, name: str, size: Ext, dtype: str) -> None:
        """Allocate ``name`` once in the entry function (the largest size it is met with)."""
        known = self.hoisted.get(name, (0, dtype))[0]
        self.hoisted[name] = (emax(known, normal(size), self.ranges), dtype)

    def size_text(self, size: Ext) -> str:
        """An element count as source (symbolic counts are expressions of the entry's symbols)."""
        return str(size) if isinstance(size, int) else self.expr(simplify(size))

    def alloc(self, b: Buffer) -> None:
        if b.scope == "local" or _on_stack(b):
            if not isinstance(b.size, int):
                raise ScheduleError(
                    f"buffer {b.name} lives in registers or on the stack but has symbolic"
                    f" extent {list(b.shape)}; cache a tile of constant extent"
                )
            if self.prange_depth:  # each thread of a prange needs its own
                self.emit(f"{b.name} = {_stack_array(b.size, b.dtype)}")
                return
            known = self.stack.get(b.name, (0, b.dtype))[0]
            self.stack[b.name] = (max(known, b.size), b.dtype)
        elif self.parallel is not None:
            self._parallel_scratch(b, self.parallel)
        else:
            self.hoist(b.name, b.size, b.dtype)

    def take_stack(self) -> list[str]:
        """The declarations of the stack buffers met since the last call, for a function's top.

        The ``alloca`` is in the function's entry block wherever the line
        stands, but the array around it is built where the line stands: built
        inside a row loop, it kept LLVM from vectorizing anything in the loop
        (a softmax whose lane partials were cached in registers ran scalar,
        6.7 against 1.2 ms).
        """
        lines = [
            f"    {n} = {_stack_array(size, dtype)}" for n, (size, dtype) in self.stack.items()
        ]
        self.stack = {}
        return lines

    def barrier(self, s: Barrier) -> None:
        """Nothing to wait for: a CPU kernel runs no block of threads."""

    def prefetch(self, s: Prefetch) -> None:
        self.emit(f"prefetch({s.buffer}, {self.index(s.buffer, s.indices)})")


def _same_element(e: Expr, s: Store) -> bool:
    return isinstance(e, Load) and e.buffer == s.buffer and e.indices == s.indices


def _on_stack(b: Buffer) -> bool:
    """Scratch small enough for the stack of the function that uses it (``_STACK_SCRATCH``).

    Memory that dies with the function is memory LLVM may keep in registers: a max
    pool's window accumulator (one pixel's channels), passed in from the entry, was
    loaded and stored at every window step (24 channels at 112 x 112: 0.124 ms; on the
    stack 0.019, onnxruntime 0.035; 64 channels 0.078 -> 0.032, Zen 5, 2 threads).
    """
    return isinstance(b.size, int) and b.size * np.dtype(b.dtype).itemsize <= _STACK_SCRATCH


def _stack_array(size: int, dtype: str) -> str:
    return f"carray(stack_empty({size}, np.{dtype}), ({size},))"


def _symbol_names(func: LoweredFunc) -> dict[str, str]:
    """Parameter names for the symbolic extents that no buffer or loop variable has.

    A symbol may share its name with a buffer (a convolution's width ``W`` and
    its weights ``W``); in the source it becomes ``W_sym``.
    """
    taken = {b.name for b in func.args}
    for x in walk_stmts(func.body):
        if isinstance(x, Alloc):
            taken.add(x.buffer.name)
        elif isinstance(x, For):
            taken.add(x.var)
    out: dict[str, str] = {}
    for v in func.symbols:
        name = f"{v.name}_sym"
        while name in taken:
            name += "_"
        taken.add(name)
        out[v.name] = name
    return out


def render(
    func: LoweredFunc,
    njit_flags: str = "",
    parallel: str = "threads",
    stage_vectors: bool = False,
    launch: str = "pool",
    lanes: int = 0,
    tables: bool = False,
) -> str:
    """The kernel as Python source for Numba.

    Every function gets ``@numba.njit(<njit_flags>, ...)`` when ``njit_flags``
    is given. Parallel loops at the top of the nest run on threads
    (``parallel="threads"``, see ``threaded.render_threaded``) or as ``prange``
    (``parallel="prange"``, and wherever a parallel loop sits deeper). Scratch
    buffers are allocated by the entry function and passed to the functions
    holding the loops: allocating them inside the loop nest's own function
    kept LLVM from vectorizing register tiles (3.8 against 52 to 74 GFLOP/s).
    ``stage_vectors`` stores innermost loops' results through stack buffers (for
    kernels compiled with the SLP vectorizer, see ``loops.LoopRewrites._stage``);
    with it, ``lanes`` writes their float32 SIMD loops in vectors of that many lanes
    (``loops.LoopRewrites._vectors``; 0: never). ``tables`` writes byte table lookups in
    vectors (``loops.LoopRewrites._lookups``; the target has AVX-512 VBMI).
    """
    if parallel not in ("threads", "prange"):
        raise ValueError(f"parallel must be 'threads' or 'prange', not {parallel!r}")
    if parallel == "threads" and has_parallel(func.body):
        allocs: list[Alloc] = []
        items = top_level(func.body, allocs, frozenset(v.name for v in func.symbols))
        if items is not None:
            return render_threaded(
                NumbaRenderer(func, stage_vectors, lanes, tables),
                func,
                items,
                allocs,
                njit_flags,
                launch,
            )
    r = NumbaRenderer(func, stage_vectors, lanes, tables)
    r.visit(func.body)
    r.lines[:0] = r.take_stack()
    params = ", ".join([*(b.name for b in func.args), *r.symbols])

    def deco(scratch: list[str]) -> list[str]:
        if not njit_flags:
            return []
        arrays = [*(b.dtype for b in func.args), *scratch]
        sig = ", ".join(
            [*(f"numba.{d}[::1]" for d in arrays), *("numba.int64" for _ in func.symbols)]
        )
        flags = f"{njit_flags}, parallel={r.has_prange}, no_cfunc_wrapper=True"
        return [f"@numba.njit(numba.void({sig}), {flags})"]  # (called from Python only)

    if not r.hoisted:
        return "\n".join([*deco([]), f"def {func.name}({params}):", *fp_state(r.lines)]) + "\n"
    # Heap scratch: the loop nest takes it from a Python entry (``threaded.python_entry``).
    scratch = {n: (r.size_text(size), dtype) for n, (size, dtype) in r.hoisted.items()}
    names = ", ".join([*(b.name for b in func.args), *scratch, *r.symbols])
    body = [
        *deco([d for _, d in scratch.values()]),
        f"def {func.name}_body({names}):",
        *fp_state(r.lines),
    ]
    entry = python_entry(func.name, params.split(", "), scratch, [f"    {func.name}_body({names})"])
    return "\n".join([*body, "", *entry]) + "\n"
