from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tuner
from search_spaces import OperatorError, get_operator
from search_spaces import conv2d as cv
from search_spaces import depthwise_conv2d as dw
from search_spaces.conv2d import Conv2d

from .targets import AVX2


def depthwise(n: int, c: int, h: int, w: int, r: int, s: int, **kw: int) -> Conv2d:
    return Conv2d(n, c, h, w, c, r, s, groups=c, **kw)


def inputs(p: Conv2d) -> list[np.ndarray]:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((p.N, p.C, p.H, p.W)).astype(np.float32)
    return [x, rng.standard_normal((p.C, 1, p.R, p.S)).astype(np.float32)]


def check(cfg, p: Conv2d) -> None:  # type: ignore[no-untyped-def]
    x, w = inputs(p)
    s, tensors = dw.depthwise_schedule(cfg, p)
    out = np.full(tensors[-1].shape_ints, 12345, np.float32)
    tuner.build(s, tensors)(x, w, out)
    np.testing.assert_allclose(out, cv.reference(p, x, w), rtol=1e-5, atol=1e-5)


AWKWARD = [
    depthwise(2, 3, 7, 13, 3, 3, pad=1),
    depthwise(1, 5, 11, 10, 3, 2, stride=2, pad=2, dilation=2),
    depthwise(1, 1, 1, 1, 1, 1),
]


@pytest.mark.parametrize("p", AWKWARD, ids=str)
def test_numpy_formulations_agree(p: Conv2d) -> None:
    x, w = inputs(p)
    # groups=C as a grouped conv2d: the reference is tested against the definition there.
    np.testing.assert_allclose(dw.depthwise_numpy_fast(p, x, w), cv.reference(p, x, w), atol=1e-5)


def test_default_config_is_in_the_space_and_correct() -> None:
    p = AWKWARD[0]
    check(
        dw.depthwise_config_space(p, target=AVX2).validate(
            dw.depthwise_default_config(p, target=AVX2)
        ),
        p,
    )


def test_register_tile_with_each_padding() -> None:
    p = AWKWARD[1]
    space = dw.depthwise_config_space(p, target=AVX2)
    base = {"owr": 8, "ohr": 3, "registers": True, "unroll_window": True, "parallel": False}
    for pad_at in ("channel", "inline"):
        check(space.validate({**base, "pad_at": pad_at}), p)


@pytest.mark.parametrize(
    "p", [*AWKWARD, depthwise(1, 128, 56, 56, 3, 3, pad=1), depthwise(1, 4, 300, 300, 5, 5)]
)
def test_default_config_is_valid_for_any_shape(p: Conv2d) -> None:
    dw.depthwise_config_space(p, target=AVX2).validate(dw.depthwise_default_config(p, target=AVX2))


def test_legal_configs_lower() -> None:
    """Cheap (no compile): every legal config with these tiles lowers (all other knobs)."""
    for p in AWKWARD[:2]:
        space = dw.depthwise_config_space(p, target=AVX2)
        for cfg in space.enumerate():
            if cfg["owr"] in (8, 16, 64) and cfg["ohr"] in (1, 3):
                s, tensors = dw.depthwise_schedule(cfg, p)
                tuner.lower(s, tensors)


@given(
    st.sampled_from([*AWKWARD[:2], depthwise(1, 2, 9, 17, 3, 3, stride=2, pad=1)]),
    st.integers(0, 2**32 - 1),
)
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_random_configs_match_numpy_on_awkward_shapes(p: Conv2d, seed: int) -> None:
    check(dw.depthwise_config_space(p, target=AVX2).sample(np.random.default_rng(seed)), p)


def test_registered_operator_validates_and_matches_numpy() -> None:
    op = get_operator("depthwise_conv2d")
    with pytest.raises(OperatorError, match=r"window S=5 .* does not fit"):
        op.parse_args({"C": "4", "H": "8", "W": "3", "S": "5"})
    with pytest.raises(OperatorError, match="has no argument 'K'"):
        op.parse_args({"C": "4", "H": "8", "W": "8", "K": "4"})
    args = op.parse_args({"C": "3", "H": "6", "W": "9", "pad": "1", "stride": "2"})
    x, w = op.make_inputs(args)
    assert w.shape == (3, 1, 3, 3)
    s, tensors = op.schedule(op.default_config(args, AVX2), args, AVX2)
    out = np.zeros(tensors[-1].shape_ints, np.float32)
    tuner.build(s, tensors)(x, w, out)
    np.testing.assert_allclose(out, op.reference(x, w, **args), rtol=1e-5, atol=1e-5)
    assert op.bytes_moved is not None
    assert op.bytes_moved(args) == 4.0 * (3 * 6 * 9 + 3 * 9 + 3 * 3 * 5)
