"""``matmul_integer`` (int8/uint8 A with a zero point, int8 B, int32 or a float epilogue that
may quantize) and ``im2col_nhwc``, against their NumPy references.

Configs without the int8 dot product run on any host; those with it only where the
host has AVX-512 VNNI. Shapes are the awkward ones: 1, primes, 49, 169, K not a
multiple of 4, N narrower than a register tile.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tuner
from search_spaces import OperatorError, get_operator
from search_spaces._epilogue import parse
from search_spaces._int8 import pack_panels, unpack_panels
from tuner.lower.intrin import dot_intrinsic
from tuner.target import Target

HOST = Target.from_name("cpu", num_threads=2)
VNNI = dot_intrinsic(HOST) is not None and HOST.lanes("int32") == 16
OP = get_operator("matmul_integer")
EPILOGUES = ("none", "mul@c;add@c;relu", "mul@c;add@c;clip:0.0:6.0;quant_uint8:0.04:3.0")


def _inputs(args: dict, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    a = OP.make_inputs(args, seed=seed, target=HOST)
    steps = parse(args["epilogue"])
    # per-channel scales small enough that a quantized output is not all saturated
    given = 4 if args.get("colsums") else 3  # A, B, AZ (and BS)
    extras = [(rng.random(x.shape) * 2e-4).astype(np.float32) for x in a[given:]]
    return [*a[:given], *extras][: given + len(steps.extras)]


def _check(args: dict, cfg: dict, seed: int = 0) -> str:
    s, tensors = OP.schedule(cfg, args, HOST)
    f = tuner.build(s, tensors, target=HOST)
    ins = _inputs(args, seed)
    out = np.full(tensors[-1].shape_ints, 7, tensors[-1].dtype)  # no reliance on zeros
    f(*ins, out)
    want = OP.reference(*ins, **args)
    assert out.dtype == want.dtype
    if want.dtype == np.int32:
        np.testing.assert_array_equal(out, want)
    elif want.dtype == np.float32:
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    else:  # quantized: within one step (an FMA's rounding at a step's boundary)
        diff = np.abs(out.astype(np.int32) - want.astype(np.int32))
        assert diff.max() <= 1 and (diff > 0).mean() < 0.01
        assert len(np.unique(want)) > 3  # the scales leave something to compare
    return f.source


@pytest.mark.parametrize(
    ("M", "N", "K", "a_dtype", "trans_b", "epilogue"),
    [
        (1, 1, 1, "uint8", False, "none"),
        (49, 24, 27, "uint8", False, EPILOGUES[2]),
        (37, 50, 17, "int8", True, EPILOGUES[1]),
        (169, 64, 144, "uint8", False, EPILOGUES[2]),
        (13, 144, 24, "int8", False, EPILOGUES[2]),
    ],
)
def test_the_default_matches_numpy(
    M: int, N: int, K: int, a_dtype: str, trans_b: bool, epilogue: str
) -> None:
    args = OP.parse_args(
        {"M": M, "N": N, "K": K, "a_dtype": a_dtype, "trans_b": trans_b, "epilogue": epilogue}
    )
    cfg = OP.default_config(args, HOST)
    assert dict(OP.space(args, HOST).validate(cfg)) == cfg
    source = _check(args, cfg)
    if VNNI:  # the instruction, not a scalar fallback, where the host has it
        assert "dot_u8s8_i32x16(" in source


@pytest.mark.parametrize(
    ("K", "a_dtype", "in_place"), [(144, "uint8", True), (27, "uint8", False), (144, "int8", False)]
)
def test_unsigned_bytes_in_whole_groups_of_4_are_read_where_they_are(
    K: int, a_dtype: str, in_place: bool
) -> None:
    """Only an int8 A (shifted by 128) or a K of ragged groups is copied into panels first."""
    args = OP.parse_args({"M": 37, "N": 48, "K": K, "a_dtype": a_dtype, "epilogue": EPILOGUES[2]})
    source = _check(args, OP.default_config(args, HOST))
    assert ("Au" not in source) == in_place


def test_panels_hold_the_matrix_with_zeros_past_its_edges() -> None:
    b = np.random.default_rng(2).integers(-128, 128, (27, 50)).astype(np.int8)
    p = pack_panels(b, 16)
    assert p.shape == (4, 7, 16, 4)  # 50 columns in panels of 16, 27 rows in groups of 4
    np.testing.assert_array_equal(unpack_panels(p, 27, 50), b)
    assert np.count_nonzero(p) == np.count_nonzero(b)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shape=st.sampled_from([(1, 1000, 64), (23, 24, 36), (49, 17, 27), (64, 96, 16)]),
    a_dtype=st.sampled_from(["uint8", "int8"]),
    epilogue=st.sampled_from(EPILOGUES),
    seed=st.integers(0, 2**31 - 1),
)
def test_b_in_panels_matches_numpy(
    shape: tuple[int, int, int], a_dtype: str, epilogue: str, seed: int
) -> None:
    """B given as a model lays out a constant weight (``b_panels``): the default of those
    panels' width and random configs of its space (every tile that wide)."""
    M, N, K = shape
    raw = {"M": M, "N": N, "K": K, "a_dtype": a_dtype, "epilogue": epilogue, "colsums": True}
    nr = OP.default_config(OP.parse_args(raw), HOST)["nr"]
    args = OP.parse_args({**raw, "b_panels": nr})
    space = OP.space(args, HOST)
    default = OP.default_config(args, HOST)
    assert default["nr"] == nr and space.is_valid(default)
    sample = dict(space.sample(np.random.default_rng(seed)))
    assert sample["nr"] == nr
    for cfg in (default, sample):
        source = _check(args, cfg, seed)
        assert "Bp" not in source  # read as given, not packed at each call


