"""Integer convolutions of QDQ models: the ``tuner.QConv`` operator (NumPy evaluation, plain
lowering, channels-last twin) and the pass ``tuner.graph.quantized.integer_linear``.

The operator is checked against the float convolution of the dequantized operands
(what the QDQ graph means); the pass on hand-built QDQ graphs, which it rewrites
where it should and leaves alone where the integer template has no kind for them.
Compiled QDQ models are checked against onnxruntime in ``test_quant.py``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tuner.graph import Graph, Node, Value
from tuner.graph.interpret import run_graph
from tuner.graph.ops import opdef
from tuner.graph.quantized import integer_linear, unsigned_activations

from .helpers import evaluate, lower_and_run

RNG = np.random.default_rng(5)


def _operands(dtype: str, C: int, K: int, per_channel: bool, bias: bool) -> list[np.ndarray]:
    info = np.iinfo(dtype)
    xq = RNG.integers(info.min, info.max + 1, (1, C, 9, 7)).astype(dtype)
    wq = RNG.integers(-128, 128, (K, C, 3, 3)).astype(np.int8)
    xs = np.array([0.02], np.float32)
    xz = np.array([RNG.integers(info.min, info.max + 1)], dtype)
    ws = (RNG.random(K if per_channel else 1) * 0.01 + 1e-3).astype(np.float32)
    ops = [xq, wq, xs, xz, ws]
    return [*ops, RNG.standard_normal(K).astype(np.float32)] if bias else ops


def _float_conv(ops: list[np.ndarray], attrs: dict) -> np.ndarray:
    xq, wq, xs, xz, ws = ops[:5]
    x = (xq.astype(np.float64) - xz.astype(np.float64)) * xs.astype(np.float64)
    w = wq.astype(np.float64) * ws.astype(np.float64).reshape(-1, 1, 1, 1)
    y = evaluate("Conv", [x, w, *ops[5:]], attrs)[0]
    return np.asarray(y, np.float64)


@pytest.mark.parametrize(
    ("dtype", "per_channel", "bias", "attrs"),
    [
        ("uint8", True, True, {"pads": [1, 1, 1, 1]}),
        ("int8", False, False, {"strides": [2, 2]}),
        ("int8", True, True, {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    ],
)
def test_qconv_is_the_float_convolution_of_the_dequantized_operands(
    dtype: str, per_channel: bool, bias: bool, attrs: dict
) -> None:
    ops = _operands(dtype, 5, 7, per_channel, bias)
    want = _float_conv(ops, attrs)
    got = evaluate("tuner.QConv", ops, attrs)[0]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    (lowered,) = lower_and_run("tuner.QConv", ops, attrs, [got], const={2, 3, 4})
    np.testing.assert_allclose(lowered, got, rtol=1e-6, atol=1e-6 * np.abs(got).max())


def test_the_channels_last_twin_is_the_same_convolution() -> None:
    ops = _operands("uint8", 4, 6, True, True)
    nchw = evaluate("tuner.QConv", ops, {"pads": [1, 1, 1, 1]})[0]
    nhwc = [ops[0].transpose(0, 2, 3, 1).copy(), *ops[1:]]
    got = evaluate("tuner.NhwcQConv", nhwc, {"pads": [1, 1, 1, 1]})[0]
    np.testing.assert_array_equal(got, nchw.transpose(0, 2, 3, 1))
    (lowered,) = lower_and_run("tuner.NhwcQConv", nhwc, {"pads": [1, 1, 1, 1]}, [got], {2, 3, 4})
    np.testing.assert_allclose(lowered, got, rtol=1e-6, atol=1e-6 * np.abs(got).max())


def _qdq_conv(
    group: int = 1,
    w_zero: int = 0,
    x_scale_size: int = 1,
    bias_dtype: str = "int32",
    act: str = "uint8",
) -> Graph:
    """x -> Q -> DQ -> Conv(DQ(w), DQ(b)) -> Relu -> Q -> DQ -> y, as quantize_static writes
    (activations of type ``act``)."""
    C, K = 4, 8
    wq = RNG.integers(-128, 128, (K, C // group, 3, 3)).astype(np.int8)
    consts = {
        "xs": np.full(x_scale_size, 0.03, np.float32),
        "xz": np.full(x_scale_size, 3, act),
        "wq": wq,
        "ws": (RNG.random(K) * 0.01 + 1e-3).astype(np.float32),
        "wz": np.full(K, w_zero, np.int8),
        "bq": RNG.integers(-500, 500, K).astype(bias_dtype),
        "bs": np.float32(0.03) * (RNG.random(K) * 0.01 + 1e-3).astype(np.float32),
        "ys": np.array(0.05, np.float32),
        "yz": np.array(-7 if act == "int8" else 7, act),
    }
    nodes = [
        Node("QuantizeLinear", ("x", "xs", "xz"), ("xq",), {"axis": 1}, "qx"),
        Node("DequantizeLinear", ("xq", "xs", "xz"), ("xd",), {"axis": 1}, "dqx"),
        Node("DequantizeLinear", ("wq", "ws", "wz"), ("wd",), {"axis": 0}, "dqw"),
        Node("DequantizeLinear", ("bq", "bs"), ("bd",), {"axis": 0}, "dqb"),
        Node("Conv", ("xd", "wd", "bd"), ("c",), {"pads": [1, 1, 1, 1], "group": group}, "conv"),
        Node("Relu", ("c",), ("r",), {}, "relu"),
        Node("QuantizeLinear", ("r", "ys", "yz"), ("rq",), {}, "qr"),
        Node("DequantizeLinear", ("rq", "ys", "yz"), ("y",), {}, "dqr"),
    ]
    values = [Value.const(k, v) for k, v in consts.items()]
    shapes = {"xq": (act, (1, C, 6, 5)), "xd": ("float32", (1, C, 6, 5))}
    shapes.update({k: ("float32", (1, K, 6, 5)) for k in ("c", "r", "y")})
    shapes["rq"] = (act, (1, K, 6, 5))
    shapes["wd"] = ("float32", wq.shape)
    shapes["bd"] = ("float32", (K,))
    values += [Value(k, t, s) for k, (t, s) in shapes.items()]
    return Graph.make([Value("x", "float32", (1, C, 6, 5))], nodes, values, ["y"])


def test_the_pass_makes_a_qdq_convolution_integer_and_keeps_its_meaning() -> None:
    g = _qdq_conv()
    h = integer_linear(g)
    ops = [n.op for n in h.nodes]
    assert "tuner.QConv" in ops and "Conv" not in ops
    qconv = next(n for n in h.nodes if n.op == "tuner.QConv")
    assert qconv.inputs[0] == "xq" and h.value(qconv.inputs[1]).dtype == "int8"
    x = RNG.standard_normal((1, 4, 6, 5)).astype(np.float32)
    want, got = run_graph(g, {"x": x})[0], run_graph(h, {"x": x})[0]
    steps = np.abs(got - want) / 0.05  # within one quantization step of the output
    assert steps.max() <= 1.001 and (steps > 0.5).mean() < 0.05


def test_int8_activations_become_uint8_that_mean_the_same_numbers() -> None:
    g = _qdq_conv(act="int8")
    h = unsigned_activations(g)
    quantized = [n.outputs[0] for n in h.nodes if n.op == "QuantizeLinear"]
    assert [h.value(q).dtype for q in quantized] == ["uint8", "uint8"]
    zero_points = [h.const(n.inputs[2]) for n in h.nodes if n.inputs[0] in quantized]
    assert [int(z.reshape(-1)[0]) for z in zero_points] == [131, 121]  # 3 and -7, plus 128
    x = RNG.standard_normal((1, 4, 6, 5)).astype(np.float32) * 4  # some values saturate
    np.testing.assert_array_equal(run_graph(h, {"x": x})[0], run_graph(g, {"x": x})[0])
    qconv = next(n for n in integer_linear(g).nodes if n.op == "tuner.QConv")
    assert integer_linear(g).value(qconv.inputs[0]).dtype == "uint8"


def test_an_int8_value_the_caller_sees_or_a_non_dequantizer_reads_stays_int8() -> None:
    g = _qdq_conv(act="int8")
    seen = Graph.make([g.value(i) for i in g.inputs], g.nodes, list(g.values.values()), ["y", "rq"])
    h = unsigned_activations(seen)
    assert h.value("rq").dtype == "int8" and h.value("xq").dtype == "uint8"
    nodes = [*g.nodes, Node("Cast", ("xq",), ("xc",), {"to": 1}, "cast")]
    read = Graph.make(
        [g.value(i) for i in g.inputs],
        nodes,
        [*g.values.values(), Value("xc", "float32", (1, 4, 6, 5))],
        ["y", "xc"],
    )
    assert unsigned_activations(read).value("xq").dtype == "int8"


def test_the_pass_takes_grouped_convolutions_too() -> None:
    g = _qdq_conv(group=2)
    h = integer_linear(g)
    assert [n.op for n in h.nodes].count("tuner.QConv") == 1
    x = RNG.standard_normal((1, 4, 6, 5)).astype(np.float32)
    steps = np.abs(run_graph(h, {"x": x})[0] - run_graph(g, {"x": x})[0]) / 0.05
    assert steps.max() <= 1.001


@pytest.mark.parametrize("why", ["weights with a zero point", "a per-axis image"])
def test_the_pass_leaves_what_the_integer_template_has_no_kind_for(why: str) -> None:
    g = {
        "weights with a zero point": lambda: _qdq_conv(w_zero=3),
        "a per-axis image": lambda: _qdq_conv(x_scale_size=4),
    }[why]()
    assert integer_linear(g) is g


def test_the_operator_is_an_anchor_that_fuses_its_epilogue() -> None:
    from tuner.graph.fusion import fuse, groups_summary

    h = integer_linear(_qdq_conv())
    summary = groups_summary(fuse(h))
    assert any(s.startswith("tuner.QConv+Relu+QuantizeLinear") for s in summary), summary
    assert opdef("tuner.QConv").kind == opdef("Conv").kind


def test_qmatmul_is_the_float_product_of_the_dequantized_operands() -> None:
    aq = RNG.integers(0, 256, (2, 5, 33)).astype(np.uint8)
    wq = RNG.integers(-128, 128, (33, 7)).astype(np.int8)
    a_s, a_z = np.array(0.03, np.float32), np.array(131, np.uint8)
    ws = (RNG.random(7) * 0.01 + 1e-3).astype(np.float32)
    ops = [aq, wq, a_s, a_z, ws]
    want = ((aq.astype(np.float64) - 131) * 0.03) @ (wq.astype(np.float64) * ws.astype(np.float64))
    got = evaluate("tuner.QMatMul", ops)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    (lowered,) = lower_and_run("tuner.QMatMul", ops, {}, [got])
    np.testing.assert_allclose(lowered, got, rtol=1e-6, atol=1e-6 * np.abs(got).max())


def _dynamic_matmul() -> Graph:
    """What the importer makes of quantize_dynamic's MatMulInteger: the product of the
    dequantized operands (scale one, the run-time zero point), cast to int32 and back,
    then multiplied by the run-time scale times the weight's (``DynamicQuantizeLinear``'s
    outputs are the graph's inputs here)."""
    wq = RNG.integers(-128, 128, (16, 6)).astype(np.int8)
    consts = {
        "one": np.array(1.0, np.float32),
        "wq": wq,
        "wz": np.array(0, np.int8),
        "w_scale": np.array(0.02, np.float32),
    }
    nodes = [
        Node("DequantizeLinear", ("xq", "one", "xz"), ("xd",), {}, "dqx"),
        Node("DequantizeLinear", ("wq", "one", "wz"), ("wd",), {}, "dqw"),
        Node("MatMul", ("xd", "wd"), ("p",), {}, "mm"),
        Node("Cast", ("p",), ("pi",), {"to": 6}, "to_int"),
        Node("Cast", ("pi",), ("pf",), {"to": 1}, "to_float"),
        Node("Mul", ("xs", "w_scale"), ("s",), {}, "scale"),
        Node("Mul", ("pf", "s"), ("y",), {}, "mul"),
    ]
    values = [Value.const(k, v) for k, v in consts.items()]
    values += [
        Value("xd", "float32", (3, 16)), Value("wd", "float32", (16, 6)),
        Value("p", "float32", (3, 6)), Value("pi", "int32", (3, 6)), Value("pf", "float32", (3, 6)),
        Value("s", "float32", ()), Value("y", "float32", (3, 6)),
    ]  # fmt: skip
    inputs = [Value("xq", "uint8", (3, 16)), Value("xs", "float32", ()), Value("xz", "uint8", ())]
    return Graph.make(inputs, nodes, values, ["y"])


