"""QuantizeLinear and DequantizeLinear against onnxruntime: one node, QDQ graphs around Conv and
MatMul, and a small CNN quantized by ``onnxruntime.quantization.quantize_static``.

One node gives exactly onnxruntime's integers (round half to even, saturation, per-tensor
and per-axis, symmetric and asymmetric). Around a Conv or a MatMul our float computation
of the dequantized values can differ from onnxruntime's integer kernels (QLinearConv: an
int32 accumulator, the bias quantized to int32, one requantizing multiply) where a value
lies within float rounding of a rounding boundary: by one quantization step, on a few
elements.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tuner.model import compile_model  # noqa: E402

from .helpers import check_op  # noqa: E402

RNG = np.random.default_rng(11)


def _q(dtype: str, values: list[int] | int) -> np.ndarray:
    return np.asarray(values, dtype)


@pytest.mark.parametrize(
    ("zp_dtype", "zero_point"), [("int8", 0), ("int8", -7), ("uint8", 128), ("uint8", 3)]
)
def test_quantize_rounds_half_to_even_and_saturates_per_tensor(
    zp_dtype: str, zero_point: int
) -> None:
    scale = np.float32(0.25)
    halves = (np.arange(-9, 9, dtype=np.float32) + 0.5) * scale  # every one on a boundary
    x = np.concatenate([halves, RNG.standard_normal(29).astype(np.float32) * 40, [1e6, -1e6]])
    x = x.astype(np.float32).reshape(1, -1)
    check_op("QuantizeLinear", [x, np.array(scale), _q(zp_dtype, zero_point)], const={1, 2})


def test_quantize_without_zero_point_is_uint8() -> None:
    x = (RNG.standard_normal((2, 3, 5)) * 30).astype(np.float32)
    check_op("QuantizeLinear", [x, np.array(0.5, np.float32)], const={1})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_quantize_and_dequantize_per_axis(axis: int) -> None:
    x = (RNG.standard_normal((3, 5, 7)) * 8).astype(np.float32)
    n = x.shape[axis]
    scale = (RNG.random(n) * 0.2 + 0.01).astype(np.float32)
    zp = RNG.integers(-20, 20, n).astype(np.int8)
    check_op("QuantizeLinear", [x, scale, zp], {"axis": axis}, const={1, 2})
    q = RNG.integers(-128, 128, x.shape).astype(np.int8)
    check_op("DequantizeLinear", [q, scale, zp], {"axis": axis}, const={1, 2})


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32"])
def test_dequantize_per_tensor(dtype: str) -> None:
    lo, hi = {"int8": (-128, 128), "uint8": (0, 256), "int32": (-(2**20), 2**20)}[dtype]
    q = RNG.integers(lo, hi, (4, 9)).astype(dtype)
    zp = np.array(0 if dtype == "int32" else (lo + hi) // 3, dtype)
    check_op("DequantizeLinear", [q, np.array(0.037, np.float32), zp], const={1, 2})
    check_op("DequantizeLinear", [q, np.array(0.5, np.float32)], const={1})


# -- QDQ graphs ------------------------------------------------------------------------


def _qdq(x: str, out: str, scale: float, zp: int, dtype: int, inits: list) -> list:  # type: ignore[type-arg]
    """Nodes quantizing then dequantizing ``x`` (one scale, one zero point) into ``out``."""
    s, z = f"{out}_s", f"{out}_z"
    inits += [
        numpy_helper.from_array(np.array(scale, np.float32), s),
        helper.make_tensor(z, dtype, [], [zp]),
    ]
    return [
        helper.make_node("QuantizeLinear", [x, s, z], [f"{out}_q"]),
        helper.make_node("DequantizeLinear", [f"{out}_q", s, z], [out]),
    ]


def _weight(name: str, w: np.ndarray, inits: list, axis: int = 0) -> list:  # type: ignore[type-arg]
    """An int8 weight with a symmetric scale per output channel, dequantized into ``name``."""
    amax = np.abs(w).reshape(w.shape[axis], -1).max(axis=1) if axis == 0 else np.abs(w).max()
    scale = (np.asarray(amax) / 127).astype(np.float32)
    shaped = scale.reshape((-1,) + (1,) * (w.ndim - 1)) if axis == 0 else scale
    q = np.clip(np.rint(w / shaped), -127, 127).astype(np.int8)
    zp = np.zeros(scale.shape, np.int8)
    inits += [
        numpy_helper.from_array(q, f"{name}_q"),
        numpy_helper.from_array(scale, f"{name}_s"),
        numpy_helper.from_array(zp, f"{name}_z"),
    ]
    return [
        helper.make_node(
            "DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [name], axis=axis
        )
    ]


def _model(
    nodes: list, inits: list, x_shape: tuple[int, ...], y: str, y_shape: tuple[int, ...]
) -> onnx.ModelProto:  # type: ignore[type-arg]
    graph = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, y_shape)],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _steps_apart(
    model: onnx.ModelProto, x: np.ndarray, step: float, optimized: bool = True
) -> np.ndarray:
    """How many quantization steps of ``step`` our output is from onnxruntime's, per element
    (onnxruntime with all its graph optimizations, or ``optimized=False`` with none)."""
    so = ort.SessionOptions()
    if not optimized:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    got = compile_model(model).run({"x": x})[0]
    assert got.shape == want.shape
    return np.rint(np.abs(got.astype(np.float64) - want) / step)


@pytest.mark.parametrize(
    ("C", "K", "zp", "dtype"),
    [(3, 5, 128, TensorProto.UINT8), (8, 7, 0, TensorProto.INT8), (16, 16, -9, TensorProto.INT8)],
)
def test_a_qdq_convolution_with_per_channel_weights_matches_within_one_step(
    C: int, K: int, zp: int, dtype: int
) -> None:
    inits: list = []  # type: ignore[type-arg]
    w = (RNG.standard_normal((K, C, 3, 3)) * 0.3).astype(np.float32)
    b = (RNG.standard_normal(K) * 0.1).astype(np.float32)
    inits.append(numpy_helper.from_array(b, "b"))
    nodes = _qdq("x", "xd", 0.02, zp, dtype, inits) + _weight("w", w, inits)
    nodes.append(helper.make_node("Conv", ["xd", "w", "b"], ["c"], pads=[1, 1, 1, 1]))
    nodes.append(helper.make_node("Relu", ["c"], ["r"]))
    nodes += _qdq("r", "y", 0.03, -20 if dtype == TensorProto.INT8 else 5, dtype, inits)
    x = (RNG.standard_normal((1, C, 9, 11))).astype(np.float32)
    apart = _steps_apart(_model(nodes, inits, x.shape, "y", (1, K, 9, 11)), x, 0.03)
    assert apart.max() <= 1 and apart.mean() < 0.02, (apart.max(), apart.mean())


def test_on_a_host_with_an_int8_dot_product_the_convolutions_run_integer() -> None:
    """A QDQ convolution (3 x 3 and depthwise) compiles to the integer templates where the
    host has VNNI, and stays within one step of onnxruntime."""
    from tuner.lower.intrin import dot_intrinsic
    from tuner.target import Target

    if dot_intrinsic(Target.from_name("cpu")) is None:
        pytest.skip("the host has no int8 dot product")
    inits: list = []  # type: ignore[type-arg]
    w = (RNG.standard_normal((16, 8, 3, 3)) * 0.3).astype(np.float32)
    dw = (RNG.standard_normal((16, 1, 3, 3)) * 0.3).astype(np.float32)
    nodes = _qdq("x", "xd", 0.02, 3, TensorProto.UINT8, inits) + _weight("w", w, inits)
    nodes.append(helper.make_node("Conv", ["xd", "w"], ["c"], pads=[1, 1, 1, 1]))
    nodes += _qdq("c", "cd", 0.05, 120, TensorProto.UINT8, inits) + _weight("dw", dw, inits)
    nodes.append(helper.make_node("Conv", ["cd", "dw"], ["d"], pads=[1, 1, 1, 1], group=16))
    nodes += _qdq("d", "y", 0.05, 128, TensorProto.UINT8, inits)
    model = _model(nodes, inits, (1, 8, 9, 11), "y", (1, 16, 9, 11))
    module = compile_model(model)
    ops = [s.task.workload.op for s in module.plans[0].specs]
    assert "matmul_integer" in ops and "im2col_nhwc" in ops, ops
    depthwise = [s.task.workload for s in module.plans[0].specs if s.task.workload.op == "conv2d"]
    assert depthwise and depthwise[0].as_dict()["x_dtype"] == "uint8"
    x = RNG.standard_normal((1, 8, 9, 11)).astype(np.float32)
    apart = _steps_apart(model, x, 0.05)
    assert apart.max() <= 1 and apart.mean() < 0.05, (apart.max(), apart.mean())


def _near_half() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """``(xq, wq, bq, w_scale, y_scale)`` of a 1 x 1 convolution of every int8 value
    (x_scale 0.02, zero point 0) on which requantizing as onnxruntime's QLinearConv does,
    ``(acc + bq) * float32(x_scale * w_scale / y_scale)``, and dequantizing the sums then
    quantizing them, ``(acc * x_scale * w_scale + bias) / y_scale``, round at least one output
    to different integers: the values lie within float32's rounding of a half."""
    rng = np.random.default_rng(3)
    xq = np.arange(-128, 128, dtype=np.int64).reshape(1, -1)
    xs = np.float32(0.02)
    while True:
        wq = rng.integers(-127, 128, (64, 1)).astype(np.int64)
        ws = (rng.random(64) * 0.02 + 0.001).astype(np.float32)
        ys = np.float32(rng.random() * 0.1 + 0.02)
        bq = rng.integers(-3000, 3000, 64).astype(np.int64)
        acc = wq.sum(axis=1, keepdims=True) * xq  # every channel sees each input value
        c = (xs * ws).astype(np.float32)[:, None]
        ort_way = np.rint((acc + bq[:, None]).astype(np.float32) * (c / ys).astype(np.float32))
        dequantized = acc.astype(np.float32) * c + (bq * c[:, 0]).astype(np.float32)[:, None]
        float_way = np.rint(dequantized.astype(np.float32) / ys)
        inside = np.abs(ort_way) < 100
        if np.any((ort_way != float_way) & inside):
            return xq, wq, bq, ws, float(ys)


