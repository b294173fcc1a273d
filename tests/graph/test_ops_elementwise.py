"""Elementwise operators against onnxruntime: NumPy evaluation and built te kernels.

Each operator is built once (a kernel costs about a second of Numba compile);
dtype and opset variants whose lowering is the same are checked in NumPy only
(``lower=False``).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.graph.helpers import check_op, evaluate
from tuner import te
from tuner.graph import GraphError
from tuner.graph.ops import OpKind, opdef
from tuner.graph.ops.elementwise import broadcast_index
from tuner.graph.ops.unary import UNARY, unary

RNG = np.random.default_rng(0)


def f32(*shape: int, lo: float = -3.0, hi: float = 3.0) -> np.ndarray:
    return RNG.uniform(lo, hi, shape).astype(np.float32)


def i32(*shape: int, lo: int = -9, hi: int = 10) -> np.ndarray:
    return RNG.integers(lo, hi, shape).astype(np.int32)


ROUNDING = np.array([-2.5, -1.5, -0.5, -0.2, 0.0, 0.5, 1.5, 2.5, 3.7, -3.7, 1e9, -1e9], np.float32)

UNARY_CASES = [
    ("Sqrt", f32(3, 7, lo=0.0), {}, 17),
    ("Exp", f32(3, 7), {}, 17),
    ("Log", f32(3, 7, lo=0.1), {}, 17),
    ("Tanh", f32(3, 7), {}, 17),
    ("Sigmoid", f32(3, 7, lo=-20, hi=20), {}, 17),
    ("Erf", f32(3, 7), {}, 17),
    ("Abs", f32(3, 7), {}, 17),
    ("Neg", i32(3, 7), {}, 17),
    ("Reciprocal", f32(3, 7, lo=0.5), {}, 17),
    ("Relu", f32(3, 7), {}, 17),
    ("LeakyRelu", f32(3, 7), {"alpha": 0.2}, 17),
    ("Elu", f32(3, 7), {"alpha": 0.7}, 17),
    ("Selu", f32(3, 7), {}, 17),
    ("HardSigmoid", f32(3, 7, lo=-6, hi=6), {"alpha": 0.3, "beta": 0.4}, 17),
    ("HardSwish", f32(3, 7, lo=-5, hi=5), {}, 17),
    ("Softplus", f32(3, 7, lo=-30, hi=30), {}, 17),
    ("Gelu", f32(3, 7), {}, 20),
    ("Gelu", f32(3, 7), {"approximate": "tanh"}, 20),
    ("Floor", ROUNDING, {}, 17),
    ("Ceil", ROUNDING, {}, 17),
    ("Round", ROUNDING, {}, 17),
    ("Sign", np.array([-2.0, 0.0, 3.5, -0.1], np.float32), {}, 17),
    ("Not", np.array([[True, False, True]]), {}, 17),
]


@pytest.mark.parametrize(
    ("op", "x", "attrs", "opset"),
    UNARY_CASES,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(UNARY_CASES)],
)
def test_unary(op: str, x: np.ndarray, attrs: dict, opset: int) -> None:
    check_op(op, [x], attrs, opset=opset, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("op", "x"),
    [
        ("Relu", i32(2, 5)),
        ("Abs", i32(2, 5)),
        ("Sign", i32(2, 5)),
        ("Neg", f32(4).astype(np.float64)),
        ("Exp", f32(4).astype(np.float64)),
        ("Floor", ROUNDING.astype(np.float64)),
        ("Round", ROUNDING.astype(np.float64)),
        ("Sqrt", np.array(4.0, np.float32)),  # rank 0
    ],
)
def test_unary_dtypes_numpy(op: str, x: np.ndarray) -> None:
    check_op(op, [x], lower=False)


def test_unary_table() -> None:
    assert {"Relu", "Sigmoid", "Gelu", "HardSwish", "Exp"} <= set(UNARY)
    assert all(opdef(op).kind is OpKind.ELEMENTWISE for op in UNARY)
    x = te.placeholder((4,), name="x")[0]
    # the activations' own math (graph.ops.activations), shared with the templates' epilogues
    assert (
        repr(unary("LeakyRelu", {"alpha": 0.5})(x)) == "(max(x[0], 0.0) + (0.5 * min(x[0], 0.0)))"
    )
    with pytest.raises(GraphError, match="not a unary"):
        unary("Add")


def test_broadcast_index() -> None:
    i, j, k = te.var("i"), te.var("j"), te.var("k")
    assert repr(broadcast_index(te.placeholder((1, 3), name="b"), (i, j, k))) == "(0, k)"
    assert repr(broadcast_index(te.placeholder((2, 1, 3), name="c"), (i, j, k))) == "(i, 0, k)"
    assert repr(broadcast_index(te.placeholder((1,), name="s"), (i, j))) == "(0,)"


# -- binary ---------------------------------------------------------------------------

BROADCAST = [
    ((2, 3, 4), (4,)),  # lower rank aligns right
    ((2, 1, 13), (7, 1)),  # extent-1 dims on both sides
    ((), (2, 7)),  # rank 0
    ((), ()),
]


@pytest.mark.parametrize(("sa", "sb"), BROADCAST)
def test_add_broadcast(sa: tuple, sb: tuple) -> None:
    check_op("Add", [f32(*sa), f32(*sb)])


BINARY_CASES = [
    ("Sub", f32(3, 7), f32(7)),
    ("Mul", f32(1, 7), f32(3, 1)),
    ("Div", f32(3, 7), f32(3, 7, lo=0.5)),
    # C truncation for every sign combination, broadcast divisor
    ("Div", np.array([[7, -7, 7, -7, 6, -6, 0]], np.int32), np.array([[2], [-2], [3]], np.int32)),
    ("Pow", f32(3, 7, lo=0.1), f32(3, 7)),
    ("Equal", i32(3, 7, lo=0, hi=3), i32(7, lo=0, hi=3)),
    ("Less", f32(3, 7), f32(7)),
    ("Greater", f32(3, 7), np.array(0.5, np.float32)),
    ("LessOrEqual", i32(3, 7, lo=0, hi=3), i32(3, 1, lo=0, hi=3)),
    ("GreaterOrEqual", f32(3, 1), f32(1, 7)),
    ("And", RNG.random((3, 7)) > 0.5, RNG.random(7) > 0.5),
    ("Or", RNG.random((3, 7)) > 0.5, RNG.random((3, 1)) > 0.5),
    ("Xor", RNG.random((3, 7)) > 0.5, RNG.random((3, 7)) > 0.5),
]


@pytest.mark.parametrize(
    ("op", "a", "b"), BINARY_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(BINARY_CASES)]
)
def test_binary(op: str, a: np.ndarray, b: np.ndarray) -> None:
    out = check_op(op, [a, b])
    assert out[0].dtype == (np.bool_ if op not in ("Sub", "Mul", "Div", "Pow") else a.dtype)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (i32(3, 4).astype(np.int64), i32(4, lo=1).astype(np.int64)),
        (f32(3, 4).astype(np.float64), f32(3, 4).astype(np.float64)),
        (i32(3, 4, lo=-100, hi=100).astype(np.int8), np.array([3, -3, 5, -5], np.int8)),
    ],
)
def test_binary_dtypes_numpy(a: np.ndarray, b: np.ndarray) -> None:
    for op in ("Add", "Sub", "Mul", "Div", "Equal", "Less"):
        check_op(op, [a, b], lower=False)


@pytest.mark.parametrize("exponent", [2.0, 0.5, 3.0])
def test_pow_constant_exponent(exponent: float) -> None:
    check_op("Pow", [f32(3, 7, lo=0.0), np.array(exponent, np.float32)], const={1})


def test_pow_mixed_dtypes_numpy() -> None:
    check_op("Pow", [f32(3, 4), np.array([2, 3, 0, 1], np.int64)], lower=False)
    check_op("Pow", [i32(3, 4, lo=-3, hi=4), np.array(2, np.int32)], lower=False)


# -- variadic, Where ---------------------------------------------------------------------


@pytest.mark.parametrize("op", ["Sum", "Max", "Min", "Mean"])
def test_variadic(op: str) -> None:
    check_op(op, [f32(2, 1, 7), f32(7), f32(3, 1)])


def test_variadic_one_and_int_numpy() -> None:
    check_op("Sum", [f32(3, 4)], lower=False)
    check_op("Max", [i32(3, 4), i32(4)], lower=False)
    check_op("Min", [np.array(1.0, np.float32), f32(2, 3)], lower=False)


@pytest.mark.parametrize(("sc", "sx", "sy"), [((3, 7), (3, 7), (3, 7)), ((7,), (3, 1), ())])
def test_where(sc: tuple, sx: tuple, sy: tuple) -> None:
    check_op("Where", [RNG.random(sc) > 0.5, f32(*sx), f32(*sy)])


def test_where_int_numpy() -> None:
    check_op("Where", [RNG.random((2, 3)) > 0.5, i32(2, 3), i32(3)], lower=False)


# -- Clip ----------------------------------------------------------------------------------


def test_clip_opset6_attributes() -> None:
    check_op("Clip", [f32(3, 7)], {"min": -0.5, "max": 1.0}, opset=6)


def test_clip_opset11_min_only() -> None:
    check_op("Clip", [f32(3, 7), np.array(-0.25, np.float32)], const={1}, opset=11)


def test_clip_opset13_int() -> None:
    x = i32(3, 7)
    check_op("Clip", [x, np.array(-2, np.int32), np.array(4, np.int32)], const={1, 2}, opset=13)


def test_clip_runtime_bounds() -> None:
    """Bounds that are not constants are read from their (rank-0) tensors."""
    check_op("Clip", [f32(3, 7), None, np.array(0.5, np.float32)], opset=13)


def test_clip_variants_numpy() -> None:
    x = f32(3, 7)
    check_op("Clip", [x], opset=13, lower=False)  # no bounds: identity
    lo, hi = np.array(1.0, np.float32), np.array(-1.0, np.float32)
    out = check_op("Clip", [x, lo, hi], const={1, 2}, opset=13, lower=False)
    np.testing.assert_array_equal(out[0], np.full_like(x, -1.0))  # min > max: all max
    check_op("Clip", [x], {"max": 0.0}, opset=6, lower=False)


# -- Cast ------------------------------------------------------------------------------------

FLOATS = np.array([-2.7, -0.5, 0.0, 0.4, 1.9, 100.2], np.float32)


@pytest.mark.parametrize(
    ("x", "to"),
    [
        (FLOATS, 6),  # float -> int32 truncates toward zero
        (np.array([[-1, 0, 3]], np.int64), 1),
        (FLOATS, 9),  # nonzero -> True
    ],
)
def test_cast(x: np.ndarray, to: int) -> None:
    check_op("Cast", [x], {"to": to})


@pytest.mark.parametrize(
    ("x", "to"),
    [
        (np.array([True, False]), 1),
        (np.array([1, -2, 300], np.int64), 6),
        (FLOATS, 11),
        (np.array([1, -2, 100], np.int32), 3),
        (np.array(3.5, np.float32), 7),
    ],
)
def test_cast_numpy(x: np.ndarray, to: int) -> None:
    check_op("Cast", [x], {"to": to}, lower=False)


def test_cast_unsupported_type() -> None:
    with pytest.raises(GraphError, match="Cast node 'n0' casts to ONNX type 10"):
        evaluate("Cast", [FLOATS], {"to": 10})


def test_cast_like() -> None:
    check_op("CastLike", [FLOATS, np.array([1], np.int64)])


# -- Mod, PRelu ------------------------------------------------------------------------------

SIGNED_A = np.array([[7, -7, 7, -7, 6, 0]], np.int32)
SIGNED_B = np.array([[3], [-3]], np.int32)


@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_int(fmod: int) -> None:
    check_op("Mod", [SIGNED_A, SIGNED_B], {"fmod": fmod})


def test_mod_float_fmod() -> None:
    check_op(
        "Mod",
        [f32(3, 7), f32(7, lo=0.5) * np.where(RNG.random(7) > 0.5, 1, -1).astype(np.float32)],
        {"fmod": 1},
    )


def test_prelu() -> None:
    check_op("PRelu", [f32(2, 3, 5), f32(3, 1)])
    check_op("PRelu", [f32(2, 3, 5), np.array([0.1], np.float32)], lower=False)


@pytest.mark.parametrize(
    ("onnx_op", "attrs", "step"),
    [
        ("Relu", {}, "relu"),
        ("Sigmoid", {}, "sigmoid"),
        ("Gelu", {}, "gelu"),
        ("Gelu", {"approximate": "tanh"}, "gelu_tanh"),
        ("HardSwish", {}, "hardswish"),
        ("LeakyRelu", {"alpha": 0.25}, "leaky:0.25"),
        ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, "hardsigmoid:0.3:0.4"),
    ],
)
def test_an_onnx_activation_and_its_epilogue_step_are_one_function(
    onnx_op: str, attrs: dict, step: str
) -> None:
    """The graph's operator and the templates' fused step give the same te expression and
    the same NumPy values: both are written once, in ``graph.ops.activations``."""
    from search_spaces._epilogue import apply_numpy, parse
    from tuner.graph.ir import Node

    x = te.placeholder((4,), name="x")[0]
    assert repr(unary(onnx_op, attrs)(x)) == repr(
        parse(step).apply(x, te.const(0, "int64"), [], [])
    )
    v = np.linspace(-6, 6, 97, dtype=np.float32).reshape(1, 97)
    node = Node(onnx_op, ["v"], ["y"], attrs)
    (want,) = opdef(onnx_op).evaluate(node, [v])
    np.testing.assert_allclose(apply_numpy(step, v, (), channel_axis=1), want, rtol=1e-6, atol=1e-7)
