"""The generic ``fused`` operator: groups of several kinds, built and compared with the interpreter.

The operator families are registered on other branches; where an operator is
not registered yet, a minimal stand-in (NumPy evaluation and te lowering) is
installed for these tests only, and the registry is restored afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest

import tuner
from search_spaces import OperatorError, fused, get_operator
from tuner import te
from tuner.graph import Graph, GraphError, Node, Value
from tuner.graph import ops as graph_ops
from tuner.graph.canonical import encode
from tuner.graph.ops import LowerContext, OpDef, OpKind
from tuner.te import Expr, Tensor

from .targets import AVX2

# -- stand-in operators -----------------------------------------------------------------------


def _te(shape: Sequence[int]) -> tuple[int, ...]:
    return tuple(shape) or (1,)


def _bcast(t: Tensor, idx: Sequence[Any]) -> Expr:
    """``t`` read under NumPy broadcasting (a rank-0 value, te shape (1,), reads index 0)."""
    shape = t.shape_ints
    off = len(idx) - len(shape)
    return t[tuple(0 if d == 1 else idx[off + k] for k, d in enumerate(shape))]


def _binary(fn: Any) -> Any:
    def lower(ctx: LowerContext) -> list[Tensor]:
        a, b = ctx.tensor(0), ctx.tensor(1)
        return [
            te.compute(
                _te(ctx.outputs[0].shape),
                lambda *i: fn(_bcast(a, i), _bcast(b, i)),
                name=ctx.name,
            )
        ]

    return lower


def _unary(fn: Any) -> Any:
    def lower(ctx: LowerContext) -> list[Tensor]:
        x = ctx.tensor(0)
        return [te.compute(x.shape_ints, lambda *i: fn(x[i]), name=ctx.name)]

    return lower


def _reduce_sum_lower(ctx: LowerContext) -> list[Tensor]:
    x = ctx.tensor(0)
    shape = x.shape_ints
    axis = int(ctx.const(1).reshape(-1)[0]) % len(shape)
    k = te.reduce_axis(shape[axis], name=f"{ctx.name}_k")

    def body(*i: Any) -> Expr:
        idx = list(i)
        idx[axis] = k
        return te.sum(x[tuple(idx)], axis=k)

    return [te.compute(_te(ctx.outputs[0].shape), body, name=ctx.name)]


def _transpose_lower(ctx: LowerContext) -> list[Tensor]:
    x = ctx.tensor(0)
    perm = ctx.node.attrs["perm"]

    def body(*i: Any) -> Expr:
        idx = [None] * len(perm)
        for out_d, in_d in enumerate(perm):
            idx[in_d] = i[out_d]
        return x[tuple(idx)]

    return [te.compute(_te(ctx.outputs[0].shape), body, name=ctx.name)]


def _softmax_lower(ctx: LowerContext) -> list[Tensor]:
    x = ctx.tensor(0)
    shape = x.shape_ints
    axis = int(ctx.node.attrs.get("axis", -1)) % len(shape)
    red = tuple(1 if d == axis else n for d, n in enumerate(shape))

    def along(i: Sequence[Any], k: Any) -> tuple[Any, ...]:
        return tuple(k if d == axis else v for d, v in enumerate(i))

    km = te.reduce_axis(shape[axis], name=f"{ctx.name}_km")
    mx = te.compute(red, lambda *i: te.max(x[along(i, km)], axis=km), name=f"{ctx.name}_max")
    e = te.compute(shape, lambda *i: te.exp(x[i] - mx[along(i, 0)]), name=f"{ctx.name}_exp")
    ks = te.reduce_axis(shape[axis], name=f"{ctx.name}_ks")
    sm = te.compute(red, lambda *i: te.sum(e[along(i, ks)], axis=ks), name=f"{ctx.name}_sum")
    return [te.compute(shape, lambda *i: e[i] / sm[along(i, 0)], name=ctx.name)]


def _np_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


_STANDINS = {
    "Add": OpDef(
        "Add", OpKind.ELEMENTWISE, lambda n, a: [a[0] + a[1]], _binary(lambda x, y: x + y)
    ),
    "Mul": OpDef(
        "Mul", OpKind.ELEMENTWISE, lambda n, a: [a[0] * a[1]], _binary(lambda x, y: x * y)
    ),
    "Relu": OpDef(
        "Relu",
        OpKind.ELEMENTWISE,
        lambda n, a: [np.maximum(a[0], 0).astype(a[0].dtype)],
        _unary(lambda v: te.maximum(v, te.const(0, v.dtype))),
    ),
    "Exp": OpDef("Exp", OpKind.ELEMENTWISE, lambda n, a: [np.exp(a[0])], _unary(te.exp)),
    "ReduceSum": OpDef(
        "ReduceSum",
        OpKind.REDUCTION,
        lambda n, a: [a[0].sum(axis=int(a[1].reshape(-1)[0]), keepdims=True)],
        _reduce_sum_lower,
        const_inputs=(1,),
    ),
    "Transpose": OpDef(
        "Transpose",
        OpKind.INJECTIVE,
        lambda n, a: [np.transpose(a[0], n.attrs["perm"])],
        _transpose_lower,
    ),
    "Softmax": OpDef(
        "Softmax",
        OpKind.REDUCTION,
        lambda n, a: [_np_softmax(a[0], int(n.attrs.get("axis", -1)))],
        _softmax_lower,
    ),
}


@pytest.fixture(autouse=True)
def standins() -> Iterator[None]:
    """The stand-ins for operators the registry lacks; the registry as it was afterwards."""
    graph_ops._load()
    saved = dict(graph_ops._REGISTRY)
    for op, d in _STANDINS.items():
        graph_ops._REGISTRY.setdefault(op, d)
    yield
    graph_ops._REGISTRY.clear()
    graph_ops._REGISTRY.update(saved)


# -- groups -------------------------------------------------------------------------------------


class _Builder:
    """A group written node by node: ``b.node("Add", "x", "w")`` returns the new value's name."""

    def __init__(self, **inputs: tuple[tuple[int, ...], str]):
        self.inputs = [Value(n, dt, shape) for n, (shape, dt) in inputs.items()]
        self.values: list[Value] = []
        self.nodes: list[Node] = []
        self.types = {v.name: v for v in self.inputs}

    def const(self, name: str, data: Any) -> str:
        v = Value.const(name, data)
        self.values.append(v)
        self.types[name] = v
        return name

    def node(
        self, op: str, *inputs: str, out: tuple[tuple[int, ...], str] | None = None, **attrs: Any
    ) -> str:
        name = f"v{len(self.nodes)}"
        if out is None:
            out = self._evaluated_type(op, inputs, attrs)
        v = Value(name, out[1], out[0])
        self.nodes.append(Node(op, inputs, (name,), attrs, f"node{len(self.nodes)}"))
        self.values.append(v)
        self.types[name] = v
        return name

    def _evaluated_type(
        self, op: str, inputs: Sequence[str], attrs: dict[str, Any]
    ) -> tuple[tuple[int, ...], str]:
        """The output's shape and dtype, from the operator's evaluation on zeros."""
        args = []
        for i in inputs:
            v = self.types[i]
            args.append(v.data if v.data is not None else np.zeros(v.shape, v.dtype))
        (res,) = graph_ops.opdef(op).evaluate(Node(op, tuple(inputs), ("o",), attrs), args)
        return tuple(res.shape), res.dtype.name

    def graph(self, out: str) -> Graph:
        return Graph.make(self.inputs, self.nodes, self.values, [out])


