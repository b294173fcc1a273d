"""Each graph pass alone: outputs equal before and after on random inputs, and the new structure.

The graphs are made with :class:`~tests.graph.standins.Builder` over the
registry with stand-ins for operators it lacks (:func:`~tests.graph.standins.standin_ops`).
"""

from __future__ import annotations

from collections.abc import Iterator
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
from tuner.graph import Graph, Node, Value
from tuner.graph.passes import (
    eliminate_common_subexpressions,
    eliminate_dead_code,
    fold_batchnorm,
    fold_constants,
    optimize,
    simplify,
)
from tuner.graph.patterns import recognize_gelu, recognize_layer_norm


@pytest.fixture(autouse=True)
def _ops() -> Iterator[None]:
    with standin_ops():
        yield


# -- simplify ------------------------------------------------------------------------


def test_simplify_drops_identity_dropout_and_same_dtype_cast() -> None:
    b = Builder()
    x = b.input("x", (2, 3))
    y = b("Identity", b("Relu", x))
    y = b("Dropout", y, b.const(np.float32(0.1)))
    y = b("Cast", y, to=1)
    y = b("Cast", b("Sigmoid", y), to=7)  # a real conversion stays
    g = b.graph(y)
    s = simplify(g)
    assert ops_of(s) == ["Relu", "Sigmoid", "Cast"]
    assert_same(g, s)


def test_simplify_renames_the_producer_of_a_graph_output() -> None:
    b = Builder()
    x = b.input("x", (2, 3))
    r = b("Relu", x)
    y = b("Identity", r, out="y")
    z = b("Tanh", r, out="z")
    g = b.graph(y, z)
    s = simplify(g)
    assert ops_of(s) == ["Relu", "Tanh"]
    assert s.nodes[0].outputs == ("y",) and s.nodes[1].inputs == ("y",)
    assert s.value("y").shape == (2, 3)
    assert_same(g, s)


def test_simplify_keeps_identity_between_names_it_cannot_merge() -> None:
    b = Builder()
    x = b.input("x", (2, 3))
    r = b("Relu", x, out="r")
    y1 = b("Identity", x, out="y1")  # of a graph input
    y2 = b("Identity", r, out="y2")  # of another graph output
    y3 = b("Identity", b.const(np.ones(3, np.float32)), out="y3")  # of a constant
    g = b.graph(y1, r, y2, y3)
    s = simplify(g)
    assert ops_of(s) == ["Relu", "Identity", "Identity", "Identity"]
    assert_same(g, s)


def test_simplify_keeps_dropout_in_training_or_with_its_mask_read() -> None:
    b = Builder()
    x = b.input("x", (2, 3))
    y, mask = b("Dropout", x, n_out=2)
    g = b.graph(y, mask)
    assert ops_of(simplify(g)) == ["Dropout"]
    train = Graph.make(
        [Value("x", "float32", (2, 3))],
        [Node("Dropout", ("x", "", "t"), ("y",))],
        [Value("y", "float32", (2, 3)), Value.const("t", np.array(True))],
        ["y"],
    )
    assert ops_of(simplify(train)) == ["Dropout"]


def test_simplify_merges_reshape_of_reshape_and_drops_noop_reshape() -> None:
    b = Builder()
    x = b.input("x", (2, 3, 4))
    r1 = b("Reshape", x, b.const(np.array([6, 4])))
    r2 = b("Reshape", r1, b.const(np.array([0, 2, 2])))  # 0: the inner view's dim
    r3 = b("Reshape", b("Relu", r2), b.const(np.array([6, 2, 2])))  # to its own shape
    g = b.graph(r3)
    s = simplify(g)
    assert ops_of(s) == ["Reshape", "Relu"]
    assert s.nodes[0].inputs[0] == "x"
    assert s.const(s.nodes[0].inputs[1]).tolist() == [6, 2, 2]
    assert s.outputs == g.outputs and s.value(s.outputs[0]).shape == (6, 2, 2)
    assert_same(g, s)


# -- fold_constants ------------------------------------------------------------------


def test_fold_constants_evaluates_constant_subgraphs() -> None:
    b = Builder()
    x = b.input("x", (2, 3))
    c = b("Mul", b.weight(3), b.const(np.float32(2.0)))
    y = b("Add", x, b("Sqrt", b("Mul", c, c)))
    g = b.graph(y)
    f = fold_constants(g)
    assert ops_of(f) == ["Add"]
    folded = f.value(f.nodes[0].inputs[1])
    assert folded.is_const and folded.dtype == "float32" and folded.shape == (3,)
    assert_same(g, f)