@pytest.mark.parametrize("group", [1, 64])
def test_a_quantize_static_convolution_requantizes_as_onnxruntime_does(group: int) -> None:
    """A QDQ convolution with an int32 bias (as ``quantize_static`` writes it), one group or
    depthwise, gives onnxruntime's int8 values exactly: its bias is added to the integer sums
    and one multiply by ``x_scale * w_scale / y_scale`` requantizes them, rounded half to
    even, as QLinearConv does, on inputs chosen where another order of the same arithmetic
    rounds differently. (Integer kernels run where the host has an int8 dot product.)"""
    from tuner.lower.intrin import dot_intrinsic
    from tuner.target import Target

    if dot_intrinsic(Target.from_name("cpu")) is None:
        pytest.skip("the host has no int8 dot product")
    xq, wq, bq, ws, ys = _near_half()
    C = 64 if group == 64 else 1
    weight = np.zeros((64, 64 // group if group == 64 else 1, 1, 1), np.int8)
    weight[:, 0, 0, 0] = wq[:, 0]
    inits: list = []  # type: ignore[type-arg]
    x = (xq.reshape(1, 1, 16, 16).astype(np.float32) * np.float32(0.02)).repeat(C, axis=1)
    nodes = _qdq("x", "xd", 0.02, 0, TensorProto.INT8, inits)
    inits += [
        numpy_helper.from_array(weight, "w_q"),
        numpy_helper.from_array(ws, "w_s"),
        numpy_helper.from_array(np.zeros(64, np.int8), "w_z"),
        numpy_helper.from_array(bq.astype(np.int32), "b_q"),
        numpy_helper.from_array((np.float32(0.02) * ws).astype(np.float32), "b_s"),
    ]
    nodes += [
        helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["w"], axis=0),
        helper.make_node("DequantizeLinear", ["b_q", "b_s"], ["b"], axis=0),
        helper.make_node("Conv", ["xd", "w", "b"], ["c"], group=group),
    ]
    nodes += _qdq("c", "y", ys, 0, TensorProto.INT8, inits)
    model = _model(nodes, inits, (1, C, 16, 16), "y", (1, 64, 16, 16))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    got = compile_model(model).run({"x": x})[0]
    np.testing.assert_array_equal(np.rint(got / np.float32(ys)), np.rint(want / np.float32(ys)))


def test_a_qdq_matmul_with_asymmetric_activations_matches_within_one_step() -> None:
    inits: list = []  # type: ignore[type-arg]
    w = (RNG.standard_normal((24, 10)) * 0.2).astype(np.float32)
    nodes = _qdq("x", "xd", 0.05, 131, TensorProto.UINT8, inits) + _weight("w", w, inits, axis=1)
    nodes.append(helper.make_node("MatMul", ["xd", "w"], ["m"]))
    nodes += _qdq("m", "y", 0.04, 120, TensorProto.UINT8, inits)
    x = (RNG.standard_normal((6, 24)) * 2).astype(np.float32)
    apart = _steps_apart(_model(nodes, inits, x.shape, "y", (6, 10)), x, 0.04)
    assert apart.max() <= 1 and apart.mean() < 0.05, (apart.max(), apart.mean())


def test_a_qdq_classifier_gemm_runs_integer_within_one_step() -> None:
    """A Linear layer as quantize_static writes it (Gemm, transB, a float bias) is an integer
    product where the host has VNNI, its bias and requantization fused; one step of
    onnxruntime."""
    from tuner.lower.intrin import dot_intrinsic
    from tuner.target import Target

    inits: list = []  # type: ignore[type-arg]
    w = (RNG.standard_normal((10, 24)) * 0.2).astype(np.float32)  # [N, K]
    inits.append(numpy_helper.from_array((RNG.standard_normal(10) * 0.3).astype(np.float32), "b"))
    nodes = _qdq("x", "xd", 0.05, 131, TensorProto.UINT8, inits) + _weight("w", w, inits)
    nodes.append(helper.make_node("Gemm", ["xd", "w", "b"], ["m"], transB=1))
    nodes += _qdq("m", "y", 0.04, 120, TensorProto.UINT8, inits)
    model = _model(nodes, inits, (6, 24), "y", (6, 10))
    if dot_intrinsic(Target.from_name("cpu")) is not None:
        ops = [s.task.workload.op for s in compile_model(model).plans[0].specs]
        assert ops == ["fused", "matmul_integer", "fused"], ops  # x's quantizer, y's dequantizer
    x = (RNG.standard_normal((6, 24)) * 2).astype(np.float32)
    apart = _steps_apart(model, x, 0.04)
    assert apart.max() <= 1 and apart.mean() < 0.05, (apart.max(), apart.mean())


def test_a_chain_of_quantizations_is_one_kernel_of_linear_size() -> None:
    """Each quantize uses its input once (rounding by one addition, not a floor and selects):
    six quantize-dequantize pairs fused into one kernel stay small (nested rounds repeated
    their argument at every level: a 6 MB kernel for three of them) and exact as ONNX
    defines them. onnxruntime's graph optimizations fold each dequantize-quantize pair into
    one requantization, which rounds differently: within a step of it."""
    inits: list = []  # type: ignore[type-arg]
    nodes, src = [], "x"
    for k, (scale, zp) in enumerate(
        [(0.05, 3), (0.11, -7), (0.02, 0), (0.3, 100), (0.07, -1), (0.5, 9)]
    ):
        nodes += _qdq(src, f"d{k}", scale, zp, TensorProto.INT8, inits)
        src = f"d{k}"
    model = _model(nodes, inits, (4, 33), src, (4, 33))
    x = (RNG.standard_normal((4, 33)) * 3).astype(np.float32)
    assert _steps_apart(model, x, 0.5, optimized=False).max() == 0
    assert _steps_apart(model, x, 0.5).max() <= 1
    module = compile_model(model)
    (plan,) = module.plans
    kernels = plan.distinct()
    assert len(kernels) == 1
    assert len(kernels[0][1].kernel.source) < 20_000


# -- the QOperator format: integer operators rewritten into QDQ at import ----------------


def _one_node(
    op: str,
    x: np.ndarray,
    consts: list[np.ndarray | None],
    n_outputs: int = 1,
    domain: str = "",
    **attrs: object,
) -> onnx.ModelProto:
    """``op`` on the graph input ``x`` and initializers ``consts`` (None: omitted)."""
    names = ["x"] + [f"c{i}" if c is not None else "" for i, c in enumerate(consts)]
    inits = [numpy_helper.from_array(c, f"c{i}") for i, c in enumerate(consts) if c is not None]
    outs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op, names, outs, domain=domain, **attrs)
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph(
        [node],
        "one",
        [helper.make_tensor_value_info("x", elem, x.shape)],
        [helper.make_value_info(o, onnx.TypeProto()) for o in outs],
        initializer=inits,
    )
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model) if not domain else _typed(model, x, n_outputs)


