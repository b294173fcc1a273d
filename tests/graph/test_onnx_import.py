"""The ONNX importer on models made with onnx.helper, checked against onnxruntime.

The models use only operators of the movement family (so the tests hold
whichever other families are merged) and an operator no family will take
(``Unique``) for the unsupported-operator message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tuner.graph import GraphError
from tuner.graph.interpret import run_graph
from tuner.graph.onnx_import import from_onnx

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def make_model(
    nodes: list[onnx.NodeProto],
    inputs: list[tuple[str, int, list[Any] | None]],
    outputs: list[str | tuple[str, int, list[Any]]],
    inits: dict[str, np.ndarray] | None = None,
    opset: int = 17,
    name: str = "m",
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [
            helper.make_value_info(o, onnx.TypeProto())
            if isinstance(o, str)
            else helper.make_tensor_value_info(*o)
            for o in outputs
        ],
        initializer=[numpy_helper.from_array(v, k) for k, v in (inits or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    # Declare the outputs' types as an exporter would: from onnx's own inference.
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except onnx.shape_inference.InferenceError:  # an operator onnx does not know
        return model
    types = {v.name: v.type for v in (*inferred.graph.value_info, *inferred.graph.output)}
    for out in model.graph.output:
        if out.name in types:
            out.type.CopyFrom(types[out.name])
    return model


def ort_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(r) for r in sess.run(None, feeds)]


def assert_same(model: onnx.ModelProto, feeds: dict[str, np.ndarray], **kw: Any) -> None:
    graph = from_onnx(model, **kw)
    ours = run_graph(graph, feeds)
    for o, r in zip(ours, ort_outputs(model, feeds), strict=True):
        assert o.shape == r.shape and o.dtype == r.dtype
        np.testing.assert_array_equal(o, r)


def movement_model(opset: int = 17, batch: Any = 2) -> onnx.ModelProto:
    """x[batch,3,4] -> Transpose -> Reshape(batch-agnostic) -> Slice -> y, plus Shape -> s."""
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1], name="tr"),
        helper.make_node("Reshape", ["t", "shape"], ["r"]),
        helper.make_node("Slice", ["r", "starts", "ends", "axes"], ["y"]),
        helper.make_node("Shape", ["x"], ["s"]),
    ]
    inits = {
        "shape": np.array([0, -1], np.int64),
        "starts": np.array([1], np.int64),
        "ends": np.array([100], np.int64),
        "axes": np.array([1], np.int64),
    }
    return make_model(nodes, [("x", F, [batch, 3, 4])], ["y", "s"], inits, opset)


def test_import_types_names_and_values() -> None:
    g = from_onnx(movement_model())
    assert g.inputs == ("x",) and g.outputs == ("y", "s") and g.opset == 17 and g.name == "m"
    assert [n.name for n in g.nodes] == ["tr", "Reshape_1", "Slice_2", "Shape_3"]
    assert g.nodes[0].attrs == {"perm": (0, 2, 1)}
    assert g.value("y").type_text() == "float32[2,11]"
    assert g.value("s").type_text() == "int64[3]"
    shape = g.value("shape")
    assert shape.is_const and shape.data is not None and shape.data.flags.writeable
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert_same(movement_model(), {"x": x})


def test_symbolic_batch_stays_a_string() -> None:
    g = from_onnx(movement_model(batch="N"))
    assert g.value("x").shape == ("N", 3, 4)
    assert g.value("t").shape == ("N", 4, 3)


def test_shapes_fix_the_batch() -> None:
    model = movement_model(batch="N")
    g = from_onnx(model, shapes={"x": (5, 3, 4)})
    assert g.value("x").shape == (5, 3, 4)
    assert g.value("y").shape == (5, 11)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"  # not changed
    assert_same(model, {"x": np.ones((5, 3, 4), np.float32)}, shapes={"x": (5, 3, 4)})


def test_shapes_name_a_symbol_by_its_value() -> None:
    """``{"N": 5}`` (or the command line's one-value ``N=5``) gives the symbol its value."""
    for shapes in ({"N": 5}, {"N": (5,)}, {"N": np.int64(5)}, {"x": (5, 3, 4), "N": 5}):
        g = from_onnx(movement_model(batch="N"), shapes=shapes)
        assert g.value("x").shape == (5, 3, 4) and g.value("y").shape == (5, 11)


def test_unknown_extents() -> None:
    """An unnamed input extent becomes a symbol that inference carries; ``shapes`` can fix it."""
    g = from_onnx(movement_model(batch=None))
    assert g.value("x").shape[0] == g.value("t").shape[0] == "x_d0"
    assert isinstance(g.value("y").shape[0], str)  # onnx's Reshape inference loses the symbol
    g = from_onnx(movement_model(batch=None), shapes={"x": [3, 3, 4]})
    assert g.value("x").shape == (3, 3, 4) and g.value("y").shape == (3, 11)


def test_uninferable_rank_names_the_value_and_node() -> None:
    nodes = [
        helper.make_node("Reshape", ["x", "s"], ["y"], name="r"),
        helper.make_node("Identity", ["y"], ["z"]),
    ]
    inputs: list[tuple[str, int, list[Any] | None]] = [("x", F, [4]), ("s", I64, [None])]
    model = make_model(nodes, inputs, [("z", F, [None, None])])
    with pytest.raises(GraphError) as err:
        from_onnx(model)
    assert str(err.value) == (
        "the rank of value 'y' (output of Reshape node 'r') cannot be inferred"
    )


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        (
            {"z": (1, 3, 4)},
            r"shapes names 'z', which is neither a graph input nor a symbol of one"
            r" \(inputs: x; symbols: N\)",
        ),
        ({"N": 0}, "shapes gives symbol 'N' the value 0; it must be positive"),
        ({"N": (2, 3)}, "shapes gives symbol 'N' \\(2, 3\\); a symbol takes one value"),
        ({"x": 5}, "shapes gives input 'x' 5; an input takes its whole shape"),
        ({"x": (5, 3, 4), "N": 6}, "shapes gives symbol 'N' two values: 5 and 6"),
        ({"x": (1, 3)}, r"input 'x' has rank 3, but shapes gives 2 extents \(1, 3\)"),
        ({"x": (1, 5, 4)}, "input 'x' has extent 3 in dimension 1, but shapes gives 5"),
        ({"x": (0, 3, 4)}, "they must be positive"),
    ],
)
def test_bad_shapes(shapes: dict[str, tuple[int, ...]], message: str) -> None:
    with pytest.raises(GraphError, match=message):
        from_onnx(movement_model(batch="N"), shapes=shapes)


