"""Winograd convolutions in a model: which 3 x 3 convolutions the compiler gives
``conv2d_winograd``, with their bias, relu and residual add fused, against onnxruntime."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import helper

import tuner
from search_spaces.conv2d import Conv2d
from search_spaces.winograd import pays
from tuner.target import Target

from .conftest import make_model, ort_outputs

AVX512 = Target.make(
    "cpu", fingerprint="synthetic-avx512", vector_bits=512, vector_lanes=16, vector_registers=32
)


def _w(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


def _block(rng: np.random.Generator, batch: int, c: int, hw: tuple[int, int]) -> Any:
    """conv 3 x 3 + bias + relu, conv 3 x 3 + bias, + the block's input, relu; then a strided
    3 x 3 (never Winograd) and a 3 x 3 without padding (Winograd at 64 channels)."""
    h, w = hw
    weights = {
        "w1": _w(rng, c, c, 3, 3), "b1": _w(rng, c, 1)[:, 0],
        "w2": _w(rng, c, c, 3, 3), "b2": _w(rng, c, 1)[:, 0],
        "w3": _w(rng, c, c, 3, 3), "w4": _w(rng, c, c, 3, 3),
    }  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "x"], ["s"]),
        helper.make_node("Relu", ["s"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3"], ["c3"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Conv", ["c3", "w4"], ["y"]),
    ]
    oh, ow = (h + 1) // 2 - 2, (w + 1) // 2 - 2
    return make_model(
        nodes, {"x": ("float32", (batch, c, h, w))}, {"y": ("float32", (batch, c, oh, ow))}, weights
    )


def test_a_residual_block_of_winograd_convolutions_matches_onnxruntime(rng):
    """Odd extents (partial tiles), a batch of two, the epilogue's residual add."""
    model = _block(rng, 2, 64, (29, 27))
    mod = tuner.compile_model(model, target=AVX512)
    x = rng.standard_normal((2, 64, 29, 27)).astype(np.float32)
    (got,) = mod.run({"x": x})
    (want,) = ort_outputs(model, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    keys = [s.task.key for s in mod.plans[0].specs if s.task is not None]
    wino = [k for k in keys if k.startswith("conv2d_winograd(")]
    assert len(wino) == 3, keys  # not the strided one
    assert "epilogue=relu," in wino[0] and "epilogue=add@f;relu," in wino[1]
    assert "pad=0" in wino[2] and "H=15" in wino[2]


def test_which_convolutions_pay():
    """Winograd where a row of tiles reuses the transformed weight enough; never strided."""
    big = Conv2d(N=1, C=64, H=56, W=56, K=64, R=3, S=3, pad=1, layout="NHWC", weights="HWIO")
    assert pays(big, AVX512)
    assert not pays(Conv2d(**{**big.__dict__, "stride": 2}), AVX512)
    assert not pays(Conv2d(**{**big.__dict__, "C": 3}), AVX512)  # a first layer
    assert not pays(Conv2d(**{**big.__dict__, "R": 1, "S": 1, "pad": 0}), AVX512)
