"""Row and column reductions on a GPU.

Over the last axis (one value per row), one block per row: its threads each
reduce a strided lane of the row into shared memory, and every thread
combines the lanes (and the row's ``N % threads`` tail)::

    for i in M:                              # blockIdx.x
      for l in threads:                      # threadIdx.x
        P[l] = sum_ko X[i, ko*threads + l]   # in shared memory
      barrier
      Y[i] = sum_r P[r] + tail

Over the first axis (one value per column), one thread per column walks down
it; neighbouring threads read neighbouring columns (coalesced)::

    for b in N / threads:                    # blockIdx.x
      for t in threads:                      # threadIdx.x
        Y[b*threads + t] = sum_k X[k, b*threads + t]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner import te
from tuner.schedule import Schedule
from tuner.space import ConfigSpace
from tuner.target import Target
from tuner.te import Tensor

from .._reduce_define import stages
from . import pow2_at_least, threads_per_block

__all__ = ["config_space", "default_config", "schedule"]

_THREADS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


def config_space(M: int, N: int, axis: int, target: Target) -> ConfigSpace:
    """Threads per block: lanes of a row (axis 1, at most N), or columns per block (axis 0)."""
    limit = threads_per_block(target)
    most = N if axis == 1 else pow2_at_least(N)
    sp = ConfigSpace()
    sp.define_knob("threads", _THREADS)
    sp.add_constraint(lambda c: c["threads"] <= limit, f"at most {limit} threads per block")
    sp.add_constraint(lambda c: c["threads"] <= most, f"at most {most} threads here")
    return sp.freeze()


def default_config(M: int, N: int, axis: int, target: Target) -> dict[str, Any]:
    """256 threads (fewer where the row or the columns are fewer)."""
    most = N if axis == 1 else pow2_at_least(N)
    return {"threads": max(t for t in _THREADS if t <= min(256, most, threads_per_block(target)))}


def schedule(
    cfg: Mapping[str, Any], kind: str, M: int, N: int, axis: int
) -> tuple[Schedule, list[Tensor]]:
    threads = int(cfg["threads"])
    X, P, R, Y = stages(kind, M, N, axis, threads if axis == 1 else 1)
    s = te.create_schedule(Y)
    (i,) = s[Y].op.axis
    if axis == 1:
        s[Y].bind(i, "blockIdx.x")
        s[R].compute_at(s[Y], i)
        if P is not None:
            s[P].compute_at(s[R], s[R].op.axis[0])
            s[P].bind(s[P].op.axis[1], "threadIdx.x")
    else:
        b, t = s[Y].split(i, factor=threads)
        s[Y].bind(b, "blockIdx.x")
        s[Y].bind(t, "threadIdx.x")
        s[R].compute_at(s[Y], t)
    return s, [X, Y]