F32 = "float32"


def _elementwise() -> Graph:
    b = _Builder(x=((13, 7), F32), y=((7,), F32))
    h = b.node("Add", "x", b.const("half", np.float32(0.5)))
    return b.graph(b.node("Relu", b.node("Mul", h, "y")))


def _scalar() -> Graph:
    b = _Builder(x=((), F32))
    return b.graph(b.node("Exp", b.node("Add", "x", b.const("one", np.float32(1.0)))))


def _softmax(shape: tuple[int, ...], axis: int) -> Graph:
    b = _Builder(x=(shape, F32))
    return b.graph(b.node("Mul", b.node("Softmax", "x", axis=axis), b.const("two", np.float32(2))))


def _reduce(shape: tuple[int, ...], axis: int) -> Graph:
    b = _Builder(x=(shape, F32))
    e = b.node("Exp", "x")
    return b.graph(b.node("ReduceSum", e, b.const("axes", np.array([axis], np.int64))))


def _norm() -> Graph:
    """A layer norm's shape: reduce, subtract the mean, square, reduce again, scale."""
    b = _Builder(x=((13, 7), F32))
    axes = b.const("axes", np.array([-1], np.int64))
    mean = b.node("Mul", b.node("ReduceSum", "x", axes), b.const("inv", np.float32(-1 / 7)))
    centred = b.node("Add", "x", mean)
    var = b.node("ReduceSum", b.node("Mul", centred, centred), axes)
    return b.graph(b.node("Mul", centred, b.node("Add", var, b.const("eps", np.float32(1.0)))))


