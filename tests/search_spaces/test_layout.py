from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tuner
from search_spaces import OperatorError, get_operator
from search_spaces import layout as lay

from .targets import AVX2


def run_transpose(cfg, m: int, n: int) -> None:  # type: ignore[no-untyped-def]
    x = np.random.default_rng(1).standard_normal((m, n)).astype(np.float32)
    s, tensors = lay.schedule_transpose(cfg, m, n)
    out = np.full((n, m), 12345, np.float32)
    tuner.build(s, tensors)(x, out)
    np.testing.assert_array_equal(out, x.T)


def run_pad(cfg, *shape: int) -> None:  # type: ignore[no-untyped-def]
    n, c, h, w, ph, pw = shape
    x = np.random.default_rng(1).standard_normal((n, c, h, w)).astype(np.float32)
    s, tensors = lay.schedule_pad(cfg, *shape)
    out = np.full(tensors[-1].shape_ints, 12345, np.float32)
    tuner.build(s, tensors)(x, out)
    np.testing.assert_array_equal(out, lay.pad_reference(x, pad_h=ph, pad_w=pw))


def test_default_configs_are_in_their_spaces_and_correct() -> None:
    run_transpose(
        lay.transpose_space(37, 45, target=AVX2).validate(
            lay.default_transpose(37, 45, target=AVX2)
        ),
        37,
        45,
    )
    shape = (2, 5, 3, 7)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    cfg = lay.transpose_space(5, 7, target=AVX2).validate(
        lay.default_nchw_to_nhwc(*shape, target=AVX2)
    )
    s, tensors = lay.schedule_nchw_to_nhwc(cfg, *shape)
    out = np.zeros((2, 3, 7, 5), np.float32)
    tuner.build(s, tensors)(x, out)
    np.testing.assert_array_equal(out, x.transpose(0, 2, 3, 1))
    pad = (1, 3, 5, 7, 2, 1)
    run_pad(lay.pad_space(*pad, target=AVX2).validate(lay.default_pad(*pad)), *pad)


def test_every_legal_config_lowers() -> None:
    """Cheap (no compile): the constraints admit only schedules that lower."""
    for m, n in [(1, 1), (9, 70)]:
        space = lay.transpose_space(m, n, target=AVX2)
        for cfg in space.enumerate():
            tuner.lower(*lay.schedule_transpose(cfg, m, n))
    for pad in [(1, 1, 1, 1, 0, 0), (2, 3, 4, 70, 1, 3)]:
        space = lay.pad_space(*pad, target=AVX2)
        for cfg in space.enumerate():
            tuner.lower(*lay.schedule_pad(cfg, *pad))


@given(
    st.sampled_from([1, 7, 40]),
    st.sampled_from([1, 13, 67]),
    st.integers(0, 2**32 - 1),
)
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_random_transpose_configs_match_numpy(m: int, n: int, seed: int) -> None:
    run_transpose(lay.transpose_space(m, n, target=AVX2).sample(np.random.default_rng(seed)), m, n)


@given(
    st.sampled_from(
        [(1, 1, 1, 1, 0, 0), (1, 2, 3, 5, 1, 0), (2, 1, 4, 9, 0, 3), (1, 3, 7, 20, 2, 2)]
    ),
    st.integers(0, 2**32 - 1),
)
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_random_pad_configs_match_numpy(shape: tuple[int, ...], seed: int) -> None:
    run_pad(lay.pad_space(*shape, target=AVX2).sample(np.random.default_rng(seed)), *shape)


def test_space_rejects_bad_configs() -> None:
    base = lay.default_transpose(64, 64, target=AVX2)
    with pytest.raises(ValueError, match="tiles no larger"):
        lay.transpose_space(4, 64, target=AVX2).validate({**base, "tile_i": 16})
    with pytest.raises(ValueError, match="packed tile"):
        lay.transpose_space(512, 512, target=AVX2).validate(
            {**base, "pack": True, "tile_i": 128, "tile_j": 64}
        )
    with pytest.raises(ValueError, match="row split"):
        lay.pad_space(1, 1, 2, 2, 1, 1, target=AVX2).validate(
            {**lay.default_pad(1, 1, 2, 2, 1, 1), "w_split": 16}
        )


def test_numpy_pad_is_the_reference() -> None:
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    out = np.full((2, 3, 8, 7), 7.0, np.float32)
    np.testing.assert_array_equal(
        lay.numpy_pad(x, out, 2, 1), lay.pad_reference(x, pad_h=2, pad_w=1)
    )


def test_operators_validate_their_arguments() -> None:
    op = get_operator("pad")
    args = op.parse_args({"N": 1, "C": 2, "H": 3, "W": 4, "pad_h": 0, "pad_w": 1})
    (x,) = op.make_inputs(args)
    assert op.reference(x, **args).shape == (1, 2, 3, 6)
    with pytest.raises(OperatorError, match="pad_w must be a non-negative integer"):
        op.parse_args({"N": 1, "C": 2, "H": 3, "W": 4, "pad_h": 0, "pad_w": -1})
    with pytest.raises(OperatorError, match="needs argument N"):
        get_operator("transpose").parse_args({"M": 3})
    assert get_operator("nchw_to_nhwc").bytes_moved is not None
