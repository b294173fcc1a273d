"""Row softmax and log-softmax over the last axis of ``X[M, N]``: definitions, knobs, schedules.

Both are the numerically stable forms::

    X_max[i]    = max_k X[i, k]
    X_exp[i, j] = exp(X[i, j] - X_max[i])
    X_sum[i]    = sum_k X_exp[i, k]
    softmax:      Y[i, j] = X_exp[i, j] * (1 / X_sum[i])
    log_softmax:  X_lse[i] = X_max[i] + log(X_sum[i]);  Y[i, j] = X[i, j] - X_lse[i]

They are memory-bound, so the fast schedule works on each row while it is in
cache (``reductions_at_row``, the default): inside one row loop of ``Y``, the
max, the exp, the sum (and the log), then the output (shown with the exp
stored, softmax's default)::

    for io in M / rows_per_task:               # parallel across cores if chosen
      for ii in rows_per_task:                 # row i
        X_max_part[i, l] = max_k X[i, k*lanes + l]     # lanes partial maxima
        X_max[i] = max_l X_max_part[i, l]
        X_exp[i, j] = exp(X[i, j] - X_max[i])          # j split by col_split
        X_sum_part[i, l] = sum_k X_exp[i, k*lanes + l]
        X_sum[i] = sum_l X_sum_part[i, l]
        Y[i, j] = ...                                  # j split by col_split

Why ``lanes``: a reduction is one serial chain of max or add operations (no
reassociation without fast-math), 3 to 4 cycles per element. Reducing into
``lanes`` partial results (``_rows_define.lane_reduce``, which also handles
rows that ``lanes`` does not divide) makes the chains independent; the
partials are combined once per row. How LLVM treats the lanes loop depends on its size:
a short loop with a small body (a plain max or sum, 32 lanes or fewer) is
unrolled fully before the loop vectorizer runs and stays scalar, while 64
or more lanes, or a body with an exp in it, are vectorized. With ``exp_inline`` the exp is recomputed where it is
read instead of stored (softmax: in the sum and the output; log-softmax reads
it once, in the sum). Stored at the row loop, it is a buffer of the task's
rows, in cache, and saves softmax its second exp; stored as a root pass
(without ``reductions_at_row``) it is a full-size buffer. Without ``reductions_at_row`` every stage is its own
pass over the matrix (parallel over rows if chosen), the shape NumPy is
limited to.

>>> space = config_space(4096, 1024)
>>> s, tensors = schedule(space.sample(np.random.default_rng(0)), 4096, 1024)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from tuner import te
from tuner.schedule import Schedule
from tuner.space import ConfigSpace
from tuner.target import Target
from tuner.te import Tensor

from ._cuda import is_gpu
from ._cuda import rows as gpu
from ._rows_define import SoftmaxStages
from ._target import resolve

__all__ = [
    "bytes_moved",
    "config_space",
    "default_config",
    "define",
    "flops",
    "log_reference",
    "reference",
    "row_schedule",
    "schedule",
]


def define(
    M: int, N: int, dtype: str = "float32", lanes: int = 1, log: bool = False
) -> tuple[Tensor, Tensor]:
    """The input ``X`` and the output ``Y`` (log-softmax with ``log``)."""
    st = SoftmaxStages(M, N, lanes, log, True, dtype)
    return st.X, st.Y


def reference(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def log_reference(x: np.ndarray) -> np.ndarray:
    shifted = x - x.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def bytes_moved(M: int, N: int) -> float:
    """Compulsory traffic: ``X`` read once and ``Y`` written once (float32)."""
    return 2.0 * M * N * 4


def flops(M: int, N: int) -> float:
    """Per element: a compare, a subtract, an exp (counted as one), an add and a multiply."""
    return 5.0 * M * N


def config_space(M: int, N: int, target: Target | None = None) -> ConfigSpace:
    """Row tasks, parallelism, column vectors, reduction lanes, where the exp and reductions live.

    The column split is 1, 2, 4 or 8 vectors of the target's lanes.
    """
    vector_lanes = resolve(target).lanes("float32")
    sp = ConfigSpace()
    sp.define_knob("rows_per_task", [1, 2, 4, 8, 16, 32, 64])
    sp.define_knob("parallel", [True, False])
    sp.define_knob("col_split", [1, *(vector_lanes * f for f in (1, 2, 4, 8))])
    sp.define_knob("lanes", [1, 4, 8, 16, 32, 64, 128])
    sp.define_knob("exp_inline", [True, False])
    sp.define_knob("reductions_at_row", [True, False])
    sp.define_knob("local_partials", [True, False], absent=False)
    sp.add_constraint(lambda c: c["rows_per_task"] <= M, "a task holds no more rows than M")
    sp.add_constraint(
        lambda c: c["col_split"] <= max(N, vector_lanes),
        f"the column split is no wider than a row or one {vector_lanes}-lane vector",
    )
    sp.add_constraint(lambda c: c["lanes"] <= N, "no more reduction lanes than columns")
    return sp.freeze()


def default_config(
    M: int, N: int, log: bool = False, target: Target | None = None
) -> dict[str, Any]:
    """Per row: a 64-lane max, the exp stored once, a 64-lane sum, the output; a task per row.

    The stored exp is a buffer of the task's rows (lowering sizes a stage
    computed at a loop to its region there, and each thread reuses its
    own), so storing it costs no memory traffic and saves the second exp.
    Log-softmax reads the exp once, in the sum, so it computes it there.

    64 lanes, their partials in registers: LLVM unrolls a lane loop of 32 or
    fewer fully before its loop vectorizer runs and leaves it scalar. The
    columns in 128s (8 vectors of 16 lanes; 64s with 8-lane vectors), one
    row per task. Softmax 4096 x 1024, 2 threads, one process (Xeon,
    AVX-512, 2026-12-02): 1.03 ms, against 1.08 with columns in 64s, 1.22 in
    32s, 1.61 with 16 lanes; PyTorch 1.13.
    """
    vector_lanes = resolve(target).lanes("float32")
    lanes = 64 if N >= 64 else next(n for n in (16, 8, 4, 1) if n <= N)
    if N >= 128:
        col_split = min(128, 8 * vector_lanes)
    else:
        col_split = max(32, vector_lanes) if N >= 32 else vector_lanes
    return {
        "rows_per_task": 1,
        "parallel": True,
        "col_split": col_split,
        "lanes": lanes,
        "exp_inline": log,
        "reductions_at_row": True,
        "local_partials": lanes > 32,
    }


def vector_columns(s: Schedule, T: Tensor, col_split: int) -> None:
    """Split ``T``'s last loop by ``col_split`` and vectorize the inner part."""
    if col_split > 1:
        j = s[T].op.axis[-1]
        _, ji = s[T].split(j, factor=col_split)
        s[T].vectorize(ji)