def _typed(model: onnx.ModelProto, x: np.ndarray, n_outputs: int) -> onnx.ModelProto:
    """Outputs typed from onnxruntime's run (shape inference does not know com.microsoft)."""
    outs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )
    del model.graph.output[:]
    model.graph.output.extend(
        helper.make_tensor_value_info(f"y{i}", helper.np_dtype_to_tensor_dtype(o.dtype), o.shape)
        for i, o in enumerate(outs[:n_outputs])
    )
    return model


def _both(model: onnx.ModelProto, x: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return compile_model(model).run({"x": x}), sess.run(None, {"x": x})


def _u8(shape: tuple[int, ...]) -> np.ndarray:
    return RNG.integers(0, 256, shape).astype(np.uint8)


def _i8(shape: tuple[int, ...]) -> np.ndarray:
    return RNG.integers(-127, 128, shape).astype(np.int8)


def test_qlinear_conv_per_channel_with_bias_within_one_step() -> None:
    K, C = 7, 5
    x = _u8((1, C, 9, 8))
    w = _i8((K, C, 3, 3))
    ws = (RNG.random(K) * 0.01 + 0.002).astype(np.float32)
    bias = RNG.integers(-3000, 3000, K).astype(np.int32)
    consts = [np.array(0.02, np.float32), np.array(120, np.uint8), w, ws, np.zeros(K, np.int8),
              np.array(0.05, np.float32), np.array(100, np.uint8), bias]  # fmt: skip
    model = _one_node("QLinearConv", x, consts, pads=[1, 1, 1, 1], strides=[2, 1])
    (got,), (want,) = _both(model, x)
    assert got.dtype == np.uint8 and got.shape == want.shape
    apart = np.abs(got.astype(int) - want.astype(int))
    assert apart.max() <= 1 and apart.mean() < 0.02, (apart.max(), apart.mean())


def test_qlinear_matmul_within_one_step() -> None:
    x = _i8((4, 6, 20))
    consts = [np.array(0.03, np.float32), np.array(-5, np.int8), _i8((20, 9)),
              np.array(0.004, np.float32), np.array(0, np.int8),
              np.array(0.02, np.float32), np.array(3, np.int8)]  # fmt: skip
    (got,), (want,) = _both(_one_node("QLinearMatMul", x, consts), x)
    apart = np.abs(got.astype(int) - want.astype(int))
    assert apart.max() <= 1 and apart.mean() < 0.02, (apart.max(), apart.mean())


def test_matmul_and_conv_integer_are_exact() -> None:
    x = _u8((3, 40))
    b = _i8((40, 11))
    (got,), (want,) = _both(_one_node("MatMulInteger", x, [b, np.array(131, np.uint8)]), x)
    assert got.dtype == np.int32 and np.array_equal(got, want)
    x4 = _u8((1, 3, 7, 7))
    w = _i8((4, 3, 3, 3))
    model = _one_node("ConvInteger", x4, [w, np.array(9, np.uint8)], pads=[1, 1, 1, 1])
    (got,), (want,) = _both(model, x4)
    assert got.dtype == np.int32 and np.array_equal(got, want)


def test_dynamic_quantize_linear_gives_onnxruntimes_scale_zero_point_and_values() -> None:
    x = (RNG.standard_normal((5, 17)) * 3 + 1).astype(np.float32)
    got, want = _both(_one_node("DynamicQuantizeLinear", x, [], n_outputs=3), x)
    y, scale, zp = got
    np.testing.assert_allclose(scale, want[1], rtol=1e-6)
    assert zp == want[2] and zp.dtype == np.uint8
    assert np.abs(y.astype(int) - want[0].astype(int)).max() <= 1


def test_qlinear_add_of_com_microsoft_within_one_step() -> None:
    x = _u8((2, 8, 5))
    consts = [np.array(0.04, np.float32), np.array(128, np.uint8), _u8((8, 5)),
              np.array(0.02, np.float32), np.array(10, np.uint8),
              np.array(0.05, np.float32), np.array(90, np.uint8)]  # fmt: skip
    (got,), (want,) = _both(_one_node("QLinearAdd", x, consts, domain="com.microsoft"), x)
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1


@pytest.mark.slow
def test_a_small_mlp_quantized_dynamically_matches(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``quantize_dynamic`` (MatMulInteger and DynamicQuantizeLinear) on Gemm -> Gelu -> Gemm:
    our module on the quantized file against onnxruntime on it, within a few hundredths of
    the outputs' scale (each activation's quantization may round one step apart)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from tests.models import builders

    fp32, q8 = tmp_path / "mlp.onnx", tmp_path / "mlp_q.onnx"
    onnx.save(builders.mlp(), fp32)
    quantize_dynamic(str(fp32), str(q8), weight_type=QuantType.QInt8)
    ops = {n.op_type for n in onnx.load(q8).graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops, ops
    sess = ort.InferenceSession(str(q8), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    module = compile_model(q8)
    for _ in range(4):
        x = RNG.standard_normal(sess.get_inputs()[0].shape).astype(np.float32)
        want, got = sess.run(None, {name: x})[0], module.run({name: x})[0]
        assert np.abs(got - want).max() <= 0.03 * np.abs(want).max()


@pytest.mark.slow
@pytest.mark.parametrize(("fmt", "activations"), [("QDQ", "QInt8"), ("QOperator", "QUInt8")])
def test_a_residual_block_quantized_by_onnxruntime_matches(
    tmp_path, fmt: str, activations: str
) -> None:  # type: ignore[no-untyped-def]
    """``quantize_static`` on a residual block (per-channel int8 weights), calibrated on random
    data, in either format (QOperator: QLinearConv and com.microsoft's QLinearAdd, rewritten
    at import): compiled and run against onnxruntime on the same file, within a step or two
    of its integer run."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    from tests.models import builders

    fp32, q8 = tmp_path / "block.onnx", tmp_path / "block_q.onnx"
    onnx.save(builders.basic_block(), fp32)
    feeds = [{"x": RNG.standard_normal((1, 8, 8, 8)).astype(np.float32)} for _ in range(8)]

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.left = iter(feeds)

        def get_next(self):  # type: ignore[no-untyped-def]
            return next(self.left, None)

    quantize_static(
        str(fp32), str(q8), Reader(), quant_format=QuantFormat[fmt], per_channel=True,
        activation_type=QuantType[activations], weight_type=QuantType.QInt8,
    )  # fmt: skip
    ops = {n.op_type for n in onnx.load(q8).graph.node}
    assert ("QLinearConv" if fmt == "QOperator" else "QuantizeLinear") in ops, ops
    sess = ort.InferenceSession(str(q8), providers=["CPUExecutionProvider"])
    module = compile_model(q8)
    levels = 255 if activations == "QUInt8" else 127
    out_scale = max(float(np.abs(sess.run(None, f)[0]).max()) for f in feeds) / levels
    for f in feeds[:4]:
        want, got = sess.run(None, f)[0], module.run(f)[0]
        apart = np.abs(got - want) / out_scale
        assert apart.max() <= 2.01 and apart.mean() < 0.1, (apart.max(), apart.mean())