def test_panels_of_a_transposed_b_or_of_no_tile_width_are_refused() -> None:
    with pytest.raises(OperatorError, match="trans_b"):
        OP.parse_args({"M": 4, "N": 16, "K": 8, "trans_b": True, "b_panels": 16})
    args = OP.parse_args({"M": 4, "N": 16, "K": 8, "b_panels": 5})
    with pytest.raises(OperatorError, match="no tile width"):
        OP.space(args, HOST)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shape=st.sampled_from([(1, 17, 9), (23, 16, 4), (40, 61, 131), (64, 96, 64), (49, 24, 36)]),
    a_dtype=st.sampled_from(["uint8", "int8"]),
    epilogue=st.sampled_from(EPILOGUES),
    seed=st.integers(0, 2**31 - 1),
)
def test_random_configs_of_the_space_match_numpy(
    shape: tuple[int, int, int], a_dtype: str, epilogue: str, seed: int
) -> None:
    M, N, K = shape
    args = OP.parse_args({"M": M, "N": N, "K": K, "a_dtype": a_dtype, "epilogue": epilogue})
    space = OP.space(args, HOST)
    cfg = space.sample(np.random.default_rng(seed))
    _check(args, dict(cfg), seed)


def test_without_the_instruction_the_space_has_only_the_plain_nest() -> None:
    plain = Target.make("cpu", vector_lanes=16, vector_registers=32, threads=2, cores=2)
    args = OP.parse_args({"M": 64, "N": 64, "K": 64})
    assert OP.space(args, plain).knobs["int8_dot"].values == (False,)
    assert OP.default_config(args, plain)["int8_dot"] is False


@pytest.mark.parametrize("N", [24, 144, 1000])
def test_the_default_never_leaves_a_tile_at_a_column_edge_of_a_block(N: int) -> None:
    """A tensorized tile at a column edge runs as plain loops: the default takes a tile
    width and column blocks that divide N, or computes the product at the root, whole
    panels wide."""
    vnni = Target.make(
        "cpu", vector_lanes=16, vector_registers=32, int8_dot_bits=512, threads=2, cores=2
    )
    cfg = OP.default_config(OP.parse_args({"M": 3136, "N": N, "K": 144}), vnni)
    if cfg["p_at"] == "block":
        assert N % (cfg["nr"] * cfg["nc_tiles"]) == 0
    else:
        assert N % cfg["nr"]


def test_a_quantizing_step_must_be_last_and_in_range() -> None:
    assert parse("relu;quant_int8:0.5:-3.0").out_dtype("float32") == "int8"
    assert parse("relu").out_dtype("float32") == "float32"
    with pytest.raises(OperatorError, match="last step"):
        parse("quant_uint8:0.5:3.0;relu")
    with pytest.raises(OperatorError, match="zero point"):
        parse("quant_int8:0.5:200.0")
    with pytest.raises(OperatorError, match="scale"):
        parse("quant_uint8:-0.5:3.0")


IM2COL = get_operator("im2col_nhwc")


@pytest.mark.parametrize(
    "a",
    [
        {"C": 3, "H": 13, "W": 11, "R": 7, "S": 7, "stride": 2, "pad": 3, "fill": 9, "channels": 4},
        {"C": 16, "H": 7, "W": 7, "pad": 1, "dtype": "int8", "fill": -5},
        {"C": 5, "H": 9, "W": 6, "R": 3, "S": 2, "dilation": 2, "pad": 2, "N": 2},
        {"C": 8, "H": 1, "W": 1, "R": 1, "S": 1},
    ],
)
def test_im2col_nhwc_matches_numpy(a: dict) -> None:
    args = IM2COL.parse_args(a)
    f = tuner.build_op("im2col_nhwc", target=HOST, **args)
    (x,) = IM2COL.make_inputs(args, target=HOST)
    np.testing.assert_array_equal(f(x), IM2COL.reference(x, **args))


def test_im2col_nhwc_refuses_a_fill_outside_its_type() -> None:
    with pytest.raises(OperatorError, match="fill"):
        IM2COL.parse_args({"C": 4, "H": 4, "W": 4, "dtype": "uint8", "fill": -1})


@pytest.mark.parametrize("a_dtype", ["uint8", "int8"])
def test_column_sums_given_once_give_the_same_product(a_dtype: str) -> None:
    """A constant weight's column sums, given as ``BS``, make the same product as those the
    kernel sums at each call."""
    base = {"M": 49, "N": 48, "K": 36, "a_dtype": a_dtype, "epilogue": EPILOGUES[2]}
    plain, given = OP.parse_args(base), OP.parse_args({**base, "colsums": True})
    a, b, az, *extras = _inputs(plain, 4)
    sums = b.astype(np.int64).sum(axis=0).astype(np.int32)
    want = OP.reference(a, b, az, *extras, **plain)
    np.testing.assert_array_equal(OP.reference(a, b, az, sums, *extras, **given), want)
    s, tensors = OP.schedule(OP.default_config(given, HOST), given, HOST)
    assert [t.name for t in tensors[:4]] == ["A", "B", "AZ", "BS"]
    out = np.zeros(tensors[-1].shape_ints, tensors[-1].dtype)
    tuner.build(s, tensors, target=HOST)(a, b, az, sums, *extras, out)
    assert np.abs(out.astype(np.int32) - want.astype(np.int32)).max() <= 1