def _transpose() -> Graph:
    """A 3-D transpose plus a per-channel constant of five values (an embedded select)."""
    b = _Builder(x=((2, 3, 5), F32))
    t = b.node("Transpose", b.node("Relu", "x"), perm=(2, 0, 1))
    scale = b.const("scale", np.array([[[1.0]], [[-2.0]], [[0.5]], [[3.0]], [[0.25]]], np.float32))
    return b.graph(b.node("Mul", t, scale))


def _identity() -> Graph:
    x = Value("x", F32, (5,))
    return Graph.make([x], [], [], ["x"])


def _unused_input() -> Graph:
    b = _Builder(x=((4,), F32), y=((3,), F32))
    return b.graph(b.node("Relu", "x"))


GROUPS = {
    "elementwise": _elementwise,
    "scalar": _scalar,
    "softmax_rows": lambda: _softmax((13, 7), -1),
    "softmax_cols": lambda: _softmax((13, 7), 0),
    "softmax_1d": lambda: _softmax((11,), 0),
    "reduce_rows": lambda: _reduce((13, 7), -1),
    "reduce_cols": lambda: _reduce((13, 7), 0),
    "norm": _norm,
    "transpose": _transpose,
    "identity": _identity,
    "unused_input": _unused_input,
}


# -- building and checking ----------------------------------------------------------------------


def _inputs(text: str, seed: int = 0) -> list[np.ndarray]:
    placeholders, _ = fused.define(text)
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(p.shape_ints).astype(p.dtype) for p in placeholders]


