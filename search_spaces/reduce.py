"""Row and column reductions of a matrix: ``reduce_sum``, ``reduce_mean``, ``reduce_max``.

``Y = X.sum(axis)`` (or ``.mean``, ``.max``) for ``X[M, N]`` with ``axis`` 1 (the
default: one value per row, ``Y[M]``) or 0 (one value per column, ``Y[N]``), like
``torch.sum(x, dim=axis)`` without ``keepdim``. A mean divides the sum by the
reduced extent. A max drops NaN (``max(acc, nan)`` keeps ``acc``), where NumPy
propagates it: the kernels compare and select, as vector max instructions do.

All three are memory-bound: every element of ``X`` is read once, and the fast
schedules read it at the speed of memory. Three stages make that possible
(``_reduce_define``)::

    P[i, l] = sum_ko X[i, ko*L + l]           # L partial sums per row ("lanes")
    R[i]    = sum_r P[i, r] (+ the N % L tail elements of the row)
    Y[i]    = R[i]  (R[i] / N for a mean)     # the output, where row tasks live

Over the last axis (``axis=1``) a row sum is one serial chain of adds (LLVM may
not reassociate float adds), so one accumulator runs at one add per add latency.
``lanes`` L splits the row into L interleaved partial sums: the lane loop is
innermost, vectorized, and with ``local`` the L partials live in registers, so
L/8 independent vector chains read the row at memory speed::

    for io in M / rows_per_task:               # parallel across cores if chosen
      for ii in rows_per_task:                 # row i
        P_local[0:L] = 0
        for ko in N // L:
          for l in L:  P_local[l] += X[i, ko*L + l]          # vectorized
        P[i, :] = P_local
        R[i] = sum of P[i, :] and of X[i, (N//L)*L:]          # short
        Y[i] = R[i]

With ``interleave_rows`` the partials of a whole task are accumulated side by
side (``for ko: for ii: for l:``), ``rows_per_task x L`` accumulators from as
many independent row streams; with ``lanes=1`` that is the classic interleaved
row sum. Without ``local`` the partials stay in memory (a load and a store per
add, usually slower: the knob is there so the search can confirm it).

Over the first axis (``axis=0``) the columns are independent, so the column loop
is vectorized directly and the reduction over rows runs outside it, ``row_unroll``
rows at a time (one load and store of the accumulators per ``row_unroll`` rows)::

    for jo in N / col_block:                   # parallel across cores if chosen
      R[block] = 0                             # R_local: registers with local
      for ko in M / row_unroll:
        for ji in col_block:                   # vectorized
          R[jo*col_block + ji] += X[ko*row_unroll + 0, jo*col_block + ji]
          ...                                  # row_unroll statements, unrolled
      Y[block] = R[block]

A narrow ``col_block`` with ``local`` keeps the accumulators in registers, but
walks down a column block with a stride of a whole row (the prefetchers and,
for power-of-two widths, the cache sets suffer: 2.6 GB/s at 4096 x 4096). A
wide one keeps them in L1 and reads ``X`` in long runs (8 GB/s with eight
rows unrolled, NumPy's ``x.sum(axis=0)`` 6.8, on a busy machine).

>>> space = config_space("sum", 4096, 4096, 1)
>>> s, tensors = schedule(default_config("sum", 4096, 4096, 1), "sum", 4096, 4096, 1)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from tuner import te
from tuner.schedule import Schedule
from tuner.space import ConfigSpace
from tuner.target import Target
from tuner.te import Tensor

from ._cuda import is_gpu
from ._cuda import reduce as gpu
from ._reduce_define import stages
from ._target import resolve

if TYPE_CHECKING:
    from . import Operator

__all__ = [
    "KINDS",
    "PARALLEL_MIN_BYTES",
    "bytes_moved",
    "config_space",
    "default_config",
    "define",
    "flops",
    "reference",
    "schedule",
]

#: The reductions this module registers, as ``reduce_<kind>``.
KINDS = ("sum", "mean", "max")

_LANES = (1, 8, 16, 32, 64)
_COL_BLOCKS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
_ROWS = (1, 2, 4, 8, 16)

#: Parallel by default only from this much traffic on: handing chunks to threads
#: costs tens of microseconds on a quiet machine and, measured on a busy one,
#: made a 4 MiB row sum 14 times slower (1.7 ms against 0.12), while a 64 MiB
#: one ran 1.6 times faster (2.1 ms against 3.4).
PARALLEL_MIN_BYTES = 8 << 20


def define(kind: str, M: int, N: int, axis: int, lanes: int = 1) -> tuple[Tensor, Tensor]:
    """The input ``X[M, N]`` and the output ``Y`` (``[M]`` for axis 1, ``[N]`` for axis 0)."""
    X, *_, Y = stages(kind, M, N, axis, lanes)
    return X, Y


def reference(kind: str, axis: int) -> Callable[[np.ndarray], np.ndarray]:
    """The NumPy reduction: ``x.sum(axis)``, ``x.mean(axis)`` or ``x.max(axis)``."""

    def ref(x: np.ndarray) -> np.ndarray:
        out: np.ndarray = getattr(x, kind)(axis=axis)
        return out

    return ref


def bytes_moved(M: int, N: int, axis: int) -> float:
    """Compulsory traffic: ``X`` read once and ``Y`` written once (float32)."""
    return 4.0 * (M * N + (M if axis == 1 else N))


def flops(M: int, N: int) -> float:
    """One add (or compare) per element of ``X``."""
    return float(M * N)


def _col_blocks(vector_lanes: int) -> list[int]:
    """``_COL_BLOCKS`` and one vector (4 lanes give a block narrower than 8)."""
    return sorted({vector_lanes, *_COL_BLOCKS})


def config_space(kind: str, M: int, N: int, axis: int, target: Target | None = None) -> ConfigSpace:
    """Lanes and row tasks for a row reduction; the column block for a column reduction.

    Local accumulators fit the target's vector registers.
    """
    tgt = resolve(target)
    vector_lanes, registers = tgt.lanes("float32"), tgt.vector_registers
    sp = ConfigSpace()
    sp.define_knob("parallel", [True, False])
    sp.define_knob("local", [True, False])
    if axis == 0:
        sp.define_knob("col_block", _col_blocks(vector_lanes))
        sp.define_knob("row_unroll", [1, 2, 4, 8])
        sp.add_constraint(lambda c: c["row_unroll"] <= M, "no more rows unrolled than M")
        sp.add_constraint(
            lambda c: c["col_block"] <= max(N, vector_lanes),
            f"the column block is no wider than a row or one {vector_lanes}-lane vector",
        )
        sp.add_constraint(
            lambda c: not c["local"] or c["col_block"] <= registers * vector_lanes,
            f"local accumulators fit {registers} vector registers",
        )
        return sp.freeze()
    sp.define_knob("lanes", list(_LANES))
    sp.define_knob("rows_per_task", list(_ROWS))
    sp.define_knob("interleave_rows", [True, False])
    sp.add_constraint(lambda c: c["lanes"] <= N, "no more lanes than columns")
    sp.add_constraint(lambda c: c["rows_per_task"] <= M, "a task holds no more rows than M")
    sp.add_constraint(
        lambda c: not c["interleave_rows"] or c["rows_per_task"] > 1,
        "interleave_rows needs more than one row per task",
    )
    sp.add_constraint(
        lambda c: (
            not c["local"]
            or c["lanes"] * (c["rows_per_task"] if c["interleave_rows"] else 1)
            <= registers * vector_lanes
        ),
        f"local accumulators fit {registers} vector registers",
    )
    return sp.freeze()


def default_config(
    kind: str, M: int, N: int, axis: int, target: Target | None = None
) -> dict[str, Any]:
    """Row reductions: 8 lanes of 4 interleaved rows in registers, parallel tasks.
    Column reductions: blocks of half a row (two parallel tasks), eight rows unrolled.

    Measured on one (busy) thread, CPU time, ``x.sum(axis=1)``: at 4096 x 4096,
    3.4 ms against NumPy's 5.4 and 3.9 ms for 32 lanes of one row; at
    1000 x 3000, 0.26 to 0.47 ms against NumPy's 1.0 and 0.67 ms for 32 lanes of
    one row. Partials kept in memory ran at half the speed.
    """
    parallel = bytes_moved(M, N, axis) >= PARALLEL_MIN_BYTES
    if axis == 0:
        lanes = resolve(target).lanes("float32")
        block = next(b for b in reversed(_col_blocks(lanes)) if b <= max(N // 2, lanes))
        unroll = next(u for u in (8, 4, 2, 1) if u <= M)
        return {"parallel": parallel, "local": False, "col_block": block, "row_unroll": unroll}
    rows = next(r for r in (4, 2, 1) if M % r == 0)
    return {
        "parallel": parallel,
        "local": True,
        "lanes": 8 if N >= 8 else 1,
        "rows_per_task": rows,
        "interleave_rows": rows > 1,
    }


def schedule(
    cfg: Mapping[str, Any], kind: str, M: int, N: int, axis: int
) -> tuple[Schedule, list[Tensor]]:
    """The schedule for ``cfg`` (validate configs from outside against config_space first)."""
    lanes = int(cfg["lanes"]) if axis == 1 else 1
    X, P, R, Y = stages(kind, M, N, axis, lanes)
    s = te.create_schedule(Y)
    if axis == 0:
        _schedule_columns(s, cfg, R, Y)
    else:
        _schedule_rows(s, cfg, P, R, Y)
    return s, [X, Y]


def _schedule_columns(s: Schedule, cfg: Mapping[str, Any], R: Tensor, Y: Tensor) -> None:
    block = int(cfg["col_block"])
    (j,) = s[Y].op.axis
    jo, ji = s[Y].split(j, factor=block)
    s[Y].vectorize(ji)
    if cfg["parallel"]:
        s[Y].parallel(jo)
    s[R].compute_at(s[Y], jo)
    (rj,) = s[R].op.axis
    (rk,) = s[R].op.reduce_axis
    rjo, rji = s[R].split(rj, factor=block)  # rjo has one iteration: a home for the cache
    unroll = int(cfg["row_unroll"])
    if unroll > 1:
        ko, ki = s[R].split(rk, factor=unroll)
        s[R].reorder(rjo, ko, rji, ki)
        s[R].unroll(ki)
    else:
        s[R].reorder(rjo, rk, rji)
        s[R].vectorize(rji)
    if cfg["local"]:
        RL = s.cache_write(R, "local")
        s[RL].compute_at(s[R], rjo)


def _schedule_rows(
    s: Schedule, cfg: Mapping[str, Any], P: Tensor | None, R: Tensor, Y: Tensor
) -> None:
    rows = int(cfg["rows_per_task"])
    interleave = bool(cfg["interleave_rows"])
    (i,) = s[Y].op.axis
    io, ii = s[Y].split(i, factor=rows)
    if cfg["parallel"]:
        s[Y].parallel(io)
    acc = R if P is None else P
    s[R].compute_at(s[Y], io if interleave else ii)
    if P is not None:
        (ri,) = s[R].op.axis
        rio, _ = s[R].split(ri, factor=rows if interleave else 1)  # rio: one iteration
        s[P].compute_at(s[R], rio)
    ai, *lane = s[acc].op.axis
    (ak,) = s[acc].op.reduce_axis
    aio, aii = s[acc].split(ai, factor=rows if interleave else 1)  # aio: one iteration
    s[acc].reorder(aio, ak, aii, *lane)
    if lane:
        s[acc].vectorize(lane[0])
    if cfg["local"]:
        AL = s.cache_write(acc, "local")
        s[AL].compute_at(s[acc], aio)


def _operator(kind: str) -> Operator:
    """The registry entry of ``reduce_<kind>``; its callables take the parsed arguments."""
    from . import Operator, Param

    def space(a: Mapping[str, Any], target: Target) -> ConfigSpace:
        if is_gpu(target):
            return gpu.config_space(a["M"], a["N"], a["axis"], target)
        return config_space(kind, a["M"], a["N"], a["axis"], target)

    def sched(
        cfg: Mapping[str, Any], a: Mapping[str, Any], target: Target
    ) -> tuple[Schedule, list[Tensor]]:
        if is_gpu(target):
            return gpu.schedule(cfg, kind, a["M"], a["N"], a["axis"])
        return schedule(cfg, kind, a["M"], a["N"], a["axis"])

    def default(a: Mapping[str, Any], target: Target) -> dict[str, Any]:
        if is_gpu(target):
            return gpu.default_config(a["M"], a["N"], a["axis"], target)
        return default_config(kind, a["M"], a["N"], a["axis"], target)

    def ref(x: np.ndarray, **args: Any) -> np.ndarray:
        """``reference(*inputs, **parsed_args)``; the axis defaults to 1 when no args come."""
        return reference(kind, int(args.get("axis", 1)))(x)

    axis_doc = "the reduced axis: 1 gives one value per row, 0 one per column"
    return Operator(
        name=f"reduce_{kind}",
        doc=f"Y = X.{kind}(axis) of an M x N float32 matrix (memory-bound)",
        params=(
            Param("M", int, doc="rows"),
            Param("N", int, doc="columns"),
            Param("axis", int, 1, (0, 1), doc=axis_doc, minimum=0),
        ),
        space=space,
        schedule=sched,
        default_config=default,
        reference=ref,
        flops=lambda a: flops(a["M"], a["N"]),
        bytes_moved=lambda a: bytes_moved(a["M"], a["N"], a["axis"]),
    )


def _register() -> None:
    from . import register_operator

    for kind in KINDS:
        register_operator(_operator(kind))


_register()
