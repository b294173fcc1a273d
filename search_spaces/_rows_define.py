"""The row operators' definitions: softmax, log-softmax and layer norm over the last axis of
``X[M, N]``, and the lane reduction their row statistics go through.

Their CPU schedules (``softmax``, ``norm``) and the GPU ones (``_cuda.rows``)
schedule these stages. A row's max or sum is ``lane_reduce``'s two stages::

    X_max_part[i, l] = max_k X[i, k*lanes + l]      # lanes partial results per row
    X_max[i]         = max_l X_max_part[i, l]       # combined as a balanced tree
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tuner import te
from tuner.te import Expr, Tensor

__all__ = ["SUMS", "LayerNormStages", "SoftmaxStages", "lane_reduce"]

_REDUCERS = {"sum": te.sum, "max": te.max}


def lane_reduce(
    combiner: str | te.CommReducer,
    source: Callable[[Any, Any], Any],
    M: int,
    N: int,
    lanes: int,
    name: str,
) -> tuple[Tensor, Tensor]:
    """Reduce ``source(i, j)`` over ``j < N`` through ``lanes`` partial results per row.

    ``name_part[i, l]`` combines ``source(i, start(k) + l)`` over the chunks
    ``k < ceil(N / lanes)``, and ``name[i]`` combines the partials. When
    ``lanes`` does not divide ``N``, the last chunk starts at ``N - lanes``
    and overlaps the one before: a max may see an element twice, a sum
    multiplies the elements seen before by 0. So only the partials read the
    source (an operator may compute it inside them), and every chunk is one
    contiguous run of ``lanes`` elements. Needs ``1 <= lanes <= N``.

    A tuple reducer (``te.comm_reducer``) whose values are all sums takes a
    ``source`` that gives a tuple: the partials and the total then have its
    values' axis last, and the total merges the partials' tuples.
    """
    if isinstance(combiner, te.CommReducer):
        return _tuple_lane_sums(combiner, source, M, N, lanes, name)
    reduce = _REDUCERS[combiner]
    if isinstance(N, te.Var) and N.lo < lanes:
        # A symbolic row as short as N.lo: fewer lanes keep every chunk inside the row.
        lanes = 1 << (N.lo.bit_length() - 1)
    k = te.reduce_axis(-(-N // lanes), name=f"{name}_k")

    def element(i: Any, lane: Any) -> Expr:
        if isinstance(N, int) and N % lanes == 0:
            return source(i, k * lanes + lane)
        if not isinstance(N, int | te.Var):  # a row length of unknown least value
            return _any_length(i, lane)
        start, fresh = _last_chunk(k, lane, lanes, N)
        value = source(i, start + lane)
        if combiner == "sum":
            value = value * fresh.astype(value.dtype)
        return value

    def _any_length(i: Any, lane: Any) -> Expr:
        """Chunk ``k``'s lane for a row of any length: past the end it reads the last element
        again (a max does not mind) and a sum counts it as 0."""
        j = k * lanes + lane
        value = source(i, te.minimum(j, N - 1))
        if combiner == "sum":
            value = value * te.if_then_else(j < N, 1.0, 0.0).astype(value.dtype)
        return value

    part = te.compute(
        (M, lanes), lambda i, lane: reduce(element(i, lane), axis=k), name=f"{name}_part"
    )
    combine = te.maximum if combiner == "max" else _add
    total = te.compute(
        (M,), lambda i: _fold(combine, [part[i, n] for n in range(lanes)]), name=name
    )
    return part, total


def _add(a: Expr, b: Expr) -> Expr:
    return a + b


def _fold(combine: Callable[[Expr, Expr], Expr], values: list[Expr]) -> Expr:
    """``values`` combined as a balanced tree, pairs of neighbours first.

    How a row's partial results become its total. A reduction over the lanes
    is one serial chain (LLVM keeps the order of a float max or sum), 64
    dependent scalar steps of 4 cycles for 64 lanes, once per row: with the
    lanes' own vector work at a few cycles per element, the folds of max and
    sum took about a fifth of a softmax row of 1024. The tree's depth is
    ``log2(lanes)``, and each level's operations are independent (the SLP
    vectorizer packs the wide ones).
    """
    while len(values) > 1:
        pairs = [combine(a, b) for a, b in zip(values[::2], values[1::2], strict=False)]
        values = pairs + values[len(pairs) * 2 :]
    return values[0]


def _last_chunk(k: Any, lane: Any, lanes: int, N: Any) -> tuple[Expr, Expr]:
    """Where chunk ``k`` starts (the last one at ``N - lanes``, overlapping the one before)
    and 1 where ``lane`` is an element no earlier chunk saw, else 0 (a sum's mask)."""
    start = te.minimum(k * lanes, N - lanes)
    return start, te.if_then_else(start + lane >= k * lanes, 1.0, 0.0)


def _tuple_lane_sums(
    reducer: te.CommReducer,
    source: Callable[[Any, Any], tuple[Expr, ...]],
    M: int,
    N: int,
    lanes: int,
    name: str,
) -> tuple[Tensor, Tensor]:
    """``lane_reduce`` for a tuple reducer of sums (overlapping chunks count as 0)."""
    if not isinstance(N, int):
        raise TypeError(f"{name}: a tuple of lane sums needs a constant row length")
    k = te.reduce_axis(-(-N // lanes), name=f"{name}_k")

    def element(i: Any, lane: Any) -> tuple[Expr, ...]:
        if N % lanes == 0:
            return tuple(source(i, k * lanes + lane))
        start, fresh = _last_chunk(k, lane, lanes, N)
        return tuple(v * fresh.astype(v.dtype) for v in source(i, start + lane))

    part = te.compute(
        (M, lanes), lambda i, lane: reducer(element(i, lane), axis=k), name=f"{name}_part"
    )
    n = int(part.shape[-1].value)  # type: ignore[attr-defined]
    total = te.compute(
        (M, n), lambda i, v: _fold(_add, [part[i, lane, v] for lane in range(lanes)]), name=name
    )
    return part, total


# -- softmax ------------------------------------------------------------------


class SoftmaxStages:
    """The tensors of one (log-)softmax, in dependency order.

    With ``stored_exp`` the exp is a stage of its own; without, the sum and
    the output compute ``exp(X - X_max)`` themselves, so they read the max
    directly and it can sit at their row (an inlined stage would hide it).
    """

    def __init__(
        self, M: int, N: int, lanes: int, log: bool, stored_exp: bool, dtype: str = "float32"
    ):
        X = te.placeholder((M, N), dtype, name="X")
        self.X = X
        self.max_part, self.max = lane_reduce("max", lambda i, j: X[i, j], M, N, lanes, "X_max")
        X_max = self.max

        def exp(i: Any, j: Any) -> Expr:
            return te.exp(X[i, j] - X_max[i])

        self.exp: Tensor | None = None
        if stored_exp:
            X_exp = te.compute((M, N), exp, name="X_exp")
            self.exp = X_exp

            def exp(i: Any, j: Any) -> Expr:
                return X_exp[i, j]

        self.sum_part, self.sum = lane_reduce("sum", exp, M, N, lanes, "X_sum")
        X_sum = self.sum
        self.lse: Tensor | None = None
        if log:
            lse = te.compute((M,), lambda i: X_max[i] + te.log(X_sum[i]), name="X_lse")
            self.lse = lse
            self.Y = te.compute((M, N), lambda i, j: X[i, j] - lse[i], name="Y")
        else:
            one = te.const(1.0, dtype)
            self.Y = te.compute((M, N), lambda i, j: exp(i, j) * (one / X_sum[i]), name="Y")


# -- layer norm ---------------------------------------------------------------


#: Two sums carried together (a tuple reduction): one pass over a row for its moments.
SUMS = te.comm_reducer(lambda a, b: (a[0] + b[0], a[1] + b[1]), lambda t: (0.0, 0.0), "sums")


class LayerNormStages:
    """The tensors of one layer norm, in dependency order.

    With ``one_pass`` the row's sum and sum of squares are one tuple reduction
    (``SUMS``), each element shifted by the row's first one: with ``d = x -
    x[0]``, the mean is ``x[0] + sum(d) / N`` and the variance ``sum(d*d) / N
    - (sum(d) / N)**2``. The shift keeps the subtraction accurate where the
    mean is large against the spread (a plain sum of squares loses every
    digit there): the first element's own deviation is part of the variance,
    ``var >= (x[0] - mean)**2 / N``, so the cancellation costs at most about
    ``N`` units of rounding (5e-5 relative at N = 768 in float32). The
    two-pass form is exact whatever the data.
    """

    def __init__(
        self, M: int, N: int, lanes: int, eps: float, dtype: str = "float32", one_pass: bool = False
    ):
        X = te.placeholder((M, N), dtype, name="X")
        gamma = te.placeholder((N,), dtype, name="gamma")
        beta = te.placeholder((N,), dtype, name="beta")
        self.X, self.gamma, self.beta = X, gamma, beta
        # A symbolic N (a generic kernel's) divides at run time, once per row.
        inv_n = 1.0 / N.astype(dtype) if isinstance(N, te.Expr) else te.const(1.0 / N, dtype)
        self.one_pass = one_pass
        if one_pass:
            self._moments(M, N, lanes, eps, dtype, inv_n)
            return
        self.sum_part, self.sum = lane_reduce("sum", lambda i, j: X[i, j], M, N, lanes, "X_sum")
        X_sum = self.sum
        self.mean = te.compute((M,), lambda i: X_sum[i] * inv_n, name="X_mean")
        mean = self.mean

        def centred_square(i: Any, j: Any) -> te.Expr:
            d = X[i, j] - mean[i]
            return d * d

        self.sq_part, self.sq = lane_reduce("sum", centred_square, M, N, lanes, "X_sq")
        X_sq = self.sq
        self.rstd = te.compute(
            (M,),
            lambda i: te.const(1.0, dtype) / te.sqrt(X_sq[i] * inv_n + te.const(eps, dtype)),
            name="X_rstd",
        )
        self._output(M, N)

    def _moments(self, M: int, N: int, lanes: int, eps: float, dtype: str, inv_n: te.Expr) -> None:
        X = self.X

        def shifted(i: Any, j: Any) -> tuple[te.Expr, te.Expr]:
            d = X[i, j] - X[i, 0]
            return d, d * d

        self.sum_part, self.sum = lane_reduce(SUMS, shifted, M, N, lanes, "X_moments")
        S = self.sum
        self.mean = te.compute((M,), lambda i: X[i, 0] + S[i, 0] * inv_n, name="X_mean")

        def rstd(i: Any) -> te.Expr:
            m = S[i, 0] * inv_n
            var = te.maximum(S[i, 1] * inv_n - m * m, te.const(0.0, dtype))
            return te.const(1.0, dtype) / te.sqrt(var + te.const(eps, dtype))

        self.rstd = te.compute((M,), rstd, name="X_rstd")
        self._output(M, N)

    def _output(self, M: int, N: int) -> None:
        X, gamma, beta, mean, rstd = self.X, self.gamma, self.beta, self.mean, self.rstd
        self.Y = te.compute(
            (M, N),
            lambda i, j: (X[i, j] - mean[i]) * rstd[i] * gamma[j] + beta[j],
            name="Y",
        )
