from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tuner
from search_spaces import OperatorError, get_operator, matmul
from tuner.lower.ir import Alloc, For, Stmt
from tuner.lower.visitor import walk_stmts
from tuner.target import Target
from tuner.te.expr import Const

from ..core.ops import chunked
from .targets import AVX2, AVX512


def check(  # type: ignore[no-untyped-def]
    cfg,
    m: int,
    n: int,
    k: int,
    dtype: str = "float32",
    trans_a: bool = False,
    trans_b: bool = False,
) -> None:
    rng = np.random.default_rng(1)
    s, tensors = matmul.schedule(cfg, m, n, k, dtype, trans_a, trans_b)
    shape_a, shape_b = tensors[0].shape_ints, tensors[1].shape_ints
    if dtype == "int8":
        a = rng.integers(-128, 128, shape_a).astype(np.int8)
        b = rng.integers(-128, 128, shape_b).astype(np.int8)
    else:
        a, b = rng.random(shape_a).astype(dtype), rng.random(shape_b).astype(dtype)
    out = np.full((m, n), 7, tensors[-1].dtype)  # no kernel may rely on a zeroed output
    tuner.build(s, tensors)(a, b, out)
    expected = matmul.reference(a, b, trans_a, trans_b)
    if dtype == "int8":
        np.testing.assert_array_equal(out, expected)
    else:
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_default_config_is_in_the_space_and_correct() -> None:
    cfg = matmul.config_space(67, 45, 33, target=AVX2).validate(
        matmul.default_config(67, 45, 33, target=AVX2)
    )
    check(cfg, 67, 45, 33)


def test_int8_accumulates_exactly_in_int32_on_awkward_shapes() -> None:
    """127 * 127 * 600 overflows int16 and loses bits in float32: only int32 sums are exact."""
    m, n, k = 17, 31, 600
    cfg = matmul.config_space(m, n, k, target=AVX2).validate(
        matmul.default_config(m, n, k, target=AVX2)
    )
    s, tensors = matmul.schedule(cfg, m, n, k, "int8")
    assert tensors[-1].dtype == "int32"
    a = np.full((m, k), 127, np.int8)
    b = np.full((k, n), 127, np.int8)
    b[::2] = -128
    out = np.zeros((m, n), np.int32)
    tuner.build(s, tensors)(a, b, out)
    np.testing.assert_array_equal(out, matmul.reference(a, b))
    check(cfg, m, n, k, dtype="int8")


def test_both_operands_transposed() -> None:
    m, n, k = 13, 29, 70
    space = matmul.config_space(m, n, k, trans_a=True, trans_b=True, target=AVX2)
    check(
        space.validate(matmul.default_config(m, n, k, trans_a=True, target=AVX2)),
        m,
        n,
        k,
        "float32",
        True,
        True,
    )


def test_float64_gets_a_tile_of_twelve_4_lane_registers() -> None:
    m, n, k = 19, 23, 37
    cfg = matmul.default_config(m, n, k, dtype="float64", target=AVX2)
    assert cfg["mr"] * cfg["nr"] <= 12 * 4
    assert matmul.accumulator_lanes("float64", AVX2) == 4
    space = matmul.config_space(m, n, k, "float64", trans_b=True, target=AVX2)
    check(space.validate(cfg), m, n, k, "float64", trans_b=True)