def test_opset9_model_is_converted() -> None:
    """At opset 9 Slice and Unsqueeze take attributes; after conversion they take inputs."""
    nodes = [
        helper.make_node("Slice", ["x"], ["s"], starts=[1], ends=[3], axes=[1]),
        helper.make_node("Unsqueeze", ["s"], ["u"], axes=[0]),
        helper.make_node("Squeeze", ["u"], ["y"], axes=[0]),
    ]
    model = make_model(nodes, [("x", F, [2, 4])], ["y"], opset=9)
    g = from_onnx(model)
    assert g.opset == 13
    assert [n.op for n in g.nodes] == ["Slice", "Unsqueeze", "Squeeze"]
    assert len(g.nodes[0].inputs) >= 3 and g.const(g.nodes[0].inputs[1]) is not None
    assert g.value("y").shape == (2, 2)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(run_graph(g, {"x": x})[0], ort_outputs(model, {"x": x})[0])


def test_opset_above_21_is_kept() -> None:
    assert from_onnx(movement_model(opset=22)).opset == 22


def test_initializer_listed_as_input_is_a_constant() -> None:
    nodes = [helper.make_node("Concat", ["x", "w"], ["y"], axis=0)]
    w = np.full((1, 3), 7.0, np.float32)
    model = make_model(nodes, [("x", F, [2, 3]), ("w", F, [1, 3])], ["y"], {"w": w})
    g = from_onnx(model)
    assert g.inputs == ("x",)
    assert g.value("w").is_const
    x = np.ones((2, 3), np.float32)
    assert_same(model, {"x": x})


def test_constant_nodes_become_values() -> None:
    tensor = numpy_helper.from_array(np.array([2, 3], np.int64))
    nodes = [
        helper.make_node("Constant", [], ["shape"], value=tensor),
        helper.make_node("Constant", [], ["axes"], value_ints=[0]),
        helper.make_node("Constant", [], ["half"], value_float=0.5),
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Unsqueeze", ["r", "axes"], ["y"]),
        helper.make_node("Identity", ["half"], ["h"]),
    ]
    model = make_model(nodes, [("x", F, [6])], ["y", "h"])
    g = from_onnx(model)
    assert [n.op for n in g.nodes] == ["Reshape", "Unsqueeze", "Identity"]
    for name, want in (("shape", [2, 3]), ("axes", [0]), ("half", 0.5)):
        data = g.const(name)
        assert data is not None and data.tolist() == want and data.flags.writeable
    assert g.value("half").dtype == "float32" and g.value("half").shape == ()
    assert_same(model, {"x": np.arange(6, dtype=np.float32)})


