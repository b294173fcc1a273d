from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tuner
from search_spaces import OperatorError, elementwise, get_operator

from .targets import AVX2


def inputs(n: int, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 4).astype(np.float32)  # tanh's whole range, relu both sides
    return [x, *(rng.standard_normal((3, 1)).astype(np.float32))]


def check(cfg, n: int) -> None:  # type: ignore[no-untyped-def]
    arrays = inputs(n)
    s, tensors = elementwise.schedule(cfg, n)
    out = np.full(n, 12345, np.float32)
    tuner.build(s, tensors)(*arrays, out)
    np.testing.assert_allclose(out, elementwise.reference(*arrays), rtol=1e-5, atol=1e-6)


def test_default_config_is_fused_vectorized_and_correct() -> None:
    n = 3 * 4096 + 7  # tasks and vectors that do not divide n
    cfg = elementwise.config_space(n, target=AVX2).validate(
        elementwise.default_config(n, target=AVX2)
    )
    check(cfg, n)
    s, tensors = elementwise.schedule(cfg, n)
    source = tuner.build(s, tensors).source
    assert "tanh32(" in source and "T_act" not in source  # one fused pass, vector tanh


def test_unfused_passes_match_too() -> None:
    space = elementwise.config_space(1000, target=AVX2)
    check(space.validate({**elementwise.default_config(1000, target=AVX2), "fuse": False}), 1000)


@pytest.mark.parametrize("n", [1, 13, 1 << 24])
def test_default_config_is_valid_for_any_size(n: int) -> None:
    elementwise.config_space(n, target=AVX2).validate(elementwise.default_config(n, target=AVX2))


def test_every_legal_config_lowers() -> None:
    for n in (1, 97, 5000):
        space = elementwise.config_space(n, target=AVX2)
        for cfg in space.enumerate():
            tuner.lower(*elementwise.schedule(cfg, n))


@given(st.sampled_from([1, 31, 4099]), st.integers(0, 2**32 - 1))
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_random_configs_match_numpy(n: int, seed: int) -> None:
    check(elementwise.config_space(n, target=AVX2).sample(np.random.default_rng(seed)), n)


def test_numpy_best_is_the_reference_in_float32() -> None:
    arrays = inputs(1000, seed=3)
    np.testing.assert_allclose(
        elementwise.numpy_best(*arrays), elementwise.reference(*arrays), rtol=1e-5, atol=1e-6
    )


def test_space_rejects_bad_configs() -> None:
    with pytest.raises(ValueError, match="no more than n elements"):
        elementwise.config_space(5000, target=AVX2).validate(
            {**elementwise.default_config(5000, target=AVX2), "task": 16384}
        )


def test_registered_operator() -> None:
    op = get_operator("elementwise_chain")
    args = op.parse_args({"n": "16777216"})
    assert op.bytes_moved is not None and op.bytes_moved(args) == 4 * (2 * 16777216 + 3)
    assert [a.shape for a in op.make_inputs({"n": 5})] == [(5,), (1,), (1,), (1,)]
    with pytest.raises(OperatorError, match="elementwise_chain argument n must be a positive"):
        op.parse_args({"n": "-3"})
