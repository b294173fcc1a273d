"""Tuple reductions (``te.comm_reducer``) against NumPy: values combined together at each step."""

from __future__ import annotations

import numpy as np
import pytest

from tuner import build, te
from tuner.schedule import ScheduleError
from tuner.te import TensorError

SUMS = te.comm_reducer(lambda a, b: (a[0] + b[0], a[1] + b[1]), lambda t: (0.0, 0.0), "sums")


def _welford_combine(a: tuple[te.Expr, ...], b: tuple[te.Expr, ...]) -> tuple[te.Expr, ...]:
    """Chan et al.'s merge of (count, mean, M2) states; an element is (1, x, 0)."""
    n = a[0] + b[0]
    delta = b[1] - a[1]
    safe = te.maximum(n, 1.0)
    return n, a[1] + delta * b[0] / safe, a[2] + b[2] + delta * delta * a[0] * b[0] / safe


WELFORD = te.comm_reducer(_welford_combine, lambda t: (0.0, 0.0, 0.0), "welford")

#: (value, index): the first position of the largest value, as np.argmax.
ARGMAX = te.comm_reducer(
    lambda a, b: (
        te.if_then_else(b[0] > a[0], b[0], a[0]),
        te.if_then_else((b[0] > a[0]) | (te.equal(b[0], a[0]) & (b[1] < a[1])), b[1], a[1]),
    ),
    lambda t: (float("-inf"), float("inf")),
    "argmax",
)


def _run(s: te.Schedule, tensors: list[te.Tensor], *inputs: np.ndarray) -> np.ndarray:
    f = build(s, tensors, target="cpu")
    out = np.full(tuple(int(d.value) for d in tensors[-1].shape), np.nan, np.float32)
    f(*inputs, out)
    return out


