"""Small ONNX graphs made with ``onnx.helper`` for focused whole-model tests.

Each builder returns a checked ``onnx.ModelProto`` with seeded random weights
(initializers), small enough that compiling it builds only a handful of
kernels. Together they cover the patterns the compiler must fuse and the ONNX
forms the importer must read:

- :func:`conv_bn_relu`: Conv (with bias) -> BatchNormalization -> Relu.
- :func:`basic_block`: a ResNet basic block, the identity added before the last Relu.
- :func:`attention`: two-head self-attention, a boolean mask input applied with Where.
- :func:`mlp`: Gemm -> Gelu (opset 20) -> Gemm.
- :func:`elementwise_chain`: broadcasting binary ops and unary ops in a row.
- :func:`opset11`: an opset-11 model: Clip with min/max inputs, Softmax on a 3-D
  input with axis=1 (opset 11 semantics: over the flattened dimensions 1 and 2).
- :func:`symbolic_batch`: MatMul/Add/Relu/Reshape/Softmax with a symbolic batch ``N``.
- :func:`sequence_mean`: a ReduceMean over a symbolic sequence ``S`` (which padding would change).

:func:`random_feeds` makes seeded inputs for any of them (and for the shipped models).

>>> model = conv_bn_relu()
>>> [i.name for i in model.graph.input]
['x']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = [
    "BUILDERS",
    "attention",
    "basic_block",
    "conv_bn_relu",
    "elementwise_chain",
    "mlp",
    "opset11",
    "random_feeds",
    "sequence_mean",
    "symbolic_batch",
]

F32 = TensorProto.FLOAT


class _Weights:
    """Seeded initializers with unique names."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.tensors: list[onnx.TensorProto] = []

    def add(self, name: str, array: np.ndarray) -> str:
        self.tensors.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def normal(self, name: str, shape: tuple[int, ...], scale: float = 1.0) -> str:
        return self.add(name, (scale * self.rng.standard_normal(shape)).astype(np.float32))

    def uniform(self, name: str, shape: tuple[int, ...], lo: float, hi: float) -> str:
        return self.add(name, self.rng.uniform(lo, hi, shape).astype(np.float32))

    def ints(self, name: str, values: tuple[int, ...]) -> str:
        return self.add(name, np.array(values, dtype=np.int64))

    def scalar(self, name: str, value: float) -> str:
        return self.add(name, np.array(value, dtype=np.float32))


def _model(
    name: str,
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    weights: _Weights,
    opset: int = 17,
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=weights.tensors)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="tests.models"
    )
    model.ir_version = min(model.ir_version, 8 if opset <= 17 else 9)  # what onnxruntime reads
    onnx.checker.check_model(model, full_check=True)
    return model


def _bn(w: _Weights, prefix: str, x: str, y: str, channels: int) -> onnx.NodeProto:
    names = [
        w.uniform(f"{prefix}_scale", (channels,), 0.5, 1.5),
        w.normal(f"{prefix}_bias", (channels,), 0.1),
        w.normal(f"{prefix}_mean", (channels,), 0.1),
        w.uniform(f"{prefix}_var", (channels,), 0.5, 2.0),
    ]
    return helper.make_node("BatchNormalization", [x, *names], [y], epsilon=1e-5, name=prefix)


def conv_bn_relu(seed: int = 0) -> onnx.ModelProto:
    """x (1, 3, 16, 16) -> Conv 3x3, 8 channels, pad 1, with bias -> BatchNormalization -> Relu."""
    w = _Weights(seed)
    nodes = [
        helper.make_node(
            "Conv",
            ["x", w.normal("conv_w", (8, 3, 3, 3), 0.3), w.normal("conv_b", (8,), 0.1)],
            ["c"],
            kernel_shape=(3, 3),
            pads=(1, 1, 1, 1),
            name="conv",
        ),
        _bn(w, "bn", "c", "b", 8),
        helper.make_node("Relu", ["b"], ["y"], name="relu"),
    ]
    return _model(
        "conv_bn_relu",
        nodes,
        [helper.make_tensor_value_info("x", F32, (1, 3, 16, 16))],
        [helper.make_tensor_value_info("y", F32, (1, 8, 16, 16))],
        w,
    )


