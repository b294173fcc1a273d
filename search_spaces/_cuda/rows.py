"""Row operators on a GPU (softmax, log-softmax, layer norm): one block per row, reductions
through shared memory.

With ``threads`` threads per block, block ``i`` handles row ``i`` (softmax shown)::

    for i in M:                                  # blockIdx.x
      barrier
      for l in threads:                          # threadIdx.x: one partial max per thread
        X_max_part[l] = max_k X[i, k*threads + l]    # in shared memory
      barrier
      X_max = max_l X_max_part[l]                # every thread, from shared memory
      (the same for the sum of exp(X - X_max))
      for jo in N / threads:
        for ji in threads:                       # threadIdx.x
          Y[i, jo*threads + ji] = exp(X[i, j] - X_max) / X_sum

Consecutive threads read consecutive columns (coalesced loads). The partials
are an intermediate whose lanes loop is bound to threads, so lowering keeps
them in the block's shared memory and fences them with barriers; the row's
totals are each thread's own. Softmax's exp is recomputed where it is read
(in the sum and the output), so nothing of a row but the partials is stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner import te
from tuner.schedule import Schedule
from tuner.space import ConfigSpace
from tuner.target import Target
from tuner.te import Tensor

from .._rows_define import LayerNormStages, SoftmaxStages
from . import threads_per_block

__all__ = [
    "block_per_row",
    "config_space",
    "default_config",
    "layer_norm_schedule",
    "softmax_schedule",
]

_THREADS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


def config_space(M: int, N: int, target: Target) -> ConfigSpace:
    """Threads per block (one row per block), no more than the row has columns."""
    limit = threads_per_block(target)
    sp = ConfigSpace()
    sp.define_knob("threads", _THREADS)
    sp.add_constraint(lambda c: c["threads"] <= limit, f"at most {limit} threads per block")
    sp.add_constraint(lambda c: c["threads"] <= N, "no more threads than columns")
    return sp.freeze()


def default_config(M: int, N: int, target: Target) -> dict[str, Any]:
    """256 threads per row, or the most the row has columns for."""
    limit = threads_per_block(target)
    return {"threads": max(t for t in _THREADS if t <= min(256, N, limit))}


def block_per_row(
    s: Schedule,
    out: Tensor,
    threads: int,
    attach: list[tuple[Tensor, Tensor]],
    partials: list[tuple[Tensor, Tensor]],
) -> None:
    """``out``'s rows on blocks, its columns on ``threads`` threads; each ``(stage, parent)`` of
    ``attach`` at its parent's row, each ``(partial, total)`` at its total's row with its
    lanes on the threads (the lane count is ``threads``)."""
    i, j = s[out].op.axis
    s[out].bind(i, "blockIdx.x")
    _, ji = s[out].split(j, factor=threads)
    s[out].bind(ji, "threadIdx.x")
    for T, parent in attach:
        s[T].compute_at(s[parent], i if parent is out else s[parent].op.axis[0])
    for part, total in partials:
        s[part].compute_at(s[total], s[total].op.axis[0])
        s[part].bind(s[part].op.axis[1], "threadIdx.x")


def softmax_schedule(
    cfg: Mapping[str, Any], M: int, N: int, dtype: str = "float32", log: bool = False
) -> tuple[Schedule, list[Tensor]]:
    """Softmax (log-softmax with ``log``), one block of ``threads`` threads per row."""
    threads = int(cfg["threads"])
    st = SoftmaxStages(M, N, threads, log, False, dtype)
    s = te.create_schedule(st.Y)
    if st.lse is None:
        attach = [(st.max, st.Y), (st.sum, st.Y)]
    else:
        attach = [(st.max, st.lse), (st.sum, st.lse), (st.lse, st.Y)]
    block_per_row(s, st.Y, threads, attach, [(st.max_part, st.max), (st.sum_part, st.sum)])
    return s, [st.X, st.Y]


def layer_norm_schedule(
    cfg: Mapping[str, Any], M: int, N: int, eps: float, dtype: str = "float32"
) -> tuple[Schedule, list[Tensor]]:
    """Layer norm, one block of ``threads`` threads per row: the mean's partial sums, then the
    centred squares' partial sums, each through shared memory."""
    threads = int(cfg["threads"])
    ln = LayerNormStages(M, N, threads, eps, dtype)
    s = te.create_schedule(ln.Y)
    attach = [(ln.sum, ln.mean), (ln.mean, ln.Y), (ln.sq, ln.rstd), (ln.rstd, ln.Y)]
    block_per_row(s, ln.Y, threads, attach, [(ln.sum_part, ln.sum), (ln.sq_part, ln.sq)])
    return s, [ln.X, ln.gamma, ln.beta, ln.Y]
