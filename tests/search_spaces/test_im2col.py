"""im2col: every window of the padded input, for random schedules and awkward shapes."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tuner
from search_spaces import OperatorError, get_operator

from .targets import AVX2

OP = get_operator("im2col")


def _run(args: dict[str, Any], cfg: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    s, tensors = OP.schedule(cfg, args, AVX2)
    (x,) = OP.make_inputs(args, seed=2, target=AVX2)
    out = np.full(tensors[-1].shape_ints, 12345, np.float32)
    tuner.build(s, tensors)(x, out)
    return x, out


def test_the_windows_are_the_matrix_a_convolution_multiplies() -> None:
    """W[K, C*R*S] @ im2col(X)[C*R*S, OH*OW] is the convolution (NumPy's, from conv2d)."""
    args = OP.parse_args({"C": 5, "H": 9, "W": 7, "R": 3, "S": 2, "stride": 2, "pad": 1})
    x, cols = _run(args, OP.default_config(args, AVX2))
    conv = get_operator("conv2d")
    cargs = conv.parse_args({**{k: v for k, v in args.items()}, "K": 4})
    w = np.random.default_rng(0).standard_normal((4, 5, 3, 2)).astype(np.float32)
    want = conv.reference(x, w, **cargs)
    got = w.reshape(4, -1) @ cols.reshape(30, -1)
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-5, atol=1e-5)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 2),
    c=st.integers(1, 5),
    h=st.integers(1, 13),
    w=st.integers(1, 13),
    r=st.integers(1, 3),
    s=st.integers(1, 3),
    stride=st.integers(1, 3),
    pad=st.integers(0, 2),
    dilation=st.integers(1, 2),
    seed=st.integers(0, 10**6),
)
def test_random_schedules_copy_every_window(
    n: int, c: int, h: int, w: int, r: int, s: int, stride: int, pad: int, dilation: int, seed: int
) -> None:
    raw = dict(N=n, C=c, H=h, W=w, R=r, S=s, stride=stride, pad=pad, dilation=dilation)
    try:
        args = OP.parse_args(raw)
    except OperatorError:
        assume(False)
        return
    cfg = OP.space(args, AVX2).sample(np.random.default_rng(seed))
    x, out = _run(args, cfg)
    np.testing.assert_array_equal(out, OP.reference(x, **args))
