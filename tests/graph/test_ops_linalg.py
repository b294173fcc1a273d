"""MatMul and Gemm against onnxruntime, evaluated and built as plain te reductions."""

from __future__ import annotations

import numpy as np
import pytest

from tests.graph.helpers import check_op, evaluate
from tuner.graph import GraphError
from tuner.graph.ops import OpKind, opdef
from tuner.graph.ops.linalg import matmul_shape

RNG = np.random.default_rng(2)
TOL = {"rtol": 1e-4, "atol": 1e-5}


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize(
    ("sa", "sb"),
    [
        ((7, 13), (13, 5)),
        ((2, 1, 3, 7), (4, 7, 1)),  # broadcast batch dims, extent-1 N
        ((7,), (2, 7, 5)),  # 1-D first operand
        ((3, 7), (7,)),  # 1-D second operand
        ((13,), (13,)),  # rank-0 result
    ],
)
def test_matmul(sa: tuple, sb: tuple) -> None:
    out = check_op("MatMul", [f32(*sa), f32(*sb)], **TOL)
    assert out[0].shape == matmul_shape(sa, sb)


def test_matmul_numpy_dtypes() -> None:
    a = RNG.integers(-5, 5, (2, 3, 4)).astype(np.int64)
    b = RNG.integers(-5, 5, (4, 2)).astype(np.int64)
    check_op("MatMul", [a, b], lower=False)
    check_op("MatMul", [f32(3, 4).astype(np.float64), f32(1, 4, 2).astype(np.float64)], lower=False)


def test_matmul_int_kernel() -> None:
    a = RNG.integers(-5, 5, (3, 4)).astype(np.int32)
    b = RNG.integers(-5, 5, (4, 2)).astype(np.int32)
    check_op("MatMul", [a, b])


def test_matmul_shape_errors() -> None:
    assert matmul_shape((5, 1, 2, 3), (4, 3, 6)) == (5, 4, 2, 6)
    with pytest.raises(GraphError, match="inner extents 3 and 4 differ"):
        matmul_shape((2, 3), (4, 5))
    with pytest.raises(GraphError, match="do not broadcast"):
        matmul_shape((2, 2, 3), (3, 3, 4))
    with pytest.raises(GraphError, match="MatMul node 'n0'"):
        evaluate("MatMul", [f32(2, 3), f32(4, 5)])
    assert opdef("MatMul").kind is OpKind.ANCHOR and opdef("Gemm").kind is OpKind.ANCHOR


@pytest.mark.parametrize(
    ("attrs", "sa", "sb", "sc"),
    [
        ({}, (7, 13), (13, 5), None),
        ({"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}, (13, 7), (5, 13), (5,)),
        ({"transB": 1}, (7, 13), (5, 13), (7, 1)),
        ({"alpha": 2.0}, (1, 13), (13, 5), ()),
        ({}, (7, 13), (13, 5), (7, 5)),
    ],
)
def test_gemm(attrs: dict, sa: tuple, sb: tuple, sc: tuple | None) -> None:
    inputs = [f32(*sa), f32(*sb)] + ([] if sc is None else [f32(*sc)])
    check_op("Gemm", inputs, attrs, **TOL)


def test_gemm_numpy_variants() -> None:
    check_op("Gemm", [f32(3, 4), f32(4, 2), f32(1, 2)], {"beta": 0.0}, lower=False)
    check_op("Gemm", [f32(4, 3), f32(4, 2)], {"transA": 1, "alpha": -1.0}, lower=False)
    check_op("Gemm", [f32(3, 4), f32(4, 2), f32(3, 2)], {}, opset=11, lower=False)


def test_gemm_shape_error() -> None:
    with pytest.raises(GraphError, match=r"Gemm node 'n0' has inner extents 4 \(A\) and 3 \(B\)"):
        evaluate("Gemm", [f32(3, 4), f32(3, 2)], {})
