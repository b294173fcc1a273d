"""Nodes the padding rules cannot judge by their kind, judged by running the model padded.

``transformers`` builds its attention mask by reading the flattened ``[batch, seq]`` mask at
``b * seq + j``, indices computed from the (padded) length: a Gather across the padded axis
that is sound nonetheless. A Gather that reverses the sequence is not, and stays refused.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tuner.graph.ir import GraphError
from tuner.model.module import compile_model


def _const(name: str, value: list[int]) -> onnx.NodeProto:
    t = helper.make_tensor(name, TensorProto.INT64, (len(value),), value)
    return helper.make_node("Constant", [], [name], value=t)


def _scalar(name: str, value: int) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, TensorProto.INT64, (), [value]))  # fmt: skip


def _model(nodes: list[onnx.NodeProto]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "probe",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ("B", "S", 4)),
            helper.make_tensor_value_info("mask", TensorProto.INT64, ("B", "S")),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ("B", "S", 4))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _lengths() -> list[onnx.NodeProto]:
    """``B`` and ``S`` read from the mask's Shape, as scalars."""
    return [
        helper.make_node("Shape", ["mask"], ["shape"]),
        _scalar("i0", 0),
        _scalar("i1", 1),
        helper.make_node("Gather", ["shape", "i0"], ["B"], axis=0),
        helper.make_node("Gather", ["shape", "i1"], ["S"], axis=0),
        _scalar("zero", 0),
        _scalar("one", 1),
        helper.make_node("Range", ["zero", "S", "one"], ["j"]),
    ]


def _times_mask(x: str, mask: str) -> list[onnx.NodeProto]:
    """y = x * mask[..., None], the integer mask cast to float."""
    return [
        helper.make_node("Cast", [mask], ["m"], to=TensorProto.FLOAT),
        _const("last", [2]),
        helper.make_node("Unsqueeze", ["m", "last"], ["m3"]),
        helper.make_node("Mul", [x, "m3"], ["y"]),
    ]


def _flat_mask_gather() -> onnx.ModelProto:
    """y = x * mask[b, j] read as flat_mask[b * S + j] (transformers' mask construction)."""
    return _model([
        *_lengths(),
        helper.make_node("Range", ["zero", "B", "one"], ["b"]),
        _const("col", [-1, 1]),
        helper.make_node("Reshape", ["b", "col"], ["b_col"]),
        helper.make_node("Mul", ["b_col", "S"], ["row_start"]),
        helper.make_node("Add", ["row_start", "j"], ["index"]),  # [B, S]
        _const("flat", [-1]),
        helper.make_node("Reshape", ["mask", "flat"], ["mask_flat"]),
        helper.make_node("Gather", ["mask_flat", "index"], ["picked"], axis=0),
        *_times_mask("x", "picked"),
    ])  # fmt: skip


def _reversed_sequence() -> onnx.ModelProto:
    """y = x[:, S - 1 - j] * mask: each position reads another one, which padding moves."""
    return _model([
        *_lengths(),
        helper.make_node("Sub", ["S", "one"], ["last_pos"]),
        helper.make_node("Sub", ["last_pos", "j"], ["rev"]),
        helper.make_node("Gather", ["x", "rev"], ["xr"], axis=1),
        *_times_mask("xr", "mask"),
    ])  # fmt: skip


def test_a_gather_of_the_flattened_mask_at_computed_indices_is_served_by_buckets() -> None:
    model = _flat_mask_gather()
    onnx.checker.check_model(model)
    module = compile_model(model, dynamic="bucket", bounds={"B": 4, "S": 32})
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(4)
    for b, s in [(1, 1), (2, 5), (3, 7), (1, 13), (4, 32)]:
        feeds = {
            "x": rng.standard_normal((b, s, 4)).astype(np.float32),
            "mask": rng.integers(0, 2, (b, s)).astype(np.int64),
        }
        (want,) = session.run(None, feeds)
        (got,) = module.run(feeds)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_a_gather_that_reverses_the_sequence_is_still_refused() -> None:
    model = _reversed_sequence()
    onnx.checker.check_model(model)
    with pytest.raises(GraphError, match=r"bucket: Gather node .* axis 1, which is padded \(S\)"):
        compile_model(model, dynamic="bucket", bounds={"B": 4, "S": 32})
