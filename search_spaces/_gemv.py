"""Dense for a small batch: vectors along the reduction (``vectors="k"``), W read once in place.

With one row of X the product is a matrix-vector one and memory-bound: each
weight is used once. The GotoBLAS nest still packs W into panels on every call
(a copy of the whole weight) and its register tile of one row leaves most of
its FMAs idle. Here each output feature's dot product runs along ``k`` in
vectors of the target's lanes, ``MR`` features at a time, from W's rows where
they lie::

    for jo in N / MR:                       # parallel
      for i in batch:
        acc[MR][L] = 0                      # registers
        for ko in K / L:
          for jr in MR:
            acc[jr, :] += X[i, ko*L : ko*L + L] * W[jo*MR + jr, ko*L : ko*L + L]
        C[jr] = sum(acc[jr, :]) (+ the K % L last products)
        Y[i, jo*MR + jr] = epilogue(C[jr])

The lane sums and the epilogue stay in the parallel loop, on the block just
computed: as a serial pass over the whole output after it they took a quarter
of the call (1 x 512 -> 1000 with bias: 22 us against 16, Zen 5, two threads).

MobileNetV2's classifier (1 x 1280 -> 1000) and ResNet-50's (1 x 2048 -> 1000)
on two threads: see ``search_spaces.dense.default_config``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner import te
from tuner.lower.extent import normal
from tuner.schedule import Schedule
from tuner.te import Tensor

__all__ = ["gemv_product", "schedule_gemv"]


def gemv_product(X: Tensor, W: Tensor, lanes: int) -> tuple[Tensor, Tensor, Tensor | None]:
    """``P[i, j, l]`` (lane-wise partial sums), ``C[i, j]`` (their sum) and the tail
    ``T[i, j]`` over the last ``K % lanes`` products (None when ``lanes`` divides K)."""
    M = normal(X.shape[0])  # the batch may be symbolic: its rows are independent
    K, N = normal(X.shape[1]), W.shape_ints[0]
    assert isinstance(K, int), "the reduction extent is constant"
    q, rem = divmod(K, lanes)
    ko = te.reduce_axis(q, name="ko")
    P = te.compute(
        (M, N, lanes),
        lambda i, j, v: te.sum(X[i, ko * lanes + v] * W[j, ko * lanes + v], axis=ko),
        name="P",
    )
    v = te.reduce_axis(lanes, name="v")
    tail = None
    if rem:
        t = te.reduce_axis(rem, name="t")
        tail = te.compute(
            (M, N), lambda i, j: te.sum(X[i, q * lanes + t] * W[j, q * lanes + t], axis=t), name="T"
        )
    C = te.compute((M, N), lambda i, j: te.sum(P[i, j, v], axis=v), name="C")
    return P, C, tail


def schedule_gemv(s: Schedule, cfg: Mapping[str, Any], Y: Tensor) -> None:
    """MR features' accumulators in registers over ``k``, then their sums, tail and epilogue,
    features in parallel (see above)."""
    mr = int(cfg["mr"])
    i, j = s[Y].op.axis
    jo, jr = s[Y].split(j, factor=mr)
    s[Y].reorder(jo, i, jr)
    if cfg["parallel"]:
        s[Y].parallel(jo)
    for name in ("C", "T"):
        if s.state.has(name):
            s[name].compute_at(s[Y], i)
    s["P"].compute_at(s[Y], i)
    pi, pj, pv = s["P"].op.axis
    (ko,) = s["P"].op.reduce_axis
    s["P"].reorder(pi, ko, pj, pv)
    s["P"].vectorize(pv)
    PL = s.cache_write(s.state.stage("P").tensor, "local")
    s[PL].compute_at(s["P"], pi)
