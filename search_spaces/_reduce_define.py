"""A row or column reduction's definition: the input, the lane partials, the reduction, the output.

``reduce``'s CPU schedules and the GPU schedule (``_cuda.reduce``) schedule
these stages::

    P[i, l] = sum_ko X[i, ko*L + l]           # L partial sums per row ("lanes", axis 1)
    R[i]    = sum_r P[i, r] (+ the N % L tail elements of the row)
    Y[i]    = R[i]  (R[i] / N for a mean)

With one lane (and over the first axis) there is no ``P``: ``R`` reduces ``X``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tuner import te
from tuner.te import Tensor

__all__ = ["stages"]

_COMBINER: dict[str, Callable[..., Any]] = {"sum": te.sum, "mean": te.sum, "max": te.max}


def stages(
    kind: str, M: int, N: int, axis: int, lanes: int
) -> tuple[Tensor, Tensor | None, Tensor, Tensor]:
    """``X``, the lane partials ``P`` (None for one lane), the reduction ``R`` and ``Y``."""
    combine = _COMBINER[kind]
    X = te.placeholder((M, N), "float32", name="X")
    extent = N if axis == 1 else M
    P: Tensor | None = None
    if axis == 0:
        k = te.reduce_axis(M, name="k")
        R = te.compute((N,), lambda j: combine(X[k, j], axis=k), name="R")
    elif lanes == 1:
        k = te.reduce_axis(N, name="k")
        R = te.compute((M,), lambda i: combine(X[i, k], axis=k), name="R")
    else:
        full, tail = N // lanes, N % lanes
        ko = te.reduce_axis(full, name="ko")
        P = te.compute((M, lanes), lambda i, l: combine(X[i, ko * lanes + l], axis=ko), name="P")
        part = P
        r = te.reduce_axis(lanes + tail, name="r")
        # Both reads stay in bounds for every r; the select picks the live one.
        R = te.compute(
            (M,),
            lambda i: combine(
                te.if_then_else(
                    r < lanes,
                    part[i, te.minimum(r, lanes - 1)],
                    X[i, full * lanes + te.maximum(r - lanes, 0)],
                ),
                axis=r,
            ),
            name="R",
        )
    if kind == "mean":
        Y = te.compute(R.shape, lambda i: R[i] / te.const(extent, "float32"), name="Y")
    else:
        Y = te.compute(R.shape, lambda i: R[i], name="Y")
    return X, P, R, Y
