from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tuner
from search_spaces import OperatorError, get_operator, softmax
from search_spaces._rows_define import lane_reduce

from .targets import AVX2


def check(cfg, m: int, n: int, log: bool = False, x: np.ndarray | None = None) -> None:  # type: ignore[no-untyped-def]
    if x is None:
        x = (np.random.default_rng(1).standard_normal((m, n)) * 10).astype(np.float32)
    s, tensors = softmax.schedule(cfg, m, n, log=log)
    out = np.full((m, n), 12345, np.float32)
    tuner.build(s, tensors)(x, out)
    ref = softmax.log_reference(x) if log else softmax.reference(x)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 if log else 1e-6)


@pytest.mark.parametrize("log", [False, True])
def test_default_config_is_in_the_space_and_correct(log: bool) -> None:
    cfg = softmax.config_space(67, 45, target=AVX2).validate(
        softmax.default_config(67, 45, target=AVX2)
    )
    check(cfg, 67, 45, log)


def test_stored_exp_and_lanes_that_do_not_divide_the_row() -> None:
    """45 columns in 16 lanes: the last chunk overlaps, the sum must not count it twice."""
    space = softmax.config_space(5, 45, target=AVX2)
    cfg = space.validate(
        {**softmax.default_config(5, 45, target=AVX2), "exp_inline": False, "lanes": 16}
    )
    check(cfg, 5, 45, log=True)
    check(cfg, 5, 45, log=False)


def test_masked_entries_give_zero_probability() -> None:
    """-inf entries (attention masks) get probability 0 and log-probability -inf."""
    x = np.random.default_rng(2).standard_normal((3, 19)).astype(np.float32)
    x[:, ::3] = -np.inf
    cfg = softmax.config_space(3, 19, target=AVX2).validate(
        softmax.default_config(3, 19, target=AVX2)
    )
    check(cfg, 3, 19, log=True, x=x)


@pytest.mark.parametrize("m, n", [(1, 1), (7, 33), (4096, 1024)])
def test_default_config_is_valid_for_any_shape(m: int, n: int) -> None:
    softmax.config_space(m, n, target=AVX2).validate(softmax.default_config(m, n, target=AVX2))


def test_every_legal_config_lowers() -> None:
    """Cheap (no compile): the constraints admit only schedules that lower."""
    for (m, n), log in itertools.product([(1, 1), (5, 12), (9, 7)], [False, True]):
        space = softmax.config_space(m, n, target=AVX2)
        for cfg in space.enumerate():
            s, tensors = softmax.schedule(cfg, m, n, log=log)
            tuner.lower(s, tensors)


@given(
    st.sampled_from([1, 7, 33, 64]),
    st.sampled_from([1, 7, 33, 64]),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_random_configs_match_numpy_on_awkward_shapes(m: int, n: int, log: bool, seed: int) -> None:
    check(softmax.config_space(m, n, target=AVX2).sample(np.random.default_rng(seed)), m, n, log)


def test_space_rejects_bad_configs() -> None:
    space = softmax.config_space(64, 64, target=AVX2)
    with pytest.raises(ValueError, match="col_split"):
        space.validate({**softmax.default_config(64, 64, target=AVX2), "col_split": 12})
    with pytest.raises(ValueError, match="no more reduction lanes than columns"):
        softmax.config_space(64, 7, target=AVX2).validate(
            {**softmax.default_config(64, 64, target=AVX2), "col_split": 8, "lanes": 8}
        )
    with pytest.raises(ValueError, match="no more rows than M"):
        softmax.config_space(3, 64, target=AVX2).validate(
            {**softmax.default_config(64, 64, target=AVX2), "rows_per_task": 4}
        )


def test_lane_reduce_reads_the_source_only_in_the_partials() -> None:
    """The total combines partials only, so a stage read by the sum can sit at its partials."""
    x = softmax.te.placeholder((4, 45), "float32", name="X")
    part, total = lane_reduce("sum", lambda i, j: x[i, j], 4, 45, 16, "S")
    assert part.shape_ints == (4, 16) and total.shape_ints == (4,)
    assert "X" not in str(total.op.body)


def test_operators_are_registered_with_clear_argument_errors() -> None:
    for name in ("softmax", "log_softmax"):
        op = get_operator(name)
        assert op.parse_args({"M": "4", "N": "8"}) == {"M": 4, "N": 8}
        with pytest.raises(OperatorError, match=f"{name} argument N must be a positive integer"):
            op.parse_args({"M": "4", "N": "0"})
        assert op.bytes_moved is not None and op.bytes_moved({"M": 4096, "N": 1024}) == 2**25
    assert softmax.flops(4, 8) > 0