@pytest.mark.parametrize("M,N", [(1, 1), (7, 13), (4, 64), (3, 101)])
def test_two_sums_in_one_pass(M: int, N: int) -> None:
    X = te.placeholder((M, N), name="X")
    k = te.reduce_axis(N, name="k")
    S = te.compute((M,), lambda i: SUMS((X[i, k], X[i, k] * X[i, k]), axis=k), name="S")
    assert [int(d.value) for d in S.shape] == [M, 2]
    x = np.random.default_rng(M * N).standard_normal((M, N)).astype(np.float32)
    out = _run(te.create_schedule(S), [X, S], x)
    np.testing.assert_allclose(out[:, 0], x.sum(1), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(out[:, 1], (x * x).sum(1), rtol=1e-5, atol=1e-4)


def test_every_value_is_combined_from_the_old_ones() -> None:
    """(a0 + b0, a1 + a0): the second value sums the running sum *before* each step; stored
    one after the other it would see the new one."""
    N = 9
    X = te.placeholder((2, N), name="X")
    k = te.reduce_axis(N, name="k")
    lagged = te.comm_reducer(lambda a, b: (a[0] + b[0], a[1] + a[0]), lambda t: (0.0, 0.0), "lag")
    S = te.compute((2,), lambda i: lagged((X[i, k], X[i, k]), axis=k), name="S")
    x = np.arange(2 * N, dtype=np.float32).reshape(2, N)
    out = _run(te.create_schedule(S), [X, S], x)
    running = np.cumsum(x, axis=1)
    np.testing.assert_allclose(out[:, 1], running[:, :-1].sum(1))  # not running.sum(1)
    assert not np.allclose(out[:, 1], running.sum(1))


@pytest.mark.parametrize("N", [1, 5, 128])
def test_online_softmax_state_at_the_rows_loop(N: int) -> None:
    """A running maximum and a sum rescaled to it, computed at each row of the output."""
    M = 6
    X = te.placeholder((M, N), name="X")
    k = te.reduce_axis(N, name="k")

    def combine(a: tuple[te.Expr, ...], b: tuple[te.Expr, ...]) -> tuple[te.Expr, ...]:
        m = te.maximum(a[0], b[0])
        return m, a[1] * te.exp(a[0] - m) + b[1] * te.exp(b[0] - m)

    online = te.comm_reducer(combine, lambda t: (float("-inf"), 0.0), "online")
    T = te.compute((M,), lambda i: online((X[i, k], te.const(1.0)), axis=k), name="T")
    Y = te.compute((M, N), lambda i, j: te.exp(X[i, j] - T[i, 0]) / T[i, 1], name="Y")
    s = te.create_schedule(Y)
    s[T].compute_at(s[Y], s[Y].op.axis[0])
    x = 4 * np.random.default_rng(N).standard_normal((M, N)).astype(np.float32)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(_run(s, [X, Y], x), e / e.sum(1, keepdims=True), rtol=1e-5)


def test_welford_partials_merged_across_lanes() -> None:
    """Mean and variance in one pass: Welford states per lane, then merged (stable where
    the mean is large against the spread, which a sum of squares is not)."""
    M, N, lanes = 5, 96, 8
    X = te.placeholder((M, N), name="X")
    k = te.reduce_axis(N // lanes, name="k")
    P = te.compute(
        (M, lanes),
        lambda i, lane: WELFORD((te.const(1.0), X[i, k * lanes + lane], te.const(0.0)), axis=k),
        name="P",
    )
    t = te.reduce_axis(lanes, name="t")
    W = te.compute((M,), lambda i: WELFORD((P[i, t, 0], P[i, t, 1], P[i, t, 2]), axis=t), name="W")
    s = te.create_schedule(W)
    i, lane, _ = s[P].op.axis
    s[P].reorder(i, s[P].op.reduce_axis[0], lane)  # lanes innermost, as the row templates do
    s[P].compute_at(s[W], s[W].op.axis[0])
    x = (1e4 + np.random.default_rng(0).standard_normal((M, N))).astype(np.float32)
    out = _run(s, [X, W], x)
    np.testing.assert_allclose(out[:, 0], N)
    np.testing.assert_allclose(out[:, 1], x.astype(np.float64).mean(1), rtol=1e-6)
    np.testing.assert_allclose(out[:, 2] / N, x.astype(np.float64).var(1), rtol=1e-3)


@pytest.mark.parametrize("split", [1, 4, 5])
def test_argmax_over_split_and_parallel_loops(split: int) -> None:
    M, N = 11, 23
    X = te.placeholder((M, N), name="X")
    k = te.reduce_axis(N, name="k")
    A = te.compute((M,), lambda i: ARGMAX((X[i, k], k.astype("float32")), axis=k), name="A")
    s = te.create_schedule(A)
    i, v = s[A].op.axis
    io, ii = s[A].split(i, factor=3)
    ko, ki = s[A].split(s[A].op.reduce_axis[0], factor=split)
    s[A].reorder(io, ii, ko, ki, v)
    s[A].parallel(io)
    x = np.random.default_rng(split).integers(0, 5, (M, N)).astype(np.float32)  # ties
    out = _run(s, [X, A], x)
    np.testing.assert_array_equal(out[:, 1], x.argmax(1))
    np.testing.assert_array_equal(out[:, 0], x.max(1))


def _sums_stage() -> tuple[te.Tensor, te.Tensor]:
    X = te.placeholder((4, 8), name="X")
    k = te.reduce_axis(8, name="k")
    return X, te.compute((4,), lambda i: SUMS((X[i, k], X[i, k]), axis=k), name="S")


@pytest.mark.parametrize("how", ["split", "reorder", "vectorize", "parallel"])
def test_the_values_axis_stays_innermost_and_serial(how: str) -> None:
    X, S = _sums_stage()
    s = te.create_schedule(S)
    i, v = s[S].op.axis
    (k,) = s[S].op.reduce_axis
    if how == "split":
        s[S].split(v, factor=1)
    elif how == "reorder":
        s[S].reorder(i, v, k)
    elif how == "vectorize":
        s[S].vectorize(v)
    else:
        s[S].parallel(v)
    with pytest.raises(ScheduleError, match="tuple reduction S"):
        build(s, [X, S], target="cpu")


def test_malformed_reducers_are_refused_when_defined() -> None:
    X = te.placeholder((4, 8), name="X")
    I = te.placeholder((4, 8), "int32", name="I")
    k = te.reduce_axis(8, name="k")
    with pytest.raises(TensorError, match="one float dtype"):
        SUMS((X[0, k], I[0, k]), axis=k)
    reads = te.comm_reducer(lambda a, b: (a[0] + X[0, 0], a[1]), lambda t: (0.0, 0.0), "reads")
    with pytest.raises(TensorError, match="reads X"):
        reads((X[0, k], X[0, k]), axis=k)
    short = te.comm_reducer(lambda a, b: (a[0] + b[0],), lambda t: (0.0, 0.0), "short")
    with pytest.raises(TensorError, match="gives 1 values for 2"):
        short((X[0, k], X[0, k]), axis=k)
    ids = te.comm_reducer(lambda a, b: (a[0], a[1]), lambda t: (0.0,), "ids")
    with pytest.raises(TensorError, match="identity has 1 values for 2"):
        ids((X[0, k], X[0, k]), axis=k)
    with pytest.raises(TensorError, match="reduce_axis"):
        SUMS((X[0, 0], X[0, 1]), axis=[])
    with pytest.raises(TensorError, match="identifier"):
        te.comm_reducer(lambda a, b: a, lambda t: (), "not a name")
