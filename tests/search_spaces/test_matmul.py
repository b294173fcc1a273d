from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tuner
from search_spaces import matmul


def check(cfg, m: int, n: int, k: int, dtype: str = "float32") -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(1)
    if dtype == "int8":
        a = rng.integers(-128, 128, (m, k)).astype(np.int8)
        b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    else:
        a, b = rng.random((m, k), dtype=np.float32), rng.random((k, n), dtype=np.float32)
    s, tensors = matmul.schedule(cfg, m, n, k, dtype)
    out = np.zeros((m, n), tensors[-1].dtype)
    tuner.build(s, tensors)(a, b, out)
    np.testing.assert_allclose(out, matmul.reference(a, b), rtol=1e-4, atol=1e-4)


def test_default_config_is_in_the_space_and_correct() -> None:
    cfg = matmul.config_space(67, 45, 33).validate(matmul.default_config(67, 45, 33))
    check(cfg, 67, 45, 33)
    check(cfg, 17, 31, 70, dtype="int8")


@given(
    st.sampled_from([1, 7, 31, 64]),
    st.sampled_from([1, 13, 40]),
    st.sampled_from([1, 29, 64]),
    st.integers(0, 2**32 - 1),
)
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_random_configs_match_numpy_on_awkward_shapes(m: int, n: int, k: int, seed: int) -> None:
    check(matmul.config_space(m, n, k).sample(np.random.default_rng(seed)), m, n, k)


def test_space_rejects_bad_configs() -> None:
    space = matmul.config_space(64, 64, 64)
    with pytest.raises(ValueError, match="mr"):
        space.validate({**matmul.default_config(64, 64, 64), "mr": "__import__('os')"})
    with pytest.raises(ValueError, match="registers"):
        space.validate({**matmul.default_config(64, 64, 64), "mr": 8, "nr": 32})
