from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tuner
from search_spaces import OperatorError, get_operator, pool

from .targets import AVX2


def pool_args(n: int, c: int, h: int, w: int, kernel: int, stride: int, pad: int) -> dict[str, Any]:
    return {"N": n, "C": c, "H": h, "W": w, "kernel": kernel, "stride": stride, "pad": pad}


def check(cfg, kind: str, args: dict[str, Any], shift: float = 0.0) -> None:  # type: ignore[no-untyped-def]
    shape = (args["N"], args["C"], args["H"], args["W"])
    x = (np.random.default_rng(1).standard_normal(shape) + shift).astype(np.float32)
    s, tensors = pool.schedule(cfg, kind, args)
    out = np.full(tensors[-1].shape_ints, 12345, np.float32)
    tuner.build(s, tensors)(x, out)
    window = {a: args[a] for a in ("kernel", "stride", "pad")}
    np.testing.assert_allclose(out, pool.reference(x, kind=kind, **window), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", pool.KINDS)
def test_default_config_is_in_the_space_and_correct(kind: str) -> None:
    # Odd sizes, stride 2 with padding; then stride defaulting to the kernel, no padding.
    for args in (pool_args(1, 3, 11, 13, 3, 2, 1), pool_args(2, 2, 7, 9, 2, 0, 0)):
        cfg = pool.config_space(kind, args, target=AVX2).validate(
            pool.default_config(kind, args, target=AVX2)
        )
        check(cfg, kind, args)


def test_padding_never_wins_a_max() -> None:
    args = pool_args(1, 2, 6, 5, 3, 1, 1)
    space = pool.config_space("max", args, target=AVX2)
    for pad_at in ("inline", "rows"):
        cfg = space.validate({**pool.default_config("max", args, target=AVX2), "pad_at": pad_at})
        check(cfg, "max", args, shift=-50.0)


def test_every_legal_config_lowers() -> None:
    """Cheap (no compile): the constraints admit only schedules that lower."""
    for args in (pool_args(1, 2, 5, 7, 3, 2, 1), pool_args(1, 1, 4, 4, 2, 0, 0)):
        space = pool.config_space("avg", args, target=AVX2)
        for cfg in space.enumerate():
            s, tensors = pool.schedule(cfg, "avg", args)
            tuner.lower(s, tensors)


@given(
    st.sampled_from(pool.KINDS),
    st.sampled_from([(5, 7), (9, 4), (1, 1)]),
    st.sampled_from([(1, 0, 0), (3, 2, 1), (3, 1, 1), (2, 0, 1), (5, 3, 2), (2, 3, 1)]),
    st.integers(0, 2**32 - 1),
)
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_random_configs_match_numpy_on_awkward_shapes(
    kind: str, hw: tuple[int, int], window: tuple[int, int, int], seed: int
) -> None:
    args = pool_args(1, 2, *hw, *window)
    assume(min(args["H"], args["W"]) + 2 * args["pad"] >= args["kernel"])
    check(
        pool.config_space(kind, args, target=AVX2).sample(np.random.default_rng(seed)), kind, args
    )


def test_space_rejects_bad_configs() -> None:
    args = pool_args(1, 4, 112, 112, 3, 2, 1)
    base = pool.default_config("max", args, target=AVX2)
    with pytest.raises(ValueError, match="no padded copy"):
        pool.config_space("max", pool_args(1, 4, 8, 8, 2, 2, 0), target=AVX2).validate(
            {**base, "pad_at": "rows"}
        )
    with pytest.raises(ValueError, match="registers"):
        wide = pool_args(1, 4, 8, 300, 3, 2, 1)  # 150 output columns
        pool.config_space("max", wide, target=AVX2).validate({**base, "local": True, "ow_split": 0})
    with pytest.raises(ValueError, match="column split"):
        pool.config_space("max", pool_args(1, 1, 8, 8, 2, 2, 0), target=AVX2).validate(
            {**base, "pad_at": "inline", "ow_split": 16}
        )


def test_operators_validate_their_arguments() -> None:
    op = get_operator("max_pool2d")
    args = op.parse_args({"N": 1, "C": 4, "H": 8, "W": 8, "kernel": 2})
    assert (args["stride"], args["pad"]) == (0, 0)
    assert pool.out_size(args) == (4, 4)  # stride 0 means the kernel, as in PyTorch
    with pytest.raises(OperatorError, match="pad must be at most half the kernel"):
        op.parse_args({"N": 1, "C": 4, "H": 8, "W": 8, "kernel": 3, "pad": 2})
    with pytest.raises(OperatorError, match="does not fit"):
        op.parse_args({"N": 1, "C": 4, "H": 2, "W": 8, "kernel": 5, "pad": 1})
    with pytest.raises(OperatorError, match="pad must be a non-negative integer"):
        op.parse_args({"N": 1, "C": 4, "H": 8, "W": 8, "kernel": 3, "pad": -1})
    (x,) = op.make_inputs(args)
    np.testing.assert_array_equal(
        op.reference(x, **args), x.reshape(1, 4, 4, 2, 4, 2).max(axis=(3, 5))
    )


@pytest.mark.parametrize("kind", pool.KINDS)
def test_numpy_fast_is_the_reference(kind: str) -> None:
    x = np.random.default_rng(0).standard_normal((2, 3, 9, 8)).astype(np.float32)
    for kernel, stride, pad in [(3, 2, 1), (2, 0, 0), (3, 1, 1)]:
        np.testing.assert_allclose(
            pool.numpy_fast(x, kind=kind, kernel=kernel, stride=stride, pad=pad),
            pool.reference(x, kind=kind, kernel=kernel, stride=stride, pad=pad),
            rtol=1e-5,
            atol=1e-6,
        )


def test_global_avg_pool_default_and_random_configs() -> None:
    for shape in [(1, 3, 5, 7), (2, 5, 1, 1)]:
        space = pool.global_config_space(*shape, target=AVX2)
        x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
        cfgs = [space.validate(pool.global_default_config(*shape, target=AVX2))]
        cfgs.append(space.sample(np.random.default_rng(7)))
        for cfg in cfgs:
            s, tensors = pool.global_schedule(cfg, *shape)
            out = np.full((shape[0], shape[1], 1, 1), 12345, np.float32)
            tuner.build(s, tensors)(x, out)
            np.testing.assert_allclose(out, pool.global_reference(x), rtol=1e-5, atol=1e-6)


def test_cost_model_figures() -> None:
    args = pool_args(1, 64, 112, 112, 3, 2, 1)
    assert pool.out_size(args) == (56, 56)
    assert pool.bytes_moved(args) == 4 * 64 * (112 * 112 + 56 * 56)
    assert pool.flops(args) == 64 * 56 * 56 * 9
    assert pool.global_bytes_moved(1, 2, 3, 4) == 4 * 2 * 13
