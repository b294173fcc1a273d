"""Matmul on a GPU: a block tile in shared memory, a register tile per thread.

With ``ty x tx`` threads per block and an ``ry x rx`` register tile per thread,
each block computes a ``(ty*ry) x (tx*rx)`` tile of ``C``::

    for bi in M / (ty*ry):                 # blockIdx.y
      for bj in N / (tx*rx):               # blockIdx.x
        for ti in ty:                      # threadIdx.y
          for tj in tx:                    # threadIdx.x
            C_local[ry, rx] = 0            # registers (cache_write "local")
            for ko in K / kc:
              barrier
              A_shared[ty*ry, kc] = A[...]  # copied by all ty*tx threads together
              B_shared[kc, tx*rx] = B[...]
              barrier
              for ki in kc:
                for ii in ry:              # unrolled when ``unroll``
                  for ji in rx:
                    C_local[ii, ji] += A_shared[ti*ry + ii, ki] * B_shared[ki, tj*rx + ji]
            C[...] = C_local               # guarded where the tile passes the edge

Without ``shared`` the threads read A and B from global memory. A fused
epilogue (bias, activation, residual) is applied by each thread to its
register tile as it is stored (see :func:`schedule`). The knobs are
the thread and register tiles, the k tile and the unrolling; constraints keep
the block within the target's threads and shared memory per block.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tuner import te
from tuner.schedule import AxisRef, Schedule
from tuner.space import ConfigSpace
from tuner.target import Target
from tuner.te import Tensor

from . import pow2_at_least, threads_per_block

__all__ = ["config_space", "default_config", "schedule"]

_THREADS = [1, 2, 4, 8, 16, 32]
_REGISTERS = [1, 2, 4, 8]
_KC = [1, 2, 4, 8, 16, 32]


def _shared_bytes(c: Mapping[str, Any], itemsize: int) -> int:
    rows, cols = int(c["ty"]) * int(c["ry"]), int(c["tx"]) * int(c["rx"])
    return (rows + cols) * int(c["kc"]) * itemsize if c["shared"] else 0


def config_space(M: int, N: int, K: int, dtype: str, target: Target) -> ConfigSpace:
    """Threads per block (``ty x tx``), register tile (``ry x rx``), k tile, shared, unroll."""
    limit = threads_per_block(target)
    shared = int(target.get("max_shared_memory_per_block", 0))
    itemsize = np.dtype(dtype).itemsize
    sp = ConfigSpace()
    for name, values in (
        ("ty", _THREADS),
        ("tx", _THREADS),
        ("ry", _REGISTERS),
        ("rx", _REGISTERS),
    ):
        sp.define_knob(name, values)
    sp.define_knob("kc", _KC)
    sp.define_knob("shared", [True, False])
    sp.define_knob("unroll", [True, False])
    sp.add_constraint(lambda c: c["ty"] * c["tx"] <= limit, f"at most {limit} threads per block")
    sp.add_constraint(
        lambda c: _shared_bytes(c, itemsize) <= shared,
        f"the shared tiles fit the block's {shared} bytes",
    )
    sp.add_constraint(
        lambda c: c["ty"] * c["ry"] <= pow2_at_least(M), "a block tile no taller than M"
    )
    sp.add_constraint(
        lambda c: c["tx"] * c["rx"] <= pow2_at_least(N), "a block tile no wider than N"
    )
    sp.add_constraint(lambda c: c["kc"] <= pow2_at_least(K), "a k tile no longer than K")
    return sp.freeze()


def _fit(n: int) -> tuple[int, int]:
    """Threads and registers along an axis of ``n``: 16 threads of 4 where n allows."""
    regs = 4 if n >= 64 else 2 if n >= 16 else 1
    return min(16, max(1, pow2_at_least(n) // regs)), regs


def default_config(M: int, N: int, K: int, target: Target) -> dict[str, Any]:
    """16 x 16 threads of 4 x 4 registers (a 64 x 64 block tile), k tiles of 8, in shared memory.

    Smaller matrices get fewer threads and registers, so that a block tile is
    no larger than the matrix.
    """
    ty, ry = _fit(M)
    tx, rx = _fit(N)
    limit = threads_per_block(target)
    while ty * tx > limit:
        ty = max(1, ty // 2)
    return {
        "ty": ty,
        "tx": tx,
        "ry": ry,
        "rx": rx,
        "kc": min(8, pow2_at_least(K)),
        "shared": True,
        "unroll": True,
    }


def cooperative_copy(s: Schedule, T: Tensor, ty: int, tx: int) -> None:
    """Spread the copy of cache ``T`` over a block of ``ty x tx`` threads, x fastest."""
    axes = s[T].op.axis
    flat = s[T].fuse(*axes) if len(axes) > 1 else axes[0]
    _, inner = s[T].split(flat, factor=ty * tx)
    fy, fx = s[T].split(inner, factor=tx)
    s[T].bind(fy, "threadIdx.y")
    s[T].bind(fx, "threadIdx.x")


def _thread_tiles(
    s: Schedule, T: Tensor, ty: int, tx: int, ry: int, rx: int
) -> tuple[AxisRef, AxisRef, AxisRef, AxisRef]:
    """``T``'s rows and columns as blocks of ``ty x tx`` threads of ``ry x rx`` each, bound
    (and its leading batch axes, if any, on the grid's z).

    Returns the thread's column loop and its ``ry x rx`` loops (and leaves the
    reduction, if any, innermost: the caller places it).
    """
    *batch, i, j = s[T].op.axis
    bi, ri = s[T].split(i, factor=ty * ry)
    ti, ii = s[T].split(ri, factor=ry)
    bj, rj = s[T].split(j, factor=tx * rx)
    tj, ji = s[T].split(rj, factor=rx)
    s[T].reorder(*batch, bi, bj, ti, tj, ii, ji)
    if batch:  # one batch (a matrix of a batched matmul) per z of the grid
        s[T].bind(s[T].fuse(*batch) if len(batch) > 1 else batch[0], "blockIdx.z")
    s[T].bind(bi, "blockIdx.y")
    s[T].bind(bj, "blockIdx.x")
    s[T].bind(ti, "threadIdx.y")
    s[T].bind(tj, "threadIdx.x")
    return tj, ii, ji, bj


def schedule(
    cfg: Mapping[str, Any],
    A: Tensor,
    B: Tensor,
    C: Tensor,
    extras: Sequence[Tensor] = (),
    Y: Tensor | None = None,
) -> tuple[Schedule, list[Tensor]]:
    """The schedule of ``C = A @ B`` (any of its transposed forms, or a batch of them) for ``cfg``.

    With an epilogue ``Y = f(C, extras)``, ``Y`` takes the block and thread
    tiles and each thread computes its ``ry x rx`` piece of ``C`` (in its own
    registers, the k loop outermost so that every thread reaches the shared
    tiles' barriers) just before applying the epilogue to it.
    """
    ty, tx, ry, rx, kc = (int(cfg[k]) for k in ("ty", "tx", "ry", "rx", "kc"))
    s = te.create_schedule(Y if Y is not None else C)
    (k,) = s[C].op.reduce_axis
    if Y is None:
        tj, ii, ji, _ = _thread_tiles(s, C, ty, tx, ry, rx)
        ko, ki = s[C].split(k, factor=kc)
        s[C].reorder(ko, ki, ii, ji)
        CL = s.cache_write(C, "local")
        s[CL].compute_at(s[C], tj)
        unrolled = [ii, ji]
    else:
        tj, yi, yj, _ = _thread_tiles(s, Y, ty, tx, ry, rx)
        s[C].compute_at(s[Y], tj)
        ko, ki = s[C].split(k, factor=kc)
        s[C].reorder(ko, ki, *s[C].op.axis)
        unrolled = [yi, yj]
    if cfg["shared"]:
        for T in (A, B):
            TS = s.cache_read(T, "shared", [C])
            s[TS].compute_at(s[C], ko)
            cooperative_copy(s, TS, ty, tx)
    if cfg["unroll"]:
        stage = C if Y is None else Y
        for ax in unrolled:
            s[stage].unroll(ax)
    return s, [A, B, *extras, Y if Y is not None else C]