def test_the_pass_makes_a_dynamic_matmul_integer_without_its_casts() -> None:
    g = _dynamic_matmul()
    h = integer_linear(g)
    ops = [n.op for n in h.nodes]
    assert "tuner.QMatMul" in ops and "MatMul" not in ops
    assert not any(n.op == "Cast" for n in h.nodes)
    feeds = {
        "xq": RNG.integers(0, 256, (3, 16)).astype(np.uint8),
        "xs": np.array(0.05, np.float32),
        "xz": np.array(120, np.uint8),
    }
    want, got = run_graph(g, feeds)[0], run_graph(h, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * np.abs(want).max())


def _qdq_gemm(trans_b: bool, bias: bool, per_channel: bool) -> Graph:
    """x -> Q -> DQ -> Gemm(., DQ(w), DQ(b)) -> y: a classifier as quantize_static writes it
    (7 rows, K = 37, N = 13: nothing a tile divides)."""
    M, K, N = 7, 37, 13
    wq = RNG.integers(-128, 128, (N, K) if trans_b else (K, N)).astype(np.int8)
    consts = {
        "xs": np.array(0.04, np.float32),
        "xz": np.array(121, np.uint8),
        "wq": wq,
        "ws": (RNG.random(N if per_channel else 1) * 0.01 + 1e-3).astype(np.float32),
        "bq": RNG.integers(-500, 500, N).astype(np.int32),
        "bs": np.array(1e-4, np.float32),
    }
    axis = 0 if trans_b else 1
    nodes = [
        Node("QuantizeLinear", ("x", "xs", "xz"), ("xq",), {}, "qx"),
        Node("DequantizeLinear", ("xq", "xs", "xz"), ("xd",), {}, "dqx"),
        Node("DequantizeLinear", ("wq", "ws"), ("wd",), {"axis": axis}, "dqw"),
        Node("DequantizeLinear", ("bq", "bs"), ("bd",), {}, "dqb"),
        Node("Gemm", ("xd", "wd", *(("bd",) if bias else ())), ("y",), {"transB": int(trans_b)}),
    ]
    values = [Value.const(k, v) for k, v in consts.items()]
    values += [
        Value("xq", "uint8", (M, K)), Value("xd", "float32", (M, K)),
        Value("wd", "float32", wq.shape), Value("bd", "float32", (N,)), Value("y", "float32", (M, N)),
    ]  # fmt: skip
    return Graph.make([Value("x", "float32", (M, K))], nodes, values, ["y"])


@pytest.mark.parametrize(
    ("trans_b", "bias", "per_channel"),
    [(True, True, True), (False, True, False), (True, False, False)],
)
def test_the_pass_makes_a_qdq_gemm_an_integer_product_and_its_bias(
    trans_b: bool, bias: bool, per_channel: bool
) -> None:
    g = _qdq_gemm(trans_b, bias, per_channel)
    h = integer_linear(g)
    ops = [n.op for n in h.nodes]
    assert "tuner.QMatMul" in ops and "Gemm" not in ops
    assert ("Add" in ops) == bias
    x = RNG.standard_normal((7, 37)).astype(np.float32)
    want, got = run_graph(g, {"x": x})[0], run_graph(h, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_a_gemm_the_integer_product_cannot_take_stays_float() -> None:
    g = _qdq_gemm(True, True, True)
    gemm = next(n for n in g.nodes if n.op == "Gemm")
    for attrs in ({"transB": 1, "alpha": 0.5}, {"transB": 1, "transA": 1}):
        other = g.replace(
            nodes=tuple(dataclasses.replace(n, attrs=attrs) if n is gemm else n for n in g.nodes)
        )
        assert "Gemm" in [n.op for n in integer_linear(other).nodes]
