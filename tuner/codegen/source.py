"""Render a lowered loop nest as Python source: readable, and ready for ``numba.njit``.

Two flavours share one renderer. ``flavour="print"`` shows the loop nest with
multi-dimensional indices for people (``tuner.lower``); ``flavour="numba"``
flattens every buffer to one dimension with constant strides, casts indices
to unsigned so that Numba emits no negative-index wrap-around (which blocks
vectorization), writes ``prange`` for parallel loops, unrolls ``unroll``
loops in the source, and puts ``local`` buffers on the stack.
"""

from __future__ import annotations

import math

import numpy as np

from ..lower.ir import Alloc, Buffer, For, If, Load, Seq, Stmt, Store
from ..lower.lower import LoweredFunc
from ..lower.simplify import simplify
from ..schedule.state import ScheduleError
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
    substitute,
    walk,
)

__all__ = ["render"]

#: Above this, per-iteration scratch of a parallel loop is allocated inside the loop instead.
_MAX_SCRATCH_BYTES = 256 * 1024 * 1024
#: The longest SIMD loop staged through a stack buffer (see ``_Renderer._stage``).
_MAX_STAGED = 64

_BINOPS = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "div": "/",
    "floordiv": "//",
    "mod": "%",
    "pow": "**",
}
_CMPOPS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


