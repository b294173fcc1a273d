"""Reductions, Softmax and LayerNormalization against onnxruntime, evaluated and built."""

from __future__ import annotations

import numpy as np
import pytest

from tests.graph.helpers import check_op, evaluate
from tuner.graph import GraphError
from tuner.graph.ops import OpKind, opdef

RNG = np.random.default_rng(1)


def f32(*shape: int, lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
    return RNG.uniform(lo, hi, shape).astype(np.float32)


X = f32(3, 7, 5)
TOL = {"rtol": 1e-5, "atol": 1e-5}


def reduce_op(
    op: str,
    x: np.ndarray,
    axes: tuple[int, ...] | None,
    keepdims: int,
    opset: int,
    *,
    lower: bool = True,
    noop: int | None = None,
) -> np.ndarray:
    """Check one Reduce* node, giving the axes the way ``opset`` wants them."""
    attrs: dict = {"keepdims": keepdims}
    if noop is not None:
        attrs["noop_with_empty_axes"] = noop
    axes_as_input = opset >= 18 or (op == "ReduceSum" and opset >= 13)
    inputs: list = [x]
    if axes is not None and axes_as_input:
        inputs.append(np.array(axes, np.int64))
    elif axes is not None:
        attrs["axes"] = axes
    return check_op(op, inputs, attrs, const={1}, opset=opset, lower=lower, **TOL)[0]


REDUCE_CASES = [
    ("ReduceSum", (1,), 1, 11),  # axes attribute
    ("ReduceSum", (-1, 0), 0, 13),  # axes input, negative axis
    ("ReduceMean", (1,), 0, 13),
    ("ReduceMean", (-2, 2), 1, 18),
    ("ReduceMax", (0,), 1, 18),
    ("ReduceMin", None, 0, 13),  # all axes, rank-0 result
    ("ReduceProd", (1,), 0, 13),
    ("ReduceL1", (2,), 1, 13),
    ("ReduceL2", (1, 2), 0, 18),
    ("ReduceSumSquare", (-1,), 1, 13),
    ("ReduceLogSum", (1,), 0, 13),
    ("ReduceLogSumExp", (0, 2), 1, 18),
]


@pytest.mark.parametrize(
    ("op", "axes", "keepdims", "opset"),
    REDUCE_CASES,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(REDUCE_CASES)],
)
def test_reduce(op: str, axes: tuple | None, keepdims: int, opset: int) -> None:
    x = f32(3, 7, 5, lo=0.5) if op in ("ReduceLogSum", "ReduceProd") else X
    out = reduce_op(op, x, axes, keepdims, opset)
    assert opdef(op).kind is OpKind.REDUCTION
    assert out.dtype == np.float32


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceL2", "ReduceProd"])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("axes", [(0,), (-1,), (0, 2), None])
def test_reduce_variants_numpy(op: str, keepdims: int, axes: tuple | None) -> None:
    reduce_op(op, X, axes, keepdims, 18, lower=False)


def test_reduce_int_numpy() -> None:
    x = RNG.integers(-5, 6, (3, 7)).astype(np.int32)
    for op in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare"):
        assert reduce_op(op, x, (1,), 0, 18, lower=False).dtype == np.int32


def test_reduce_int_sum_kernel() -> None:
    x = RNG.integers(-5, 6, (13, 7)).astype(np.int64)
    reduce_op("ReduceSum", x, (0,), 1, 13)


@pytest.mark.slow
def test_reduce_prod_long_axis() -> None:
    """More than one chunk of written-out products, with a ragged tail: 1 x 7 x 37 = 259."""
    x = f32(2, 7, 37, lo=0.95, hi=1.05)
    reduce_op("ReduceProd", x, (1, 2), 0, 18)


def test_reduce_prod_int_exact() -> None:
    x = RNG.integers(-3, 4, (2, 13)).astype(np.int64)
    reduce_op("ReduceProd", x, (1,), 1, 13)


