from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tuner
from search_spaces import OperatorError, batch_matmul, get_operator

from .targets import AVX2, AVX512


def check(cfg, bt: int, m: int, n: int, k: int, trans_b: bool = False) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(1)
    s, tensors = batch_matmul.schedule(cfg, bt, m, n, k, "float32", trans_b)
    a = rng.random(tensors[0].shape_ints, dtype=np.float32)
    b = rng.random(tensors[1].shape_ints, dtype=np.float32)
    out = np.full((bt, m, n), 7, np.float32)
    tuner.build(s, tensors)(a, b, out)
    expected = np.einsum("bmk,bnk->bmn" if trans_b else "bmk,bkn->bmn", a, b)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def default(bt: int, m: int, n: int, k: int, trans_b: bool = False):  # type: ignore[no-untyped-def]
    space = batch_matmul.config_space(bt, m, n, k, trans_b=trans_b, target=AVX2)
    return space.validate(batch_matmul.default_config(bt, m, n, k, target=AVX2))


@pytest.mark.parametrize("trans_b", [False, True])
def test_default_config_is_correct_on_awkward_shapes(trans_b: bool) -> None:
    check(default(3, 7, 20, 13, trans_b), 3, 7, 20, 13, trans_b)


def test_unpacked_b() -> None:
    cfg = {**default(2, 9, 33, 70), "pack_b": False}
    check(batch_matmul.config_space(2, 9, 33, 70, target=AVX2).validate(cfg), 2, 9, 33, 70)


def test_batches_and_column_blocks_share_one_parallel_loop() -> None:
    """Cheap (no compile): 12 batches of one column block: 12 parallel iterations."""
    s, tensors = batch_matmul.schedule(default(12, 128, 128, 64), 12, 128, 128, 64)
    text = str(tuner.lower(s, tensors))
    assert "in range(12):  # parallel" in text
    assert text.count("# parallel") == 1
    cfg = batch_matmul.default_config(12, 128, 128, 64, target=AVX2)
    assert cfg["kc"] == 64, "all of K in one block: no tile on the edge path for K"


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (12, 128, 128, 64), (3, 5, 3, 700)])
@pytest.mark.parametrize("trans_b", [False, True])
def test_default_config_is_valid_for_any_shape(
    shape: tuple[int, int, int, int], trans_b: bool
) -> None:
    default(*shape, trans_b=trans_b)


def test_random_legal_configs_lower() -> None:
    """Cheap (no compile): the constraints admit only schedules that lower."""
    rng = np.random.default_rng(0)
    for bt, m, n, k, tb in [(1, 1, 1, 1, False), (3, 7, 40, 33, True), (2, 64, 13, 100, False)]:
        space = batch_matmul.config_space(bt, m, n, k, trans_b=tb, target=AVX2)
        for cfg in space.sample_many(rng, 15):
            s, tensors = batch_matmul.schedule(cfg, bt, m, n, k, "float32", tb)
            tuner.lower(s, tensors)


@given(
    st.sampled_from([1, 3]),
    st.sampled_from([1, 7, 31]),
    st.sampled_from([1, 13, 40]),
    st.sampled_from([1, 29, 64]),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_random_configs_match_numpy_on_awkward_shapes(
    bt: int, m: int, n: int, k: int, trans_b: bool, seed: int
) -> None:
    space = batch_matmul.config_space(bt, m, n, k, trans_b=trans_b, target=AVX2)
    check(space.sample(np.random.default_rng(seed)), bt, m, n, k, trans_b)


def test_space_rejects_an_unpacked_transposed_b() -> None:
    space = batch_matmul.config_space(2, 64, 64, 64, trans_b=True, target=AVX2)
    with pytest.raises(ValueError, match="transposed B is packed"):
        space.validate({**batch_matmul.default_config(2, 64, 64, 64, target=AVX2), "pack_b": False})


def test_registered_operator() -> None:
    op = get_operator("batch_matmul")
    args = op.parse_args({"B": "2", "M": "3", "N": "4", "K": "5", "trans_b": "1"})
    a, b = op.make_inputs(args)
    assert (a.shape, b.shape) == ((2, 3, 5), (2, 4, 5))
    np.testing.assert_allclose(op.reference(a, b, **args), a @ b.transpose(0, 2, 1), rtol=1e-6)
    assert op.flops(args) == 2 * 2 * 3 * 4 * 5
    with pytest.raises(OperatorError, match="B must be a positive integer"):
        op.parse_args({"B": -1, "M": 3, "N": 4, "K": 5})


def test_a_tile_only_avx512_registers_hold_builds_and_matches_numpy() -> None:
    bt, m, n, k = 3, 13, 37, 11
    base = batch_matmul.default_config(bt, m, n, k, target=AVX512)
    cfg = {**base, "mr": 10, "nr": 32}  # 20 accumulators of 16 lanes
    assert not batch_matmul.config_space(bt, m, n, k, target=AVX2).is_valid(cfg)
    check(batch_matmul.config_space(bt, m, n, k, target=AVX512).validate(cfg), bt, m, n, k)
