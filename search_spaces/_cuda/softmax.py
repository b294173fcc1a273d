"""Softmax and log-softmax on a GPU: one block per row, reductions through shared memory.

With ``threads`` threads per block, block ``i`` handles row ``i``::

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
them in the block's shared memory and fences them with barriers. The exp is
recomputed where it is read (in the sum and the output), so nothing of a row
but the partials is stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner import te
from tuner.schedule import Schedule
from tuner.space import ConfigSpace
from tuner.target import Target
from tuner.te import Tensor

from . import threads_per_block

__all__ = ["config_space", "default_config", "schedule"]

_THREADS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


def config_space(M: int, N: int, target: Target) -> ConfigSpace:
    """Threads per block (one row per block); no more than the row's columns, rounded up."""
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


def schedule(
    cfg: Mapping[str, Any], M: int, N: int, dtype: str = "float32", log: bool = False
) -> tuple[Schedule, list[Tensor]]:
    """One block per row of ``threads`` threads; see the module's docstring."""
    from ..softmax import _Stages  # the operator's module imports this one

    threads = int(cfg["threads"])
    st = _Stages(M, N, threads, log, False, dtype)
    s = te.create_schedule(st.Y)
    i, j = s[st.Y].op.axis
    s[st.Y].bind(i, "blockIdx.x")
    _, ji = s[st.Y].split(j, factor=threads)
    s[st.Y].bind(ji, "threadIdx.x")
    if st.lse is None:
        row = [(st.max, st.Y), (st.sum, st.Y)]
    else:
        row = [(st.max, st.lse), (st.sum, st.lse), (st.lse, st.Y)]
    for T, parent in row:
        axis = i if parent is st.Y else s[parent].op.axis[0]
        s[T].compute_at(s[parent], axis)
    for part, total in ((st.max_part, st.max), (st.sum_part, st.sum)):
        s[part].compute_at(s[total], s[total].op.axis[0])
        _, lane = s[part].op.axis
        s[part].bind(lane, "threadIdx.x")
    return s, [st.X, st.Y]
