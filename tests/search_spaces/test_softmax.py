from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tuner
from search_spaces import softmax


def check(cfg, m: int, n: int) -> None:  # type: ignore[no-untyped-def]
    x = (np.random.default_rng(1).standard_normal((m, n)) * 10).astype(np.float32)
    s, tensors = softmax.schedule(cfg, m, n)
    out = np.full((m, n), 12345, np.float32)
    tuner.build(s, tensors)(x, out)
    np.testing.assert_allclose(out, softmax.reference(x), rtol=1e-5, atol=1e-6)


def test_default_config_is_in_the_space_and_correct() -> None:
    cfg = softmax.config_space(67, 45).validate(softmax.default_config(67, 45))
    check(cfg, 67, 45)


def test_interleaved_sum_over_row_tasks() -> None:
    space = softmax.config_space(36, 45)
    check(space.validate({**softmax.default_config(36, 45), "interleave_sum": True}), 36, 45)


@pytest.mark.parametrize("m, n", [(1, 1), (7, 33), (4096, 1024)])
def test_default_config_is_valid_for_any_shape(m: int, n: int) -> None:
    softmax.config_space(m, n).validate(softmax.default_config(m, n))


def test_every_legal_config_lowers() -> None:
    """Cheap (no compile): the constraints admit only schedules that lower."""
    for m, n in [(1, 1), (7, 64), (33, 7)]:
        space = softmax.config_space(m, n)
        choices = space.choices()
        for values in itertools.product(*choices.values()):
            try:
                cfg = space.validate(dict(zip(choices, values, strict=True)))
            except ValueError:
                continue
            s, tensors = softmax.schedule(cfg, m, n)
            tuner.lower(s, tensors)


@given(
    st.sampled_from([1, 7, 33, 64]),
    st.sampled_from([1, 7, 33, 64]),
    st.integers(0, 2**32 - 1),
)
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_random_configs_match_numpy_on_awkward_shapes(m: int, n: int, seed: int) -> None:
    check(softmax.config_space(m, n).sample(np.random.default_rng(seed)), m, n)


def test_space_rejects_bad_configs() -> None:
    space = softmax.config_space(64, 64)
    with pytest.raises(ValueError, match="col_split"):
        space.validate({**softmax.default_config(64, 64), "col_split": 12})
    with pytest.raises(ValueError, match="stored exp"):
        space.validate(
            {**softmax.default_config(64, 64), "exp_inline": True, "reductions_at_row": True}
        )
    with pytest.raises(ValueError, match="interleave_sum needs"):
        space.validate(
            {**softmax.default_config(64, 64), "rows_per_task": 1, "interleave_sum": True}
        )
    with pytest.raises(ValueError, match="no more rows than M"):
        softmax.config_space(3, 64).validate({**softmax.default_config(64, 64)})


def test_cost_model_figures() -> None:
    assert softmax.bytes_moved(4096, 1024) == 2 * 4096 * 1024 * 4
    assert softmax.flops(4, 8) > 0