def _check(text: str, cfg: Any) -> None:
    arrays = _inputs(text)
    s, tensors = fused.schedule(cfg, text, AVX2)
    dtype = np.dtype(tensors[-1].dtype)
    out = np.full(tensors[-1].shape_ints, np.nan if dtype.kind == "f" else 77, dtype)
    tuner.build(s, tensors)(*arrays, out)
    np.testing.assert_allclose(out, fused.reference(*arrays, graph=text), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_default_config_matches_the_interpreter(group: str) -> None:
    text = encode(GROUPS[group]())
    space = fused.config_space(text, AVX2)
    _check(text, space.validate(fused.default_config(text, AVX2)))


# Groups whose spaces have the most to choose from; two random configs each.
_SAMPLED = ["elementwise", "softmax_rows", "softmax_cols", "norm", "reduce_cols", "transpose"]


@pytest.mark.parametrize("group", _SAMPLED)
def test_random_configs_match_the_interpreter(group: str) -> None:
    text = encode(GROUPS[group]())
    space = fused.config_space(text, AVX2)
    default = space.validate(fused.default_config(text, AVX2))
    rng = np.random.default_rng(sorted(GROUPS).index(group))
    for cfg in space.sample_many(rng, 2, exclude={default.key}):
        _check(text, cfg)


@pytest.mark.parametrize("group", ["softmax_rows", "norm", "elementwise", "reduce_rows"])
def test_every_legal_config_lowers(group: str) -> None:
    text = encode(GROUPS[group]())
    for cfg in fused.config_space(text, AVX2).enumerate():
        tuner.lower(*fused.schedule(cfg, text, AVX2))


def test_reductions_sit_at_the_row_only_where_each_element_is_computed_once() -> None:
    rows = fused.default_config(encode(_softmax((64, 1000), -1)), AVX2)
    assert rows["reductions"] == "row" and not rows["flat"] and rows["vector"] == 4
    cols = fused.default_config(encode(_softmax((64, 1000), 0)), AVX2)
    assert cols["reductions"] == "root"


def test_small_constants_fold_into_the_expressions() -> None:
    text = encode(_transpose())
    s, tensors = fused.schedule(fused.default_config(text, AVX2), text, AVX2)
    nest = str(tuner.lower(s, tensors))
    assert "c0[" not in nest and "-2.0" in nest  # the select over the channel, inlined
    text = encode(_elementwise())
    s, tensors = fused.schedule(fused.default_config(text, AVX2), text, AVX2)
    nest = str(tuner.lower(s, tensors))
    assert "c0" not in nest and "0.5" in nest and "vectorize" in nest


def test_parallel_follows_the_threads_and_the_size() -> None:
    big = encode(_softmax((1024, 2048), -1))
    assert fused.default_config(big, AVX2.with_threads(2))["parallel"]
    assert not fused.default_config(encode(_softmax((13, 7), -1)), AVX2.with_threads(2))["parallel"]
    one = AVX2.with_threads(1)
    assert fused.config_space(big, one).choices()["parallel"] == [False]
    assert not fused.default_config(big, one)["parallel"]


def test_registered_operator() -> None:
    op = get_operator("fused")
    text = encode(_scalar())
    args = op.parse_args({"graph": text})
    target = AVX2
    assert [a.shape for a in op.make_inputs(args, target=target)] == [(1,)]
    x = np.array([0.5], np.float32)
    np.testing.assert_allclose(op.reference(x, **args), np.exp([1.5]).astype(np.float32), rtol=1e-6)
    assert op.reference(x, **args).shape == (1,)
    assert op.flops(args) == 2.0 and op.bytes_moved is not None and op.bytes_moved(args) == 8.0
    s, tensors = op.schedule(op.default_config(args, target), args, target)
    assert [t.name for t in tensors] == ["x0", "t1"]
    norm = op.parse_args({"graph": encode(_norm())})
    assert op.flops(norm) == 91.0 * 7 and op.bytes_moved(norm) == 2 * 91 * 4


def test_bad_graphs_are_operator_errors() -> None:
    op = get_operator("fused")
    with pytest.raises(OperatorError, match="fused argument graph: canonical graph text"):
        op.parse_args({"graph": "{"})
    b = _Builder(x=((20,), F32))
    big = b.graph(b.node("Add", "x", b.const("w", np.ones(20, np.float32))))
    with pytest.raises(OperatorError, match="embeds at most 16"):
        op.parse_args({"graph": encode(big)})
    b = _Builder(x=((3,), F32))
    odd = b.graph(b.node("NoSuchOp", "x", out=((3,), F32)))
    with pytest.raises(OperatorError, match="operator NoSuchOp is not supported"):
        op.parse_args({"graph": encode(odd)})


def test_standins_leave_the_registry_as_it_was() -> None:
    assert graph_ops._REGISTRY["Relu"] is not None  # installed by the fixture for this test
    with pytest.raises(GraphError):
        graph_ops.opdef("NoSuchOp")


# -- with the real operators (once their families are registered) ---------------------------


def _real_groups() -> dict[str, tuple[tuple[str, ...], Any]]:
    """Groups of operators that have no stand-in here; each runs once its family is merged."""

    def layer_norm() -> Graph:
        b = _Builder(x=((3, 5, 4), F32))
        g = b.const("g", np.float32([1, 2, 3, 4]))
        return b.graph(
            b.node("LayerNormalization", "x", g, b.const("b", np.float32([0, 1, 0, -1])))
        )

    def pool() -> Graph:
        b = _Builder(x=((1, 2, 7, 7), F32))
        attrs = {"kernel_shape": (3, 3), "pads": (1, 1, 1, 1), "strides": (2, 2)}
        return b.graph(b.node("Relu", b.node("MaxPool", "x", **attrs)))

    def mean() -> Graph:
        b = _Builder(x=((5, 6, 7), F32))
        m = b.node("ReduceMean", "x", b.const("axes", np.array([1], np.int64)))
        return b.graph(b.node("Sub", "x", m))

    def where() -> Graph:
        b = _Builder(x=((4, 9), F32), y=((9,), F32))
        return b.graph(b.node("Where", b.node("Greater", "x", "y"), "x", b.node("Neg", "y")))

    def gather_cast() -> Graph:
        b = _Builder(x=((6, 5), F32))
        g = b.node("Gather", "x", b.const("i", np.array([4, 0, 2], np.int64)), axis=0)
        return b.graph(b.node("Cast", b.node("Mul", g, b.const("k", np.float32(10))), to=7))

    return {
        "layer_norm": (("LayerNormalization",), layer_norm),
        "max_pool": (("MaxPool", "Relu"), pool),
        "reduce_mean": (("ReduceMean", "Sub"), mean),
        "where": (("Where", "Greater", "Neg"), where),
        "gather_cast": (("Gather", "Cast", "Mul"), gather_cast),
    }


@pytest.mark.parametrize("group", sorted(_real_groups()))
def test_groups_of_the_real_operators(group: str) -> None:
    ops, make = _real_groups()[group]
    missing = [op for op in ops if op not in graph_ops._REGISTRY]
    if missing:
        pytest.skip(f"{', '.join(missing)} not registered on this branch")
    text = encode(make())
    _check(text, fused.config_space(text, AVX2).validate(fused.default_config(text, AVX2)))


def test_a_reduction_along_rows_adds_whole_contiguous_rows() -> None:
    """A softmax over axis 0 (a channels-last global pool's shape): each step of the
    reduction loop adds one contiguous row, vectorized, into the accumulators, instead of
    walking down a column with the stride of a row."""
    text = encode(_softmax((64, 1000), 0))
    s, tensors = fused.schedule(fused.default_config(text, AVX2), text, AVX2)
    lines = str(tuner.lower(s, tensors)).splitlines()
    for stage in ("t0_max", "t0_sum"):
        update = next(i for i, ln in enumerate(lines) if f"{stage}[" in ln and "x0[" in ln)
        loops = [ln.strip() for ln in lines[:update] if ln.strip().startswith("for ")]
        assert loops[-2].startswith("for k0 ") and "vectorize" in loops[-1], lines
    _check(text, fused.default_config(text, AVX2))


def test_short_rows_go_flat_only_where_every_read_follows_the_flat_index() -> None:
    """Rows of 24 (three AVX2 vectors): a same-shape product runs as one flat loop; a product
    with a broadcast ``[1, 1, 1, 24]`` scale (squeeze-and-excitation, channels-last) would
    divide the flat index for every element, so it runs in rows."""
    same = _Builder(x=((1, 7, 5, 24), F32), y=((1, 7, 5, 24), F32))
    text = encode(same.graph(same.node("Mul", "x", "y")))
    assert fused.default_config(text, AVX2)["flat"]
    scaled = _Builder(x=((1, 7, 5, 24), F32), s=((1, 1, 1, 24), F32))
    text = encode(scaled.graph(scaled.node("Mul", "x", "s")))
    cfg = fused.default_config(text, AVX2)
    assert not cfg["flat"]
    _check(text, cfg)
