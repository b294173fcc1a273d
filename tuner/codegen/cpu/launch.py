"""Launch a kernel's parallel loop on Numba's threading layer: one ``prange`` for every kernel.

A generated kernel's parallel loop is a ``nogil`` function over a range of its
iterations, ``<name>_p<k>(lo, hi, *arrays)``. :func:`launch` cuts ``[0, n)``
into a chunk per thread and runs them with ``prange`` (OpenMP or TBB threads,
which wait for work outside the GIL). It calls the chunk function through its
address, so it is compiled once per list of argument types and cached on
disk: a launcher compiled for each kernel (a ``prange`` whose body is the one
call) cost 1.3 s more per kernel, the chunk function being linked and
optimized into it again.

Two chunks of an empty loop cost about 3 us more than a plain call here,
against about 25 us on ``threads.parallel_for``'s Python pool.
"""

from __future__ import annotations

from typing import Any

import numba
from numba import prange, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["chunk_address", "launch"]


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


@numba.njit(nogil=True, parallel=True, cache=True)
def launch(address, n, threads, *args):  # type: ignore[no-untyped-def]  # pragma: no cover - jitted
    """``fn(lo, hi, *args)`` over ``[0, n)`` in ``min(threads, n)`` chunks whose sizes differ by
    at most one (as ``threads.chunks`` cuts them), ``fn`` at ``address`` (:func:`chunk_address`)."""
    parts = min(threads, n)
    for t in prange(parts):
        fn = _chunk_function(address, args)  # type: ignore[call-arg, var-annotated]
        fn((n * t) // parts, (n * (t + 1)) // parts, *args)
