"""The shipped test models and the builder graphs are what README.md and their docstrings say.

These run without the compiler: they check the files themselves (size, inputs,
opset, operators, onnxruntime runs them), that each builder graph computes what
its docstring claims (against NumPy), and, where torch is installed, that the
README's commands still make models that agree with the shipped ones.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from .builders import BUILDERS, random_feeds

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parents[2]

#: name -> (input shape with the symbolic dim as str, output shape, operators it must contain)
SHIPPED = {
    "resnet18_small": (
        (1, 3, 32, 32),
        (1, 10),
        {"Conv", "Relu", "Add", "MaxPool", "GlobalAveragePool", "Gemm"},
    ),
    "mobilenet_v2_small": (
        (1, 3, 32, 32),
        (1, 10),
        {"Conv", "Clip", "Add", "GlobalAveragePool", "Gemm"},
    ),
    "encoder_small": (
        ("batch", 16, 32),
        ("batch", 16, 32),
        {"MatMul", "Softmax", "LayerNormalization", "Erf", "Reshape", "Transpose"},
    ),
    "encoder_small_dynamic": (
        ("batch", "seq", 32),
        ("batch", "seq", 32),
        {"Shape", "Gather", "Concat", "MatMul", "Softmax", "LayerNormalization", "Reshape"},
    ),
}


def _dims(value: onnx.ValueInfoProto) -> tuple[int | str, ...]:
    return tuple(
        d.dim_param if d.dim_param else d.dim_value for d in value.type.tensor_type.shape.dim
    )


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return list(session.run(None, feeds))


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_model(name: str) -> None:
    path = DATA / f"{name}.onnx"
    assert path.stat().st_size < 1_000_000
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    in_shape, out_shape, ops = SHIPPED[name]
    assert [_dims(v) for v in model.graph.input] == [in_shape]
    assert [_dims(v) for v in model.graph.output] == [out_shape]
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    assert ops <= {n.op_type for n in model.graph.node}
    for batch, seq in ((1, 16), (3, 16), (2, 5)) if "batch" in in_shape else ((1, 16),):
        if seq != 16 and "seq" not in in_shape:
            continue
        dims = {"batch": batch, "seq": seq}
        (y,) = _run(model, random_feeds(model, seed=1, dims=dims))
        assert y.shape == tuple(dims.get(d, d) if isinstance(d, str) else d for d in out_shape)
        assert np.all(np.isfinite(y)) and 0.01 < float(np.std(y)) < 100  # activations of order one


def _softmax(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    e = np.exp(x - x.max(axis=axes, keepdims=True))
    return e / e.sum(axis=axes, keepdims=True)


def test_builders_are_valid_and_run() -> None:
    for name, build in BUILDERS.items():
        model = build()
        outputs = _run(model, random_feeds(model, dims={"N": 2}))
        assert all(np.all(np.isfinite(y)) for y in outputs), name
        assert model.ByteSize() < 20_000, name


def test_opset11_softmax_runs_over_the_flattened_trailing_dims() -> None:
    model = BUILDERS["opset11"]()
    feeds = random_feeds(model, seed=3)
    (y,) = _run(model, feeds)
    np.testing.assert_allclose(
        y, _softmax(np.clip(feeds["x"], -1.5, 2.0), (1, 2)), rtol=1e-5, atol=1e-7
    )
    assert not np.allclose(y, _softmax(np.clip(feeds["x"], -1.5, 2.0), (1,)))


def test_attention_mask_blocks_the_masked_keys() -> None:
    model = BUILDERS["attention"]()
    feeds = random_feeds(model, seed=4)
    (y,) = _run(model, feeds)
    # changing x at a position no query attends to changes only that position's own row
    mask = np.ones((1, 1, 8, 8), dtype=bool)
    mask[..., 5] = False
    x2 = feeds["x"].copy()
    x2[0, 5] += 1.0
    (a,) = _run(model, {"x": feeds["x"], "mask": mask})
    (b,) = _run(model, {"x": x2, "mask": mask})
    rows = [i for i in range(8) if i != 5]
    np.testing.assert_allclose(a[0, rows], b[0, rows], rtol=1e-5, atol=1e-6)
    assert y.shape == (1, 8, 16)


def test_sequence_mean_builder_averages_over_the_sequence() -> None:
    model = BUILDERS["sequence_mean"]()
    feeds = random_feeds(model, seed=3, dims={"N": 2, "S": 5})
    (y,) = _run(model, feeds)
    w = numpy_helper.to_array(model.graph.initializer[0])
    np.testing.assert_allclose(y, np.maximum(feeds["x"] @ w, 0).mean(axis=1), rtol=1e-5, atol=1e-6)


def test_symbolic_batch_builder_takes_any_batch() -> None:
    model = BUILDERS["symbolic_batch"]()
    assert _dims(model.graph.input[0]) == ("N", 16)
    for n in (1, 4):
        (y,) = _run(model, random_feeds(model, dims={"N": n}))
        assert y.shape == (n, 2, 4)
        np.testing.assert_allclose(y.sum(axis=-1), 1.0, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "flags"),
    [
        ("resnet18", ["--small"]),
        ("mobilenet_v2", ["--small"]),
        ("encoder", ["--small", "--dynamic-batch"]),
        ("encoder", ["--small", "--dynamic-batch", "--dynamic-seq"]),
    ],
)
def test_readme_command_remakes_the_shipped_model(
    name: str, flags: list[str], tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    out = tmp_path / f"{name}.onnx"
    subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "models.py"), name, str(out), *flags],
        check=True,
        cwd=ROOT,
        capture_output=True,
    )
    suffix = "_dynamic" if "--dynamic-seq" in flags else ""
    shipped = onnx.load(DATA / f"{name}_small{suffix}.onnx")
    remade = onnx.load(out)
    feeds = random_feeds(shipped, seed=5, dims={"batch": 2, "seq": 16})
    # Batch-norm statistics are calibrated by PyTorch on this machine's CPU: its sums' order
    # (vector width) moves the last bits, up to 3e-5 at outputs of order 1 on AVX-512.
    for a, b in zip(_run(shipped, feeds), _run(remade, feeds), strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-4 * float(np.abs(b).max()))