def test_attributes_are_plain_values() -> None:
    nodes = [helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect", name="p")]
    model = make_model(nodes, [("x", F, [4])], ["y"], {"pads": np.array([1, 2], np.int64)})
    attrs = from_onnx(model).nodes[0].attrs
    assert attrs == {"mode": "reflect"} and isinstance(attrs["mode"], str)


def test_node_names_are_unique() -> None:
    nodes = [
        helper.make_node("Identity", ["x"], ["a"], name="n"),
        helper.make_node("Identity", ["a"], ["b"], name="n"),
        helper.make_node("Identity", ["b"], ["c"]),
        helper.make_node("Identity", ["c"], ["y"], name="Identity_2"),
    ]
    g = from_onnx(make_model(nodes, [("x", F, [3])], ["y"]))
    names = [n.name for n in g.nodes]
    assert len(set(names)) == 4 and names[0] == "n" and all(names)


def test_unsupported_operator_is_one_line() -> None:
    nodes = [
        helper.make_node("Identity", ["x"], ["a"], name="first"),
        helper.make_node("Unique", ["a"], ["u"]),
        helper.make_node("NonZero", ["a"], ["y"], name="later"),
    ]
    model = make_model(nodes, [("x", F, [4])], ["y"])
    with pytest.raises(GraphError) as err:
        from_onnx(model)
    assert str(err.value) == "unsupported operator Unique (node 'Unique_1', opset 17)"


def test_custom_domain_operator() -> None:
    node = helper.make_node("Foo", ["x"], ["y"], name="n1", domain="com.example")
    model = make_model([node], [("x", F, [4])], ["y"])
    model.opset_import.append(helper.make_opsetid("com.example", 2))
    with pytest.raises(
        GraphError, match=r"^unsupported operator com.example.Foo \(node 'n1', opset 2\)$"
    ):
        from_onnx(model)


def test_unsupported_dtype() -> None:
    model = make_model(
        [helper.make_node("Identity", ["x"], ["y"])], [("x", TensorProto.FLOAT16, [4])], ["y"]
    )
    with pytest.raises(
        GraphError, match="graph input 'x' has dtype float16, which is not supported"
    ):
        from_onnx(model)


def test_invalid_model() -> None:
    model = make_model([helper.make_node("Identity", ["nowhere"], ["y"])], [("x", F, [4])], ["y"])
    with pytest.raises(GraphError, match=r"^invalid ONNX model: ") as err:
        from_onnx(model)
    assert "\n" not in str(err.value)


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(GraphError, match="no such file"):
        from_onnx(tmp_path / "missing.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not a protobuf \xff\xfe")
    with pytest.raises(GraphError, match=r"^cannot read ONNX model") as err:
        from_onnx(str(bad))
    assert "\n" not in str(err.value)
    with pytest.raises(GraphError, match="cannot read ONNX model"):
        from_onnx(tmp_path)  # a folder
    with pytest.raises(GraphError, match=r"expected a path or an onnx\.ModelProto"):
        from_onnx(b"bytes")  # type: ignore[arg-type]


def test_external_data(tmp_path: Path) -> None:
    w = np.arange(4096, dtype=np.float32).reshape(1, 4096)
    nodes = [helper.make_node("Concat", ["x", "w"], ["y"], axis=0)]
    model = make_model(nodes, [("x", F, [2, 4096])], ["y"], {"w": w})
    path = tmp_path / "model.onnx"
    onnx.save(
        model, str(path), save_as_external_data=True, location="weights.bin", size_threshold=0
    )
    assert (tmp_path / "weights.bin").exists()
    g = from_onnx(path)
    data = g.const("w")
    assert data is not None and np.array_equal(data, w)
    # The same model handed over without its data is refused in one line.
    bare = onnx.load(str(path), load_external_data=False)
    with pytest.raises(GraphError, match=r"weights\.bin"):
        from_onnx(bare)


def test_sparse_and_half_constants_are_refused() -> None:
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([1.0], np.float32), "v"),
        numpy_helper.from_array(np.array([0], np.int64), "i"),
        [2],
    )
    nodes = [helper.make_node("Constant", [], ["c"], sparse_value=sparse, name="c")]
    model = make_model(nodes, [], [("c", F, [2])])
    with pytest.raises(GraphError, match="Constant node 'c' has a sparse_tensor attribute"):
        from_onnx(model)
    half = {"w": np.ones(2, np.float16)}
    nodes = [helper.make_node("Identity", ["w"], ["y"])]
    with pytest.raises(GraphError, match="initializer 'w' has dtype float16"):
        from_onnx(make_model(nodes, [], ["y"], half))


def test_conversion_failure_names_the_opset(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(model: onnx.ModelProto, target: int) -> onnx.ModelProto:
        raise RuntimeError("no adapter\nfor this")

    monkeypatch.setattr(onnx.version_converter, "convert_version", fail)
    with pytest.raises(GraphError) as err:
        from_onnx(movement_model(opset=11))
    assert str(err.value) == "cannot convert the model from opset 11 to 13: no adapter"


def test_shape_inference_failure_is_one_line() -> None:
    nodes = [helper.make_node("Concat", ["x", "w"], ["y"], axis=0)]
    w = {"w": np.ones((2, 4), np.float32)}
    model = make_model(nodes, [("x", F, [2, 3])], [("y", F, [4, 3])], w)
    with pytest.raises(GraphError, match=r"^shape inference failed: ") as err:
        from_onnx(model)
    assert "\n" not in str(err.value)
