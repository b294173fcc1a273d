"""Small ONNX models made with onnx.helper, for the module's own tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

_TYPES = {"float32": TensorProto.FLOAT, "int64": TensorProto.INT64, "bool": TensorProto.BOOL}


def make_model(
    nodes: Sequence[Any],
    inputs: dict[str, tuple[str, Sequence[int | str]]],
    outputs: dict[str, tuple[str, Sequence[int | str] | None]],
    weights: dict[str, np.ndarray] | None = None,
    opset: int = 17,
) -> Any:
    graph = helper.make_graph(
        list(nodes),
        "test",
        [helper.make_tensor_value_info(n, _TYPES[t], list(s)) for n, (t, s) in inputs.items()],
        [
            helper.make_tensor_value_info(n, _TYPES[t], None if s is None else list(s))
            for n, (t, s) in outputs.items()
        ],
        initializer=[numpy_helper.from_array(a, n) for n, a in (weights or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def ort_outputs(model: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(r) for r in sess.run(None, feeds)]


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def residual_block(rng: np.random.Generator, batch: int | str = 2) -> Any:
    """Conv-BN-Relu, 1x1 Conv, residual Add, Relu, global pool, Flatten, Gemm."""

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    weights = {
        "w1": w(8, 3, 3, 3), "b1": w(8), "w2": w(8, 8, 1, 1),
        "g": (rng.random(8) + 0.5).astype(np.float32), "be": w(8), "m": w(8),
        "v": (rng.random(8) + 0.5).astype(np.float32), "fw": w(5, 8), "fb": w(5),
    }  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "g", "be", "m", "v"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"]),
        helper.make_node("Add", ["c2", "r1"], ["a"]),
        helper.make_node("Relu", ["a"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["gp"]),
        helper.make_node("Flatten", ["gp"], ["f"]),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1),
    ]
    return make_model(
        nodes, {"x": ("float32", (batch, 3, 7, 7))}, {"y": ("float32", (batch, 5))}, weights
    )
