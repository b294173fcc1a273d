"""Launch a kernel's parallel loop on Numba's threading layer: one launcher for every kernel.

A generated kernel's parallel loop is a ``nogil`` function over a range of its
iterations, ``<name>_p<k>(lo, hi, *arrays)``. :func:`launch` cuts ``[0, n)``
into a chunk per thread (``numba.get_num_threads()`` of them at most) and runs
them on the threads of Numba's layer, which wait for work outside the GIL. It
calls the chunk function through its address, so it is compiled once per list
of argument types and cached on disk: a launcher compiled for each kernel (a
``prange`` whose body is the one call) cost 1.3 s more per kernel, the chunk
function being linked and optimized into it again.

Where Numba's layer is OpenMP (GNU's, the one its wheels load on Linux), the
launcher starts the team itself with ``GOMP_parallel``, the entry point GCC
compiles ``#pragma omp parallel`` into, on the same library and so the same
threads as Numba's own parallel loops: a trampoline (``void(void *)``,
generated per argument types beside the launcher) reads the chunk's address,
the extent and the arguments from a record on the caller's stack, and each
thread of the team runs its chunks. Numba's ``prange`` does the same through
its gufunc scheduler, with arrays of schedules allocated per call: two chunks
of an empty loop cost 2.1 us that way against 1.1 us here (AMD Zen 5, two
threads, 2026-12-05; a plain call 0.3). Elsewhere (Intel's or LLVM's OpenMP
under other names, TBB) :func:`launch` is the ``prange`` one.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numba
from llvmlite import binding as llvm
from llvmlite import ir
from numba import prange, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["chunk_address", "gomp_loaded", "launch"]


def chunk_address(fn: Any) -> int:
    """The address of ``fn``'s compiled code (Numba's calling convention), for :func:`launch`.

    ``fn`` is a dispatcher with one signature, ``void(int64, int64, ...)``; the
    address lives as long as ``fn`` does (the kernel's module keeps both).
    """
    (cres,) = fn.overloads.values()
    return int(cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name))


@intrinsic
def _chunk_function(typingctx, address, args):  # type: ignore[no-untyped-def]
    """A first-class function value for ``void(int64, int64, *args)`` at ``address``."""
    fnty = types.FunctionType(types.void(types.int64, types.int64, *args.types))

    def codegen(context, builder, signature, llargs):  # type: ignore[no-untyped-def]
        fn = cgutils.create_struct_proxy(fnty)(context, builder)
        voidptr = context.get_value_type(types.voidptr)
        fn.c_addr = context.get_constant_null(types.voidptr)
        fn.py_addr = context.get_constant_null(types.voidptr)
        fn.jit_addr = builder.inttoptr(llargs[0], voidptr)  # called with Numba's convention
        return fn._getvalue()

    return fnty(address, args), codegen


# -- GNU OpenMP ---------------------------------------------------------------------------

#: The libgomp entry points the launcher calls, by the names its cached code links against.
_GOMP_SYMBOLS = ("GOMP_parallel", "omp_get_thread_num", "omp_get_num_threads")


def _gomp_library() -> str | None:
    """The path of the GNU OpenMP library this process has loaded (Linux), else None."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if "/libgomp" in path:
                    return path
    except OSError:
        return None
    return None


def _start_layer() -> str | None:
    """Start Numba's threading layer (as its own parallel loops do when they compile), so
    its choice is made and its functions (``get_num_threads``) are known to LLVM; its name."""
    try:
        from numba.np.ufunc import parallel

        parallel._launch_threads()
        return str(numba.threading_layer())
    except (ImportError, OSError, ValueError):
        return None


def _load_gomp(layer: str | None) -> bool:
    """Whether Numba's layer is GNU OpenMP; if so, its entry points are made known to LLVM."""
    path = _gomp_library() if layer == "omp" else None
    if path is None:
        return False
    try:
        lib = ctypes.CDLL(path)
        for name in _GOMP_SYMBOLS:
            llvm.add_symbol(name, ctypes.cast(getattr(lib, name), ctypes.c_void_p).value)
    except (OSError, AttributeError):
        return False
    return True


_I32, _I64 = ir.IntType(32), ir.IntType(64)
_BYTES = ir.IntType(8).as_pointer()
_TEAM_BODY = ir.FunctionType(ir.VoidType(), [_BYTES])


def _declare(module: ir.Module, name: str, fnty: ir.FunctionType) -> ir.Function:
    return cgutils.get_or_insert_function(module, fnty, name)


def _trampoline(context: Any, module: ir.Module, argtys: list[Any], record: ir.Type) -> Any:
    """``void(void *record)``, run by every thread of the team: the chunks ``t`` of
    ``[0, n)`` with ``t`` from the thread's number up to ``parts`` in steps of the team's
    size (all of them on one thread if OpenMP gave fewer than asked for)."""
    fn = ir.Function(module, _TEAM_BODY, name=module.get_unique_name("tuner_team_chunks"))
    fn.linkage = "internal"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    rec = b.bitcast(fn.args[0], record.as_pointer())

    def field(i: int) -> Any:
        return b.load(b.gep(rec, [_I32(0), _I32(i)]))

    address, n, parts = field(0), field(1), field(2)
    values = [field(3 + i) for i in range(len(argtys))]
    me = b.sext(b.call(_declare(module, "omp_get_thread_num", ir.FunctionType(_I32, [])), []), _I64)
    team = b.sext(
        b.call(_declare(module, "omp_get_num_threads", ir.FunctionType(_I32, [])), []), _I64
    )
    chunk_types = [types.int64, types.int64, *argtys]
    fnty = context.call_conv.get_function_type(types.void, chunk_types)
    chunk = b.inttoptr(address, fnty.as_pointer())
    entry = b.block
    head, body, done = (fn.append_basic_block(n) for n in ("head", "body", "done"))
    b.branch(head)
    b.position_at_end(head)
    t = b.phi(_I64)
    t.add_incoming(me, entry)
    b.cbranch(b.icmp_signed("<", t, parts), body, done)
    b.position_at_end(body)
    lo = b.sdiv(b.mul(n, t), parts)
    hi = b.sdiv(b.mul(n, b.add(t, _I64(1))), parts)
    context.call_conv.call_function(b, chunk, types.void, chunk_types, [lo, hi, *values])
    t.add_incoming(b.add(t, team), b.block)
    b.branch(head)
    b.position_at_end(done)
    b.ret_void()
    return fn


@intrinsic
def _gomp_team(typingctx, address, n, parts, args):  # type: ignore[no-untyped-def]
    """``GOMP_parallel`` of a team of ``parts`` threads over the chunks (see ``_trampoline``)."""
    argtys = list(args.types)

    def codegen(context, builder, signature, llargs):  # type: ignore[no-untyped-def]
        module = builder.module
        values = cgutils.unpack_tuple(builder, llargs[3], len(argtys))
        record = ir.LiteralStructType(
            [_I64, _I64, _I64, *(context.get_value_type(t) for t in argtys)]
        )
        body = _trampoline(context, module, argtys, record)
        slot = cgutils.alloca_once(builder, record)
        for i, v in enumerate([llargs[0], llargs[1], llargs[2], *values]):
            builder.store(v, builder.gep(slot, [_I32(0), _I32(i)]))
        gomp = _declare(
            module,
            "GOMP_parallel",
            ir.FunctionType(ir.VoidType(), [_TEAM_BODY.as_pointer(), _BYTES, _I32, _I32]),
        )
        parts = builder.trunc(llargs[2], _I32)
        builder.call(gomp, [body, builder.bitcast(slot, _BYTES), parts, _I32(0)])
        return context.get_dummy_value()

    return types.void(address, n, parts, args), codegen


@intrinsic
def _threads(typingctx):  # type: ignore[no-untyped-def]
    """Numba's thread count for this thread (``numba.get_num_threads()``, which a cached
    function cannot call: it holds a ctypes pointer), from the layer's own C function."""

    def codegen(context, builder, signature, llargs):  # type: ignore[no-untyped-def]
        # Declared as Numba's parallel loops declare it (an int read as intp), since one
        # module may hold both: the low 32 bits are the C int.
        fn = _declare(builder.module, "get_num_threads", ir.FunctionType(_I64, []))
        return builder.sext(builder.trunc(builder.call(fn, []), _I32), _I64)

    return types.int64(), codegen


@numba.njit(nogil=True, cache=True)
def _launch_gomp(address, n, *args):  # type: ignore[no-untyped-def]  # pragma: no cover - jitted
    """``fn(lo, hi, *args)`` over ``[0, n)`` in ``min(threads, n)`` chunks whose sizes differ by
    at most one (as ``threads.chunks`` cuts them), ``fn`` at ``address`` (:func:`chunk_address`)."""
    parts = min(_threads(), n)  # type: ignore[call-arg]
    if parts <= 1:
        fn = _chunk_function(address, args)  # type: ignore[call-arg, var-annotated]
        fn(0, n, *args)
    else:
        _gomp_team(address, n, parts, args)  # type: ignore[call-arg]


@numba.njit(nogil=True, parallel=True, cache=True)
def _launch_prange(address, n, *args):  # type: ignore[no-untyped-def]  # pragma: no cover - jitted
    """As ``_launch_gomp``, through Numba's ``prange`` (any thread-safe layer)."""
    parts = min(_threads(), n)  # type: ignore[call-arg]
    for t in prange(parts):
        fn = _chunk_function(address, args)  # type: ignore[call-arg, var-annotated]
        fn((n * t) // parts, (n * (t + 1)) // parts, *args)


#: Whether :func:`launch` starts GNU OpenMP teams itself.
gomp_loaded = _load_gomp(_start_layer())

#: ``launch(address, n, *args)``: the chunks of ``[0, n)`` over the threads.
launch = _launch_gomp if gomp_loaded else _launch_prange
