"""The threaded entry of a CPU kernel: its top-level parallel loops as chunk functions.

A kernel whose parallel loops sit at the top of its nest (through sequences,
scratch buffers and short serial loops) is rendered as separate Numba
functions, one per parallel loop (run a chunk of iterations per thread) and
one per serial stretch between them, called in order by a plain Python entry
that allocates the scratch buffers. ``top_level`` finds those statements;
``render_threaded`` writes the functions and the entry. Everything else of the
source (buffers, unrolling, vector staging) is ``source.NumbaRenderer``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ...lower.ir import Alloc, For, Seq, Stmt
from ...lower.lower import LoweredFunc
from ...lower.simplify import simplify
from ...lower.visitor import substitute_stmt, walk_stmts
from ...te.expr import Const, Expr, Var, walk

if TYPE_CHECKING:
    from .source import NumbaRenderer

__all__ = [
    "FP_STATE",
    "Repeat",
    "binds",
    "fp_state",
    "has_parallel",
    "python_entry",
    "render_threaded",
    "top_level",
]

#: The variable holding a thread's floating-point state while a kernel's function runs.
FP_STATE = "mx_"


def fp_state(lines: list[str]) -> list[str]:
    """A compiled function's body lines between flushing denormals to zero and giving the
    thread its floating-point state back (``runtime.flush_denormals``)."""
    return [f"    {FP_STATE} = flush_denormals()", *lines, f"    restore_fp({FP_STATE})"]


def binds(var: str, value: Expr):  # type: ignore[no-untyped-def]
    return lambda e: value if isinstance(e, Var) and e.name == var else None


def has_parallel(s: Stmt) -> bool:
    return any(isinstance(x, For) and x.kind == "parallel" for x in walk_stmts(s))


#: Serial loops around parallel ones that the threaded entry runs as Python loops, at most.
_MAX_REPEATS = 64


@dataclass(frozen=True)
class Repeat:
    """A serial loop at the top whose body holds parallel loops: run by the Python entry."""

    var: str
    extent: int
    items: list[Stmt | Repeat]


def top_level(
    s: Stmt, allocs: list[Alloc], symbols: frozenset[str] = frozenset()
) -> list[Stmt | Repeat] | None:
    """The statements run one after another at the function's top, through sequences and scratch.

    A serial loop around a parallel one is unwrapped when it runs once and
    becomes a ``Repeat`` (a loop in the Python entry) when it runs a few
    times: a padding stage's ``for n in range(1): for c in parallel(C)`` is as
    common as the batch loop of a batch above 1. ``None`` when a parallel loop
    sits anywhere else (inside a condition, a stack buffer's scope or a long
    serial loop) or has an extent that is neither constant nor an expression of
    the kernel's ``symbols`` (which the entry knows): such a kernel keeps
    ``prange``.
    """
    if isinstance(s, Seq):
        out: list[Stmt | Repeat] = []
        for child in s.body:
            items = top_level(child, allocs, symbols)
            if items is None:
                return None
            out += items
        return out
    if isinstance(s, Alloc) and s.buffer.scope != "local":
        allocs.append(s)
        return top_level(s.body, allocs, symbols)
    if isinstance(s, For) and s.kind == "parallel":
        free = {v.name for v in walk(s.extent) if isinstance(v, Var)}
        if not free <= symbols or has_parallel(s.body):
            return None
        return [s]
    if not has_parallel(s):
        return [s]
    if isinstance(s, For) and s.kind == "serial" and isinstance(s.extent, Const):
        extent = int(s.extent.value)
        if extent == 1:
            body = substitute_stmt(s.body, binds(s.var, Const(0)), simplify)
            return top_level(body, allocs, symbols)
        if 1 < extent <= _MAX_REPEATS:
            inner = top_level(s.body, allocs, symbols)
            return None if inner is None else [Repeat(s.var, extent, inner)]
    return None


def render_threaded(
    r: NumbaRenderer,
    func: LoweredFunc,
    items: list[Stmt | Repeat],
    allocs: list[Alloc],
    njit_flags: str,
    launch: str,
) -> str:
    """Serial stretches and parallel loops as separate functions, called by a Python entry.

    Each top-level parallel loop becomes ``<name>_p<k>(lo, hi, ...)``, a
    ``nogil`` function over a range of its iterations, one chunk per thread.
    ``launch="native"``: the chunks run on Numba's threading layer (OpenMP or
    TBB), through ``tuner.codegen.cpu.launch.launch`` and the chunk function's
    address ``<name>_p<k>_a``. ``launch="pool"`` (no thread-safe layer):
    ``tuner.codegen.cpu.threads.parallel_for`` runs them on Python threads. The statements
    between them become ``<name>_s<k>(...)``; a ``Repeat`` is a loop of the
    entry, its variable passed on to the functions inside. Every function has
    a signature, so importing the module compiles them all (or loads them from
    the cache).
    """
    native = launch == "native" and bool(njit_flags)  # the launcher calls compiled chunks
    for a in allocs:
        r.buffers[a.buffer.name] = a.buffer
        r.hoist(a.buffer.name, a.buffer.size, a.buffer.dtype)
    buffers = [*func.args]  # the scratch buffers join once all are known
    functions: list[tuple[str, For | None, tuple[str, ...], list[str]]] = []
    # The entry's lines: a loop header, or (indent, function, parallel extent or None).
    entry: list[str | tuple[int, int, str | None]] = []

    def place(items: list[Stmt | Repeat], outer: tuple[str, ...], depth: int) -> None:
        open_serial = False  # the last function is serial and may take more statements
        for item in items:
            if isinstance(item, Repeat):
                entry.append(f"{'    ' * depth}for {item.var} in range({item.extent}):")
                place(item.items, (*outer, item.var), depth + 1)
                open_serial = False
                continue
            r.lines, r.depth, r.parallel = [], 1, None
            if isinstance(item, For) and item.kind == "parallel":
                r.emit(f"for {item.var} in range(lo_, hi_):")
                r.depth, r.parallel = 2, item
                r.hoisted_body(item)
                entry.append((depth, len(functions), r.expr(item.extent)))
                lines = [*r.take_stack(), *r.lines]
                functions.append((f"{func.name}_p{len(functions)}", item, outer, lines))
                open_serial = False
            elif open_serial:
                r.visit(item)
                functions[-1][3][:0] = r.take_stack()
                functions[-1][3].extend(r.lines)
            else:
                r.visit(item)
                entry.append((depth, len(functions), None))
                lines = [*r.take_stack(), *r.lines]
                functions.append((f"{func.name}_s{len(functions)}", None, outer, lines))
                open_serial = True

    place(items, (), 1)
    buffers += [r.buffers[n] for n in r.hoisted]
    symbols = r.symbols
    sig = ", ".join(
        [*(f"numba.{b.dtype}[::1]" for b in buffers), *("numba.int64" for _ in symbols)]
    )
    out: list[str] = []
    params: list[str] = []
    for name, loop, outer, lines in functions:
        params.append(", ".join([*(b.name for b in buffers), *symbols, *outer]))
        types = ", ".join([sig, *("numba.int64" for _ in outer)])
        if loop is None:  # called from Python: its C function wrapper is never used
            deco = f"@numba.njit(numba.void({types}), {njit_flags}, no_cfunc_wrapper=True)"
            head = f"def {name}({params[-1]}):"
        else:
            # A chunk the native launcher calls by address needs no Python wrapper of its own.
            bare = ", no_cpython_wrapper=True, no_cfunc_wrapper=True" if native else ""
            deco = f"@numba.njit(numba.void(numba.int64, numba.int64, {types}), {njit_flags}, nogil=True{bare})"
            head = f"def {name}(lo_, hi_, {params[-1]}):"
        out += [*([deco] if njit_flags else []), head, *fp_state(lines), ""]
        if loop is not None and native:
            out += [f"{name}_a = chunk_address({name})", ""]
    calls: list[str] = []
    for line in entry:
        if isinstance(line, str):
            calls.append(line)
            continue
        depth, k, extent = line
        name = functions[k][0]
        if extent is None:
            call = f"{name}({params[k]})"
        elif native:
            call = f"launch({name}_a, {extent}, {params[k]})"
        else:
            call = f"parallel_for({name}, {extent}, {params[k]})"
        calls.append("    " * depth + call)
    args = [*(b.name for b in func.args), *symbols]
    scratch = {n: (r.size_text(size), dtype) for n, (size, dtype) in r.hoisted.items()}
    return "\n".join(out + python_entry(func.name, args, scratch, calls)) + "\n"


def python_entry(
    name: str, args: list[str], scratch: dict[str, tuple[str, str]], calls: list[str]
) -> list[str]:
    """A kernel's entry as plain Python: it takes the kernel's ``args``, allocates its
    ``scratch`` (name -> element count as source, dtype) and runs ``calls``.

    Plain Python, not a compiled function calling the compiled ones: Numba
    links a callee's code into its caller's and optimizes it again there (a
    serial matmul with a packed panel compiled in 5.3 s with a compiled
    entry, 2.0 without).
    """
    pooled = [
        (n, size, dtype)
        for n, (size, dtype) in scratch.items()
        if not size.isdigit() or int(size) * np.dtype(dtype).itemsize >= _POOLED_BYTES
    ]
    out = [f"_{name}_scratch = []"] if pooled else []
    out.append(f"def {name}({', '.join(args)}):")
    out += [
        f"    {n} = np.empty({size}, np.{dtype})"
        for n, (size, dtype) in scratch.items()
        if n not in {p[0] for p in pooled}
    ]
    out += _take_scratch(f"_{name}_scratch", pooled)
    out += calls
    if pooled:
        out.append(f"    _{name}_scratch.append(_set)")
    return out


#: Scratch from this size on is kept between calls (``_take_scratch``); smaller scratch is
#: allocated per call, from the heap the kernel before has just freed, still in cache
#: (glibc's ``malloc`` maps memory of its own only from 128 KiB).
_POOLED_BYTES = 128 * 1024


def _take_scratch(pool: str, buffers: list[tuple[str, str, str]]) -> list[str]:
    """The entry's large scratch (name, element count as source, dtype): a set of buffers
    from the kernel's ``pool`` of earlier calls', or new ones.

    Large scratch allocated afresh each call (``np.empty``) is memory the allocator
    maps anew (or trims from the heap's top and takes back): every call faulted in and
    zeroed the pages its threads touch. A Winograd convolution of 64 -> 64 channels at
    56 x 56 ran 0.40 ms so and 0.25 ms with its buffers kept (Zen 5, 2 threads). The
    pool holds a set per concurrent call: a call pops one (``list.pop`` is atomic under
    the GIL, so two calls never share one), takes new buffers where a set is smaller
    than this call's symbols need, and puts it back when done; a call that raises
    drops its set.
    """
    if not buffers:
        return []
    fresh = "".join(f"np.empty({size}, np.{dtype}), " for _, size, dtype in buffers)
    unpack = f"    {''.join(f'{n}, ' for n, _, _ in buffers)}= _set"
    if all(size.isdigit() for _, size, _ in buffers):  # constant sizes: any set will do
        return [f"    _set = {pool}.pop() if {pool} else ({fresh})", unpack]
    sizes = "".join(f"{size}, " for _, size, _ in buffers)
    return [
        f"    _set = {pool}.pop() if {pool} else ()",
        f"    if len(_set) == 0 or any(b.size < n for b, n in zip(_set, ({sizes}))):",
        f"        _set = ({fresh})",
        unpack,
    ]
