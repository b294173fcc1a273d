"""int8 matmul through the int8 dot product (``search_spaces._int8``), against NumPy.

The space and the default are read from synthetic targets; the kernels run
only where the host has the instruction (AVX-512 VNNI).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tuner
from search_spaces import _int8, get_operator, matmul
from tuner.lower.intrin import dot_intrinsic
from tuner.target import Target

from .targets import AVX2, AVX512

VNNI = Target.make(
    "cpu", vector_lanes=16, vector_registers=32, int8_dot_bits=512, threads=2, cores=2
)
HOST = Target.from_name("cpu", num_threads=2)
needs_vnni = pytest.mark.skipif(
    dot_intrinsic(HOST) is None or HOST.lanes("int32") != 16,
    reason="the host has no 16-lane int8 dot product (AVX-512 VNNI)",
)


def run(cfg: dict, m: int, n: int, k: int, trans_a: bool = False, trans_b: bool = False) -> str:
    s, tensors = _int8.schedule(cfg, m, n, k, HOST, trans_a, trans_b)
    f = tuner.build(s, tensors, target=HOST)
    rng = np.random.default_rng(m * 1000 + n + k)
    a = rng.integers(-128, 128, tensors[0].shape_ints).astype(np.int8)
    b = rng.integers(-128, 128, tensors[1].shape_ints).astype(np.int8)
    a.flat[0], b.flat[0] = -128, -128  # the shift's edge: -128 + 128 = 0
    out = np.full((m, n), 7, np.int32)  # no kernel may rely on a zeroed output
    f(a, b, out)
    np.testing.assert_array_equal(out, matmul.reference(a, b, trans_a, trans_b))
    return f.source


def test_the_knob_exists_only_where_the_target_has_the_instruction() -> None:
    assert "int8_dot" in matmul.config_space(64, 64, 64, "int8", target=VNNI).knobs
    for target in (AVX2, AVX512):
        assert "int8_dot" not in matmul.config_space(64, 64, 64, "int8", target=target).knobs
    assert "int8_dot" not in matmul.config_space(64, 64, 64, "float32", target=VNNI).knobs
    assert not matmul.default_config(64, 64, 64, dtype="int8", target=AVX512).get("int8_dot")


@pytest.mark.parametrize(("m", "n", "k"), [(1, 1, 1), (7, 13, 5), (37, 53, 29), (64, 64, 1024)])
def test_the_default_is_in_the_space(m: int, n: int, k: int) -> None:
    space = matmul.config_space(m, n, k, "int8", target=VNNI)
    cfg = space.validate(matmul.default_config(m, n, k, dtype="int8", target=VNNI))
    assert cfg["int8_dot"] and cfg["kc"] % 4 == 0


def test_the_space_refuses_blocks_of_k_that_split_a_group() -> None:
    space = matmul.config_space(64, 64, 600, "int8", target=VNNI)
    cfg = matmul.default_config(64, 64, 600, dtype="int8", target=VNNI)
    with pytest.raises(ValueError, match="groups of 4"):
        space.validate({**cfg, "kc": 300})  # an even block of 600, not whole groups


@needs_vnni
@pytest.mark.parametrize(
    ("m", "n", "k"),
    [(1, 1, 1), (37, 53, 29), (97, 113, 256)],
)
def test_the_default_matches_numpy_on_awkward_shapes(m: int, n: int, k: int) -> None:
    cfg = matmul.default_config(m, n, k, dtype="int8", target=HOST)
    src = run(cfg, m, n, k)
    if n >= 16:
        assert "dot_u8s8_i32x16(" in src


@needs_vnni
def test_extreme_values_sum_exactly_in_int32() -> None:
    m, n, k = 17, 33, 600
    cfg = matmul.default_config(m, n, k, dtype="int8", target=HOST)
    s, tensors = _int8.schedule(cfg, m, n, k, HOST)
    a = np.full((m, k), -128, np.int8)
    b = np.full((k, n), -128, np.int8)
    b[::2] = 127
    out = np.zeros((m, n), np.int32)
    tuner.build(s, tensors, target=HOST)(a, b, out)
    np.testing.assert_array_equal(out, matmul.reference(a, b))


@needs_vnni
def test_transposed_operands() -> None:
    m, n, k = 29, 45, 38
    cfg = matmul.default_config(m, n, k, trans_a=True, dtype="int8", target=HOST)
    run(cfg, m, n, k, True, True)


@pytest.mark.slow
@needs_vnni
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shape=st.sampled_from([(1, 17, 9), (23, 16, 4), (40, 61, 131), (64, 96, 64)]),
    seed=st.integers(0, 2**31 - 1),
)
def test_random_configs_of_the_space_match_numpy(shape: tuple[int, int, int], seed: int) -> None:
    m, n, k = shape
    space = matmul.config_space(m, n, k, "int8", target=HOST)
    rng = np.random.default_rng(seed)
    cfg = next(c for c in (space.sample(rng) for _ in range(200)) if c["int8_dot"])
    run(dict(cfg), m, n, k)


@needs_vnni
def test_the_registered_operator_routes_the_knob() -> None:
    op = get_operator("matmul")
    args = op.parse_args({"M": 33, "N": 48, "K": 20, "dtype": "int8"})
    cfg = op.default_config(args, HOST)
    assert cfg["int8_dot"]
    s, tensors = op.schedule(cfg, args, HOST)
    f = tuner.build(s, tensors, target=HOST)
    assert "dot_u8s8_i32x16(" in f.source