def basic_block(seed: int = 0) -> onnx.ModelProto:
    """x (1, 8, 8, 8) -> [Conv-BN-Relu, Conv-BN] + x -> Relu (torchvision's BasicBlock, no projection)."""
    w = _Weights(seed)
    nodes = []
    for i, (src, dst) in enumerate((("x", "r1"), ("r1", "b2")), start=1):
        nodes.append(
            helper.make_node(
                "Conv",
                [src, w.normal(f"conv{i}_w", (8, 8, 3, 3), 0.15)],
                [f"c{i}"],
                kernel_shape=(3, 3),
                pads=(1, 1, 1, 1),
                name=f"conv{i}",
            )
        )
        nodes.append(_bn(w, f"bn{i}", f"c{i}", f"b{i}" if i == 1 else dst, 8))
        if i == 1:
            nodes.append(helper.make_node("Relu", ["b1"], ["r1"], name="relu1"))
    nodes += [
        helper.make_node("Add", ["b2", "x"], ["s"], name="residual"),
        helper.make_node("Relu", ["s"], ["y"], name="relu2"),
    ]
    return _model(
        "basic_block",
        nodes,
        [helper.make_tensor_value_info("x", F32, (1, 8, 8, 8))],
        [helper.make_tensor_value_info("y", F32, (1, 8, 8, 8))],
        w,
    )


def attention(seed: int = 0, seq: int = 8, hidden: int = 16, heads: int = 2) -> onnx.ModelProto:
    """x (1, seq, hidden), mask (1, 1, seq, seq) bool -> softmax(Where(mask, QK^T/sqrt(d), -1e9)) V -> Wo.

    The heads are split by Reshape and Transpose; masked scores become -1e9
    (finite, so a fully masked row is uniform in every runtime).
    """
    w = _Weights(seed)
    d = hidden // heads
    split = w.ints("split_shape", (1, seq, heads, d))
    merge = w.ints("merge_shape", (1, seq, hidden))
    nodes = []
    for p in ("q", "k", "v"):
        nodes += [
            helper.make_node(
                "MatMul", ["x", w.normal(f"w{p}", (hidden, hidden), hidden**-0.5)], [f"{p}0"]
            ),
            helper.make_node("Add", [f"{p}0", w.normal(f"b{p}", (hidden,), 0.1)], [f"{p}1"]),
            helper.make_node("Reshape", [f"{p}1", split], [f"{p}2"]),
            helper.make_node(
                "Transpose", [f"{p}2"], [f"{p}h"], perm=(0, 2, 3, 1) if p == "k" else (0, 2, 1, 3)
            ),
        ]
    nodes += [
        helper.make_node("MatMul", ["qh", "kh"], ["scores0"]),  # k is already (b, h, d, s)
        helper.make_node("Mul", ["scores0", w.scalar("scale", d**-0.5)], ["scores"]),
        helper.make_node("Where", ["mask", "scores", w.scalar("neg", -1e9)], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", "vh"], ["ctx0"]),
        helper.make_node("Transpose", ["ctx0"], ["ctx1"], perm=(0, 2, 1, 3)),
        helper.make_node("Reshape", ["ctx1", merge], ["ctx"]),
        helper.make_node("MatMul", ["ctx", w.normal("wo", (hidden, hidden), hidden**-0.5)], ["o0"]),
        helper.make_node("Add", ["o0", w.normal("bo", (hidden,), 0.1)], ["y"]),
    ]
    return _model(
        "attention",
        nodes,
        [
            helper.make_tensor_value_info("x", F32, (1, seq, hidden)),
            helper.make_tensor_value_info("mask", TensorProto.BOOL, (1, 1, seq, seq)),
        ],
        [helper.make_tensor_value_info("y", F32, (1, seq, hidden))],
        w,
    )


def mlp(seed: int = 0) -> onnx.ModelProto:
    """x (4, 16) -> Gemm (transB, 32) -> Gelu (erf, the opset-20 operator) -> Gemm (transB, 8)."""
    w = _Weights(seed)
    nodes = [
        helper.make_node(
            "Gemm",
            ["x", w.normal("w1", (32, 16), 0.25), w.normal("b1", (32,), 0.1)],
            ["h"],
            transB=1,
        ),
        helper.make_node("Gelu", ["h"], ["g"]),
        helper.make_node(
            "Gemm",
            ["g", w.normal("w2", (8, 32), 0.18), w.normal("b2", (8,), 0.1)],
            ["y"],
            transB=1,
            alpha=0.5,
        ),
    ]
    return _model(
        "mlp",
        nodes,
        [helper.make_tensor_value_info("x", F32, (4, 16))],
        [helper.make_tensor_value_info("y", F32, (4, 8))],
        w,
        opset=20,
    )


def elementwise_chain(seed: int = 0) -> onnx.ModelProto:
    """x (2, 3, 4, 5), b (4, 5): swish(x + b) - tanh(x), then Max with 0.1, sqrt, divided by (1 + |x|)."""
    w = _Weights(seed)
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"]),
        helper.make_node("Sigmoid", ["a"], ["s"]),
        helper.make_node("Mul", ["a", "s"], ["sw"]),
        helper.make_node("Tanh", ["x"], ["t"]),
        helper.make_node("Sub", ["sw", "t"], ["d"]),
        helper.make_node("Max", ["d", w.scalar("floor", 0.1)], ["m"]),
        helper.make_node("Sqrt", ["m"], ["r"]),
        helper.make_node("Abs", ["x"], ["ax"]),
        helper.make_node("Add", ["ax", w.scalar("one", 1.0)], ["den"]),
        helper.make_node("Div", ["r", "den"], ["y"]),
    ]
    return _model(
        "elementwise_chain",
        nodes,
        [
            helper.make_tensor_value_info("x", F32, (2, 3, 4, 5)),
            helper.make_tensor_value_info("b", F32, (4, 5)),
        ],
        [helper.make_tensor_value_info("y", F32, (2, 3, 4, 5))],
        w,
    )