def row_schedule(
    s: Schedule,
    cfg: Mapping[str, Any],
    out: Tensor,
    attach: list[tuple[Tensor, Tensor | None]],
    partials: list[Tensor],
    vector_stages: list[Tensor],
) -> None:
    """The shared nest of the row operators (softmax, log-softmax, layer norm).

    ``attach`` lists ``(stage, parent)`` in dependency order: with
    ``reductions_at_row`` each stage is computed at its parent's row loop
    (``out``'s task-row loop for ``out``), a parent of None leaving it at the
    root; without, every stage is a pass at the root. Each stage here is
    attached to a stage that reads it directly (``compute_at`` also takes a
    consumer's consumer, as TVM's x86 softmax schedules the max and the exp
    at the output's row loop). Root passes are parallel over rows if chosen. The
    ``partials`` of lane reductions get their lanes loop innermost, and
    ``vector_stages`` their columns split by ``col_split``.
    """
    rows, col_split = int(cfg["rows_per_task"]), int(cfg["col_split"])
    i = s[out].op.axis[0]
    io, ii = s[out].split(i, factor=rows)
    for T in [out, *vector_stages]:
        vector_columns(s, T, col_split)
    if cfg["parallel"]:
        s[out].parallel(io)
    for part in partials:
        r, lane = s[part].op.axis[:2]  # a tuple's values' axis stays innermost, after lane
        (k,) = s[part].op.reduce_axis
        s[part].reorder(r, k, lane)
        if int(cfg["lanes"]) >= 8:
            s[part].vectorize(lane)
        if cfg.get("local_partials", False):
            s[s.cache_write(part, "local")].compute_at(s[part], r)
    for T, parent in attach:
        if cfg["reductions_at_row"] and parent is not None:
            s[T].compute_at(s[parent], ii if parent is out else s[parent].op.axis[0])
        elif cfg["parallel"]:
            s[T].parallel(s[T].op.axis[0])


