"""Fusion decisions pinned for real blocks (ResNet, encoder layer) and for each rule alone.

Every test also runs the graph before and after fusion on random inputs
(fused nodes run their group) and checks the contract: one output per group,
views and shape nodes outside groups, small constants inside, weights as
group inputs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest

from tests.graph.standins import (
    Builder,
    assert_same,
    bn_params,
    gelu,
    layer_norm_parts,
    ops_of,
    standin_ops,
)
from tuner.graph import Graph, Node
from tuner.graph import ops as registry
from tuner.graph.fusion import SMALL_CONST, fuse, groups_summary
from tuner.graph.interpret import run_graph
from tuner.graph.ir import FUSED
from tuner.graph.ops import OpDef, OpKind, opdef
from tuner.graph.passes import optimize


@pytest.fixture(autouse=True)
def _ops() -> Iterator[None]:
    with standin_ops():
        yield


def fused(graph: Graph, enabled: bool = True) -> Graph:
    """``fuse`` with the contract checked and the outputs compared."""
    f = fuse(graph, enabled)
    assert_same(graph, f)
    for node in f.nodes:
        if node.op != FUSED:
            assert opdef(node.op).kind in (OpKind.VIEW, OpKind.SHAPE)
            continue
        group: Graph = node.attrs["group"]
        assert node.attrs["kind"] in ("anchor", "reduction", "injective")
        assert len(node.outputs) == 1 and group.outputs == node.outputs
        assert group.inputs == node.inputs
        assert all(opdef(n.op).kind not in (OpKind.VIEW, OpKind.SHAPE) for n in group.nodes)
        for name in group.inputs:
            v = f.value(name)
            assert v.data is None or v.data.size > SMALL_CONST
        needed = {
            n.inputs[k] for n in group.nodes for k in opdef(n.op).const_inputs if k < len(n.inputs)
        }
        for c in group.constants():
            assert c.data is not None and (c.data.size <= SMALL_CONST or c.name in needed)
    return f


def resnet_basic_block(b: Builder, x: str, channels: int) -> str:
    c = b("Conv", x, b.weight(channels, channels, 1, 1))
    r = b("Relu", b("BatchNormalization", c, *bn_params(b, channels)))
    c = b("Conv", r, b.weight(channels, channels, 1, 1))
    a = b("Add", b("BatchNormalization", c, *bn_params(b, channels)), x)
    return b("Relu", a)


def test_resnet_basic_block() -> None:
    b = Builder()
    x = b.input("x", (1, 8, 4, 4))
    g = optimize(b.graph(resnet_basic_block(b, x, 8)))
    f = fused(g)
    assert groups_summary(f) == ["Conv+Relu", "Conv+Add+Relu"]
    first, second = f.nodes
    assert first.attrs["kind"] == "anchor" and first.attrs["anchor"] == "Conv"
    assert len(first.inputs) == 2 and first.inputs[0] == "x"  # the (8,) bias is inside
    assert [c.shape for c in first.attrs["group"].constants()] == [(8,)]
    assert second.inputs[0] == first.outputs[0] and "x" in second.inputs
    assert groups_summary(fused(g, enabled=False)) == ["Conv", "Relu", "Conv", "Add", "Relu"]


def test_resnet_bottleneck_with_downsample() -> None:
    b = Builder()
    x = b.input("x", (1, 8, 4, 4))

    def conv_bn(v: str, k: int, c: int) -> str:
        return b("BatchNormalization", b("Conv", v, b.weight(k, c, 1, 1)), *bn_params(b, k))

    out = b("Relu", conv_bn(x, 4, 8))
    out = b("Relu", conv_bn(out, 4, 4))
    out = conv_bn(out, 16, 4)
    identity = conv_bn(x, 16, 8)  # torchvision computes the downsample after the main path
    g = optimize(b.graph(b("Relu", b("Add", out, identity))))
    assert ops_of(g) == ["Conv", "Relu", "Conv", "Relu", "Conv", "Conv", "Add", "Relu"]
    f = fused(g)
    assert groups_summary(f) == ["Conv+Relu", "Conv+Relu", "Conv", "Conv+Add+Relu"]


def encoder_layer(b: Builder, x: str, seq: int, d: int, heads: int, ff: int) -> str:
    """A post-norm transformer encoder layer as exporters spell it (GELU and layer norm decomposed)."""
    dh = d // heads
    split = (1, seq, heads, dh)

    def linear(v: str, n_in: int, n_out: int) -> str:
        return b("Add", b("MatMul", v, b.weight(n_in, n_out)), b.weight(n_out))

    def head(v: str, perm: Sequence[int]) -> str:
        return b("Transpose", b("Reshape", v, b.const(np.array(split))), perm=tuple(perm))

    q = head(linear(x, d, d), (0, 2, 1, 3))
    k = head(linear(x, d, d), (0, 2, 3, 1))
    v = head(linear(x, d, d), (0, 2, 1, 3))
    s = b("Div", b("MatMul", q, k), b.const(np.float32(np.sqrt(dh))))
    o = b("MatMul", b("Softmax", s, axis=-1), v)
    o = b("Reshape", b("Transpose", o, perm=(0, 2, 1, 3)), b.const(np.array([1, seq, d])))
    h = layer_norm_parts(b, b("Add", linear(o, d, d), x), affine=True)
    f = linear(gelu(b, linear(h, d, ff), "torch"), ff, d)
    return layer_norm_parts(b, b("Add", f, h), affine=True)


ENCODER_GROUPS = [
    "MatMul+Add",  # q projection
    "Transpose",  # q heads (the Reshape before it is a view)
    "MatMul+Add",  # k
    "Transpose",
    "MatMul+Add",  # v
    "Transpose",
    "MatMul+Div",  # scores / sqrt(d_head)
    "Softmax",
    "MatMul",  # probabilities @ v
    "Transpose",  # heads back (then a view)
    "MatMul+Add+Add",  # output projection, bias, residual
    "LayerNormalization",
    "MatMul+Add+Gelu",
    "MatMul+Add+Add",  # second linear, bias, residual
    "LayerNormalization",
]


def test_encoder_layer() -> None:
    b = Builder()
    x = b.input("x", (1, 8, 16))
    g = optimize(b.graph(encoder_layer(b, x, seq=8, d=16, heads=2, ff=32)))
    assert ops_of(g).count("LayerNormalization") == 2 and ops_of(g).count("Gelu") == 1
    assert ops_of(optimize(g)) == ops_of(g)
    f = fused(g)
    assert groups_summary(f) == ENCODER_GROUPS
    assert [n.op for n in f.nodes if n.op != FUSED] == ["Reshape"] * 4
    kinds = {
        n.attrs["group"].nodes[0].op: (n.attrs["kind"], n.attrs["anchor"])
        for n in f.nodes
        if n.op == FUSED
    }
    assert kinds["Softmax"] == ("reduction", "Softmax")
    assert kinds["Transpose"] == ("injective", "")
    assert kinds["MatMul"] == ("anchor", "MatMul")
    kernels = [n for n in g.nodes if opdef(n.op).kind not in (OpKind.VIEW, OpKind.SHAPE)]
    assert groups_summary(fused(g, enabled=False)) == [n.op for n in kernels]
    assert len(kernels) == 25


# -- each rule alone -----------------------------------------------------------------


def test_anchor_epilogue_stops_at_outputs_shared_values_and_shape_changes() -> None:
    b = Builder()
    x = b.input("x", (2, 8))
    m = b("Add", b("MatMul", x, b.weight(8, 8)), b.weight(8), out="biased")
    y1 = b("Relu", m)  # `biased` is a graph output: Relu cannot join
    m2 = b("MatMul", x, b.weight(8, 8))
    y2 = b("Add", b("Sigmoid", m2), b("Tanh", m2))  # two readers
    m3 = b("MatMul", x, b.weight(8, 8))
    y3 = b("Mul", m3, b.input("z", (3, 2, 8)))  # broadcasts to a bigger shape
    f = fused(b.graph(m, y1, y2, y3))
    assert groups_summary(f) == [
        "MatMul+Add",
        "Relu",
        "MatMul",
        "Sigmoid+Tanh+Add",
        "MatMul",
        "Mul",
    ]


def test_an_epilogue_takes_a_diamond_once_every_reader_has_joined() -> None:
    """SiLU (``x * sigmoid(x)``) and a decomposed GELU after an anchor: a value read twice
    joins when both readers have; a second reader that is no link of the chain stops it."""
    b = Builder()
    x = b.input("x", (2, 8))
    m = b("MatMul", x, b.weight(8, 8))
    silu = b("Mul", m, b("Sigmoid", m))
    m2 = b("MatMul", silu, b.weight(8, 8))
    half = b.const(np.float32(0.5))
    erf = b("Erf", b("Mul", m2, b.const(np.float32(0.70710677))))
    gelu_ = b("Mul", b("Mul", m2, b("Add", erf, b.const(np.float32(1.0)))), half)
    m3 = b("MatMul", gelu_, b.weight(8, 8))
    y = b("Add", b("Relu", m3), b("Tanh", m3))  # no chain: Add reads Tanh, not Relu's link
    f = fused(b.graph(y))
    assert groups_summary(f) == [
        "MatMul+Sigmoid+Mul",
        "MatMul+Mul+Erf+Add+Mul+Mul",
        "MatMul",
        "Relu+Tanh+Add",
    ]


def test_reduction_takes_its_prologue_and_epilogue() -> None:
    b = Builder()
    x = b.input("x", (2, 3, 8))
    e = b("Exp", x)
    r = b("ReduceMean", b("Mul", e, b.const(np.float32(2.0))), axes=(-1,))
    y = b("Add", b("Sqrt", r), b("Tanh", e))  # e is read outside the group: no prologue
    f = fused(b.graph(y))
    assert groups_summary(f) == ["Exp", "Mul+ReduceMean+Sqrt", "Tanh+Add"]
    assert [n.attrs["kind"] for n in f.nodes] == ["injective", "reduction", "injective"]


def test_injective_chains_merge_around_views() -> None:
    b = Builder()
    x = b.input("x", (2, 3, 4))
    t = b("Relu", b("Transpose", x, perm=(2, 0, 1)))
    r = b("Reshape", t, b.const(np.array([4, 6])))
    e = b("Exp", r)
    y = b("Add", b("Sigmoid", e), b("Tanh", e))  # a diamond: Exp's readers are all in one group
    f = fused(b.graph(y))
    assert groups_summary(f) == ["Transpose+Relu", "Exp+Sigmoid+Tanh+Add"]
    assert ops_of(f) == [FUSED, "Reshape", FUSED]


def test_graph_outputs_and_shared_values_end_groups() -> None:
    b = Builder()
    x = b.input("x", (4, 4))
    a = b("Exp", x, out="a")
    t = b("Transpose", a, perm=(1, 0))
    y = b("Relu", t)
    f = fused(b.graph(y, a, t))
    assert groups_summary(f) == ["Exp", "Transpose", "Relu"]


def test_weights_are_inputs_and_compile_time_constants_are_copied_in() -> None:
    def scale(node: Node, a: Sequence[Any]) -> list[np.ndarray]:
        return [a[0] * a[1]]

    registry._REGISTRY["test.Scale"] = OpDef("test.Scale", OpKind.ELEMENTWISE, scale, None, (1,))
    b = Builder()
    x = b.input("x", (2, 32))
    w, bias, big = b.weight(32, 32), b.weight(32), b.weight(32)
    y = b("test.Scale", b("Add", b("MatMul", x, w), bias), big)
    f = fused(b.graph(y))
    (node,) = f.nodes
    assert node.inputs == ("x", w, bias)  # weights are runtime inputs ...
    consts = node.attrs["group"].constants()
    assert [c.name for c in consts] == [big]  # ... except where an op needs the data to compile
    assert groups_summary(f) == ["MatMul+Add+test.Scale"]


def test_nodes_with_two_outputs_become_one_group_each() -> None:
    def halves(node: Node, a: Sequence[Any]) -> list[np.ndarray]:
        return list(np.split(a[0], 2, axis=-1))

    registry._REGISTRY["test.Halves"] = OpDef("test.Halves", OpKind.INJECTIVE, halves)
    b = Builder()
    x = b.input("x", (2, 8))
    lo, hi = b("test.Halves", x, n_out=2)
    f = fused(b.graph(b("Relu", lo), b("Exp", hi)))
    assert groups_summary(f) == ["test.Halves+Relu", "test.Halves+Exp"]
    assert [n.attrs["group"].nodes[0].outputs for n in f.nodes] == [(lo, ""), ("", hi)]


def test_unfused_baseline_and_summary_of_a_plain_graph() -> None:
    b = Builder()
    x = b.input("x", (2, 3))
    y = b("Relu", b("Reshape", b("Exp", x), b.const(np.array([3, 2]))))
    g = b.graph(y)
    assert groups_summary(g) == []
    f = fused(g, enabled=False)
    assert ops_of(f) == [FUSED, "Reshape", FUSED]
    assert groups_summary(f) == ["Exp", "Relu"]


def test_imported_resnet_block_matches_onnxruntime() -> None:
    """After the merge: an ONNX basic block (3x3 convs, BN) through import, optimize and fuse."""
    importer = pytest.importorskip("tuner.graph.onnx_import")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    c = 4
    inits, nodes = [], []

    def init(name: str, data: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(data.astype(np.float32), name))
        return name

    def conv_bn(x: str, k: int) -> str:
        w = init(f"w{k}", rng.standard_normal((c, c, 3, 3)) * 0.3)
        nodes.append(helper.make_node("Conv", [x, w], [f"c{k}"], pads=[1, 1, 1, 1]))
        params = [
            init(f"{p}{k}", rng.uniform(0.5, 1.5, c) if p in ("s", "v") else rng.standard_normal(c))
            for p in ("s", "b", "m", "v")
        ]
        nodes.append(helper.make_node("BatchNormalization", [f"c{k}", *params], [f"n{k}"]))
        return f"n{k}"

    nodes.append(helper.make_node("Relu", [conv_bn("x", 1)], ["r1"]))
    nodes.append(helper.make_node("Add", [conv_bn("r1", 2), "x"], ["a"]))
    nodes.append(helper.make_node("Relu", ["a"], ["y"]))
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, c, 5, 5]) for n in ("x", "y")]
    graph = helper.make_graph(nodes, "block", info[:1], info[1:], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = rng.standard_normal((1, c, 5, 5)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    f = fuse(optimize(importer.from_onnx(model)))
    assert groups_summary(f) == ["Conv+Relu", "Conv+Add+Relu"]
    np.testing.assert_allclose(run_graph(f, {"x": x})[0], want, rtol=1e-3, atol=1e-4)
