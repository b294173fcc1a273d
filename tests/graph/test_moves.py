"""Data movement between equal quantizers on the integers (``tuner.graph.moves``).

ShuffleNet's channel shuffle as ``quantize_static`` writes it, each movement wrapped in
a quantizer of the same scale and zero point: the pass moves the integers themselves,
and the graph means the same arrays, bit for bit; anything else stays.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tuner.graph.interpret import run_graph  # noqa: E402
from tuner.graph.moves import integer_moves  # noqa: E402
from tuner.graph.onnx_import import from_onnx  # noqa: E402
from tuner.model import compile_model  # noqa: E402

RNG = np.random.default_rng(29)
SHAPE = (1, 6, 7, 5)


def _shuffle(second_scale: float = 0.05, relu: bool = False) -> onnx.ModelProto:
    """x -> Q -> DQ -> Reshape(1,2,3,7,5) -> Q -> DQ -> Transpose -> Q -> DQ -> Reshape -> y,
    the quantizer after the transpose of scale ``second_scale`` (``relu``: a Relu reads
    the first reshape too)."""
    inits = [
        numpy_helper.from_array(np.array(0.05, np.float32), "s"),
        numpy_helper.from_array(np.array(second_scale, np.float32), "s2"),
        numpy_helper.from_array(np.array(-3, np.int8), "z"),
        numpy_helper.from_array(np.array([1, 2, 3, 7, 5], np.int64), "split"),
        numpy_helper.from_array(np.array(SHAPE, np.int64), "whole"),
    ]

    def qdq(x: str, out: str, s: str = "s") -> list:  # type: ignore[type-arg]
        return [
            helper.make_node("QuantizeLinear", [x, s, "z"], [f"{out}_q"]),
            helper.make_node("DequantizeLinear", [f"{out}_q", s, "z"], [out]),
        ]

    nodes = [
        *qdq("x", "xd"),
        helper.make_node("Reshape", ["xd", "split"], ["r"]),
        *qdq("r", "rd"),
        helper.make_node("Transpose", ["rd"], ["t"], perm=[0, 2, 1, 3, 4]),
        *qdq("t", "td", "s2"),
        helper.make_node("Reshape", ["td", "whole"], ["y"]),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)]
    if relu:
        nodes.append(helper.make_node("Relu", ["r"], ["r_relu"]))
        outputs.append(helper.make_tensor_value_info("r_relu", TensorProto.FLOAT, (1, 2, 3, 7, 5)))
    graph = helper.make_graph(
        nodes,
        "shuffle",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        outputs,
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _x() -> np.ndarray:
    return (RNG.standard_normal(SHAPE) * 4).astype(np.float32)  # saturates both ends too


def test_a_quantized_channel_shuffle_moves_the_integers() -> None:
    graph = from_onnx(_shuffle())
    moved = integer_moves(graph)
    ops = [n.op for n in moved.nodes]
    assert ops.count("QuantizeLinear") == 1  # x's own; the movements' went
    by_op = {n.op: n for n in moved.nodes}
    assert moved.value(by_op["Transpose"].inputs[0]).dtype == "int8"
    x = _x()
    np.testing.assert_array_equal(run_graph(moved, {"x": x})[0], run_graph(graph, {"x": x})[0])
    model = _shuffle()
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(
        compile_model(model).run({"x": x})[0], sess.run(None, {"x": x})[0]
    )


def test_movement_between_unequal_quantizers_or_read_otherwise_stays_float() -> None:
    x = _x()
    for model, kept in (
        (_shuffle(second_scale=0.07), "Transpose"),
        (_shuffle(relu=True), "Reshape"),
    ):
        graph = from_onnx(model)
        moved = integer_moves(graph)
        node = next(n for n in moved.nodes if n.op == kept)
        assert moved.value(node.inputs[0]).dtype == "float32"
        for got, want in zip(run_graph(moved, {"x": x}), run_graph(graph, {"x": x}), strict=True):
            np.testing.assert_array_equal(got, want)