@pytest.mark.parametrize(
    "m, n, k", [(1, 1, 1), (1, 3, 5), (5, 3, 70), (7, 45, 33), (128, 3072, 768), (1024, 1024, 1024)]
)
@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (True, False), (False, True)])
def test_default_config_is_valid_for_any_shape(
    m: int, n: int, k: int, trans_a: bool, trans_b: bool
) -> None:
    space = matmul.config_space(m, n, k, trans_a=trans_a, trans_b=trans_b, target=AVX2)
    cfg = space.validate(matmul.default_config(m, n, k, trans_a, target=AVX2))
    # K in as few blocks of at most 512 as there can be, cut evenly: no KC beyond K
    # (a longer reduction loop than there is K) and no short last block.
    assert cfg["kc"] <= k and -(-k // cfg["kc"]) == -(-k // 512)
    assert cfg["kc"] * (-(-k // cfg["kc"])) - k < -(-k // cfg["kc"])


def _loops(s: Stmt) -> list[For]:
    return [f for f in walk_stmts(s) if isinstance(f, For)]


def test_default_1024_is_the_register_blocked_nest() -> None:
    """Cheap (no compile): 4 parallel column blocks (2 per core), 12-accumulator tiles."""
    s, tensors = matmul.schedule(
        matmul.default_config(1024, 1024, 1024, target=AVX2), 1024, 1024, 1024
    )
    loops = _loops(tuner.lower(s, tensors).body)
    parallel = [f for f in loops if f.kind == "parallel"]
    assert len(parallel) == 1 and parallel[0].extent.value == 4  # type: ignore[attr-defined]
    cfg = matmul.default_config(1024, 1024, 1024, target=AVX2)
    assert cfg["mr"] * cfg["nr"] == 12 * 8 and cfg["kc"] == 512


def test_random_legal_configs_lower() -> None:
    """Cheap (no compile): the constraints admit only schedules that lower."""
    rng = np.random.default_rng(0)
    for m, n, k, ta, tb in [
        (1, 1, 1, False, False),
        (7, 40, 33, True, True),
        (64, 13, 300, False, True),
    ]:
        space = matmul.config_space(m, n, k, trans_a=ta, trans_b=tb, target=AVX2)
        for cfg in space.sample_many(rng, 25):
            s, tensors = matmul.schedule(cfg, m, n, k, "float32", ta, tb)
            tuner.lower(s, tensors)


@given(
    st.sampled_from([1, 7, 31, 64]),
    st.sampled_from([1, 13, 40]),
    st.sampled_from([1, 29, 64]),
    st.booleans(),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_random_configs_match_numpy_on_awkward_shapes(
    m: int, n: int, k: int, trans_a: bool, trans_b: bool, seed: int
) -> None:
    space = matmul.config_space(m, n, k, trans_a=trans_a, trans_b=trans_b, target=AVX2)
    check(space.sample(np.random.default_rng(seed)), m, n, k, "float32", trans_a, trans_b)


def test_space_rejects_bad_configs() -> None:
    space = matmul.config_space(64, 64, 64, target=AVX2)
    with pytest.raises(ValueError, match="mr"):
        space.validate({**matmul.default_config(64, 64, 64, target=AVX2), "mr": "__import__('os')"})
    with pytest.raises(ValueError, match="registers"):
        space.validate({**matmul.default_config(64, 64, 64, target=AVX2), "mr": 8, "nr": 32})
    transposed = matmul.config_space(64, 64, 64, trans_b=True, target=AVX2)
    with pytest.raises(ValueError, match="transposed B is packed"):
        transposed.validate({**matmul.default_config(64, 64, 64, target=AVX2), "pack_b": False})


def test_packing_a_is_a_knob_and_configs_of_older_logs_read_as_unpacked() -> None:
    space = matmul.config_space(32, 40, 24, target=AVX2)
    old = {k: v for k, v in matmul.default_config(32, 40, 24, target=AVX2).items() if k != "pack_a"}
    assert space.validate(old)["pack_a"] is False, "logs from before the knob read A in place"
    s, tensors = matmul.schedule(space.validate(old), 32, 40, 24)
    assert "A_global" not in str(tuner.lower(s, tensors))
    packed = space.validate({**old, "pack_a": True})
    s, tensors = matmul.schedule(packed, 32, 40, 24)
    assert "A_global = allocate(float32[" in str(tuner.lower(s, tensors))
    check(packed, 32, 40, 24, "float32", False, False)
    cfg = matmul.default_config(32, 32, 32, trans_a=True, target=AVX2)
    assert cfg["pack_a"] is True, "a transposed A is packed by default"
    unpacked = {k: v for k, v in cfg.items() if k != "pack_a"}
    with pytest.raises(ValueError, match="missing knob 'pack_a'"):  # that space always had it
        matmul.config_space(32, 32, 32, trans_a=True, target=AVX2).validate(unpacked)


def test_records_of_older_logs_get_the_new_knob_so_one_schedule_has_one_key() -> None:
    from records import Record
    from search_spaces import canonical_records
    from tuner.target import Target
    from tuner.workload import Workload

    w = Workload.make("matmul", M=32, N=40, K=24)
    old = {k: v for k, v in matmul.default_config(32, 40, 24, target=AVX2).items() if k != "pack_a"}
    rec = Record.make(w, Target.from_name("cpu"), old, samples=(1e-3,))
    (done,) = canonical_records([rec])
    assert done.config == {**old, "pack_a": False, "pack_a_at": "block", "parallel_at": "cols"}
    assert done.samples == rec.samples and done.workload.as_dict()["trans_b"] is False


def test_registered_operator_takes_the_transpose_flags() -> None:
    op = get_operator("matmul")
    args = op.parse_args({"M": "3", "N": "4", "K": "5", "trans_b": "true"})
    a, b = op.make_inputs(args)
    assert b.shape == (4, 5)
    np.testing.assert_allclose(op.reference(a, b, **args), a @ b.T, rtol=1e-6)
    with pytest.raises(OperatorError, match="trans_a must be a bool"):
        op.parse_args({"M": 3, "N": 4, "K": 5, "trans_a": "maybe"})
    with pytest.raises(OperatorError, match="M must be a positive integer"):
        op.parse_args({"M": 0, "N": 4, "K": 5})


@pytest.mark.parametrize("unroll", [2, 4, 8])
@pytest.mark.parametrize("k, kc", [(96, 32), (72, 72)])
def test_k_unroll_unrolls_the_tile_update_by_constant_steps(unroll: int, k: int, kc: int) -> None:
    """K in three blocks of KC, or in one: every unrolled trip stays whole."""
    m, n = 13, 37
    space = matmul.config_space(m, n, k, target=AVX2)
    cfg = space.validate(
        {**matmul.default_config(m, n, k, target=AVX2), "kc": kc, "k_unroll": unroll}
    )
    s, tensors = matmul.schedule(cfg, m, n, k)
    loops = [f for f in _loops(tuner.lower(s, tensors).body) if f.kind == "unroll"]
    assert loops and all(isinstance(f.extent, Const) and f.extent.value == unroll for f in loops)
    source = tuner.build(s, tensors).source
    updates = [line for line in source.splitlines() if "C_local[" in line and "+=" in line]
    assert len(updates) == unroll * len(loops)  # one copy of the update per step
    check(cfg, m, n, k)


def test_k_unroll_must_divide_every_block_of_k_and_older_logs_read_as_not_unrolled() -> None:
    space = matmul.config_space(16, 16, 1001, target=AVX2)
    with pytest.raises(ValueError, match="k_unroll divides every block of K"):
        space.validate({**matmul.default_config(16, 16, 1001, target=AVX2), "k_unroll": 2})
    for kc in (32, 128):  # 72 = 32 + 32 + 8; one block of 72 < 128
        with pytest.raises(ValueError, match="k_unroll divides every block of K"):
            matmul.config_space(16, 16, 72, target=AVX2).validate(
                {**matmul.default_config(16, 16, 72, target=AVX2), "kc": kc, "k_unroll": 2}
            )
    assert matmul.default_config(16, 16, 1001, target=AVX2)["k_unroll"] == 1
    assert matmul.default_config(1024, 1024, 1024, target=AVX2)["k_unroll"] == 4
    old = {
        k: v for k, v in matmul.default_config(16, 16, 64, target=AVX2).items() if k != "k_unroll"
    }
    assert matmul.config_space(16, 16, 64, target=AVX2).validate(old)["k_unroll"] == 1


@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("trans_a", [False, True])
def test_a_packed_once_before_the_nest(parallel: bool, trans_a: bool) -> None:
    """31 rows in panels of 6: the last panel is short; the pack is its own parallel loop."""
    m, n, k = 31, 40, 29
    space = matmul.config_space(m, n, k, trans_a=trans_a, target=AVX2)
    base = matmul.default_config(m, n, k, trans_a=trans_a, target=AVX2)
    cfg = space.validate(
        {**base, "mr": 6, "nr": 8, "pack_a": True, "pack_a_at": "once", "parallel": parallel}
    )
    s, tensors = matmul.schedule(cfg, m, n, k, trans_a=trans_a)
    body = tuner.lower(s, tensors).body
    assert isinstance(body, Alloc) and body.buffer.name == "A_global"
    assert body.buffer.size >= m * k
    parallel_loops = [f for f in _loops(body) if f.kind == "parallel"]
    assert len(parallel_loops) == (2 if parallel else 0)
    check(cfg, m, n, k, trans_a=trans_a)
    with pytest.raises(ValueError, match="pack_a_at only matters when A is packed"):
        matmul.config_space(m, n, k, target=AVX2).validate({**cfg, "pack_a": False})


@pytest.mark.parametrize(
    "knobs",
    [
        {"mr": 14, "nr": 32, "parallel": False},  # 28 accumulators of 16 lanes
        {"mr": 6, "nr": 64, "pack_a": True, "pack_a_at": "once", "parallel": True},  # 24
    ],
)
def test_tiles_only_avx512_registers_hold_build_and_match_numpy(knobs: dict) -> None:
    """Prime extents: every tile is an edge tile in at least one direction."""
    m, n, k = 37, 53, 41
    cfg = {**matmul.default_config(m, n, k, target=AVX512), **knobs}
    assert matmul.tile_registers(cfg["mr"], cfg["nr"], AVX512.lanes("float32")) > 16
    assert not matmul.config_space(m, n, k, target=AVX2).is_valid(cfg)
    check(matmul.config_space(m, n, k, target=AVX512).validate(cfg), m, n, k)


def test_a_wide_tile_through_the_registry() -> None:
    op = get_operator("matmul")
    args = op.parse_args({"M": 29, "N": 67, "K": 31, "trans_b": True})
    cfg = op.space(args, AVX512).validate({**op.default_config(args, AVX512), "mr": 12, "nr": 32})
    s, tensors = op.schedule(cfg, args, AVX512)
    a, b = op.make_inputs(args, target=AVX512)
    out = np.empty((29, 67), np.float32)
    tuner.build(s, tensors)(a, b, out)
    np.testing.assert_allclose(out, op.reference(a, b, **args), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("epilogue", ["none", "add@c;relu"])
def test_few_columns_over_many_rows_run_row_blocks_on_the_thread_pool(epilogue: str) -> None:
    """A 7 x 7 pointwise convolution's product: one column block, row blocks in parallel,
    the (single) column and k loops unwrapped so the pool runs them, not prange."""
    from tuner.target import Target

    op = get_operator("matmul")
    two = Target.make("cpu", vector_lanes=8, vector_registers=16, threads=2)
    args = op.parse_args({"M": 384, "N": 49, "K": 37, "channels": "rows", "epilogue": epilogue})
    cfg = op.space(args, two).validate(op.default_config(args, two))
    assert cfg["parallel_at"] == "rows" and cfg["nc_tiles"] * cfg["nr"] >= 49
    s, tensors = op.schedule(cfg, args, two)
    kern = tuner.build(s, tensors, target=two)
    assert chunked(kern.source)
    inputs = op.make_inputs(args, seed=1, target=two)
    out = np.full(tensors[-1].shape_ints, 7, np.float32)
    kern(*inputs, out)
    np.testing.assert_allclose(out, op.reference(*inputs, **args), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("m", "n", "k", "whole"),
    [
        (1024, 196, 64, True),
        (250, 197, 41, True),
        (260, 196, 40, False),
        (128, 196, 64, False),
        (512, 784, 32, False),
    ],
)
def test_a_few_hundred_columns_over_many_rows_take_128_row_blocks(
    m: int, n: int, k: int, whole: bool
) -> None:
    """Where column blocks would be one panel wide (a 14 x 14 image's pointwise product),
    row blocks of 4 x 3-vector tiles run in parallel over all the columns, and compute
    the same product; one row block, or columns past 256, keep column blocks."""
    from tuner.target import Target

    op = get_operator("matmul")
    two = Target.make("cpu", vector_lanes=8, vector_registers=16, threads=2)
    args = op.parse_args({"M": m, "N": n, "K": k, "channels": "rows", "epilogue": "add@c;relu"})
    cfg = op.space(args, two).validate(op.default_config(args, two))
    taken = (cfg["parallel_at"], cfg["mr"], cfg["nr"], cfg["mc_tiles"])
    assert (taken == ("rows", 4, 24, 32)) is whole
    if whole:
        assert cfg["nc_tiles"] * cfg["nr"] >= n
    s, tensors = op.schedule(cfg, args, two)
    inputs = op.make_inputs(args, seed=2, target=two)
    out = np.full(tensors[-1].shape_ints, 7, np.float32)
    tuner.build(s, tensors, target=two)(*inputs, out)
    np.testing.assert_allclose(out, op.reference(*inputs, **args), rtol=1e-4, atol=1e-5)


_SHAPES_OF_MODELS = [
    (m, n, k)
    for m in (24, 64, 160, 256, 512, 2048)
    for n in (1, 7, 49, 169, 196, 784, 3025, 3136)
    for k in (27, 64, 147, 576)
]


@pytest.mark.parametrize("lanes,registers", [(8, 16), (16, 32)])
def test_epilogue_blocks_are_wider_than_one_narrow_panel(lanes: int, registers: int) -> None:
    """With a fused epilogue, column blocks run in parallel are at least 48 columns wide
    wherever a wider block still leaves every thread a block (one 32-column panel a block
    ran at a third of the nest's speed on two threads); no block is wider than 256."""
    from search_spaces._gemm import blocks
    from search_spaces._matmul_parallel import EPILOGUE_BLOCK_COLUMNS

    two = Target.make("cpu", vector_lanes=lanes, vector_registers=registers, threads=2)
    for m, n, k in _SHAPES_OF_MODELS:
        cfg = matmul.default_config(m, n, k, target=two, epilogue="add@c;relu")
        if cfg.get("parallel_at", "cols") != "cols":
            continue
        width, nr = int(cfg["nc_tiles"]) * int(cfg["nr"]), int(cfg["nr"])
        assert width <= max(256, nr), (m, n, k, cfg)
        if width < EPILOGUE_BLOCK_COLUMNS:
            wider = [w for w in (2 * width, 4 * width) if w >= EPILOGUE_BLOCK_COLUMNS]
            assert all(len(blocks(n, w)) < 2 for w in wider), (m, n, k, cfg)


@pytest.mark.parametrize("lanes,registers", [(8, 16), (16, 32)])
def test_row_blocks_share_the_rows_out_most_evenly(lanes: int, registers: int) -> None:
    """Where the default runs row blocks in parallel, no other row block of its choices
    would give the busiest of two threads fewer rows."""
    from search_spaces._gemm import blocks, busiest_share
    from search_spaces._matmul_parallel import ROW_BLOCK_TILES, WHOLE_ROWS_TILES

    two = Target.make("cpu", vector_lanes=lanes, vector_registers=registers, threads=2)
    seen = 0
    for m, n, k in _SHAPES_OF_MODELS:
        cfg = matmul.default_config(m, n, k, target=two, epilogue="add@c")
        if cfg.get("parallel_at") != "rows" or cfg["mc_tiles"] == WHOLE_ROWS_TILES:
            continue
        seen += 1
        mr = int(cfg["mr"])
        share = busiest_share(blocks(m, mr * int(cfg["mc_tiles"])), 2)
        assert share <= min(busiest_share(blocks(m, mr * t), 2) for t in ROW_BLOCK_TILES)
    assert seen, "some shape of the grid runs row blocks"
