"""Row softmax ``Y[M, N] = softmax(X[M, N], axis=1)``: definition, reference, knobs, schedule.

The algorithm is four stages, the numerically stable softmax::

    X_max[i]  = max_k X[i, k]
    X_exp[i, j] = exp(X[i, j] - X_max[i])
    X_sum[i]  = sum_k X_exp[i, k]
    Y[i, j]   = X_exp[i, j] / X_sum[i]

It is memory-bound, so the fast schedule works on each row while it is in
cache: inside one row loop of ``Y``, the max, the exp into the row of ``X_exp``,
the sum, then the divide (``reductions_at_row``, the default)::

    for io in M / rows_per_task:           # parallel across cores if chosen
      for ii in rows_per_task:             # row i = io * rows_per_task + ii
        X_max[i] = max_k X[i, k]                    # at X_exp's row loop
        X_exp[i, j] = exp(X[i, j] - X_max[i])       # j split by col_split, vectorized
        X_sum[i] = sum_k X_exp[i, k]
        Y[i, j] = X_exp[i, j] / X_sum[i]            # j split by col_split, vectorized

With ``interleave_sum`` the exp and sum stages sit at ``io`` instead, the sum's
loops ordered ``for k: for ii:`` so the task's rows accumulate side by side.

The other shapes keep the reductions at the root, each a whole pass over the
matrix (parallel over rows if chosen), with the exp stored or inlined into the
sum and the divide. Why no more than that: the exp stage is read by both the
sum and the divide, so it can sit at the output's row only together with the
sum; the max is read only by the exp stage, so it can be computed only inside
a stored exp (an inlined exp leaves the max at the root). The reductions'
column loops are never vectorized (a reduction axis cannot be), and a scalar
exp inside the sum loop is slow: storing the exp lets that loop vectorize.
A row sum is one serial chain of adds (no reassociation without fast-math):
interleaving gives rows_per_task independent chains.

>>> space = config_space(4096, 1024)
>>> s, tensors = schedule(space.sample(np.random.default_rng(0)), 4096, 1024)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tuner import te
from tuner.schedule import Schedule
from tuner.space import ConfigSpace
from tuner.te import Tensor

__all__ = [
    "bytes_moved",
    "config_space",
    "default_config",
    "define",
    "flops",
    "reference",
    "schedule",
]


def define(M: int, N: int, dtype: str = "float32") -> tuple[Tensor, Tensor]:
    """The input ``X`` and the output ``Y``; the max, exp and sum stages sit between."""
    X, *_, Y = _stages(M, N, dtype)
    return X, Y


def _stages(M: int, N: int, dtype: str) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """``X``, ``X_max``, ``X_exp``, ``X_sum`` and ``Y``, in dependency order."""
    X = te.placeholder((M, N), dtype, name="X")
    k1 = te.reduce_axis(N, name="k1")
    X_max = te.compute((M,), lambda i: te.max(X[i, k1], axis=k1), name="X_max")
    X_exp = te.compute((M, N), lambda i, j: te.exp(X[i, j] - X_max[i]), name="X_exp")
    k2 = te.reduce_axis(N, name="k2")
    X_sum = te.compute((M,), lambda i: te.sum(X_exp[i, k2], axis=k2), name="X_sum")
    Y = te.compute((M, N), lambda i, j: X_exp[i, j] / X_sum[i], name="Y")
    return X, X_max, X_exp, X_sum, Y


def reference(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def bytes_moved(M: int, N: int) -> float:
    """Compulsory traffic: ``X`` read once and ``Y`` written once (float32)."""
    return 2.0 * M * N * 4


def flops(M: int, N: int) -> float:
    """Per element: a compare, a subtract, an exp (counted as one), an add and a divide."""
    return 5.0 * M * N


def config_space(M: int, N: int, vector_lanes: int = 8) -> ConfigSpace:
    """Row tasks, parallelism, column vectors and where the exp and the reductions live."""
    sp = ConfigSpace()
    sp.define_knob("rows_per_task", [1, 2, 4, 8, 16, 32, 64])
    sp.define_knob("parallel", [True, False])
    sp.define_knob("col_split", [1, *(vector_lanes * f for f in (1, 2, 4, 8))])
    sp.define_knob("exp_inline", [True, False])
    sp.define_knob("reductions_at_row", [True, False])
    sp.define_knob("interleave_sum", [True, False])
    sp.add_constraint(lambda c: c["rows_per_task"] <= M, "a task holds no more rows than M")
    sp.add_constraint(
        lambda c: c["col_split"] <= max(N, vector_lanes),
        f"the column split is no wider than a row or one {vector_lanes}-lane vector",
    )
    sp.add_constraint(
        lambda c: not (c["exp_inline"] and c["reductions_at_row"]),
        "reductions at the row need a stored exp stage (the max is computed at its row)",
    )
    sp.add_constraint(
        lambda c: not c["interleave_sum"] or (c["reductions_at_row"] and c["rows_per_task"] > 1),
        "interleave_sum needs reductions at the row and more than one row per task",
    )
    return sp.freeze()


def default_config(M: int, N: int) -> dict[str, Any]:
    """The NUMBA_NOTES shape: per row max, exp into a row, sum, divide; parallel row tasks.

    Tasks of 4, 2 or 1 rows, whichever divides M: a partial last task makes Numba's
    parallel compile several times slower for no speed. No ``interleave_sum``:
    measured at 4096 x 1024 on one thread, it makes the serial kernel about 13%
    faster but the parallel one about 40% slower.
    """
    return {
        "rows_per_task": next(r for r in (4, 2, 1) if M % r == 0),
        "parallel": True,
        "col_split": 32 if N >= 32 else 8,
        "exp_inline": False,
        "reductions_at_row": True,
        "interleave_sum": False,
    }


def _vector_columns(s: Schedule, T: Tensor, col_split: int) -> None:
    """Split ``T``'s column loop by ``col_split`` and vectorize the inner part."""
    if col_split > 1:
        _, j = s[T].op.axis
        _, ji = s[T].split(j, factor=col_split)
        s[T].vectorize(ji)