def opset11(seed: int = 0) -> onnx.ModelProto:
    """Opset 11: x (2, 5, 6) -> Clip(x, -1.5, 2.0) (bounds as inputs) -> Softmax axis=1.

    At opset 11 Softmax coerces its input to 2-D at ``axis``: the softmax runs
    over the 30 values of dimensions 1 and 2 together (from opset 13 it would
    run over dimension 1 alone), which is what the importer's conversion must keep.
    """
    w = _Weights(seed)
    nodes = [
        helper.make_node("Clip", ["x", w.scalar("lo", -1.5), w.scalar("hi", 2.0)], ["c"]),
        helper.make_node("Softmax", ["c"], ["y"], axis=1),
    ]
    return _model(
        "opset11",
        nodes,
        [helper.make_tensor_value_info("x", F32, (2, 5, 6))],
        [helper.make_tensor_value_info("y", F32, (2, 5, 6))],
        w,
        opset=11,
    )


def symbolic_batch(seed: int = 0) -> onnx.ModelProto:
    """x (N, 16) -> MatMul (16, 8) -> Add -> Relu -> Reshape (-1, 2, 4) -> Softmax(-1): y (N, 2, 4)."""
    w = _Weights(seed)
    nodes = [
        helper.make_node("MatMul", ["x", w.normal("w", (16, 8), 0.25)], ["h"]),
        helper.make_node("Add", ["h", w.normal("b", (8,), 0.1)], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Reshape", ["r", w.ints("shape", (-1, 2, 4))], ["s"]),
        helper.make_node("Softmax", ["s"], ["y"], axis=-1),
    ]
    return _model(
        "symbolic_batch",
        nodes,
        [helper.make_tensor_value_info("x", F32, ("N", 16))],
        [helper.make_tensor_value_info("y", F32, ("N", 2, 4))],
        w,
    )


def sequence_mean(seed: int = 0) -> onnx.ModelProto:
    """x (N, S, 8) -> MatMul (8, 8) -> Relu -> ReduceMean over S: y (N, 8), the mean over the sequence."""
    w = _Weights(seed)
    nodes = [
        helper.make_node("MatMul", ["x", w.normal("w", (8, 8), 0.35)], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("ReduceMean", ["r"], ["y"], axes=[1], keepdims=0),
    ]
    return _model(
        "sequence_mean",
        nodes,
        [helper.make_tensor_value_info("x", F32, ("N", "S", 8))],
        [helper.make_tensor_value_info("y", F32, ("N", 8))],
        w,
    )


BUILDERS: dict[str, Callable[[], onnx.ModelProto]] = {
    "conv_bn_relu": conv_bn_relu,
    "basic_block": basic_block,
    "attention": attention,
    "mlp": mlp,
    "elementwise_chain": elementwise_chain,
    "opset11": opset11,
    "symbolic_batch": symbolic_batch,
    "sequence_mean": sequence_mean,
}


def random_feeds(
    model: onnx.ModelProto, seed: int = 0, dims: Mapping[str, int] | None = None
) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input: float32 standard normal, bool with 3 in 4 True, ints in [0, 4).

    ``dims`` gives the size of each symbolic dimension by name (missing ones are 1).
    """
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for value in model.graph.input:
        if value.name in inits:
            continue
        tt = value.type.tensor_type
        shape = tuple(
            d.dim_value if d.HasField("dim_value") else (dims or {}).get(d.dim_param, 1)
            for d in tt.shape.dim
        )
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if dtype == np.bool_:
            feeds[value.name] = rng.random(shape) < 0.75
        elif np.issubdtype(dtype, np.integer):
            feeds[value.name] = rng.integers(0, 4, shape).astype(dtype)
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
    return feeds
