"""Each graph pass alone: outputs equal before and after on random inputs, and the new structure.

The operator families are written on other branches; until they are merged,
:func:`standin_ops` puts minimal NumPy stand-ins (with the kinds the families
use) into the registry for the operators these tests need, and the real
definitions win wherever they exist. :class:`Builder` makes graphs with
``Graph.make`` and infers each value's type by evaluating the node.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from scipy import special

from tuner.graph import Graph, Node, Value
from tuner.graph import ops as registry
from tuner.graph.interpret import run_graph
from tuner.graph.ops import OpDef, OpKind, opdef
from tuner.graph.passes import (
    eliminate_common_subexpressions,
    eliminate_dead_code,
    fold_batchnorm,
    fold_constants,
    optimize,
    simplify,
)
from tuner.graph.patterns import recognize_gelu, recognize_layer_norm

# -- stand-in operators --------------------------------------------------------------

E, I, V, R, A, S = (
    OpKind.ELEMENTWISE,
    OpKind.INJECTIVE,
    OpKind.VIEW,
    OpKind.REDUCTION,
    OpKind.ANCHOR,
    OpKind.SHAPE,
)
_CAST = {1: "float32", 3: "int8", 6: "int32", 7: "int64", 9: "bool", 11: "float64"}


def _unary(f: Callable[[np.ndarray], Any]) -> Any:
    return lambda node, a: [np.asarray(f(a[0])).astype(a[0].dtype)]


def _binary(f: Callable[[np.ndarray, np.ndarray], Any]) -> Any:
    return lambda node, a: [np.asarray(f(a[0], a[1]))]


def _axes(node: Node, a: Sequence[np.ndarray | None]) -> tuple[int, ...] | None:
    raw = a[1] if len(a) > 1 and a[1] is not None else node.attr("axes")
    return None if raw is None else tuple(int(i) for i in np.asarray(raw).reshape(-1))


def _reduce_mean(node: Node, a: Sequence[Any]) -> list[np.ndarray]:
    keep = bool(node.attr("keepdims", 1))
    return [np.mean(a[0], axis=_axes(node, a), keepdims=keep).astype(a[0].dtype)]


def _softmax(node: Node, a: Sequence[Any]) -> list[np.ndarray]:
    e = np.exp(a[0] - a[0].max(axis=node.attr("axis", -1), keepdims=True))
    return [(e / e.sum(axis=node.attr("axis", -1), keepdims=True)).astype(a[0].dtype)]


def _layer_norm(node: Node, a: Sequence[Any]) -> list[np.ndarray]:
    x, scale = a[0], a[1]
    axes = tuple(range(node.attr("axis", -1) % x.ndim, x.ndim))
    m = x.mean(axis=axes, keepdims=True)
    var = ((x - m) ** 2).mean(axis=axes, keepdims=True)
    y = (x - m) / np.sqrt(var + node.attr("epsilon", 1e-5)) * scale
    if len(a) > 2 and a[2] is not None:
        y = y + a[2]
    return [y.astype(x.dtype)]


def _batchnorm(node: Node, a: Sequence[Any]) -> list[np.ndarray]:
    x, s, b, m, v = a
    c = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - m.reshape(c)) / np.sqrt(v.reshape(c) + node.attr("epsilon", 1e-5))
    return [(y * s.reshape(c) + b.reshape(c)).astype(x.dtype)]


def _conv1x1(node: Node, a: Sequence[Any]) -> list[np.ndarray]:
    x, w = a[0], a[1]
    assert w.shape[2:] == (1,) * (w.ndim - 2) and node.attr("group", 1) == 1
    y = np.einsum("nc...,kc->nk...", x, w.reshape(w.shape[:2]))
    if len(a) > 2 and a[2] is not None:
        y = y + a[2].reshape((1, -1) + (1,) * (x.ndim - 2))
    return [y.astype(x.dtype)]


def _reshape(node: Node, a: Sequence[Any]) -> list[np.ndarray]:
    x, shape = a[0], [int(s) for s in a[1]]
    if not node.attr("allowzero", 0):
        shape = [x.shape[k] if s == 0 else s for k, s in enumerate(shape)]
    return [x.reshape(shape)]


def _unsqueeze(node: Node, a: Sequence[Any]) -> list[np.ndarray]:
    axes = _axes(node, a) or ()
    rank = a[0].ndim + len(axes)
    return [np.expand_dims(a[0], tuple(sorted(i % rank for i in axes)))]


def _shape(node: Node, a: Sequence[Any]) -> list[np.ndarray]:
    dims = a[0].shape[node.attr("start", 0) : node.attr("end", None)]
    return [np.array(dims, dtype=np.int64)]


def _dropout(node: Node, a: Sequence[Any]) -> list[np.ndarray]:
    return [a[0], np.ones(a[0].shape, dtype=bool)][: len(node.outputs)]


STANDINS: dict[str, tuple[OpKind, Any]] = {
    "Add": (E, _binary(np.add)),
    "Sub": (E, _binary(np.subtract)),
    "Mul": (E, _binary(np.multiply)),
    "Div": (E, _binary(np.divide)),
    "Pow": (E, _binary(np.power)),
    "Sqrt": (E, _unary(np.sqrt)),
    "Exp": (E, _unary(np.exp)),
    "Erf": (E, _unary(special.erf)),
    "Relu": (E, _unary(lambda x: np.maximum(x, 0))),
    "Sigmoid": (E, _unary(special.expit)),
    "Tanh": (E, _unary(np.tanh)),
    "Gelu": (E, _unary(lambda x: 0.5 * x * (1 + special.erf(x / np.sqrt(2))))),
    "BatchNormalization": (E, _batchnorm),
    "Cast": (E, lambda node, a: [a[0].astype(_CAST[node.attr("to")])]),
    "Transpose": (I, lambda node, a: [np.transpose(a[0], node.attr("perm"))]),
    "Concat": (I, lambda node, a: [np.concatenate(a, axis=node.attr("axis"))]),
    "Gather": (I, lambda node, a: [np.take(a[0], a[1], axis=node.attr("axis", 0))]),
    "Reshape": (V, _reshape),
    "Unsqueeze": (V, _unsqueeze),
    "Identity": (V, lambda node, a: [a[0]]),
    "Dropout": (V, _dropout),
    "ReduceMean": (R, _reduce_mean),
    "Softmax": (R, _softmax),
    "LayerNormalization": (R, _layer_norm),
    "Conv": (A, _conv1x1),
    "MatMul": (A, lambda node, a: [np.matmul(a[0], a[1])]),
    "Shape": (S, _shape),
}


@contextlib.contextmanager
def standin_ops() -> Iterator[None]:
    """The real registry, with stand-ins for the operators it lacks; restored afterwards."""
    registry.supported()  # load the families that exist first: real definitions win
    saved = dict(registry._REGISTRY)
    for op, (kind, evaluate) in STANDINS.items():
        registry._REGISTRY.setdefault(op, OpDef(op, kind, evaluate))
    try:
        yield
    finally:
        registry._REGISTRY.clear()
        registry._REGISTRY.update(saved)


@pytest.fixture(autouse=True)
def _ops() -> Iterator[None]:
    with standin_ops():
        yield


# -- building and checking graphs ------------------------------------------------------


class Builder:
    """Graph.make for tests: ``b("Relu", x)`` adds a node and returns its output's name."""

    def __init__(self, seed: int = 0, opset: int = 17) -> None:
        self.rng = np.random.default_rng(seed)
        self.opset = opset
        self.inputs: list[Value] = []
        self.nodes: list[Node] = []
        self.values: list[Value] = []
        self.env: dict[str, np.ndarray] = {}

    def _name(self, base: str) -> str:
        return f"{base}{len(self.env)}"

    def input(self, name: str, shape: Sequence[int], declared: Sequence[Any] | None = None) -> str:
        self.env[name] = self.rng.standard_normal(tuple(shape)).astype(np.float32)
        self.inputs.append(Value(name, "float32", tuple(declared or shape)))
        return name

    def const(self, data: Any, name: str | None = None) -> str:
        arr = np.asarray(data)
        arr = arr.astype(np.float32) if arr.dtype == np.float64 else arr
        name = name or self._name("c")
        self.values.append(Value.const(name, arr))
        self.env[name] = arr
        return name

    def weight(self, *shape: int) -> str:
        return self.const(self.rng.standard_normal(shape) * 0.5)

    def __call__(
        self, op: str, *inputs: str, out: str | None = None, n_out: int = 1, **attrs: Any
    ) -> Any:
        outs = (out,) if out else tuple(self._name(op.lower()) + f"_{k}" for k in range(n_out))
        node = Node(op, tuple(inputs), outs, attrs, f"{op.lower()}{len(self.nodes)}")
        results = opdef(op).evaluate(node, [self.env[i] if i else None for i in inputs])
        for o, r in zip(outs, results, strict=False):
            arr = np.asarray(r)
            self.env[o] = arr
            self.values.append(Value(o, arr.dtype.name, tuple(arr.shape)))
        self.nodes.append(node)
        return outs[0] if n_out == 1 else outs

    def graph(self, *outputs: str) -> Graph:
        return Graph.make(self.inputs, self.nodes, self.values, outputs, opset=self.opset)