def test_fold_constants_collapses_a_shape_chain_before_reshape() -> None:
    b = Builder()
    x = b.input("x", (2, 3, 4))
    shp = b("Shape", x)
    n = b("Unsqueeze", b("Gather", shp, b.const(np.array(0))), b.const(np.array([0])))
    target = b("Concat", n, b.const(np.array([-1])), axis=0)
    y = b("Reshape", b("Relu", x), target)
    g = b.graph(y)
    f = fold_constants(g)
    assert ops_of(f) == ["Relu", "Reshape"]
    assert f.const(f.nodes[1].inputs[1]).tolist() == [2, -1]
    assert_same(g, f)


def test_fold_constants_uses_static_output_shapes_when_the_input_is_symbolic() -> None:
    def graph(out_shape: tuple[Any, ...]) -> Graph:
        x = Value("x", "float32", ("n", 3))
        nodes = [Node("Shape", ("x",), ("s",)), Node("Reshape", ("x", "s"), ("y",))]
        values = [Value("s", "int64", (2,)), Value("y", "float32", out_shape)]
        return Graph.make([x], nodes, values, ["y", "s"])

    f = fold_constants(graph(("n", 3)))
    assert ops_of(f) == ["Shape", "Reshape"]  # Shape of a symbolic dim cannot fold
    assert f.nodes[1].inputs[1] == "s"  # nor a Reshape to a symbolic shape
    f = fold_constants(graph((2, 3)))  # the importer knew the output shape
    assert ops_of(f) == ["Shape", "Reshape"]
    assert f.const(f.nodes[1].inputs[1]).tolist() == [2, 3]
    feeds = {"x": np.ones((2, 3), np.float32)}
    assert_same(graph((2, 3)), f, feeds)


def test_fold_constants_leaves_big_results_as_nodes() -> None:
    b = Builder()
    x = b.input("x", (1,))
    big = b("Add", b.const(np.zeros((1024, 1), np.float32)), b.const(np.ones(1025, np.float32)))
    w = b("Transpose", b.const(np.ones((1025, 1024), np.float32)), perm=(1, 0))
    g = b.graph(b("Add", b("Add", x, big), w))
    assert ops_of(fold_constants(g)) == ["Add", "Add", "Add"]  # the weight's transpose folds


# -- fold_batchnorm ------------------------------------------------------------------


@pytest.mark.parametrize("bias", [True, False])
def test_fold_batchnorm_into_conv(bias: bool) -> None:
    b = Builder()
    x = b.input("x", (1, 3, 4, 4))
    ins = [x, b.weight(5, 3, 1, 1)] + ([b.weight(5)] if bias else [])
    y = b("BatchNormalization", b("Conv", *ins), *bn_params(b, 5), epsilon=1e-3, out="y")
    g = b.graph(y)
    f = fold_batchnorm(g)
    assert ops_of(f) == ["Conv"] and f.nodes[0].outputs == ("y",)
    w, bb = (f.value(i) for i in f.nodes[0].inputs[1:])
    assert w.is_const and bb.is_const and w.dtype == bb.dtype == "float32"
    assert (w.shape, bb.shape) == ((5, 3, 1, 1), (5,))
    assert_same(g, f)


def test_fold_batchnorm_leaves_other_batchnorms() -> None:
    b = Builder()
    x = b.input("x", (1, 3, 4, 4))
    a = b("BatchNormalization", x, *bn_params(b, 3))  # after a graph input
    c = b("Conv", a, b.weight(3, 3, 1, 1))
    d = b("BatchNormalization", c, *bn_params(b, 3))  # conv output read twice
    g = b.graph(b("Add", d, c))
    f = fold_batchnorm(g)
    assert ops_of(f) == ["BatchNormalization", "Conv", "BatchNormalization", "Add"]
    assert_same(g, f)


# -- CSE and DCE -----------------------------------------------------------------------


def test_cse_merges_equal_nodes_and_small_constants() -> None:
    b = Builder()
    x = b.input("x", (2, 3))
    a1 = b("Add", x, b.const(np.float32(1.5)))
    a2 = b("Add", x, b.const(np.float32(1.5)))  # an equal constant under another name
    s1 = b("Softmax", b("Mul", a1, a2), axis=1)
    s2 = b("Softmax", b("Mul", a2, a1), axis=0)  # different attrs, operands swapped: kept
    g = b.graph(b("Add", s1, s2))
    c = eliminate_common_subexpressions(g)
    assert ops_of(c) == ["Add", "Mul", "Softmax", "Softmax", "Add"]
    assert c.nodes[1].inputs == (c.nodes[0].outputs[0],) * 2
    assert len(c.constants()) == 1
    assert_same(g, c)


