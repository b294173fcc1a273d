"""Stand-in operators and a graph builder, shared by the pass and fusion tests.

The operator families are written on other branches; until they are merged,
:func:`standin_ops` puts minimal NumPy stand-ins (with the kinds the families
use) into the registry for the operators these tests need, and the real
definitions win wherever they exist. :class:`Builder` makes graphs with
``Graph.make`` and infers each value's type by evaluating the node;
:func:`assert_same` checks that a rewritten graph computes what the original
did; :func:`bn_params`, :func:`gelu` and :func:`layer_norm_parts` spell out
the subgraphs that folding and pattern recognition look for.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from scipy import special

from tuner.graph import Graph, Node, Value
from tuner.graph import ops as registry
from tuner.graph.interpret import run_graph
from tuner.graph.ops import OpDef, OpKind, opdef

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


# -- subgraphs the passes look for ---------------------------------------------------


def bn_params(b: Builder, k: int) -> list[str]:
    rng = b.rng
    scale, beta, mean = (rng.standard_normal(k) for _ in range(3))
    var = rng.uniform(0.5, 2.0, k)
    return [b.const(p) for p in (scale, beta, mean, var)]


def gelu(b: Builder, x: str, order: str) -> str:
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


def layer_norm_parts(b: Builder, x: str, affine: bool, opset18: bool = False) -> str:
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