def schedule(
    cfg: Mapping[str, Any], M: int, N: int, dtype: str = "float32", log: bool = False
) -> tuple[Schedule, list[Tensor]]:
    """The schedule for ``cfg`` (validate configs from outside against config_space first).

    With ``reductions_at_row`` the stages are computed at the row loop of a
    stage that reads them, nested so that every stage is read only inside
    the loop it is computed at (as lowering requires). Softmax: the max (at
    the stored exp's row, or at the output's row), the exp and the sum at
    the output's row. Log-softmax: the log-sum at the output's row, the max
    and the sum at its row, a stored exp at the row of the sum's partials.
    """
    st = SoftmaxStages(M, N, int(cfg["lanes"]), log, not cfg["exp_inline"], dtype)
    s = te.create_schedule(st.Y)
    attach: list[tuple[Tensor, Tensor | None]]
    if st.lse is None:
        attach = [(st.max, st.Y if st.exp is None else st.exp)]
        attach += [] if st.exp is None else [(st.exp, st.Y)]
        attach += [(st.sum, st.Y)]
    else:
        attach = [(st.max, st.lse)]
        attach += [] if st.exp is None else [(st.exp, st.sum_part)]
        attach += [(st.sum, st.lse), (st.lse, st.Y)]
    attach += [(st.max_part, st.max), (st.sum_part, st.sum)]
    vector = [] if st.exp is None else [st.exp]
    row_schedule(s, cfg, st.Y, attach, [st.max_part, st.sum_part], vector)
    return s, [st.X, st.Y]


def _space_of(args: Mapping[str, Any], target: Target) -> ConfigSpace:
    if is_gpu(target):
        return gpu.config_space(args["M"], args["N"], target)
    return config_space(args["M"], args["N"], target)


def _schedule_of(
    cfg: Mapping[str, Any], args: Mapping[str, Any], target: Target, log: bool
) -> tuple[Schedule, list[Tensor]]:
    if is_gpu(target):
        return gpu.softmax_schedule(cfg, args["M"], args["N"], log=log)
    return schedule(cfg, args["M"], args["N"], log=log)


def _default_of(args: Mapping[str, Any], target: Target, log: bool) -> dict[str, Any]:
    if is_gpu(target):
        return gpu.default_config(args["M"], args["N"], target)
    return default_config(args["M"], args["N"], log, target)


def _register() -> None:
    from . import Operator, Param, register_operator

    params = (
        Param("M", int, doc="rows", pad=0.0),
        # exp(-inf - max) is 0: a padded column adds nothing to the max or the sum
        Param("N", int, doc="columns (the reduced axis)", pad=float("-inf")),
    )
    for name, log, ref, what in (
        ("softmax", False, reference, "softmax(X)"),
        ("log_softmax", True, log_reference, "log(softmax(X))"),
    ):
        register_operator(
            Operator(
                name=name,
                doc=f"Y = {what} over the last axis of an M x N matrix (memory-bound)",
                params=params,
                space=_space_of,
                schedule=functools.partial(_schedule_of, log=log),
                default_config=functools.partial(_default_of, log=log),
                reference=ref,
                flops=lambda a: flops(a["M"], a["N"]),
                bytes_moved=lambda a: bytes_moved(a["M"], a["N"]),
            )
        )


_register()