class _Renderer:
    def __init__(self, func: LoweredFunc, flavour: str, stage_vectors: bool = False):
        self.func = func
        self.numba = flavour == "numba"
        self.stage_vectors = stage_vectors
        self.lines: list[str] = []
        self.buffers: dict[str, Buffer] = {b.name: b for b in func.args}
        # Scratch allocated once by the entry function: name -> (elements, dtype).
        # The same buffer may be met twice (full and edge copies of a tile).
        self.hoisted: dict[str, tuple[int, str]] = {}
        # Scratch buffers of parallel loops: name -> (loop variable, slot size).
        self.slots: dict[str, tuple[str, int]] = {}
        self.has_prange = False

    # -- expressions -------------------------------------------------------
    def expr(self, e: Expr) -> str:
        if isinstance(e, Const):
            return self.const(e)
        if isinstance(e, Var):
            return e.name
        if isinstance(e, Load):
            return f"{e.buffer}[{self.index(e.buffer, e.indices)}]"
        if isinstance(e, Binary):
            a, b = self.expr(e.a), self.expr(e.b)
            if e.op in ("min", "max"):
                return f"{e.op}({a}, {b})"
            if e.op == "div" and self.numba and not is_float(e.a.dtype):
                a, b = f"np.{e.dtype}({a})", f"np.{e.dtype}({b})"
            return f"({a} {_BINOPS[e.op]} {b})"
        if isinstance(e, Compare):
            return f"({self.expr(e.a)} {_CMPOPS[e.op]} {self.expr(e.b)})"
        if isinstance(e, Logical):
            if e.op == "not":
                return f"(not {self.expr(e.args[0])})"
            return "(" + f" {e.op} ".join(self.expr(a) for a in e.args) + ")"
        if isinstance(e, Select):
            return f"({self.expr(e.true_value)} if {self.expr(e.cond)} else {self.expr(e.false_value)})"
        if isinstance(e, Cast):
            if not self.numba:
                return f"{e.dtype}({self.expr(e.value)})"
            return f"np.{'bool_' if e.dtype == 'bool' else e.dtype}({self.expr(e.value)})"
        if isinstance(e, Call):
            return self.call(e)
        raise TypeError(f"cannot render {e!r}")

    def const(self, e: Const) -> str:
        if e.dtype == "bool":
            return "True" if e.value else "False"
        if not is_float(e.dtype):
            return str(int(e.value))
        v = float(e.value)
        text = ("np.inf" if v > 0 else "-np.inf") if math.isinf(v) else repr(v)
        return f"np.{e.dtype}({text})" if self.numba else text

    def call(self, e: Call) -> str:
        args = ", ".join(self.expr(a) for a in e.args)
        if not self.numba:
            return f"{e.name}({args})"
        if e.name == "abs":
            return f"abs({args})"
        if e.dtype == "float32" and e.name in ("exp", "tanh", "sigmoid", "erf"):
            return f"{e.name}32({args})"
        if e.name == "sigmoid":
            return f"sigmoid64({args})"
        if e.dtype == "float32":
            return f"np.float32(math.{e.name}({args}))"
        return f"math.{e.name}({args})"

    def index(self, name: str, idx: tuple[Expr, ...]) -> str:
        if not self.numba:
            return ", ".join(self.expr(i) for i in idx)
        shape = self.buffers[name].shape
        flat: Expr = Const(0)
        stride = 1
        for i, extent in zip(reversed(idx), reversed(shape), strict=True):
            flat = flat + i * stride
            stride *= extent
        if name in self.slots:
            var, size = self.slots[name]
            flat = flat + Var(var) * size
        return f"np.uint64({self.expr(simplify(flat))})"

    # -- statements --------------------------------------------------------
    def emit(self, line: str, depth: int) -> None:
        self.lines.append("    " * depth + line)

    def stmt(self, s: Stmt, depth: int, parallel: For | None) -> None:
        if isinstance(s, Seq):
            for child in s.body:
                self.stmt(child, depth, parallel)
        elif isinstance(s, Store):
            target = f"{s.buffer}[{self.index(s.buffer, s.indices)}]"
            v = s.value
            if (
                isinstance(v, Binary)
                and v.op == "add"
                and isinstance(v.a, Load)
                and v.a.buffer == s.buffer
                and v.a.indices == s.indices
            ):
                self.emit(f"{target} += {self.expr(v.b)}", depth)
            else:
                self.emit(f"{target} = {self.expr(v)}", depth)
        elif isinstance(s, If):
            self.emit(f"if {self.expr(s.cond)}:", depth)
            self.stmt(s.then, depth + 1, parallel)
            if s.orelse is not None:
                self.emit("else:", depth)
                self.stmt(s.orelse, depth + 1, parallel)
        elif isinstance(s, For):
            self.loop(s, depth, parallel)
        elif isinstance(s, Alloc):
            self.alloc(s, depth, parallel)
        else:
            raise TypeError(f"cannot render {s!r}")

    def loop(self, s: For, depth: int, parallel: For | None) -> None:
        extent = self.expr(s.extent)
        if s.kind.startswith(("threadIdx", "blockIdx")):
            if self.numba:
                raise ScheduleError(
                    f"loop {s.var} is bound to {s.kind}, which the cpu target does not have; remove the bind"
                )
            self.emit(f"for {s.var} in range({extent}):  # bound to {s.kind}", depth)
            self.stmt(s.body, depth + 1, parallel)
            return
        if self.numba and s.kind == "unroll" and isinstance(s.extent, Const):
            for k in range(int(s.extent.value)):
                self.stmt(_subst_stmt(s.body, s.var, Const(k)), depth, parallel)
            return
        if self.numba and self.stage_vectors and self._stage(s, depth):
            return
        if self.numba and s.kind == "parallel":
            self.has_prange = True
            self.emit(f"for {s.var} in prange({extent}):", depth)
        else:
            note = f"  # {s.kind}" if s.kind != "serial" and not self.numba else ""
            self.emit(f"for {s.var} in range({extent}):{note}", depth)
        self.stmt(s.body, depth + 1, s if s.kind == "parallel" else parallel)

    def _stage(self, s: For, depth: int) -> bool:
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
        self.emit(f"{tmp} = carray(stack_empty({n}, np.{dtype}), ({n},))", depth)
        self.emit(f"for {s.var} in range({n}):", depth)
        self.emit(f"{tmp}[np.uint64({s.var})] = {self.expr(body.value)}", depth + 1)
        self.emit(f"for {s.var} in range({n}):", depth)
        self.emit(
            f"{body.buffer}[{self.index(body.buffer, body.indices)}] = {tmp}[np.uint64({s.var})]",
            depth + 1,
        )
        return True

    def _parallel_scratch(self, b: Buffer, loop: For, depth: int) -> None:
        """One slot per iteration of the parallel loop, allocated by the entry function.

        Iterations never share a slot, so threads need no coordination, and the
        loop nest's function allocates nothing (which keeps it vectorizable).
        """
        slots = int(loop.extent.value) if isinstance(loop.extent, Const) else 0
        if not slots or slots * b.size * np.dtype(b.dtype).itemsize > _MAX_SCRATCH_BYTES:
            self.emit(f"{b.name} = np.empty({b.size}, np.{b.dtype})", depth)
            return
        self.slots[b.name] = (loop.var, b.size)
        self._hoist(b.name, slots * b.size, b.dtype)

    def _hoist(self, name: str, size: int, dtype: str) -> None:
        known = self.hoisted.get(name, (0, dtype))[0]
        self.hoisted[name] = (max(known, size), dtype)

    def alloc(self, s: Alloc, depth: int, parallel: For | None) -> None:
        b = s.buffer
        self.buffers[b.name] = b
        if not self.numba:
            self.emit(
                f"{b.name} = allocate({b.dtype}[{', '.join(map(str, b.shape))}], scope={b.scope!r})",
                depth,
            )
        elif b.scope == "local":
            self.emit(f"{b.name} = carray(stack_empty({b.size}, np.{b.dtype}), ({b.size},))", depth)
        elif parallel is not None:
            self._parallel_scratch(b, parallel, depth)
        else:
            self._hoist(b.name, b.size, b.dtype)
        self.stmt(s.body, depth, parallel)


