"""Shape arithmetic against onnxruntime: NumPy evaluation only, as these operators have no kernel.

Shape, Size, ConstantOfShape, Range and Constant fold to constants at compile
time, so each case checks the evaluation (``lower=False``) and the registry
entry says there is nothing to lower.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper

from tests.graph.helpers import check_op, evaluate, ort_run
from tuner.graph import GraphError
from tuner.graph.ops import OpKind, opdef

rng = np.random.default_rng(0)


def rand(*shape: int, dtype: str = "float32") -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def test_shape_ops_have_no_kernel() -> None:
    for op in ("Shape", "Size", "ConstantOfShape", "Range", "Constant"):
        assert opdef(op).kind is OpKind.SHAPE and opdef(op).lower is None


@pytest.mark.parametrize(("attrs", "opset"), [({}, 13), ({"start": 1}, 15), ({"end": -1}, 15)])
def test_shape(attrs: dict[str, int], opset: int) -> None:
    check_op("Shape", [rand(2, 3, 5)], attrs, opset=opset, lower=False)


def test_size() -> None:
    check_op("Size", [rand(2, 3, 5)], lower=False)


def test_constant_of_shape() -> None:
    check_op("ConstantOfShape", [i64(2, 3)], const={0}, lower=False)
    value = np.array([7], np.int64)
    ref = ort_run("ConstantOfShape", [i64(3)], {"value": numpy_helper.from_array(value)}, const={0})
    ours = evaluate("ConstantOfShape", [i64(3)], {"value": value})
    assert ours[0].dtype == ref[0].dtype and np.array_equal(ours[0], ref[0])


@pytest.mark.parametrize(
    ("start", "limit", "delta"),
    [(0, 5, 1), (10, 1, -3), (np.float32(0.5), np.float32(2.0), np.float32(0.4)), (3, 3, 1)],
)
def test_range(start: float, limit: float, delta: float) -> None:
    dtype = np.asarray(start).dtype if isinstance(start, np.floating) else np.int64
    arrays = [np.array(v, dtype) for v in (start, limit, delta)]
    check_op("Range", arrays, const={0, 1, 2}, lower=False)


def test_constant() -> None:
    data = rand(2, 2)
    ref = ort_run("Constant", [], {"value": numpy_helper.from_array(data)})
    assert np.array_equal(evaluate("Constant", [], {"value": data})[0], ref[0])
    for attrs in ({"value_float": 2.0}, {"value_floats": [1.0, 2.0]}, {"value_int": 3},
                  {"value_ints": [4, 5]}):  # fmt: skip
        ref = ort_run("Constant", [], attrs)
        ours = evaluate("Constant", [], attrs)
        assert ours[0].dtype == ref[0].dtype and np.array_equal(ours[0], ref[0])
    with pytest.raises(GraphError, match="only dense numeric values"):
        evaluate("Constant", [], {"value_string": "a"})