def test_reduce_noop_with_empty_axes() -> None:
    out = reduce_op("ReduceSum", X, None, 1, 13, noop=1)
    np.testing.assert_array_equal(out, X)
    reduce_op("ReduceSumSquare", X, None, 1, 18, noop=1, lower=False)  # still squares
    reduce_op("ReduceMean", X, None, 0, 18, noop=0, lower=False)  # all axes


def test_reduce_extent_one_and_rank_one() -> None:
    reduce_op("ReduceMax", f32(1, 13, 1), (0, 2), 0, 13)
    reduce_op("ReduceSum", f32(7), None, 0, 13, lower=False)


def test_reduce_bad_axis() -> None:
    with pytest.raises(GraphError, match="ReduceMean node 'n0' has axis 3"):
        evaluate("ReduceMean", [X], {"axes": (3,)})


# -- ArgMax / ArgMin --------------------------------------------------------------------

TIES = np.array([[1, 3, 3, 2], [5, 0, 5, 1], [2, 2, 2, 2]], np.float32)


@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("ArgMax", {"axis": 1}),
        ("ArgMin", {"axis": -2, "keepdims": 0}),
        ("ArgMax", {"axis": 1, "select_last_index": 1, "keepdims": 0}),
    ],
)
def test_arg(op: str, attrs: dict) -> None:
    out = check_op(op, [TIES], attrs)
    assert out[0].dtype == np.int64


def test_arg_numpy() -> None:
    check_op("ArgMin", [TIES], {"axis": 0, "select_last_index": 1}, lower=False)
    check_op("ArgMax", [X], {}, lower=False)


# -- Softmax, LogSoftmax --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "axis", "shape"),
    [
        ("Softmax", None, (3, 13)),
        ("Softmax", 1, (2, 7, 5)),
        ("Softmax", -3, (2, 7, 5)),
        ("LogSoftmax", -1, (3, 13)),
        ("LogSoftmax", 0, (7, 1)),
        ("Softmax", 0, (13,)),
    ],
)
def test_softmax(op: str, axis: int | None, shape: tuple) -> None:
    attrs = {} if axis is None else {"axis": axis}
    check_op(op, [f32(*shape, lo=-30, hi=30)], attrs, opset=13, **TOL)


def test_softmax_numpy_variants() -> None:
    x = f32(2, 3, 4).astype(np.float64)
    for axis in (0, 1, -1):
        check_op("Softmax", [x], {"axis": axis}, opset=13, lower=False)
        check_op("LogSoftmax", [x], {"axis": axis}, opset=13, lower=False)
    big = np.array([[1000.0, 1001.0, -1000.0]], np.float32)  # stable: no overflow
    check_op("Softmax", [big], {}, opset=13)


# -- LayerNormalization ---------------------------------------------------------------------


def test_layer_norm_default_axis_scale_bias() -> None:
    x = f32(3, 7, 13)
    check_op("LayerNormalization", [x, f32(13), f32(13)], {}, **TOL)


@pytest.mark.slow
def test_layer_norm_axis_all_outputs() -> None:
    x = f32(3, 7, 5)
    outs = check_op(
        "LayerNormalization", [x, f32(7, 5)], {"axis": -2, "epsilon": 1e-3}, n_outputs=3, **TOL
    )
    assert [o.shape for o in outs] == [(3, 7, 5), (3, 1, 1), (3, 1, 1)]


def test_layer_norm_numpy_variants() -> None:
    x = f32(2, 3, 4)
    check_op("LayerNormalization", [x, f32(4), None], {"axis": 2}, lower=False, **TOL)
    check_op("LayerNormalization", [x, f32(3, 4), f32(4)], {"axis": 1}, lower=False, **TOL)
    check_op("LayerNormalization", [x, f32(2, 3, 4)], {"axis": 0}, lower=False, **TOL)


@pytest.mark.slow
def test_layer_norm_float64_outputs() -> None:
    x = f32(2, 7).astype(np.float64)
    outs = check_op("LayerNormalization", [x, f32(7).astype(np.float64)], {}, n_outputs=3, **TOL)
    assert [o.dtype for o in outs] == [np.float64, np.float32, np.float32]