def _subst_stmt(s: Stmt, var: str, value: Expr) -> Stmt:
    m = {var: value}
    if isinstance(s, Seq):
        return Seq(tuple(_subst_stmt(c, var, value) for c in s.body))
    if isinstance(s, Store):
        return Store(
            s.buffer, tuple(simplify(substitute(i, m)) for i in s.indices), _subst_expr(s.value, m)
        )
    if isinstance(s, If):
        orelse = None if s.orelse is None else _subst_stmt(s.orelse, var, value)
        return If(simplify(_subst_expr(s.cond, m)), _subst_stmt(s.then, var, value), orelse)
    if isinstance(s, For):
        return For(
            s.var, simplify(substitute(s.extent, m)), s.kind, _subst_stmt(s.body, var, value)
        )
    if isinstance(s, Alloc):
        return Alloc(s.buffer, _subst_stmt(s.body, var, value))
    return s


def _subst_expr(e: Expr, m: dict[str, Expr]) -> Expr:
    from ..te.expr import transform

    def fn(x: Expr) -> Expr | None:
        if isinstance(x, Var) and x.name in m:
            return m[x.name]
        if isinstance(x, Load):
            return Load(x.buffer, tuple(simplify(_subst_expr(i, m)) for i in x.indices), x.dtype)
        return None

    return simplify(transform(e, fn))


def _top_level(s: Stmt, allocs: list[Alloc]) -> list[Stmt] | None:
    """The statements run one after another at the function's top, through sequences and scratch.

    ``None`` when a parallel loop sits anywhere else (inside another loop, a
    condition or a stack buffer's scope) or has an extent unknown at build
    time: such a kernel keeps ``prange``.
    """
    if isinstance(s, Seq):
        out: list[Stmt] = []
        for child in s.body:
            items = _top_level(child, allocs)
            if items is None:
                return None
            out += items
        return out
    if isinstance(s, Alloc) and s.buffer.scope != "local":
        allocs.append(s)
        return _top_level(s.body, allocs)
    if isinstance(s, For) and s.kind == "parallel":
        if not isinstance(s.extent, Const) or _has_parallel(s.body):
            return None
        return [s]
    return None if _has_parallel(s) else [s]


def _has_parallel(s: Stmt) -> bool:
    if isinstance(s, Seq):
        return any(_has_parallel(c) for c in s.body)
    if isinstance(s, For):
        return s.kind == "parallel" or _has_parallel(s.body)
    if isinstance(s, Alloc):
        return _has_parallel(s.body)
    if isinstance(s, If):
        return _has_parallel(s.then) or (s.orelse is not None and _has_parallel(s.orelse))
    return False


