from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tuner
from search_spaces import OperatorError, get_operator
from search_spaces import reduce as red

from .targets import AVX2


def check(cfg, kind: str, m: int, n: int, axis: int, shift: float = 0.0) -> None:  # type: ignore[no-untyped-def]
    x = (np.random.default_rng(1).standard_normal((m, n)) + shift).astype(np.float32)
    s, tensors = red.schedule(cfg, kind, m, n, axis)
    out = np.full(tensors[-1].shape_ints, 12345, np.float32)
    tuner.build(s, tensors)(x, out)
    np.testing.assert_allclose(out, red.reference(kind, axis)(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", red.KINDS)
def test_default_config_is_in_the_space_and_correct(kind: str) -> None:
    for m, n, axis in [(7, 45, 1), (13, 37, 0)]:
        cfg = red.config_space(kind, m, n, axis, target=AVX2).validate(
            red.default_config(kind, m, n, axis, target=AVX2)
        )
        check(cfg, kind, m, n, axis)


def test_max_of_negative_rows_and_columns() -> None:
    """The identity of a max is -inf, never 0, also for the lanes' tail."""
    for axis in (0, 1):
        cfg = red.config_space("max", 5, 35, axis, target=AVX2).validate(
            red.default_config("max", 5, 35, axis, target=AVX2)
        )
        check(cfg, "max", 5, 35, axis, shift=-100.0)


@pytest.mark.parametrize(
    "m, n, axis", [(1, 1, 0), (1, 1, 1), (3, 8, 1), (4096, 4096, 1), (4096, 4096, 0)]
)
def test_default_config_is_valid_for_any_shape(m: int, n: int, axis: int) -> None:
    for kind in red.KINDS:
        red.config_space(kind, m, n, axis, target=AVX2).validate(
            red.default_config(kind, m, n, axis, target=AVX2)
        )


def test_every_legal_config_lowers() -> None:
    """Cheap (no compile): the constraints admit only schedules that lower."""
    for m, n, axis in [(1, 1, 1), (5, 70, 1), (3, 9, 1), (1, 1, 0), (6, 70, 0)]:
        space = red.config_space("sum", m, n, axis, target=AVX2)
        for cfg in space.enumerate():
            s, tensors = red.schedule(cfg, "sum", m, n, axis)
            tuner.lower(s, tensors)


@given(
    st.sampled_from(red.KINDS),
    st.sampled_from([1, 7, 32]),
    st.sampled_from([1, 13, 67]),
    st.sampled_from([0, 1]),
    st.integers(0, 2**32 - 1),
)
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_random_configs_match_numpy_on_awkward_shapes(
    kind: str, m: int, n: int, axis: int, seed: int
) -> None:
    check(
        red.config_space(kind, m, n, axis, target=AVX2).sample(np.random.default_rng(seed)),
        kind,
        m,
        n,
        axis,
    )


def test_space_rejects_bad_configs() -> None:
    space = red.config_space("sum", 64, 64, 1, target=AVX2)
    base = red.default_config("sum", 64, 64, 1, target=AVX2)
    with pytest.raises(ValueError, match="lanes"):
        red.config_space("sum", 64, 12, 1, target=AVX2).validate({**base, "lanes": 16})
    with pytest.raises(ValueError, match="interleave_rows needs"):
        space.validate({**base, "rows_per_task": 1, "interleave_rows": True})
    with pytest.raises(ValueError, match="registers"):
        space.validate({**base, "lanes": 64, "rows_per_task": 4, "interleave_rows": True})
    with pytest.raises(ValueError, match="col_block"):
        red.config_space("sum", 64, 64, 0, target=AVX2).validate(
            {**red.default_config("sum", 64, 64, 0, target=AVX2), "col_block": 24}
        )


def test_operators_validate_their_arguments() -> None:
    op = get_operator("reduce_mean")
    assert op.parse_args({"M": "8", "N": "9"}) == {"M": 8, "N": 9, "axis": 1}
    with pytest.raises(OperatorError, match="axis must be one of 0, 1"):
        op.parse_args({"M": 8, "N": 9, "axis": 2})
    with pytest.raises(OperatorError, match="M must be a positive integer"):
        op.parse_args({"M": 0, "N": 9})
    args = op.parse_args({"M": 8, "N": 9, "axis": 0})
    (x,) = op.make_inputs(args)
    np.testing.assert_allclose(op.reference(x, axis=0), x.mean(axis=0))


def test_cost_model_figures() -> None:
    assert red.bytes_moved(4096, 1024, 1) == 4 * (4096 * 1024 + 4096)
    assert red.bytes_moved(4096, 1024, 0) == 4 * (4096 * 1024 + 1024)
    assert red.flops(4, 8) == 32


def test_defaults_use_threads_only_for_large_inputs() -> None:
    """Handing a small input to threads costs more than the second core saves."""
    assert red.default_config("sum", 4096, 4096, 1, target=AVX2)["parallel"]
    assert red.default_config("sum", 4096, 4096, 0, target=AVX2)["parallel"]
    assert not red.default_config("sum", 64, 64, 1, target=AVX2)["parallel"]
    assert red.bytes_moved(1024, 1024, 1) < red.PARALLEL_MIN_BYTES <= red.bytes_moved(4096, 4096, 1)
