"""A product with a constant weight over many rows runs as a channels-last 1 x 1 convolution
(``templates._dense``): its weight packed once, its rows read in place; few rows, the
shape-generic mode and a target without vectors keep dense."""

from __future__ import annotations

import numpy as np
import pytest

import tuner
from tuner.target import Target

from .conftest import helper, make_model, ort_outputs

#: 197 rows (a prime: no tile of pixels divides it), 40 -> 72 features: a tile the
#: convolution's default fills registers with on AVX2, AVX-512 and 4-lane targets alike.
ROWS, IN, OUT = 197, 40, 72


def _gemm(rng: np.random.Generator, rows: int) -> object:
    """Gemm(x, W^T) * 0.5 + 2 * b, then relu: transB, alpha and beta folded at compile time."""
    w = rng.standard_normal((OUT, IN)).astype(np.float32)
    b = rng.standard_normal(OUT).astype(np.float32)
    nodes = [
        helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1, alpha=0.5, beta=2.0),
        helper.make_node("Relu", ["g"], ["y"]),
    ]
    return make_model(
        nodes, {"x": ("float32", [rows, IN])}, {"y": ("float32", [rows, OUT])}, {"w": w, "b": b}
    )


def _matmul_residual(rng: np.random.Generator, rows: int | str) -> object:
    """A transformer's MLP half: MatMul by a [K, N] weight, bias, GELU-free Add of a residual."""
    w = rng.standard_normal((IN, OUT)).astype(np.float32)
    b = rng.standard_normal(OUT).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Add", ["a", "r"], ["y"]),
    ]
    inputs = {"x": ("float32", [1, rows, IN]), "r": ("float32", [1, rows, OUT])}
    return make_model(nodes, inputs, {"y": ("float32", [1, rows, OUT])}, {"w": w, "b": b})


def _only_product(mod: tuner.Module) -> tuple[str, dict]:
    (spec,) = [s for s in mod.plans[0].specs if s.task.op_name in ("dense", "conv2d")]
    return spec.task.op_name, spec.task.workload.as_dict()


def test_a_gemm_over_many_rows_is_a_pointwise_convolution_with_its_bias_and_relu(rng):
    model = _gemm(rng, ROWS)
    x = rng.standard_normal((ROWS, IN)).astype(np.float32)
    mod = tuner.compile_model(model)
    op, args = _only_product(mod)
    assert op == "conv2d"
    assert (args["H"], args["W"], args["C"], args["K"], args["R"]) == (1, ROWS, IN, OUT, 1)
    assert (args["layout"], args["weights"], args["bias"]) == ("NHWC", "blocked", True)
    assert args["epilogue"] == "relu"
    np.testing.assert_allclose(mod.run({"x": x})[0], ort_outputs(model, {"x": x})[0], rtol=1e-4)


def test_a_matmul_with_bias_and_residual_takes_the_bias_as_the_convolutions_own(rng):
    model = _matmul_residual(rng, ROWS)
    feeds = {
        "x": rng.standard_normal((1, ROWS, IN)).astype(np.float32),
        "r": rng.standard_normal((1, ROWS, OUT)).astype(np.float32),
    }
    mod = tuner.compile_model(model)
    op, args = _only_product(mod)
    assert op == "conv2d" and args["bias"] is True and args["epilogue"] == "add@f"
    np.testing.assert_allclose(mod.run(feeds)[0], ort_outputs(model, feeds)[0], rtol=1e-4)


@pytest.mark.parametrize("rows", [1, 8, 9, 49])
def test_every_row_count_matches_onnxruntime(rng, rows):
    """Up to 8 rows dense's matrix-vector kernel; from 9, whichever the tile rule picks."""
    model = _gemm(rng, rows)
    x = rng.standard_normal((rows, IN)).astype(np.float32)
    mod = tuner.compile_model(model)
    op, _ = _only_product(mod)
    if rows <= 8:
        assert op == "dense"
    np.testing.assert_allclose(mod.run({"x": x})[0], ort_outputs(model, {"x": x})[0], rtol=1e-4)


def test_a_target_without_vectors_keeps_dense(rng):
    model = _gemm(rng, ROWS)
    x = rng.standard_normal((ROWS, IN)).astype(np.float32)
    scalar = Target.make("cpu", vector_lanes=1, vector_registers=16, threads=1)
    mod = tuner.compile_model(model, target=scalar)
    assert _only_product(mod)[0] == "dense"
    np.testing.assert_allclose(mod.run({"x": x})[0], ort_outputs(model, {"x": x})[0], rtol=1e-4)


def test_the_shape_generic_mode_keeps_dense_for_every_row_count(rng):
    model = _matmul_residual(rng, "S")
    mod = tuner.compile_model(model, dynamic="generic", bounds={"S": 256})
    for rows in (3, ROWS):
        feeds = {
            "x": rng.standard_normal((1, rows, IN)).astype(np.float32),
            "r": rng.standard_normal((1, rows, OUT)).astype(np.float32),
        }
        np.testing.assert_allclose(mod.run(feeds)[0], ort_outputs(model, feeds)[0], rtol=1e-4)
        assert all(s.task.op_name != "conv2d" for p in mod.plans for s in p.specs)