def random_feeds(graph: Graph, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        name: rng.standard_normal(graph.value(name).shape).astype(graph.value(name).dtype)  # type: ignore[arg-type]
        for name in graph.inputs
    }


def assert_same(before: Graph, after: Graph, feeds: Mapping[str, np.ndarray] | None = None) -> None:
    """Both graphs give the same outputs (dtype, shape, values) on random inputs."""
    assert after.inputs == before.inputs and after.outputs == before.outputs
    for seed in (1, 2):
        fed = feeds if feeds is not None else random_feeds(before, seed)
        want, got = run_graph(before, fed), run_graph(after, fed)
        for w, g in zip(want, got, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def ops_of(graph: Graph) -> list[str]:
    return [n.op for n in graph.nodes]


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


def _bn_params(b: Builder, k: int) -> list[str]:
    rng = b.rng
    scale, beta, mean = (rng.standard_normal(k) for _ in range(3))
    var = rng.uniform(0.5, 2.0, k)
    return [b.const(p) for p in (scale, beta, mean, var)]


@pytest.mark.parametrize("bias", [True, False])
def test_fold_batchnorm_into_conv(bias: bool) -> None:
    b = Builder()
    x = b.input("x", (1, 3, 4, 4))
    ins = [x, b.weight(5, 3, 1, 1)] + ([b.weight(5)] if bias else [])
    y = b("BatchNormalization", b("Conv", *ins), *_bn_params(b, 5), epsilon=1e-3, out="y")
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
    a = b("BatchNormalization", x, *_bn_params(b, 3))  # after a graph input
    c = b("Conv", a, b.weight(3, 3, 1, 1))
    d = b("BatchNormalization", c, *_bn_params(b, 3))  # conv output read twice
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


def _gelu(b: Builder, x: str, order: str) -> str:
    c = b.const
    if order.endswith("mul"):
        u = b("Mul", c(np.float32(0.7071067811865476)), x)
    else:
        u = b("Div", x, c(np.float32(np.sqrt(2.0))))
    a = b("Add", b("Erf", u), c(np.float32(1.0)))
    if order.startswith("torch"):  # (x * (1 + e)) * 0.5
        return b("Mul", b("Mul", x, a), c(np.float32(0.5)))
    if order.startswith("half"):  # (0.5 * (1 + e)) * x
        return b("Mul", x, b("Mul", c(np.float32(0.5)), a))
    return b("Mul", b("Mul", x, c(np.float32(0.5))), a)  # (x * 0.5) * (1 + e)


@pytest.mark.parametrize("order", ["torch", "half", "hf", "hf_mul", "torch_mul"])
def test_recognize_gelu(order: str) -> None:
    b = Builder()
    x = b.input("x", (2, 8))
    h = b("MatMul", x, b.weight(8, 8))
    g = b.graph(b("Add", _gelu(b, h, order), x))
    r = recognize_gelu(g)
    assert ops_of(r) == ["MatMul", "Gelu", "Add"]
    assert r.nodes[1].attrs == {"approximate": "none"} and r.nodes[1].inputs == (h,)
    assert_same(g, r)


def test_recognize_gelu_needs_the_exact_pattern() -> None:
    b = Builder()
    x = b.input("x", (2, 8))
    y = _gelu(b, x, "torch")
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


def _layer_norm_parts(b: Builder, x: str, affine: bool, opset18: bool = False) -> str:
    def mean(v: str) -> str:
        if opset18:
            return b("ReduceMean", v, b.const(np.array([-1])))
        return b("ReduceMean", v, axes=(-1,))

    d = b("Sub", x, mean(x))
    var = mean(b("Pow", d, b.const(np.float32(2.0))))
    n = b("Div", d, b("Sqrt", b("Add", var, b.const(np.float32(1e-6)))))
    if affine:
        width = b.env[x].shape[-1]
        n = b("Add", b("Mul", n, b.weight(width)), b.weight(width))
    return n


@pytest.mark.parametrize(("affine", "opset18"), [(True, False), (False, False), (True, True)])
def test_recognize_layer_norm(affine: bool, opset18: bool) -> None:
    b = Builder(opset=18 if opset18 else 17)
    x = b.input("x", (2, 3, 8))
    g = b.graph(b("Relu", _layer_norm_parts(b, b("Exp", x), affine, opset18)))
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
    y = b("Relu", b("BatchNormalization", c, *_bn_params(b, 8)))
    n = b("Unsqueeze", b("Gather", b("Shape", y), b.const(np.array(0))), b.const(np.array([0])))
    flat = b("Reshape", y, b("Concat", n, b.const(np.array([-1])), axis=0))
    h = b("MatMul", flat, b.weight(128, 8))
    h = _gelu(b, h, "torch")
    g = b.graph(b("Identity", _layer_norm_parts(b, h, affine=True), out="out"))
    o = optimize(g)
    assert ops_of(o) == ["Conv", "Relu", "Reshape", "MatMul", "Gelu", "LayerNormalization"]
    assert o.outputs == ("out",)
    assert_same(g, o)
    again = optimize(o)
    assert ops_of(again) == ops_of(o) and set(again.values) == set(o.values)
