"""Activations between quantizers as table lookups: the ``tuner.Lookup`` operator and the
pass ``tuner.graph.tables.tabulate``.

The pass is checked on QDQ graphs written as ``quantize_static`` writes them: the
tabulated graph evaluates to the same arrays as the chain it replaces (every key value
of both 8-bit types met), compiled modules to the same arrays as the interpreter, and
within a step of onnxruntime; chains a table cannot hold stay as they are.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tuner.graph.interpret import run_graph  # noqa: E402
from tuner.graph.onnx_import import from_onnx  # noqa: E402
from tuner.graph.ops.lookup import LOOKUP  # noqa: E402
from tuner.graph.tables import tabulate  # noqa: E402
from tuner.model import compile_model  # noqa: E402

from .helpers import evaluate, lower_and_run  # noqa: E402

RNG = np.random.default_rng(11)
SHAPE = (1, 8, 13, 11)  # 1,144 elements: every key value, none a multiple of a vector


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_lookup_reads_each_key_from_its_table(dtype: str) -> None:
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max + 1, (1, 49, 3)).astype(dtype)
    table = RNG.integers(-128, 128, 256).astype(np.int8)
    (got,) = evaluate(LOOKUP, [x, table])
    np.testing.assert_array_equal(got, table[x.astype(int) - info.min])
    (lowered,) = lower_and_run(LOOKUP, [x, table], None, [got])
    np.testing.assert_array_equal(lowered, got)


class _Model:
    """A QDQ graph from float ``x`` to float ``y``, built node by node."""

    def __init__(self, dtype: int) -> None:
        self.dtype, self.nodes, self.inits, self.outputs = dtype, [], [], ["y"]

    def const(self, name: str, data: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(data), name))
        return name

    def qdq(self, x: str, out: str, scale: float, zp: int) -> tuple[str, str]:
        """Quantize ``x`` and dequantize it again: the quantized name and the float one."""
        s = self.const(f"{out}_s", np.array(scale, np.float32))
        z = f"{out}_z"
        self.inits.append(helper.make_tensor(z, self.dtype, [], [zp]))
        self.nodes.append(helper.make_node("QuantizeLinear", [x, s, z], [f"{out}_q"]))
        self.nodes.append(helper.make_node("DequantizeLinear", [f"{out}_q", s, z], [out]))
        return f"{out}_q", out

    def node(self, op: str, inputs: list[str], out: str, **attrs: object) -> str:
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def proto(self, opset: int = 17) -> onnx.ModelProto:
        info = helper.make_tensor_value_info
        graph = helper.make_graph(
            self.nodes,
            "qdq",
            [info("x", TensorProto.FLOAT, SHAPE)],
            [info(o, TensorProto.FLOAT, SHAPE) for o in self.outputs],
            initializer=self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8
        return model


def _activation(m: _Model, kind: str, x: str) -> str:
    """The float activation ``kind`` of ``x``, its intermediate values quantized as
    ``quantize_static`` quantizes them (SiLU's sigmoid has a quantizer of its own)."""
    if kind == "silu":
        low = -128 if m.dtype == TensorProto.INT8 else 0  # [0, 1] over the type's range
        _, s = m.qdq(m.node("Sigmoid", [x], "sig"), "sig_dq", 1 / 255, low)
        return m.node("Mul", [x, s], "act")
    if kind == "hardswish":
        return m.node("HardSwish", [x], "act")
    if kind == "leaky":
        return m.node("LeakyRelu", [x], "act", alpha=0.1)
    return m.node("Tanh", [x], "act")


def _model(kind: str, dtype: int = TensorProto.INT8) -> _Model:
    """x -> Q -> DQ -> activation -> Q -> DQ -> y."""
    m = _Model(dtype)
    zp = -3 if dtype == TensorProto.INT8 else 125
    _, xd = m.qdq("x", "xd", 0.03, zp)
    act = _activation(m, kind, xd)
    m.qdq(act, "y", 0.02, zp)
    return m


def _inputs() -> np.ndarray:
    """Inputs whose quantization meets every one of the 256 key values (and saturates)."""
    x = np.linspace(-4.5, 4.5, int(np.prod(SHAPE)), dtype=np.float32)
    return RNG.permutation(x).reshape(SHAPE)


def _ops(graph) -> list[str]:  # type: ignore[no-untyped-def]
    return [n.op for n in graph.nodes]


@pytest.mark.parametrize("dtype", [TensorProto.INT8, TensorProto.UINT8])
def test_a_quantized_silu_becomes_one_lookup_of_the_same_results(dtype: int) -> None:
    graph = from_onnx(_model("silu", dtype).proto())
    tabled = tabulate(graph)
    assert _ops(tabled).count(LOOKUP) == 1
    assert "Sigmoid" not in _ops(tabled) and "Mul" not in _ops(tabled)
    x = _inputs()
    np.testing.assert_array_equal(run_graph(tabled, {"x": x})[0], run_graph(graph, {"x": x})[0])


@pytest.mark.parametrize("kind", ["silu", "hardswish", "leaky", "tanh"])
def test_compiled_activations_between_quantizers_are_the_chains_results(kind: str) -> None:
    proto = _model(kind).proto()
    x = _inputs()
    want = run_graph(from_onnx(proto), {"x": x})[0]
    module = compile_model(proto)
    np.testing.assert_array_equal(module.run({"x": x})[0], want)
    (plan,) = module.plans
    assert any(LOOKUP in str(spec) for spec in plan.specs)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
    steps = np.rint(np.abs(want - sess.run(None, {"x": x})[0]) / 0.02)
    assert steps.max() <= 1, "onnxruntime's float activation rounds within a step of ours"


def test_chains_a_table_cannot_hold_stay_arithmetic() -> None:
    # a per-channel multiply: the result depends on the channel too
    m = _Model(TensorProto.INT8)
    _, xd = m.qdq("x", "xd", 0.03, 0)
    scale = m.const("per_channel", RNG.random((8, 1, 1)).astype(np.float32))
    m.qdq(m.node("Mul", [m.node("Sigmoid", [xd], "s"), scale], "act"), "y", 0.01, 0)
    assert LOOKUP not in _ops(tabulate(from_onnx(m.proto())))
    # a bare requantization: arithmetic is cheaper than a table read
    m = _Model(TensorProto.INT8)
    _, xd = m.qdq("x", "xd", 0.03, 0)
    m.qdq(xd, "y", 0.05, 4)
    assert LOOKUP not in _ops(tabulate(from_onnx(m.proto())))


def test_a_value_the_caller_sees_stays_outside_the_table() -> None:
    m = _model("silu")
    m.outputs.append("sig")  # the float sigmoid before its quantizer
    graph = from_onnx(m.proto())
    tabled = tabulate(graph)
    x = _inputs()
    for got, want in zip(run_graph(tabled, {"x": x}), run_graph(graph, {"x": x}), strict=True):
        np.testing.assert_array_equal(got, want)
    assert "Sigmoid" in _ops(tabled)


def test_a_lookup_may_stay_a_kernel_of_its_own() -> None:
    """Where the target reads tables in vectors, fused with its readers a lookup would be
    a scalar read per element: ``fuse(..., alone=...)`` keeps it apart, else it fuses."""
    from tuner.graph.fusion import fuse, groups_summary

    tabled = tabulate(from_onnx(_model("silu").proto()))
    assert groups_summary(fuse(tabled)) == [f"QuantizeLinear+{LOOKUP}+DequantizeLinear"]
    alone = groups_summary(fuse(tabled, alone=frozenset({LOOKUP})))
    assert alone == ["QuantizeLinear", LOOKUP, "DequantizeLinear"]