def schedule(
    cfg: Mapping[str, Any], M: int, N: int, dtype: str = "float32"
) -> tuple[Schedule, list[Tensor]]:
    """The schedule for ``cfg`` (validate configs from outside against config_space first).

    With ``reductions_at_row`` the exp and sum stages are computed at the
    output's row loop (at its task loop with ``interleave_sum``, the sum's row
    loop innermost) and the max at the exp's row: every stage there is read
    only inside that loop, as lowering requires. The max has the exp stage as
    its only consumer, so an inlined exp leaves it (and the sum) at the root;
    parallel root stages each get a parallel row loop.
    """
    rows, col_split = int(cfg["rows_per_task"]), int(cfg["col_split"])
    X, X_max, X_exp, X_sum, Y = _stages(M, N, dtype)
    s = te.create_schedule(Y)
    i, _ = s[Y].op.axis
    io, ii = s[Y].split(i, factor=rows)
    _vector_columns(s, Y, col_split)
    if cfg["parallel"]:
        s[Y].parallel(io)
    if cfg["exp_inline"]:
        s[X_exp].compute_inline()
    else:
        _vector_columns(s, X_exp, col_split)
    if cfg["reductions_at_row"]:
        task = io if cfg["interleave_sum"] else ii
        s[X_exp].compute_at(s[Y], task)
        s[X_max].compute_at(s[X_exp], s[X_exp].op.axis[0])
        s[X_sum].compute_at(s[Y], task)
        if cfg["interleave_sum"]:
            s[X_sum].reorder(*s[X_sum].op.reduce_axis, *s[X_sum].op.axis)
    elif cfg["parallel"]:
        stored = [X_max, X_sum] if cfg["exp_inline"] else [X_max, X_exp, X_sum]
        for T in stored:
            s[T].parallel(s[T].op.axis[0])
    return s, [X, Y]


def _register() -> None:
    from . import Operator, Param, register_operator

    register_operator(
        Operator(
            name="softmax",
            doc="Y = softmax(X) over the last axis of an M x N matrix (memory-bound)",
            params=(Param("M", int, doc="rows"), Param("N", int, doc="columns (the softmax axis)")),
            space=lambda a: config_space(a["M"], a["N"]),
            schedule=lambda cfg, a: schedule(cfg, a["M"], a["N"]),
            default_config=lambda a: default_config(a["M"], a["N"]),
            reference=reference,
            flops=lambda a: flops(a["M"], a["N"]),
            bytes_moved=lambda a: bytes_moved(a["M"], a["N"]),
        )
    )


_register()
