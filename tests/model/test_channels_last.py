"""The channels-last layout pass: every kind of neighbour a convolution has, against onnxruntime."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

import tuner
from tuner.graph.layout import channels_last, layouts
from tuner.graph.onnx_import import from_onnx
from tuner.graph.passes import optimize
from tuner.target import Target

from .conftest import make_model, ort_outputs, residual_block


def _w(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return (rng.standard_normal(shape) * 0.3).astype(np.float32)


def _check(model: Any, x: np.ndarray, target: str | Target = "cpu") -> tuner.Module:
    mod = tuner.compile_model(model, target=target)
    got = mod.run({"x": x})
    for g, want in zip(got, ort_outputs(model, {"x": x}), strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-4)
    return mod


def _ops(mod: tuner.Module) -> list[str]:
    return [s.ops for s in mod.plans[0].specs]


def test_concat_of_two_channels_last_branches_stays_channels_last(rng):
    """An Inception-like fork: 1x1 and 3x3 branches (7 and 5 channels), concatenated, then a conv."""
    weights = {"a": _w(rng, 7, 6, 1, 1), "b": _w(rng, 5, 6, 3, 3), "c": _w(rng, 4, 12, 3, 3)}
    nodes = [
        helper.make_node("Conv", ["x", "a"], ["p"]),
        helper.make_node("Conv", ["x", "b"], ["q"], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["p", "q"], ["pq"], axis=1),
        helper.make_node("Relu", ["pq"], ["r"]),
        helper.make_node("Conv", ["r", "c"], ["y"], strides=[2, 2]),
    ]
    model = make_model(
        nodes, {"x": ("float32", (1, 6, 13, 11))}, {"y": ("float32", (1, 4, 6, 5))}, weights
    )
    mod = _check(model, rng.standard_normal((1, 6, 13, 11)).astype(np.float32))
    # one transpose in, one out: the concat, the relu and the three convs between them
    assert _ops(mod).count("Transpose") == 2


def test_flatten_of_an_image_into_a_dense_layer_keeps_nchw_order(rng):
    """Flatten of a 2 x 3 x 3 image: the classifier reads channels-major, as ONNX says."""
    weights = {"w": _w(rng, 2, 3, 3, 3), "fw": _w(rng, 18, 4)}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Flatten", ["c"], ["f"]),
        helper.make_node("MatMul", ["f", "fw"], ["y"]),
    ]
    model = make_model(nodes, {"x": ("float32", (1, 3, 5, 6))}, {"y": ("float32", (1, 4))}, weights)
    _check(model, rng.standard_normal((1, 3, 5, 6)).astype(np.float32))


def test_a_global_pool_into_a_classifier_needs_no_transpose_out(rng):
    model = residual_block(rng, batch=1)
    mod = _check(model, rng.standard_normal((1, 3, 7, 7)).astype(np.float32))
    assert _ops(mod).count("Transpose") == 1  # in only: one pixel is the same in both layouts


def test_an_explicit_transpose_and_a_second_output_read_nchw(rng):
    weights = {"w": _w(rng, 4, 3, 3, 3), "s": (rng.random((4, 1, 1)) + 0.5).astype(np.float32)}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["c", "s"], ["m"]),  # a per-channel constant, permuted
        helper.make_node("Transpose", ["m"], ["y"], perm=[0, 3, 2, 1]),
        helper.make_node("Sigmoid", ["m"], ["z"]),
    ]
    model = make_model(
        nodes,
        {"x": ("float32", (2, 3, 5, 7))},
        {"y": ("float32", (2, 7, 5, 4)), "z": ("float32", (2, 4, 5, 7))},
        weights,
    )
    _check(model, rng.standard_normal((2, 3, 5, 7)).astype(np.float32))


def test_a_residual_add_across_a_stride_and_pools(rng):
    """A ResNet downsampling block with a max pool in front and an average pool behind."""
    weights = {
        "w1": _w(rng, 8, 4, 3, 3), "w2": _w(rng, 8, 8, 3, 3), "ws": _w(rng, 8, 4, 1, 1),
        "b1": _w(rng, 8),
    }  # fmt: skip
    nodes = [
        helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["p", "w1", "b1"], ["c1"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["p", "ws"], ["sc"], strides=[2, 2]),
        helper.make_node("Add", ["c2", "sc"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("AveragePool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
    ]  # fmt: skip
    model = make_model(
        nodes, {"x": ("float32", (1, 4, 13, 13))}, {"y": ("float32", (1, 8, 3, 3))}, weights
    )
    mod = _check(model, rng.standard_normal((1, 4, 13, 13)).astype(np.float32))
    assert any(o.startswith("Conv+Add") for o in _ops(mod))  # the residual add fused


def test_depthwise_and_clip_as_in_mobilenet(rng):
    """An inverted residual of 5 channels (no tile divides them): expand, depthwise stride 2."""
    weights = {
        "e": _w(rng, 15, 5, 1, 1), "d": _w(rng, 15, 1, 3, 3), "db": _w(rng, 15),
        "p": _w(rng, 6, 15, 1, 1),
        "lo": np.array(0, np.float32), "hi": np.array(6, np.float32),
    }  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "e"], ["e1"]),
        helper.make_node("Clip", ["e1", "lo", "hi"], ["e2"]),
        helper.make_node("Conv", ["e2", "d", "db"], ["d1"], group=15, strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["d1", "lo", "hi"], ["d2"]),
        helper.make_node("Conv", ["d2", "p"], ["y"]),
    ]  # fmt: skip
    model = make_model(
        nodes, {"x": ("float32", (1, 5, 11, 11))}, {"y": ("float32", (1, 6, 6, 6))}, weights
    )
    mod = _check(model, rng.standard_normal((1, 5, 11, 11)).astype(np.float32))
    convs = [s.task.workload.as_dict() for s in mod.plans[0].specs if s.task.op_name == "conv2d"]
    assert [a["groups"] for a in convs] == [1, 15, 1]
    assert all(a["layout"] == "NHWC" and a["weights"] == "blocked" for a in convs)


def test_the_pass_leaves_a_graph_alone_without_vectors_or_convolutions(rng):
    graph = optimize(from_onnx(residual_block(rng)))
    assert layouts(channels_last(graph, lanes=8)) == {
        "tuner.NhwcConv": 2,
        "tuner.NhwcGlobalAveragePool": 1,
    }
    assert channels_last(graph, lanes=1) is graph
    scalar = Target.make("cpu", vector_lanes=1, vector_registers=16)
    mod = _check(residual_block(rng), rng.standard_normal((2, 3, 7, 7)).astype(np.float32), scalar)
    assert "Transpose" not in _ops(mod)


@pytest.mark.parametrize("op", ["tuner.NhwcConv", "tuner.NhwcMaxPool", "tuner.NhwcAveragePool"])
def test_a_twin_evaluates_as_its_onnx_operator_between_transposes(rng, op):
    from tuner.graph.ir import Node
    from tuner.graph.ops import opdef
    from tuner.graph.ops.channels_last import nhwc_op

    x = rng.standard_normal((1, 6, 7, 3)).astype(np.float32)
    w = _w(rng, 4, 3, 3, 3)
    attrs = {"pads": (1, 1, 1, 1)} if op == "tuner.NhwcConv" else {"kernel_shape": (3, 3)}
    inputs = [x, w] if op == "tuner.NhwcConv" else [x]
    base = nhwc_op(op)
    assert base is not None
    (got,) = opdef(op).evaluate(Node(op, ("x", "w")[: len(inputs)], ("y",), attrs), inputs)
    (want,) = opdef(base).evaluate(
        Node(base, ("x", "w")[: len(inputs)], ("y",), attrs), [x.transpose(0, 3, 1, 2), *inputs[1:]]
    )
    np.testing.assert_array_equal(got, want.transpose(0, 2, 3, 1))


def test_a_grouped_conv_and_an_asymmetric_window_stay_correct(rng):
    """ResNeXt's groups of channels, and a TensorFlow-style SAME_UPPER stride (pads 0 before,
    1 after: an explicit Pad, then the template with no padding, ``tuner.graph.padding``)."""
    weights = {"g": _w(rng, 8, 2, 3, 3), "s": _w(rng, 6, 8, 3, 3)}
    nodes = [
        helper.make_node("Conv", ["x", "g"], ["a"], group=4, pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Conv", ["r", "s"], ["y"], strides=[2, 2], auto_pad="SAME_UPPER"),
    ]
    model = make_model(
        nodes, {"x": ("float32", (1, 8, 10, 9))}, {"y": ("float32", (1, 6, 5, 5))}, weights
    )
    mod = _check(model, rng.standard_normal((1, 8, 10, 9)).astype(np.float32))
    assert [s.task.op_name for s in mod.plans[0].specs].count("conv2d") == 2


@pytest.mark.parametrize("target", ["cpu", Target.make("cpu", vector_lanes=1, vector_registers=16)])
def test_factorised_seven_tap_convolutions_find_the_template(rng, target):
    """Inception's 1 x 7 then 7 x 1 (pads (0, 3) and (3, 0)), in either layout: each conv is
    the conv2d template behind a Pad, never the generic kernel (a hundred times slower)."""
    weights = {"a": _w(rng, 6, 5, 1, 7), "b": _w(rng, 4, 6, 7, 1)}
    nodes = [
        helper.make_node("Conv", ["x", "a"], ["p"], pads=[0, 3, 0, 3]),
        helper.make_node("Relu", ["p"], ["r"]),
        helper.make_node("Conv", ["r", "b"], ["y"], pads=[3, 0, 3, 0]),
    ]
    model = make_model(
        nodes, {"x": ("float32", (1, 5, 11, 13))}, {"y": ("float32", (1, 4, 11, 13))}, weights
    )
    mod = _check(model, rng.standard_normal((1, 5, 11, 13)).astype(np.float32), target)
    kinds = [s.task.op_name for s in mod.plans[0].specs]
    assert kinds.count("conv2d") + kinds.count("matmul") == 2, kinds


def test_a_tensorflow_export_in_nhwc_needs_no_transpose_at_all(rng):
    """NHWC in, Transpose to NCHW, convolutions, Transpose back: both transposes vanish."""
    weights = {"w": _w(rng, 6, 3, 3, 3), "v": _w(rng, 4, 6, 1, 1)}
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]),
        helper.make_node("Conv", ["t", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Conv", ["r", "v"], ["d"]),
        helper.make_node("Transpose", ["d"], ["y"], perm=[0, 2, 3, 1]),
    ]
    model = make_model(
        nodes, {"x": ("float32", (1, 9, 8, 3))}, {"y": ("float32", (1, 9, 8, 4))}, weights
    )
    mod = _check(model, rng.standard_normal((1, 9, 8, 3)).astype(np.float32))
    assert _ops(mod) == ["Conv+Relu", "Conv"]


def test_a_channel_shuffle_and_split_stay_channels_last(rng):
    """ShuffleNet's block: split the channels, convolve one half, concatenate, shuffle
    (Reshape, Transpose, Reshape), split again. Every step runs on the stored NHWC bytes:
    one 4-D transpose in, one out, and the shuffle is one small copy."""
    weights = {
        "w": _w(rng, 8, 3, 3, 3), "a": _w(rng, 4, 4, 1, 1), "b": _w(rng, 4, 4, 1, 1),
        "shape5": np.array([1, 2, 4, 5, 7], np.int64), "shape4": np.array([1, 8, 5, 7], np.int64),
        "split": np.array([4, 4], np.int64),
    }  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Split", ["c", "split"], ["l", "r"], axis=1),
        helper.make_node("Conv", ["r", "a"], ["ra"]),
        helper.make_node("Relu", ["ra"], ["rr"]),
        helper.make_node("Concat", ["l", "rr"], ["cat"], axis=1),
        helper.make_node("Reshape", ["cat", "shape5"], ["g"]),
        helper.make_node("Transpose", ["g"], ["gt"], perm=[0, 2, 1, 3, 4]),
        helper.make_node("Reshape", ["gt", "shape4"], ["s"]),
        helper.make_node("Slice", ["s", "starts", "ends", "axes"], ["half"]),
        helper.make_node("Conv", ["half", "b"], ["y"]),
    ]
    weights |= {"starts": np.array([4], np.int64), "ends": np.array([8], np.int64),
                "axes": np.array([1], np.int64)}  # fmt: skip
    model = make_model(
        nodes, {"x": ("float32", (1, 3, 5, 7))}, {"y": ("float32", (1, 4, 5, 7))}, weights
    )
    graph = channels_last(optimize(from_onnx(model)), lanes=8)
    four_d = [n for n in graph.nodes if n.op == "Transpose" and len(n.attr("perm")) == 4]
    assert len(four_d) == 2, [n.describe() for n in graph.nodes]  # the image in, the result out
    assert layouts(graph) == {"tuner.NhwcConv": 3}
    _check(model, rng.standard_normal((1, 3, 5, 7)).astype(np.float32))


def test_a_squeeze_and_excitation_block_stays_channels_last(rng):
    """EfficientNet's SE: a global pool, two 1x1 convs, a sigmoid, and the image scaled by
    the ``[N, C, 1, 1]`` result; the scale is read channels-last without a transpose."""
    weights = {"w": _w(rng, 6, 3, 3, 3), "s1": _w(rng, 2, 6, 1, 1), "s2": _w(rng, 6, 2, 1, 1),
               "v": _w(rng, 4, 6, 1, 1)}  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c"], ["cs"]),
        helper.make_node("Mul", ["c", "cs"], ["a"]),  # SiLU
        helper.make_node("GlobalAveragePool", ["a"], ["p"]),
        helper.make_node("Conv", ["p", "s1"], ["q"]),
        helper.make_node("Relu", ["q"], ["qr"]),
        helper.make_node("Conv", ["qr", "s2"], ["e"]),
        helper.make_node("Sigmoid", ["e"], ["es"]),
        helper.make_node("Mul", ["a", "es"], ["m"]),
        helper.make_node("Conv", ["m", "v"], ["y"]),
    ]
    model = make_model(
        nodes, {"x": ("float32", (2, 3, 9, 11))}, {"y": ("float32", (2, 4, 9, 11))}, weights
    )
    graph = channels_last(optimize(from_onnx(model)), lanes=8)
    assert [n.op for n in graph.nodes].count("Transpose") == 2, [n.describe() for n in graph.nodes]
    _check(model, rng.standard_normal((2, 3, 9, 11)).astype(np.float32))


def test_a_batch_norm_after_a_concat_stays_channels_last(rng):
    """DenseNet's pre-activation: a BatchNormalization no convolution absorbs (it reads a
    concatenation) is a per-channel scale and shift in the layout, not two transposes."""
    weights = {
        "w": _w(rng, 4, 3, 3, 3), "v": _w(rng, 3, 4, 1, 1), "u": _w(rng, 5, 7, 3, 3),
        "g": (rng.random(7) + 0.5).astype(np.float32), "b": _w(rng, 7),
        "m": _w(rng, 7), "var": (rng.random(7) + 0.5).astype(np.float32),
    }  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c", "v"], ["d"]),
        helper.make_node("Concat", ["c", "d"], ["cat"], axis=1),
        helper.make_node("BatchNormalization", ["cat", "g", "b", "m", "var"], ["bn"], epsilon=1e-3),
        helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("Conv", ["r", "u"], ["y"], pads=[1, 1, 1, 1]),
    ]
    model = make_model(
        nodes, {"x": ("float32", (2, 3, 6, 5))}, {"y": ("float32", (2, 5, 6, 5))}, weights
    )
    graph = channels_last(optimize(from_onnx(model)), lanes=8)
    ops = [n.op for n in graph.nodes]
    assert ops.count("Transpose") == 2 and "BatchNormalization" not in ops, ops
    _check(model, rng.standard_normal((2, 3, 6, 5)).astype(np.float32))


@pytest.mark.parametrize(
    ("op", "axes", "keepdims", "out_shape", "transposes"),
    [
        ("ReduceMean", [2, 3], 0, (1, 5), 1),  # MNASNet's end: [N, C] as it is stored
        ("ReduceMean", [2, 3], 1, (1, 5, 1, 1), 1),  # one pixel: the same bytes either way
        ("ReduceMax", [1], 0, (1, 6, 7), 1),  # over the channels: [N, H, W], stored so too
        ("ReduceSum", [3], 0, (1, 5, 6), 2),  # over W: [N, H, C] stored, read back [N, C, H]
    ],
)
def test_a_reduction_of_a_channels_last_value_reduces_the_stored_axes(
    rng, op, axes, keepdims, out_shape, transposes
):
    """No transpose of the feature map before its reduction: the reduction's axes are
    remapped to where they are stored (ReduceSum's axes are an input from opset 13 on)."""
    weights = {"w": _w(rng, 5, 3, 3, 3)}
    if op == "ReduceSum":
        weights["axes"] = np.array(axes, np.int64)
        reduce = helper.make_node(op, ["c", "axes"], ["y"], keepdims=keepdims)
    else:
        reduce = helper.make_node(op, ["c"], ["y"], axes=axes, keepdims=keepdims)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), reduce]
    model = make_model(
        nodes, {"x": ("float32", (1, 3, 6, 7))}, {"y": ("float32", out_shape)}, weights
    )
    mod = _check(model, rng.standard_normal((1, 3, 6, 7)).astype(np.float32))
    assert _ops(mod).count("Transpose") == transposes, _ops(mod)


def test_a_normalised_input_is_transposed_before_its_elementwise_operators(rng):
    """An input scaled and shifted (or quantized and dequantized) before the first
    convolution: the float image is transposed first, by the copy template, and the
    elementwise operators run channels-last, instead of fusing with the transpose into a
    generic kernel whose writes scatter."""
    weights = {"w": _w(rng, 8, 3, 3, 3), "m": np.full((1, 3, 1, 1), 0.5, np.float32)}
    nodes = [
        helper.make_node("Sub", ["x", "m"], ["c"]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Conv", ["r", "w"], ["y"], pads=[1, 1, 1, 1]),
    ]
    model = make_model(
        nodes, {"x": ("float32", (1, 3, 9, 7))}, {"y": ("float32", (1, 8, 9, 7))}, weights
    )
    mod = _check(model, rng.standard_normal((1, 3, 9, 7)).astype(np.float32))
    ops = _ops(mod)
    assert ops[0] == "Transpose", ops  # the input's own kernel, the copy template's
    assert any(o.startswith("Sub") or "Sub+Relu" in o for o in ops[1:]), ops
    graph = channels_last(optimize(from_onnx(model)), 16)
    first = graph.nodes[0]
    assert first.op == "Transpose" and first.inputs == ("x",)
