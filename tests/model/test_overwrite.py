"""Outputs computed into an input's buffer (``tuner.model.overwrite``,
``tuner.lower.access.updates_in_place``): a residual added in place."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

import tuner
from tuner import te
from tuner.codegen import build
from tuner.kernels.opkernel import _build
from tuner.lower.access import updates_in_place
from tuner.task import Task

from .conftest import make_model, ort_outputs


def _w(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return (rng.standard_normal(shape) * 0.3).astype(np.float32)


def _block(rng: np.random.Generator, extra: list[Any] | None = None, shortcut: str = "s") -> Any:
    """``y = conv_d(relu(conv_c(relu(conv_a(x))) + s))`` with the shortcut ``s = conv_b(x)``
    (or ``x`` itself), 13 x 11 pixels, 7 and 12 channels; ``extra`` nodes and outputs added."""
    weights = {
        "a": _w(rng, 7, 7, 3, 3), "b": _w(rng, 12, 7, 1, 1), "c": _w(rng, 12, 7, 1, 1),
        "cb": _w(rng, 12), "d": _w(rng, 5, 12, 3, 3),
    }  # fmt: skip
    if shortcut == "x":
        weights["c"], weights["cb"] = _w(rng, 7, 7, 1, 1), _w(rng, 7)
        weights["d"] = _w(rng, 5, 7, 3, 3)
    nodes = [
        helper.make_node("Conv", ["x", "a"], ["a0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a0"], ["r"]),
        helper.make_node("Conv", ["x", "b"], ["s"]),
        helper.make_node("Conv", ["r", "c", "cb"], ["c0"]),
        helper.make_node("Add", ["c0", shortcut], ["sum"]),
        helper.make_node("Relu", ["sum"], ["h"]),
        helper.make_node("Conv", ["h", "d"], ["y"], strides=[2, 2]),
    ]
    outputs: dict[str, Any] = {"y": ("float32", (1, 5, 6, 5))}
    for node, name, shape in extra or []:
        nodes.append(node)
        outputs[name] = ("float32", shape)
    return make_model(nodes, {"x": ("float32", (1, 7, 13, 11))}, outputs, weights)


def _check(model: Any, rng: np.random.Generator) -> tuner.Module:
    mod = tuner.compile_model(model)
    for _ in range(2):  # the second call runs over the same arena
        x = rng.standard_normal((1, 7, 13, 11)).astype(np.float32)
        got = mod.run({"x": x})
        for g, want in zip(got, ort_outputs(model, {"x": x}), strict=True):
            np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-4)
    return mod


def test_the_residual_kernel_writes_over_the_shortcut(rng) -> None:
    mod = _check(_block(rng), rng)
    plan = mod.plans[0]
    ((out, src),) = plan.overwrites.items()
    (spec,) = [s for s in plan.specs if s.output == out]
    assert "Add" in spec.ops and src in spec.inputs


def test_a_shortcut_read_later_keeps_its_buffer(rng) -> None:
    """The shortcut is also read after the add: writing over it would lose it."""
    extra = [(helper.make_node("Relu", ["s"], ["s_out"]), "s_out", (1, 12, 13, 11))]
    mod = _check(_block(rng, extra), rng)
    assert mod.plans[0].overwrites == {}


def test_the_callers_array_is_never_written(rng) -> None:
    """An identity shortcut is the model's input, the caller's array: a channels-last
    network writes over its own transposed copy, a matrix product over nothing."""
    mod = _check(_block(rng, shortcut="x"), rng)
    x = rng.standard_normal((1, 7, 13, 11)).astype(np.float32)
    kept = x.copy()
    mod.run({"x": x})
    np.testing.assert_array_equal(x, kept)
    weights = {"w": _w(rng, 6, 6), "v": _w(rng, 6, 3)}
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["p"]),
        helper.make_node("Add", ["p", "x"], ["q"]),
        helper.make_node("Relu", ["q"], ["h"]),
        helper.make_node("MatMul", ["h", "v"], ["y"]),
    ]
    model = make_model(nodes, {"x": ("float32", (4, 6))}, {"y": ("float32", (4, 3))}, weights)
    dense = tuner.compile_model(model)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    kept = x.copy()
    np.testing.assert_allclose(
        dense.run({"x": x})[0], ort_outputs(model, {"x": x})[0], rtol=1e-4, atol=1e-5
    )
    np.testing.assert_array_equal(x, kept)
    assert dense.plans[0].overwrites == {}


def _conv_task(**config: Any) -> Task:
    args = {
        "N": 1, "C": 5, "H": 9, "W": 7, "K": 13, "R": 3, "S": 3, "pad": 1, "stride": 1,
        "layout": "NHWC", "bias": True, "epilogue": "add@f;relu",
    }  # fmt: skip
    return Task.make("conv2d", args, tuner.Target.from_name("cpu", num_threads=2))


def _aliased(kernel: Any, arrays: list[np.ndarray]) -> np.ndarray:
    """Run ``kernel`` with its output in its residual's memory (the plan's way: the
    generated entry is called directly; the checked call refuses overlapping arrays)."""
    residual = arrays[-1].copy()
    flat = [a.reshape(-1) for a in arrays[:-1]]
    kernel._fn(*flat, residual.reshape(-1), residual.reshape(-1))
    return residual


@pytest.mark.parametrize("seed", range(8))
def test_random_schedules_that_prove_it_compute_the_same_in_place(seed: int) -> None:
    """Random legal schedules of a channels-last 3 x 3 conv2d with a residual, on extents
    no tile divides: where the nest proves the residual is read only at the element it
    writes, the kernel run over its residual equals NumPy; its image never qualifies."""
    task = _conv_task()
    rng = np.random.default_rng(seed)
    config = task.default_config() if seed == 0 else dict(task.space.sample(rng))
    kernel = _build(task, *task.schedule(config))
    func = kernel.lowered
    names = [b.name for b in func.args]
    assert not updates_in_place(func, names[0], names[-1])
    proved = updates_in_place(func, names[-2], names[-1])
    if seed == 0:
        assert proved  # the default's epilogue is one store at the residual's own index
    if not proved:
        return
    arrays = [
        rng.standard_normal([int(d) for d in b.shape]).astype(np.float32) for b in func.args[:-1]
    ]
    want = task.operator.reference(*arrays, **task.args)
    np.testing.assert_allclose(_aliased(kernel, arrays), want, rtol=1e-4, atol=1e-4)


def _nest(body: Any, shape: tuple[int, ...] = (6, 6)) -> Any:
    A = te.placeholder(shape, name="A")
    E = te.placeholder(shape, name="E")
    Y = te.compute(shape, lambda *i: body(A, E, *i), name="Y")
    return build(te.create_schedule(Y), [A, E, Y], target="cpu").lowered


@pytest.mark.parametrize(
    "body, proved",
    [
        (lambda A, E, i, j: A[i, j] + E[i, j], True),
        (lambda A, E, i, j: A[i, j] * E[i, j] + E[i, j], True),
        (lambda A, E, i, j: A[i, j] + E[j, i], False),  # reads an element another writes
        (lambda A, E, i, j: A[i, j] + E[i, (j + 1) % 6], False),
        (lambda A, E, i, j: A[i, j] * E[i, j] + E[0, 0], False),
    ],
)
def test_the_proof_asks_for_the_written_element_only(body: Any, proved: bool) -> None:
    assert updates_in_place(_nest(body), "E", "Y") is proved


def test_a_sum_into_the_output_is_not_proved() -> None:
    """A reduction written straight into its output reads it back: no overwrite."""
    A = te.placeholder((5, 7), name="A")
    E = te.placeholder((5,), name="E")
    k = te.reduce_axis(7, name="k")
    S = te.compute((5,), lambda i: te.sum(A[i, k] * E[i], axis=k), name="Y")
    func = build(te.create_schedule(S), [A, E, S], target="cpu").lowered
    assert not updates_in_place(func, "E", "Y")


def test_a_cached_kernel_answers_from_its_index_entry_without_lowering_again() -> None:
    """The proof is kept with the kernel in the cache's index: a kernel restored from its
    entry says which input its output may take without its loop nest (lowering it again
    took a third of a cached compile of ResNet-50); an entry written before it was kept
    proves it on the nest, lowered on demand."""
    from tuner.codegen.backend import get_backend

    task = _conv_task()
    kernel = build(*task.schedule(task.default_config()), target=task.target)  # (not indexed)
    backend = get_backend("cpu")
    entry = backend.describe(kernel)
    assert entry is not None and entry["in_place"] == [len(kernel.args) - 2]

    def refuse() -> Any:
        raise AssertionError("lowered again")

    restored = backend.restore(entry, kernel.target, refuse)
    assert restored is not None
    assert restored.overwrites(len(kernel.args) - 2) and not restored.overwrites(0)
    old = {k: v for k, v in entry.items() if k != "in_place"}
    again = backend.restore(old, kernel.target, lambda: kernel.lowered)
    assert again is not None and again.overwrites(len(kernel.args) - 2)
