"""Shape arithmetic folded at import, and the legacy operator forms older exporters wrote.

Each graph is hand-made the way an exporter writes it and runs through
``compile_model`` against onnxruntime.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tuner.graph.onnx_import import from_onnx
from tuner.model.module import compile_model

F = TensorProto.FLOAT


def _model(
    nodes: list, inputs: list, outputs: list, opset: int, inits: list = ()
) -> onnx.ModelProto:  # type: ignore[assignment]
    graph = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, F, s) for n, s in outputs],
        initializer=list(inits),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    return model


def _const(name: str, *values: int) -> onnx.NodeProto:
    return helper.make_node(
        "Constant", [], [name], value=numpy_helper.from_array(np.array(values, np.int64))
    )


def _check(model: onnx.ModelProto, shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {"x": x})
    (got,) = compile_model(model).run({"x": x})
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _mod_reshape(batch: int | str) -> onnx.ModelProto:
    """torchvision ViT's attention: a Reshape target whose slice bounds come from a Mod of
    constants, which ONNX's data propagation does not follow (the rank stays unknown)."""
    nodes = [
        _const("two", 2),
        _const("three", 3),
        _const("one", 1),
        _const("zero", 0),
        _const("big", 2**62),
        _const("mid", 3, 4),
        helper.make_node("Mod", ["two", "three"], ["m"]),
        helper.make_node("Add", ["m", "one"], ["m1"]),
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "m"], ["head"]),  # s[0:2]
        helper.make_node("Slice", ["s", "m1", "big"], ["tail"]),  # s[3:]
        helper.make_node("Concat", ["head", "mid", "tail"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r"]),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    return _model(nodes, [("x", (batch, 5, 12, 2))], [("y", (batch, 5, 3, 4, 2))], 17)


def test_a_reshape_target_from_arithmetic_on_constants_gets_its_rank() -> None:
    assert from_onnx(_mod_reshape(2)).value("r").shape == (2, 5, 3, 4, 2)
    _check(_mod_reshape(2), (2, 5, 12, 2))


def test_folding_keeps_symbolic_shapes_symbolic() -> None:
    g = from_onnx(_mod_reshape("N"))
    assert g.value("r").shape == ("N", 5, 3, 4, 2)
    assert not g.value("target").is_const  # it depends on N: computed at run time or bound later


# -- legacy forms (opset 9-11), each against onnxruntime ------------------------------------


def test_unsqueeze_and_squeeze_with_axes_attributes() -> None:
    nodes = [
        helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0, 3]),
        helper.make_node("Squeeze", ["u"], ["y"], axes=[0]),
    ]
    _check(_model(nodes, [("x", (3, 4))], [("y", (3, 4, 1))], 11), (3, 4))


def test_constant_of_shape_from_a_static_shape() -> None:
    value = numpy_helper.from_array(np.array([0.5], np.float32))
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("ConstantOfShape", ["s"], ["c"], value=value),
        helper.make_node("Add", ["x", "c"], ["y"]),
    ]
    _check(_model(nodes, [("x", (2, 3))], [("y", (2, 3))], 9), (2, 3))


def test_flatten_by_shape_gather_unsqueeze_concat_reshape() -> None:
    """The opset-9 exporter's flatten: Shape -> Gather -> Unsqueeze(axes=) -> Concat -> Reshape."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Constant", [], ["i"], value=numpy_helper.from_array(np.array(0))),
        helper.make_node("Gather", ["s", "i"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n"], ["n1"], axes=[0]),
        _const("minus", -1),
        helper.make_node("Concat", ["n1", "minus"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    _check(_model(nodes, [("x", (2, 3, 4))], [("y", (2, 12))], 9), (2, 3, 4))


def test_sum_of_three_and_dropout_with_a_ratio() -> None:
    nodes = [
        helper.make_node("Dropout", ["x"], ["d"], ratio=0.5),
        helper.make_node("Sum", ["x", "d", "x"], ["y"]),
    ]
    _check(_model(nodes, [("x", (2, 5))], [("y", (2, 5))], 9), (2, 5))


def test_lrn_and_ceil_mode_max_pool() -> None:
    nodes = [
        helper.make_node("LRN", ["x"], ["l"], size=5, alpha=1e-4, beta=0.75, bias=1.0),
        helper.make_node("MaxPool", ["l"], ["y"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    ]
    _check(_model(nodes, [("x", (1, 8, 10, 10))], [("y", (1, 8, 5, 5))], 10), (1, 8, 10, 10))


@pytest.mark.parametrize("opset", [9, 11])
def test_initializers_listed_among_the_inputs(opset: int) -> None:
    """Old exporters list every weight as a graph input too; the weight is still a constant."""
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    model = _model(nodes, [("x", (2, 4)), ("w", (4, 3))], [("y", (2, 3))], opset, [w])
    assert from_onnx(model).value("w").is_const
    _check(model, (2, 4))
