"""Concatenations written in place by their producers (``tuner.model.inplace``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

import tuner
from tuner import te
from tuner.codegen import build

from .conftest import make_model, ort_outputs


def _w(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return (rng.standard_normal(shape) * 0.3).astype(np.float32)


def _inception(rng: np.random.Generator, batch: int, extra: list[Any] | None = None) -> Any:
    """Three branches of 7, 5 and 6 channels (a 1 x 1 conv, a 3 x 3 conv with a relu, a max
    pool), concatenated, then a strided 3 x 3 conv; ``extra`` nodes and outputs added."""
    weights = {"a": _w(rng, 7, 6, 1, 1), "b": _w(rng, 5, 6, 3, 3), "c": _w(rng, 4, 18, 3, 3)}
    nodes = [
        helper.make_node("Conv", ["x", "a"], ["p"]),
        helper.make_node("Conv", ["x", "b"], ["q0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["q0"], ["q"]),
        helper.make_node("MaxPool", ["x"], ["m"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["p", "q", "m"], ["cat"], axis=1),
        helper.make_node("Conv", ["cat", "c"], ["y"], strides=[2, 2]),
    ]
    outputs: dict[str, Any] = {"y": ("float32", (batch, 4, 6, 5))}
    for node, name, shape in extra or []:
        nodes.append(node)
        outputs[name] = ("float32", shape)
    return make_model(nodes, {"x": ("float32", (batch, 6, 13, 11))}, outputs, weights)


def _check(model: Any, batch: int, rng: np.random.Generator) -> tuner.Module:
    mod = tuner.compile_model(model)
    for _ in range(2):  # the second call runs over the same arena
        x = rng.standard_normal((batch, 6, 13, 11)).astype(np.float32)
        got = mod.run({"x": x})
        for g, want in zip(got, ort_outputs(model, {"x": x}), strict=True):
            np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-4)
    return mod


@pytest.mark.parametrize("batch", [1, 2])
def test_each_branch_writes_its_slice_of_the_concatenation(batch: int, rng) -> None:
    mod = _check(_inception(rng, batch), batch, rng)
    plan = mod.plans[0]
    assert [s.ops for s in plan.specs].count("Concat") == 0
    (place,) = plan.in_place
    assert place.pitch == 18 and sorted(place.parts.values()) == [0, 7, 12]


def test_a_branch_read_elsewhere_too_keeps_the_copy(rng) -> None:
    """The 1 x 1 branch is also a graph output: it needs a buffer of its own."""
    extra = [(helper.make_node("Identity", ["p"], ["p_out"]), "p_out", (1, 7, 13, 11))]
    mod = _check(_inception(rng, 1, extra), 1, rng)
    assert not mod.plans[0].in_place
    assert "Concat" in [s.ops for s in mod.plans[0].specs]


def _dense_pair(rng: np.random.Generator, out: str) -> Any:
    """Two matmuls of 3 and 5 columns concatenated along the last axis; the concatenation is
    the graph output (``out="cat"``) or read by a third matmul (``out="y"``)."""
    weights = {"a": _w(rng, 6, 3), "b": _w(rng, 6, 5), "c": _w(rng, 8, 2)}
    nodes = [
        helper.make_node("MatMul", ["x", "a"], ["p"]),
        helper.make_node("MatMul", ["x", "b"], ["q"]),
        helper.make_node("Concat", ["p", "q"], ["cat"], axis=-1),
    ]
    if out == "y":
        nodes.append(helper.make_node("MatMul", ["cat", "c"], ["y"]))
    shape = (4, 2) if out == "y" else (4, 8)
    return make_model(nodes, {"x": ("float32", (4, 6))}, {out: ("float32", shape)}, weights)


@pytest.mark.parametrize("out", ["y", "cat"])
def test_matmuls_write_their_columns_unless_the_concatenation_is_a_graph_output(
    out: str, rng
) -> None:
    """A graph output is allocated per call: its producers keep buffers of their own."""
    model = _dense_pair(rng, out)
    mod = tuner.compile_model(model)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    np.testing.assert_allclose(mod.run({"x": x})[0], ort_outputs(model, {"x": x})[0], atol=1e-5)
    assert len(mod.plans[0].in_place) == (out == "y")


def test_a_value_concatenated_with_itself_keeps_the_copy(rng) -> None:
    weights = {"a": _w(rng, 4, 3, 1, 1), "c": _w(rng, 2, 8, 1, 1)}
    nodes = [
        helper.make_node("Conv", ["x", "a"], ["p"]),
        helper.make_node("Concat", ["p", "p"], ["cat"], axis=1),
        helper.make_node("Conv", ["cat", "c"], ["y"]),
    ]
    model = make_model(
        nodes, {"x": ("float32", (1, 3, 5, 5))}, {"y": ("float32", (1, 2, 5, 5))}, weights
    )
    mod = tuner.compile_model(model)
    x = rng.standard_normal((1, 3, 5, 5)).astype(np.float32)
    np.testing.assert_allclose(mod.run({"x": x})[0], ort_outputs(model, {"x": x})[0], atol=1e-5)
    assert not mod.plans[0].in_place


def test_a_pitched_output_writes_its_columns_and_nothing_between_rows() -> None:
    """Rows ``pitch`` apart: the kernel writes the first ``shape[-1]`` of each, no others."""
    A = te.placeholder((3, 5), "float32", name="A")
    B = te.compute((3, 5), lambda i, j: A[i, j] * 2.0, name="B")
    s = te.create_schedule(B)
    s[B].vectorize(s[B].op.axis[1])
    kern = build(s, [A, B], out_pitch=8)
    a = np.arange(15, dtype=np.float32).reshape(3, 5)
    out = np.full(3 * 8, np.nan, np.float32)
    kern._fn(a.reshape(-1), out[2:])  # the slice from column 2 on
    rows = out.reshape(3, 8)
    np.testing.assert_array_equal(rows[:, 2:7], a * 2)
    assert np.isnan(rows[:, :2]).all() and np.isnan(rows[:, 7:]).all()
    with pytest.raises(ValueError, match="pitch"):
        build(s, [A, B], out_pitch=4)