def test_cse_keeps_duplicates_that_are_graph_outputs() -> None:
    b = Builder()
    x = b.input("x", (2, 3))
    g = b.graph(b("Relu", x, out="y1"), b("Relu", x, out="y2"))
    c = eliminate_common_subexpressions(g)
    assert ops_of(c) == ["Relu", "Relu"]
    assert_same(g, c)


def test_dce_drops_unused_branches() -> None:
    b = Builder()
    x = b.input("x", (2, 3))
    b("Tanh", b("Exp", x))
    y = b("Relu", x)
    g = b.graph(y)
    d = eliminate_dead_code(g)
    assert ops_of(d) == ["Relu"] and len(d.values) == 2
    assert_same(g, d)


# -- recognize_gelu ------------------------------------------------------------------


@pytest.mark.parametrize("order", ["torch", "half", "hf", "hf_mul", "torch_mul"])
def test_recognize_gelu(order: str) -> None:
    b = Builder()
    x = b.input("x", (2, 8))
    h = b("MatMul", x, b.weight(8, 8))
    g = b.graph(b("Add", gelu(b, h, order), x))
    r = recognize_gelu(g)
    assert ops_of(r) == ["MatMul", "Gelu", "Add"]
    assert r.nodes[1].attrs == {"approximate": "none"} and r.nodes[1].inputs == (h,)
    assert_same(g, r)


def test_recognize_gelu_needs_the_exact_pattern() -> None:
    b = Builder()
    x = b.input("x", (2, 8))
    y = gelu(b, x, "torch")
    e = next(n for n in b.nodes if n.op == "Erf").outputs[0]
    g = b.graph(y, e)  # the erf is also a graph output
    assert "Gelu" not in ops_of(recognize_gelu(g))
    b2 = Builder()
    x2 = b2.input("x", (2, 8))
    u = b2("Div", x2, b2.const(np.float32(2.0)))  # not sqrt(2)
    a = b2("Add", b2("Erf", u), b2.const(np.float32(1.0)))
    g2 = b2.graph(b2("Mul", b2("Mul", x2, a), b2.const(np.float32(0.5))))
    assert "Gelu" not in ops_of(recognize_gelu(g2))


# -- recognize_layer_norm --------------------------------------------------------------


@pytest.mark.parametrize(("affine", "opset18"), [(True, False), (False, False), (True, True)])
def test_recognize_layer_norm(affine: bool, opset18: bool) -> None:
    b = Builder(opset=18 if opset18 else 17)
    x = b.input("x", (2, 3, 8))
    g = b.graph(b("Relu", layer_norm_parts(b, b("Exp", x), affine, opset18)))
    r = recognize_layer_norm(g)
    assert ops_of(r) == ["Exp", "LayerNormalization", "Relu"]
    ln = r.nodes[1]
    assert ln.attrs["axis"] == -1 and ln.attrs["epsilon"] == 1e-6
    assert len(ln.inputs) == (3 if affine else 2) and r.value(ln.inputs[1]).shape == (8,)
    assert_same(g, r)


def test_recognize_layer_norm_only_over_the_last_axis() -> None:
    b = Builder()
    x = b.input("x", (2, 3, 8))
    d = b("Sub", x, b("ReduceMean", x, axes=(1,)))
    var = b("ReduceMean", b("Pow", d, b.const(np.float32(2.0))), axes=(1,))
    g = b.graph(b("Div", d, b("Sqrt", b("Add", var, b.const(np.float32(1e-5))))))
    assert "LayerNormalization" not in ops_of(recognize_layer_norm(g))


# -- optimize --------------------------------------------------------------------------


def test_optimize_runs_every_pass_and_is_idempotent() -> None:
    b = Builder()
    x = b.input("x", (1, 3, 4, 4))
    c = b("Conv", b("Identity", x), b.weight(8, 3, 1, 1), b.weight(8))
    y = b("Relu", b("BatchNormalization", c, *bn_params(b, 8)))
    n = b("Unsqueeze", b("Gather", b("Shape", y), b.const(np.array(0))), b.const(np.array([0])))
    flat = b("Reshape", y, b("Concat", n, b.const(np.array([-1])), axis=0))
    h = b("MatMul", flat, b.weight(128, 8))
    h = gelu(b, h, "torch")
    g = b.graph(b("Identity", layer_norm_parts(b, h, affine=True), out="out"))
    o = optimize(g)
    assert ops_of(o) == ["Conv", "Relu", "Reshape", "MatMul", "Gelu", "LayerNormalization"]
    assert o.outputs == ("out",)
    assert_same(g, o)
    again = optimize(o)
    assert ops_of(again) == ops_of(o) and set(again.values) == set(o.values)
