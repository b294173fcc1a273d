from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tuner
from search_spaces import OperatorError, get_operator, norm

from .targets import AVX2


def check_layer_norm(cfg, m: int, n: int, shift: float = 0.0, eps: float = norm.EPS) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((m, n)) * 3 + shift).astype(np.float32)
    gamma, beta = rng.standard_normal((2, n)).astype(np.float32)
    s, tensors = norm.layer_norm_schedule(cfg, m, n, eps)
    out = np.full((m, n), 12345, np.float32)
    tuner.build(s, tensors)(x, gamma, beta, out)
    expected = norm.layer_norm_reference(x, gamma, beta, eps)
    # float32 rounding of the inputs' mean grows with mean / spread; a one-pass
    # E[x**2] - mean**2 variance is off by 0.1 at shift 1000.
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=2e-5 * (1 + shift / 10))


def check_batch_norm(cfg, shape: tuple[int, int, int, int]) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(2)
    c = shape[1]
    x = rng.standard_normal(shape).astype(np.float32)
    mean, gamma, beta = rng.standard_normal((3, c)).astype(np.float32)
    var = rng.random(c).astype(np.float32) * 2
    s, tensors = norm.batch_norm_schedule(cfg, *shape)
    out = np.full(shape, 12345, np.float32)
    tuner.build(s, tensors)(x, mean, var, gamma, beta, out)
    expected = norm.batch_norm_reference(x, mean, var, gamma, beta)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("one_pass", [True, False])
def test_layer_norm_default_is_correct_with_a_large_mean(one_pass: bool) -> None:
    """The shifted one-pass sums (the default) and the centred second pass keep the
    variance right when the mean dwarfs the spread."""
    default = norm.layer_norm_default(67, 45, target=AVX2)
    assert default["one_pass"]
    cfg = norm.layer_norm_space(67, 45, target=AVX2).validate({**default, "one_pass": one_pass})
    check_layer_norm(cfg, 67, 45, shift=1000.0)


@pytest.mark.parametrize("m,n,lanes", [(1, 1, 1), (7, 45, 8), (5, 131, 64), (3, 768, 64)])
def test_layer_norm_in_one_pass_with_a_large_mean(m: int, n: int, lanes: int) -> None:
    """The moments as one tuple reduction (sums shifted by each row's first element) stay
    accurate where the mean dwarfs the spread; lanes need not divide the row."""
    space = norm.layer_norm_space(m, n, target=AVX2)
    cfg = {**norm.layer_norm_default(m, n, target=AVX2), "one_pass": True, "lanes": lanes}
    check_layer_norm(space.validate(cfg), m, n, shift=1000.0)
    check_layer_norm(space.validate({**cfg, "reductions_at_row": False}), m, n)


def test_layer_norm_at_the_root_with_another_eps() -> None:
    space = norm.layer_norm_space(13, 29, target=AVX2)
    cfg = {**norm.layer_norm_default(13, 29, target=AVX2), "reductions_at_row": False, "lanes": 8}
    check_layer_norm(space.validate(cfg), 13, 29, eps=0.5)


@pytest.mark.parametrize("fold", [False, True])
def test_batch_norm_default_is_correct_with_and_without_folding(fold: bool) -> None:
    cfg = {**norm.batch_norm_default(2, 5, 3, 37), "fold_scale": fold}
    check_batch_norm(norm.batch_norm_space(2, 5, 3, 37, target=AVX2).validate(cfg), (2, 5, 3, 37))


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (3, 7, 5, 5), (32, 512, 7, 7), (1, 64, 56, 56)])
def test_defaults_are_valid_for_any_shape(shape: tuple[int, int, int, int]) -> None:
    norm.batch_norm_space(*shape, target=AVX2).validate(norm.batch_norm_default(*shape))
    m, n = shape[0] * shape[1], shape[2] * shape[3]
    norm.layer_norm_space(m, n, target=AVX2).validate(norm.layer_norm_default(m, n, target=AVX2))


def test_every_legal_config_lowers() -> None:
    """Cheap (no compile): the constraints admit only schedules that lower."""
    for m, n in [(1, 1), (5, 12), (9, 7)]:
        space = norm.layer_norm_space(m, n, target=AVX2)
        for cfg in space.enumerate():
            tuner.lower(*norm.layer_norm_schedule(cfg, m, n))
    for shape in [(1, 1, 1, 1), (2, 3, 5, 7), (1, 4, 2, 33)]:
        space = norm.batch_norm_space(*shape, target=AVX2)
        for cfg in space.enumerate():
            tuner.lower(*norm.batch_norm_schedule(cfg, *shape))


@given(
    st.sampled_from([1, 7, 33]),
    st.sampled_from([1, 6, 45]),
    st.integers(0, 2**32 - 1),
)
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_layer_norm_random_configs(m: int, n: int, seed: int) -> None:
    check_layer_norm(
        norm.layer_norm_space(m, n, target=AVX2).sample(np.random.default_rng(seed)), m, n
    )


@given(
    st.tuples(
        st.sampled_from([1, 2]),
        st.sampled_from([1, 3, 17]),
        st.sampled_from([1, 5]),
        st.sampled_from([1, 7, 40]),
    ),
    st.integers(0, 2**32 - 1),
)
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_batch_norm_random_configs(shape: tuple[int, int, int, int], seed: int) -> None:
    check_batch_norm(
        norm.batch_norm_space(*shape, target=AVX2).sample(np.random.default_rng(seed)), shape
    )


def test_space_rejects_bad_configs() -> None:
    with pytest.raises(ValueError, match="no more reduction lanes than columns"):
        norm.layer_norm_space(64, 7, target=AVX2).validate(
            {**norm.layer_norm_default(64, 64, target=AVX2), "col_split": 8, "lanes": 8}
        )
    with pytest.raises(ValueError, match="no more planes than N"):
        norm.batch_norm_space(1, 3, 4, 4, target=AVX2).validate(
            {**norm.batch_norm_default(1, 3, 4, 4), "planes_per_task": 4}
        )


def test_registered_operators_check_their_arguments() -> None:
    ln, bn = get_operator("layer_norm"), get_operator("batch_norm")
    args = ln.parse_args({"M": "4096", "N": "768"})
    assert args["eps"] == "1e-05"
    assert ln.bytes_moved is not None and ln.bytes_moved(args) == 4 * (2 * 4096 * 768 + 2 * 768)
    with pytest.raises(OperatorError, match="layer_norm argument eps must be a positive number"):
        ln.parse_args({"M": "4", "N": "8", "eps": "-1"})
    with pytest.raises(OperatorError, match="batch_norm argument eps must be a positive number"):
        bn.parse_args({"N": "1", "C": "2", "H": "3", "W": "4", "eps": "tiny"})
    with pytest.raises(OperatorError, match="batch_norm argument C must be a positive integer"):
        bn.parse_args({"N": "1", "C": "0", "H": "3", "W": "4"})


def test_registry_inputs_and_reference_agree_with_the_args() -> None:
    """Batch norm's random variances are never negative; eps reaches the reference."""
    bn = get_operator("batch_norm")
    args = bn.parse_args({"N": "2", "C": "64", "H": "3", "W": "3", "eps": "0.25"})
    x, mean, var, gamma, beta = bn.make_inputs(args)
    assert var.min() >= 0.1
    expected = norm.batch_norm_reference(x, mean, var, gamma, beta, eps=0.25)
    np.testing.assert_allclose(bn.reference(x, mean, var, gamma, beta, **args), expected)
    assert np.isfinite(bn.reference(x, mean, var, gamma, beta)).all()
