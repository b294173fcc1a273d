"""Views and index remaps against onnxruntime and as kernels.

Each case runs one node three ways through ``check_op``; cases where a kernel
adds nothing over another already built (same lowering, other attributes) pass
``lower=False`` to keep the number of Numba builds small.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.graph.helpers import check_op, evaluate
from tuner.graph import GraphError, Node
from tuner.graph.ops import opdef
from tuner.graph.ops.movement import pads_of, slice_params
from tuner.graph.ops.views import reshape_target

rng = np.random.default_rng(0)


def rand(*shape: int, dtype: str = "float32") -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


# -- views -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "target", "lower"),
    [
        ((2, 3, 5), i64(0, -1), True),  # 0 copies, -1 infers: a direct remap
        ((2, 3, 5), i64(5, 6), True),  # through the flat index
        ((7,), i64(7, 1, 1), False),
        ((1, 6), i64(-1), False),
    ],
)
def test_reshape(shape: tuple[int, ...], target: np.ndarray, lower: bool) -> None:
    check_op("Reshape", [rand(*shape), target], const={1}, lower=lower)


def test_reshape_allowzero_and_errors() -> None:
    node = Node("Reshape", ("x", "s"), ("y",), {"allowzero": 0}, "r")
    assert reshape_target(node, (4, 3), i64(0, 3)) == (4, 3)
    with pytest.raises(GraphError, match="Reshape node 'r' cannot reshape"):
        reshape_target(node, (4, 3), i64(5, -1))
    with pytest.raises(GraphError, match="more than one -1"):
        reshape_target(node, (4, 3), i64(-1, -1))
    zero = Node("Reshape", ("x", "s"), ("y",), {"allowzero": 1}, "r")
    with pytest.raises(GraphError, match="cannot reshape"):
        reshape_target(zero, (4, 3), i64(0, 3))  # a real zero extent: empty tensors unsupported


@pytest.mark.parametrize(("axis", "lower"), [(1, True), (-1, False), (0, False), (3, False)])
def test_flatten(axis: int, lower: bool) -> None:
    check_op("Flatten", [rand(2, 3, 1, 5)], {"axis": axis}, lower=lower)


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_attr_and_input(opset: int) -> None:
    x = rand(1, 3, 1, 5)
    if opset < 13:
        check_op("Squeeze", [x], {"axes": [-2, 0]}, opset=opset, lower=False)
    else:
        check_op("Squeeze", [x, i64(-2, 0)], const={1}, opset=opset)


def test_squeeze_all_ones_to_rank0() -> None:
    check_op("Squeeze", [rand(1, 1)], lower=True)  # rank 0 out: a te tensor of shape (1,)
    check_op("Squeeze", [rand(3, 1, 2)], lower=False)


@pytest.mark.parametrize("opset", [11, 13, 21])
def test_unsqueeze(opset: int) -> None:
    x = rand(3, 4)
    if opset < 13:
        check_op("Unsqueeze", [x], {"axes": [0, -1]}, opset=opset, lower=False)
    else:
        check_op("Unsqueeze", [x, i64(-1, 1)], const={1}, opset=opset, lower=opset == 13)


def test_unsqueeze_scalar() -> None:
    check_op("Unsqueeze", [np.array(2.5, np.float32), i64(0)], const={1}, lower=False)


def test_identity_and_dropout() -> None:
    check_op("Identity", [rand(2, 3)])
    check_op("Identity", [np.array([True, False])], lower=False)
    check_op("Dropout", [rand(4, 3)], n_outputs=2)  # output and mask (all True)
    check_op("Dropout", [rand(4, 3), np.array(0.5, np.float32)], const={1}, lower=False)


def test_dropout_in_training_is_refused() -> None:
    node = Node("Dropout", ("x", "r", "t"), ("y",), {}, "d")
    with pytest.raises(GraphError, match="Dropout node 'd' is in training mode"):
        opdef("Dropout").evaluate(node, [rand(2), np.array(0.5), np.array(True)])


# -- injective --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "perm", "lower"),
    [((2, 3, 5, 7), [0, 2, 3, 1], True), ((3, 5), None, False), ((6,), [0], False)],
)
def test_transpose(shape: tuple[int, ...], perm: list[int] | None, lower: bool) -> None:
    check_op("Transpose", [rand(*shape)], {} if perm is None else {"perm": perm}, lower=lower)


def test_concat() -> None:
    check_op("Concat", [rand(2, 3), rand(2, 1), rand(2, 5)], {"axis": -1})
    check_op("Concat", [rand(7), rand(1)], {"axis": 0}, lower=False)
    a, b = rand(2, 3, 1, 2), rand(2, 3, 4, 2)
    check_op("Concat", [a, b], {"axis": 2}, const={0}, lower=False)


@pytest.mark.parametrize("opset", [13, 18])
def test_split(opset: int) -> None:
    x = rand(2, 7, 3)
    check_op("Split", [x, i64(2, 5)], {"axis": 1}, const={1}, n_outputs=2, opset=opset)
    if opset >= 18:  # num_outputs: ceil parts, the last one smaller
        check_op("Split", [x], {"axis": -2, "num_outputs": 3}, n_outputs=3, opset=18, lower=False)
    else:  # equal parts by the output count
        check_op("Split", [rand(6, 2)], {"axis": 0}, n_outputs=3, opset=13, lower=False)


def test_split_attr_before_13() -> None:
    check_op("Split", [rand(5, 2)], {"split": [1, 4]}, n_outputs=2, opset=11, lower=False)


@pytest.mark.parametrize(
    ("starts", "ends", "axes", "steps", "lower"),
    [
        (i64(1, 0), i64(-1, 100), i64(0, 1), i64(1, 2), True),
        (i64(-1), i64(-100), i64(-1), i64(-2), True),  # negative step down to index 0
        (i64(10), i64(0), i64(0), i64(-3), False),  # start clamped to n-1
        (i64(0, 2), i64(1, 4), None, None, False),  # default axes and steps
        (i64(-3), i64(2**62), i64(2), i64(1), False),
    ],
)
def test_slice(
    starts: np.ndarray,
    ends: np.ndarray,
    axes: np.ndarray | None,
    steps: np.ndarray | None,
    lower: bool,
) -> None:
    x = rand(7, 5, 4)
    inputs = [x, starts, ends, axes, steps]
    while inputs[-1] is None:
        inputs.pop()
    check_op("Slice", inputs, const={1, 2, 3, 4}, lower=lower)


def test_slice_params_clamps() -> None:
    node = Node("Slice", (), (), {}, "s")
    assert slice_params(node, (5,), i64(-100), i64(100)) == [(0, 1, 5)]
    assert slice_params(node, (5,), i64(4), i64(-100), None, i64(-1)) == [(4, -1, 5)]
    with pytest.raises(GraphError, match="step 0"):
        slice_params(node, (5,), i64(0), i64(1), None, i64(0))


@pytest.mark.parametrize(
    ("data", "indices", "axis", "const", "lower"),
    [
        (rand(5, 3), np.array([0, -1, 3, 3], np.int64), 0, set(), True),  # runtime indices
        (rand(2, 7, 3), np.array([[6, -7], [2, 0]], np.int32), -2, {1}, True),  # 2-D, int32
        (rand(4, 3), np.array(-2, np.int64), 1, {1}, True),  # scalar index: the axis goes
        (np.arange(5, dtype=np.int64), np.array(1, np.int64), 0, {1}, False),  # rank-0 out
    ],
)
def test_gather(
    data: np.ndarray, indices: np.ndarray, axis: int, const: set[int], lower: bool
) -> None:
    check_op("Gather", [data, indices], {"axis": axis}, const=const, lower=lower)


@pytest.mark.parametrize(("axis", "lower"), [(1, True), (0, False), (-1, False)])
def test_gather_elements(axis: int, lower: bool) -> None:
    data = rand(3, 5, 2)
    n = data.shape[axis]
    indices = rng.integers(-n, n, size=(3, 4, 2) if axis in (1, -2) else (2, 5, 2))
    if axis == -1:
        indices = rng.integers(-n, n, size=(3, 5, 3))
    check_op("GatherElements", [data, indices.astype(np.int64)], {"axis": axis}, lower=lower)


def test_gather_elements_checks_its_indices() -> None:
    node = Node("GatherElements", ("d", "i"), ("y",), {"axis": 0}, "g")
    with pytest.raises(GraphError, match="GatherElements node 'g' has an index out of range"):
        opdef("GatherElements").evaluate(node, [rand(3, 2), np.full((1, 2), 3, np.int64)])
    with pytest.raises(GraphError, match="indices of rank 1 for data of rank 2"):
        opdef("GatherElements").evaluate(node, [rand(3, 2), i64(0)])


def test_gather_out_of_range() -> None:
    node = Node("Gather", ("d", "i"), ("y",), {}, "g")
    with pytest.raises(GraphError, match="Gather node 'g' has an index out of range"):
        opdef("Gather").evaluate(node, [rand(3), i64(3)])


@pytest.mark.parametrize(
    ("mode", "pads", "lower"),
    [
        ("constant", i64(0, 1, 2, 1, 0, 3), True),
        ("reflect", i64(2, 0, 1, 1, 2, 3), True),
        ("edge", i64(1, 3, 0, 0, 2, 1), True),
        ("constant", i64(-1, 0, 1, 0, 1, -1), False),  # negative pads crop
    ],
)
def test_pad(mode: str, pads: np.ndarray, lower: bool) -> None:
    x = rand(3, 4, 5)
    value = np.array(1.5, np.float32)
    inputs = [x, pads, value] if mode == "constant" else [x, pads]
    check_op("Pad", inputs, {"mode": mode}, const={1, 2}, lower=lower)


def test_pad_axes_at_18_and_wrap_at_19() -> None:
    x = rand(3, 4)
    check_op("Pad", [x, i64(1, 2), None, i64(-1)], const={1, 3}, opset=18, lower=False)
    check_op("Pad", [x, i64(2, 1, 1, 3)], {"mode": "wrap"}, const={1}, opset=19)


def test_pad_runtime_value_and_int() -> None:
    x = np.arange(6, dtype=np.int64).reshape(2, 3)
    check_op("Pad", [x, i64(1, 0, 0, 2), np.array(7, np.int64)], const={1}, lower=False)


def test_pads_of_reads_both_forms() -> None:
    old = Node("Pad", ("x",), ("y",), {"pads": (1, 0, 2, 3), "mode": "edge"}, "p")
    assert pads_of(old, 2) == ("edge", ((1, 2), (0, 3)))
    new = Node("Pad", ("x", "p", "", "a"), ("y",), {}, "p")
    assert pads_of(new, 3, i64(1, 2), i64(-2)) == ("constant", ((0, 0), (1, 2), (0, 0)))
    with pytest.raises(GraphError, match="reflects 3 over an extent of 3"):
        evaluate("Pad", [rand(3), i64(3, 0)], {"mode": "reflect"})


@pytest.mark.parametrize(
    ("shape", "target", "lower"),
    [((3, 1), i64(2, 1, 4), True), ((1,), i64(5), False), ((2, 3), i64(1, 1), False)],
)
def test_expand(shape: tuple[int, ...], target: np.ndarray, lower: bool) -> None:
    check_op("Expand", [rand(*shape), target], const={1}, lower=lower)


def test_expand_scalar() -> None:
    check_op("Expand", [np.array(3.0, np.float32), i64(2, 3)], const={1})


def test_tile() -> None:
    check_op("Tile", [rand(2, 1, 3), i64(2, 3, 1)], const={1})
    check_op("Tile", [np.array([True, False]), i64(3)], const={1}, lower=False)
