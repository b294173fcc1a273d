"""conv2d_winograd: F(2 x 2, 3 x 3) against the direct convolution's reference, on random
legal schedules and awkward shapes (odd and prime extents, one pixel, one channel)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tuner
from search_spaces import OperatorError, get_operator
from search_spaces.winograd import reference, transform_weights

from .targets import AVX2, AVX512, SYNTHETIC

OP = get_operator("conv2d_winograd")
CONV = get_operator("conv2d")


def _case(args: dict[str, Any], seed: int) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """Inputs (X, U, B, epilogue inputs) from a ``[K, C, 3, 3]`` weight, and the direct
    convolution of the same image and weight (conv2d's reference, float64 sums)."""
    rng = np.random.default_rng(seed)
    n, c, h, w, k = (args[x] for x in ("N", "C", "H", "W", "K"))
    x = rng.standard_normal((n, h, w, c)).astype(np.float32)
    wt = (rng.standard_normal((k, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    b = rng.standard_normal(k).astype(np.float32)
    conv_args = CONV.parse_args(
        {
            **{a: args[a] for a in ("N", "C", "H", "W", "K", "pad", "activation", "epilogue")},
            "R": 3,
            "S": 3,
            "layout": "NHWC",
            "bias": args["bias"],
        }
    )
    extras = [rng.standard_normal(e.shape_ints).astype(np.float32) for e in _extras(args)]
    want = CONV.reference(x, wt, *([b] if args["bias"] else []), *extras, **conv_args)
    return [x, transform_weights(wt), *([b] if args["bias"] else []), *extras], wt, want


def _extras(args: dict[str, Any]) -> list[Any]:
    _, tensors = OP.schedule(OP.default_config(args, AVX2), args, AVX2)
    return [t for t in tensors if t.name.startswith("E")]


def _run(
    args: dict[str, Any], cfg: dict[str, Any], target: Any, ins: list[np.ndarray]
) -> np.ndarray:
    s, tensors = OP.schedule(cfg, args, target)
    out = np.full(tensors[-1].shape_ints, np.nan, np.float32)
    tuner.build(s, tensors)(*ins, out)
    return out


def test_the_reference_is_the_convolution() -> None:
    """The NumPy Winograd reference on transformed weights equals the direct convolution."""
    args = OP.parse_args(
        {"N": 2, "C": 5, "H": 9, "W": 6, "K": 7, "bias": True, "activation": "relu"}
    )
    ins, _, want = _case(args, 0)
    got = OP.reference(*ins, **args)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "target",
    [AVX2, AVX512, *(pytest.param(t, marks=pytest.mark.slow) for t in SYNTHETIC[2:])],
    ids=lambda t: t.fingerprint,
)
@pytest.mark.parametrize(
    "shape",
    [
        (1, 1, 1, 1, 1, 1),
        (1, 3, 5, 7, 5, 1),
        (2, 16, 7, 7, 24, 1),
        (1, 17, 13, 11, 19, 0),
        (1, 64, 14, 14, 64, 1),
        (1, 8, 49, 3, 16, 1),
    ],
)
def test_default_schedule_on_awkward_shapes(target: Any, shape: tuple[int, ...]) -> None:
    n, c, h, w, k, pad = shape
    args = OP.parse_args({"N": n, "C": c, "H": h, "W": w, "K": k, "pad": pad, "bias": True,
                          "activation": "relu"})  # fmt: skip
    ins, _, want = _case(args, 1)
    got = _run(args, OP.default_config(args, target), target, ins)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 2),
    c=st.integers(1, 40),
    h=st.integers(1, 13),
    w=st.integers(1, 13),
    k=st.integers(1, 40),
    pad=st.integers(0, 1),
    epilogue=st.sampled_from(["none", "add@f", "add@f;relu"]),
    seed=st.integers(0, 10**6),
)
def test_random_legal_schedules(
    n: int, c: int, h: int, w: int, k: int, pad: int, epilogue: str, seed: int
) -> None:
    """Any config of the space, with a residual input in the epilogue, is the convolution."""
    if pad == 0 and min(h, w) < 3:
        h, w = max(h, 3), max(w, 3)
    args = OP.parse_args({"N": n, "C": c, "H": h, "W": w, "K": k, "pad": pad,
                          "bias": seed % 2 == 0, "epilogue": epilogue})  # fmt: skip
    space = OP.space(args, AVX512)
    cfg = dict(space.sample(np.random.default_rng(seed)).to_json())
    ins, _, want = _case(args, seed)
    got = _run(args, cfg, AVX512, ins)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_the_transforms_are_additions_and_the_products_vectors() -> None:
    """The transforms' 16 values per tile are additions of the patch (no multiply by a
    constant of the transform matrices survives), and the products run on whole vectors."""
    args = OP.parse_args({"C": 32, "H": 14, "W": 14, "K": 64, "bias": True, "activation": "relu"})
    s, tensors = OP.schedule(OP.default_config(args, AVX512), args, AVX512)
    source = tuner.build(s, tensors).source
    # In vectors (``vstore16(V, ...)``, the default source) or as scalar stores to V.
    vector = [line for line in source.splitlines() if re.match(r"\s+vstore16\(V\b", line)]
    assert vector and not any("vmul" in line for line in vector), vector[:2]
    assert re.search(r"vstore16\(M_local, .*vadd16\(vload16\(M_local, .*vmul16\(", source)
    scalar = tuner.build(s, tensors, options=tuner.BuildOptions(simd=False)).source
    transforms = [line for line in scalar.splitlines() if re.match(r"\s+V_\w+\[", line)]
    values = [re.sub(r"\[np\.uint64\(.*?\)\]", "[]", line.split("=", 1)[1]) for line in transforms]
    assert values and not any("*" in v for v in values), values[:2]
    assert re.search(r"M_local\[.*\] \+= \(V\[.*\] \* U\[", scalar)


def test_refusals() -> None:
    with pytest.raises(OperatorError, match="padding 0 or 1"):
        OP.parse_args({"C": 4, "H": 8, "W": 8, "K": 4, "pad": 2})
    with pytest.raises(OperatorError, match="does not fit"):
        OP.parse_args({"C": 4, "H": 2, "W": 8, "K": 4, "pad": 0})


def test_weights_transform_keeps_float64_precision() -> None:
    """U is G g G^T computed in float64: exact for weights that are sums of halves."""
    w = np.arange(2 * 3 * 9, dtype=np.float32).reshape(2, 3, 3, 3) / 4
    u = transform_weights(w)
    assert u.shape == (4, 4, 3, 2) and u.dtype == np.float32
    g = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
    np.testing.assert_array_equal(u[:, :, 1, 0], (g @ w[0, 1].astype(np.float64) @ g.T))
    p = OP.parse_args({"C": 3, "H": 4, "W": 4, "K": 2, "pad": 1})
    assert reference is not None and p["pad"] == 1
