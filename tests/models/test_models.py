"""Whole models through ``tuner.compile_model``, compared with onnxruntime.

The builder graphs (``builders.py``) are small and run by default; the shipped
models (``data/``, see README.md) build tens of kernels each and are ``slow``.
Every comparison is at rtol 1e-3 / atol 1e-4 on seeded random inputs, outputs
in the graph's order with onnxruntime's shapes and dtypes. Symbolic batches
are bound both ways the API allows: ``shapes=`` at compile time, or by the
first call of ``Module.run``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import tuner

from .builders import BUILDERS, random_feeds

# The module skips until the compiler's entry point exists (getattr keeps mypy quiet meanwhile).
_compile = getattr(tuner, "compile_model", None)
if _compile is None:
    pytest.skip("tuner.compile_model is not there yet", allow_module_level=True)
compile_model: Callable[..., Any] = _compile

DATA = Path(__file__).parent / "data"
RTOL, ATOL = 1e-3, 1e-4


def reference(model: onnx.ModelProto | Path, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    session = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    return list(session.run(None, dict(feeds)))


def assert_matches(
    module: Any, model: onnx.ModelProto | Path, feeds: Mapping[str, np.ndarray]
) -> None:
    """``module.run(feeds)`` equals onnxruntime's outputs: count, order, shape, dtype and values."""
    want = reference(model, feeds)
    got = module.run(dict(feeds))
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert isinstance(g, np.ndarray), f"output {i} is a {type(g).__name__}"
        assert g.shape == w.shape, f"output {i}: shape {g.shape}, onnxruntime {w.shape}"
        assert g.dtype == w.dtype, f"output {i}: dtype {g.dtype}, onnxruntime {w.dtype}"
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=f"output {i}")


@pytest.mark.parametrize("name", sorted(set(BUILDERS) - {"symbolic_batch"}))
def test_builder_model(name: str) -> None:
    model = BUILDERS[name]()
    module = compile_model(model)
    assert_matches(module, model, random_feeds(model, seed=1))
    # a second call on new data reuses the module
    assert_matches(module, model, random_feeds(model, seed=2))


def test_symbolic_batch_bound_by_shapes() -> None:
    model = BUILDERS["symbolic_batch"]()
    module = compile_model(model, shapes={"x": (3, 16)})
    assert_matches(module, model, random_feeds(model, seed=1, dims={"N": 3}))


def test_symbolic_batch_bound_by_the_first_call() -> None:
    model = BUILDERS["symbolic_batch"]()
    module = compile_model(model)
    assert_matches(module, model, random_feeds(model, seed=1, dims={"N": 5}))
    assert_matches(module, model, random_feeds(model, seed=2, dims={"N": 5}))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18_small", "mobilenet_v2_small"])
def test_shipped_cnn(name: str) -> None:
    path = DATA / f"{name}.onnx"
    module = compile_model(path)  # a path, not a ModelProto
    model = onnx.load(path)
    assert_matches(module, model, random_feeds(model, seed=1))


@pytest.mark.slow
def test_shipped_encoder_batch_bound_by_shapes() -> None:
    path = DATA / "encoder_small.onnx"
    module = compile_model(str(path), shapes={"input": (2, 16, 32)})
    assert_matches(module, path, random_feeds(onnx.load(path), seed=1, dims={"batch": 2}))


@pytest.mark.slow
def test_shipped_encoder_batch_bound_by_the_first_call() -> None:
    path = DATA / "encoder_small.onnx"
    model = onnx.load(path)
    module = compile_model(model)
    assert_matches(module, model, random_feeds(model, seed=1, dims={"batch": 3}))
    assert_matches(module, model, random_feeds(model, seed=2, dims={"batch": 3}))


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        ({"batch": "x"}, "shapes gives symbol 'batch' 'x'; a symbol takes one value"),
        ({"input": 5}, "shapes gives input 'input' 5; an input takes its whole shape"),
        ({"nothing": 2}, "shapes names 'nothing', which is neither a graph input nor a symbol"),
    ],
)
def test_a_model_file_with_wrong_shapes_is_one_clear_line(
    tmp_path: Path, shapes: dict, message: str
) -> None:
    """A mistake in ``shapes=`` on a model file (whose compile is cached) is one GraphError line."""
    model = BUILDERS["symbolic_batch"]()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    model.graph.input[0].name = "input"
    for node in model.graph.node:
        node.input[:] = ["input" if i == "x" else i for i in node.input]
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    with pytest.raises(tuner.graph.GraphError) as err:
        compile_model(str(path), shapes=shapes)
    assert message in str(err.value) and "\n" not in str(err.value)