def _render_threaded(
    r: _Renderer, func: LoweredFunc, items: list[Stmt], allocs: list[Alloc], njit_flags: str
) -> str:
    """Serial stretches and parallel loops as separate functions, called by a Python entry.

    Each top-level parallel loop becomes ``<name>_p<k>(lo, hi, ...)``, a
    ``nogil`` function over a range of its iterations that
    ``tuner.codegen.threads.parallel_for`` runs on threads; the statements
    between them become ``<name>_s<k>(...)``. Every function has a signature,
    so importing the module compiles them all (or loads them from the cache).
    """
    for a in allocs:
        r.buffers[a.buffer.name] = a.buffer
        r._hoist(a.buffer.name, a.buffer.size, a.buffer.dtype)
    segments: list[tuple[For | None, list[str]]] = []
    for item in items:
        r.lines = []
        if isinstance(item, For) and item.kind == "parallel":
            r.emit(f"for {item.var} in range(lo_, hi_):", 1)
            r.stmt(item.body, 2, item)
            segments.append((item, r.lines))
        elif segments and segments[-1][0] is None:
            r.stmt(item, 1, None)
            segments[-1][1].extend(r.lines)
        else:
            r.stmt(item, 1, None)
            segments.append((None, r.lines))
    buffers = [*func.args, *(r.buffers[n] for n in r.hoisted)]
    params = ", ".join(b.name for b in buffers)
    sig = ", ".join(f"numba.{b.dtype}[::1]" for b in buffers)
    out: list[str] = []
    calls: list[str] = []
    for k, (loop, lines) in enumerate(segments):
        if loop is None:
            name = f"{func.name}_s{k}"
            deco = f"@numba.njit(numba.void({sig}), {njit_flags})" if njit_flags else ""
            head = f"def {name}({params}):"
            calls.append(f"    {name}({params})")
        else:
            name = f"{func.name}_p{k}"
            deco = (
                f"@numba.njit(numba.void(numba.int64, numba.int64, {sig}), {njit_flags}, nogil=True)"
                if njit_flags
                else ""
            )
            head = f"def {name}(lo_, hi_, {params}):"
            calls.append(f"    parallel_for({name}, {r.expr(loop.extent)}, {params})")
        out += [*([deco] if deco else []), head, *lines, ""]
    out.append(f"def {func.name}({', '.join(b.name for b in func.args)}):")
    out += [f"    {n} = np.empty({size}, np.{dtype})" for n, (size, dtype) in r.hoisted.items()]
    out += calls
    return "\n".join(out) + "\n"


def render(
    func: LoweredFunc,
    flavour: str = "print",
    njit_flags: str = "",
    parallel: str = "threads",
    stage_vectors: bool = False,
) -> str:
    """The kernel as Python source (``"numba"``) or as a readable loop nest (``"print"``).

    In Numba source, every function gets ``@numba.njit(<njit_flags>, ...)`` when
    ``njit_flags`` is given. Parallel loops at the top of the nest run on
    threads (``parallel="threads"``, see ``_render_threaded``) or as ``prange``
    (``parallel="prange"``, and wherever a parallel loop sits deeper). Scratch
    buffers are allocated by the entry function and passed to the functions
    holding the loops: allocating them inside the loop nest's own function
    kept LLVM from vectorizing register tiles (3.8 against 52 to 74 GFLOP/s).
    ``stage_vectors`` stores innermost loops' results through stack buffers (for
    kernels compiled with the SLP vectorizer, see ``_Renderer._stage``).
    """
    if parallel not in ("threads", "prange"):
        raise ValueError(f"parallel must be 'threads' or 'prange', not {parallel!r}")
    r = _Renderer(func, flavour, stage_vectors)
    if r.numba and parallel == "threads" and _has_parallel(func.body):
        allocs: list[Alloc] = []
        items = _top_level(func.body, allocs)
        if items is not None:
            return _render_threaded(r, func, items, allocs, njit_flags)
        r = _Renderer(func, flavour, stage_vectors)
    r.stmt(func.body, 1, None)
    params = ", ".join(b.name for b in func.args)
    if not r.numba:
        head = [f"def {func.name}({params}):"]
        head += [f"    # {b.name}: {b.dtype}[{', '.join(map(str, b.shape))}]" for b in func.args]
        return "\n".join(head + r.lines) + "\n"

    def deco(signature: bool, prange: bool) -> list[str]:
        if not njit_flags:
            return []
        sig = ", ".join(f"numba.{b.dtype}[::1]" for b in func.args)
        first = f"numba.void({sig}), " if signature else ""
        return [f"@numba.njit({first}{njit_flags}, parallel={prange})"]

    if not r.hoisted:
        return (
            "\n".join([*deco(True, r.has_prange), f"def {func.name}({params}):", *r.lines]) + "\n"
        )
    scratch = ", ".join(r.hoisted)
    body = [*deco(False, r.has_prange), f"def {func.name}_body({params}, {scratch}):", *r.lines, ""]
    entry = [*deco(True, False), f"def {func.name}({params}):"]
    entry += [f"    {n} = np.empty({size}, np.{dtype})" for n, (size, dtype) in r.hoisted.items()]
    entry.append(f"    {func.name}_body({params}, {scratch})")
    return "\n".join(body + entry) + "\n"
