from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tuner
from search_spaces import OperatorError, get_operator
from search_spaces import conv2d as cv
from search_spaces.conv2d import Conv2d
from tuner.target import Target

from .targets import AVX2, AVX512


def naive(p: Conv2d, x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """The definition, one output element at a time (float64), independent of the module."""
    xc = x.transpose(0, 3, 1, 2) if p.nhwc else x
    y = np.zeros((p.N, p.K, p.OH, p.OW))
    kg = p.K // p.groups
    for n, k, oh, ow in itertools.product(range(p.N), range(p.K), range(p.OH), range(p.OW)):
        acc = 0.0 if b is None else float(b[k])
        for c, r, s in itertools.product(range(p.Cg), range(p.R), range(p.S)):
            h = oh * p.stride + r * p.dilation - p.pad
            v = ow * p.stride + s * p.dilation - p.pad
            if 0 <= h < p.H and 0 <= v < p.W:
                acc += float(xc[n, (k // kg) * p.Cg + c, h, v]) * float(w[k, c, r, s])
        y[n, k, oh, ow] = max(acc, 0.0) if p.activation == "relu" else acc
    return y.transpose(0, 2, 3, 1) if p.nhwc else y


def inputs(p: Conv2d, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    xshape = (p.N, p.H, p.W, p.C) if p.nhwc else (p.N, p.C, p.H, p.W)
    arrays = [rng.standard_normal(xshape), rng.standard_normal((p.K, p.Cg, p.R, p.S))]
    if p.bias:
        arrays.append(rng.standard_normal(p.K))
    return [a.astype(np.float32) for a in arrays]


def check(cfg, p: Conv2d) -> None:  # type: ignore[no-untyped-def]
    arrays = inputs(p)
    s, tensors = cv.schedule(cfg, p, target=AVX2)
    out = np.full(tensors[-1].shape_ints, 12345, np.float32)
    tuner.build(s, tensors)(*arrays, out)
    np.testing.assert_allclose(out, cv.reference(p, *arrays), rtol=1e-4, atol=1e-4)


AWKWARD = [
    Conv2d(1, 3, 7, 11, 5, 3, 3, stride=1, pad=1, bias=True, activation="relu"),
    Conv2d(2, 4, 9, 6, 6, 3, 2, stride=2, pad=2, dilation=2, groups=2, layout="NHWC"),
    Conv2d(1, 6, 5, 5, 3, 1, 1, groups=3, bias=True),
    Conv2d(1, 1, 1, 1, 1, 1, 1),
    Conv2d(1, 2, 3, 4, 17, 3, 3, stride=3, pad=0, layout="NHWC", activation="relu"),
]


@pytest.mark.parametrize("p", AWKWARD, ids=str)
def test_reference_matches_the_definition(p: Conv2d) -> None:
    arrays = inputs(p)
    b = arrays[2] if p.bias else None
    expected = naive(p, arrays[0], arrays[1], b)
    np.testing.assert_allclose(cv.reference(p, *arrays), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cv.numpy_fast(p, *arrays), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("p", AWKWARD[:2], ids=str)
def test_default_config_is_in_the_space_and_correct(p: Conv2d) -> None:
    check(cv.config_space(p, target=AVX2).validate(cv.default_config(p, target=AVX2)), p)


@pytest.mark.parametrize(
    "p",
    [
        *AWKWARD,
        Conv2d(1, 64, 56, 56, 64, 3, 3, pad=1),
        Conv2d(1, 256, 56, 56, 64, 1, 1),
        Conv2d(1, 128, 56, 56, 128, 3, 3, stride=2, pad=1, layout="NHWC"),
    ],
    ids=str,
)
def test_default_config_is_valid_for_any_shape(p: Conv2d) -> None:
    cv.config_space(p, target=AVX2).validate(cv.default_config(p, target=AVX2))


@pytest.mark.parametrize(
    ("size", "tile"), [(7, (1, 4)), (14, (3, 2)), (28, (6, 1)), (56, (6, 1)), (112, (6, 1))]
)
def test_the_default_tile_trades_the_wide_row_for_one_that_fits_a_small_output(
    size: int, tile: tuple[int, int]
) -> None:
    """6 columns leave a large edge tile at 7 and 14 (ResNet's and MobileNet's late stages)."""
    p = Conv2d(1, 256, size, size, 256, 3, 3, pad=1, bias=True)
    for target in (AVX2, AVX512):
        cfg = cv.default_config(p, target=target)
        assert (cfg["owr"], cfg["ohr"]) == tile
        assert cfg["reduction"] == ("rsc" if size % tile[0] == 0 and size % tile[1] == 0 else "crs")
        cv.config_space(p, target=target).validate(cfg)


def test_sampled_legal_configs_lower() -> None:
    """Cheap (no compile): the constraints admit only schedules that lower."""
    for p in AWKWARD[:3]:
        space = cv.config_space(p, target=AVX2)
        rng = np.random.default_rng(0)
        for _ in range(25):
            s, tensors = cv.schedule(space.sample(rng), p, target=AVX2)
            tuner.lower(s, tensors)


@st.composite
def workloads(draw: st.DrawFn) -> Conv2d:
    groups = draw(st.sampled_from([1, 1, 2]))
    p = Conv2d(
        N=draw(st.sampled_from([1, 2])),
        C=groups * draw(st.sampled_from([1, 3])),
        H=draw(st.sampled_from([1, 5, 7])),
        W=draw(st.sampled_from([1, 6, 13])),
        K=groups * draw(st.sampled_from([1, 5, 9])),
        R=draw(st.sampled_from([1, 3])),
        S=draw(st.sampled_from([1, 2, 3])),
        stride=draw(st.sampled_from([1, 2])),
        pad=draw(st.sampled_from([0, 1, 2])),
        dilation=draw(st.sampled_from([1, 2])),
        groups=groups,
        layout=draw(st.sampled_from(["NCHW", "NHWC"])),
        bias=draw(st.booleans()),
        activation=draw(st.sampled_from(["none", "relu"])),
    )
    try:
        p.check()
    except OperatorError:
        assume(False)
    return p


@given(workloads(), st.integers(0, 2**32 - 1))
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_random_configs_match_numpy_on_awkward_shapes(p: Conv2d, seed: int) -> None:
    check(cv.config_space(p, target=AVX2).sample(np.random.default_rng(seed)), p)


@pytest.mark.slow
@given(workloads(), st.integers(0, 2**32 - 1))
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_many_random_configs_match_numpy(p: Conv2d, seed: int) -> None:
    check(cv.config_space(p, target=AVX2).sample(np.random.default_rng(seed + 1)), p)


def test_registered_operator_end_to_end() -> None:
    op = get_operator("conv2d")
    raw = {"C": "6", "H": "5", "W": "5", "K": "3", "R": "1", "S": "1", "groups": "3"}
    args = op.parse_args({**raw, "bias": "true"})
    arrays = op.make_inputs(args)
    assert [a.shape for a in arrays] == [(1, 6, 5, 5), (3, 2, 1, 1), (3,)]
    s, tensors = op.schedule(op.default_config(args, AVX2), args, AVX2)
    out = np.zeros(tensors[-1].shape_ints, np.float32)
    tuner.build(s, tensors)(*arrays, out)
    np.testing.assert_allclose(out, op.reference(*arrays, **args), rtol=1e-4, atol=1e-4)
    assert op.flops(args) == 2 * 3 * 5 * 5 * 2


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"groups": "3"}, "groups=3 must divide both C=4 and K=6"),
        ({"R": "10", "pad": "1"}, r"window R=10 .* does not fit the padded input"),
        ({"R": "1", "dilation": "4"}, "window S=3 \\(dilation 4, span 9\\)"),
        ({"pad": "-1"}, "pad must be a non-negative integer"),
        ({"stride": "0"}, "stride must be a positive integer"),
        ({"layout": "NCWH"}, "layout must be one of NCHW, NHWC"),
        ({"activation": "gelu"}, "activation must be one of none, relu"),
        ({"bias": "maybe"}, "bias must be a bool"),
    ],
)
def test_arguments_are_validated_in_one_sentence(raw: dict[str, str], message: str) -> None:
    base = {"C": "4", "H": "7", "W": "7", "K": "6"}
    with pytest.raises(OperatorError, match=message):
        get_operator("conv2d").parse_args({**base, **raw})


def test_space_rejects_bad_configs() -> None:
    p = Conv2d(1, 64, 56, 56, 64, 3, 3, pad=1)
    space, default = cv.config_space(p, target=AVX2), cv.default_config(p, target=AVX2)
    with pytest.raises(ValueError, match="registers"):
        space.validate({**default, "kr": 32, "owr": 6})
    with pytest.raises(ValueError, match="SIMD axis"):
        space.validate({**default, "kr": 12, "owr": 1})
    with pytest.raises(ValueError, match="no larger than the output"):
        cv.config_space(Conv2d(1, 4, 5, 5, 3, 3, 3, pad=1), target=AVX2).validate(
            {**default, "kr": 16, "owr": 1}
        )
    nhwc = Conv2d(1, 8, 8, 8, 8, 3, 3, layout="NHWC")
    with pytest.raises(ValueError, match="vector"):
        cv.config_space(nhwc, target=AVX2).validate(
            {**cv.default_config(nhwc, target=AVX2), "vector": "ow"}
        )
    with pytest.raises(ValueError, match="pad_at"):
        cv.config_space(Conv2d(1, 8, 8, 8, 8, 1, 1), target=AVX2).validate(default)


def test_cost_model_figures() -> None:
    p = Conv2d(1, 64, 56, 56, 64, 3, 3, pad=1)
    assert (p.OH, p.OW) == (56, 56)
    assert cv.flops(p) == 2.0 * 64 * 56 * 56 * 64 * 9
    assert cv.bytes_moved(p) == 4.0 * (64 * 56 * 56 * 2 + 64 * 64 * 9)
    assert Conv2d(1, 128, 56, 56, 128, 3, 3, stride=2, pad=1).OH == 28


@pytest.mark.parametrize("vector", ["k", "ow"])
def test_a_tile_only_avx512_registers_hold_builds_and_matches_numpy(vector: str) -> None:
    """Two 16-lane vectors by 12 (24 accumulators): 37 channels, 13 or 31 columns."""
    p = Conv2d(1, 5, 7, 13 if vector == "k" else 31, 37, 3, 3, pad=1, bias=True, activation="relu")
    tile = {"kr": 32, "owr": 12} if vector == "k" else {"kr": 12, "owr": 32}
    cfg = {**cv.default_config(p, AVX512), "vector": vector, "ohr": 1, **tile}
    assert not cv.config_space(p, AVX2).is_valid(cfg)
    arrays = inputs(p)
    s, tensors = cv.schedule(cv.config_space(p, AVX512).validate(cfg), p, AVX512)
    out = np.full(tensors[-1].shape_ints, 12345, np.float32)
    tuner.build(s, tensors)(*arrays, out)
    np.testing.assert_allclose(out, cv.reference(p, *arrays), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("target", "groups", "kr"), [(AVX512, 1, 24), (AVX512, 72, 24), (AVX2, 72, 24)]
)
def test_channels_no_whole_vector_divides_get_an_exact_half_vector_tile(target, groups, kr):
    """72 channels: 4.5 vectors of 16 lanes. The channels-last default tiles them by 24 (one
    and a half vectors, no edge block run element by element); with 8 lanes 24 is whole."""
    c = 72 if groups > 1 else 24
    p = Conv2d(1, c, 9, 10, 72, 3, 3, pad=1, groups=groups, bias=True, layout="NHWC")
    cfg = cv.config_space(p, target).validate(cv.default_config(p, target))
    assert cfg["kr"] == kr
    arrays = inputs(p)
    s, tensors = cv.schedule(cfg, p, target)
    out = np.full(tensors[-1].shape_ints, 12345, np.float32)
    tuner.build(s, tensors)(*arrays, out)
    np.testing.assert_allclose(out, cv.reference(p, *arrays), rtol=1e-4, atol=1e-4)


ROWS_SHAPES = [
    # depthwise, strided 5 x 5 over an odd image; a 7 x 7 plane; a dense conv with a residual
    "C=24,H=13,W=11,K=24,R=5,S=5,pad=2,stride=2,groups=24,block=16,weights=blocked",
    "C=20,H=7,W=7,K=20,R=3,S=3,pad=1,stride=1,groups=20",
    "C=5,H=9,W=6,K=7,R=3,S=3,pad=1,stride=1,block=16,weights=blocked",
]


@pytest.mark.parametrize("shape", ROWS_SHAPES)
@pytest.mark.parametrize("epilogue", ["relu", "add@f;relu"])
def test_padding_per_row_block_and_the_tile_epilogue_match_numpy(shape: str, epilogue: str) -> None:
    """pad_at=rows copies the padded rows each row block reads (``block``: those of each
    channel block's channels); in NHWC the epilogue runs on each register tile: both
    against the reference, over random tiles, both loop orders."""
    # with the row blocks outermost, the next channel block's weights prefetched
    overrides: list[dict[str, Any]] = [
        {"pad_at": "rows", "outer": "rows", "prefetch": True, "pack_w": False},
        *({"pad_at": "rows", "outer": outer, "prefetch": False} for outer in ("channels", "both")),
    ]
    if "groups" in shape:  # a channel block reads its own channels: their rows per block
        overrides.append({"pad_at": "block", "outer": "rows", "prefetch": False})
    _random_configs_match_numpy(shape, 1, epilogue, overrides, seed=3)


def _random_configs_match_numpy(
    shape: str, images: int, epilogue: str, overrides: list[dict[str, Any]], seed: int
) -> None:
    """Channels-last ``shape`` (with a bias and ``epilogue``): a random config with each of
    ``overrides`` applied matches the reference."""
    op = get_operator("conv2d")
    raw = dict(kv.split("=") for kv in shape.split(","))
    args = op.parse_args(
        {**raw, "N": str(images), "layout": "NHWC", "bias": "true", "epilogue": epilogue}
    )
    space = op.space(args, AVX512)
    rng = np.random.default_rng(seed)
    inputs_ = op.make_inputs(args, target=AVX512)
    want = op.reference(*inputs_, **args)
    for override in overrides:
        cfg = {**space.sample(rng).to_json(), **override}
        s, tensors = op.schedule(space.validate(cfg), args, AVX512)
        out = np.full(tensors[-1].shape_ints, 12345, np.float32)
        tuner.build(s, tensors)(*inputs_, out)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4, err_msg=str(cfg))


def test_a_default_pads_per_row_block_but_a_depthwise_one_per_channel_block_or_inline() -> None:
    """Depthwise: inline on a tiny plane, or with whole vectors of channels and at most a
    tenth of the window's taps in the padding; else the rows of each channel block's
    channels."""
    op = get_operator("conv2d")

    def pad_at(raw: str) -> str:
        args = op.parse_args(
            {**dict(kv.split("=") for kv in raw.split(",")), "N": "1", "layout": "NHWC"}
        )
        return str(op.default_config(args, AVX512)["pad_at"])

    assert pad_at("C=48,H=112,W=112,K=48,R=3,S=3,pad=1,stride=2,groups=48") == "inline"
    assert pad_at("C=72,H=56,W=56,K=72,R=3,S=3,pad=1,groups=72,weights=blocked,block=24") == (
        "block"  # a vector and a half of channels
    )
    # 5 x 5: 16 % of the taps in the padding at 14 x 14, 8 % at 28 x 28
    assert pad_at("C=480,H=14,W=14,K=480,R=5,S=5,pad=2,groups=480") == "block"
    assert pad_at("C=240,H=28,W=28,K=240,R=5,S=5,pad=2,groups=240") == "inline"
    assert pad_at("C=96,H=14,W=14,K=96,R=5,S=5,pad=2,stride=2,groups=96") == "inline"
    assert pad_at("C=64,H=56,W=56,K=64,R=3,S=3,pad=1") == "rows"  # dense: rows in cache
    assert pad_at("C=512,H=7,W=7,K=512,R=3,S=3,pad=1") == "rows"  # dense: never inline


def test_a_parallel_default_shares_its_blocks_evenly_over_the_threads() -> None:
    """Five channel blocks over two threads ran three against two (MNASNet's 1152 -> 320 at
    7 x 7): the (channel block, row block) pairs share out instead; 32 blocks stay as they
    are, and one thread needs no sharing."""
    op = get_operator("conv2d")
    two = Target.make("cpu", fingerprint="synthetic-avx512-2", vector_bits=512, vector_lanes=16,
                      vector_registers=32, threads=2)  # fmt: skip

    def outer(raw: str, target: Target) -> str:
        pairs = dict(kv.split("=") for kv in raw.split(","))
        args = op.parse_args({**pairs, "N": "1", "layout": "NHWC", "weights": "blocked"})
        return str(op.default_config(args, target)["outer"])

    assert outer("C=1152,H=7,W=7,K=320,R=1,S=1,block=64", two) == "both"
    assert outer("C=512,H=7,W=7,K=2048,R=1,S=1,block=64", two) == "channels"
    assert outer("C=1152,H=7,W=7,K=320,R=1,S=1,block=64", AVX512) != "both"


def test_a_row_split_default_takes_a_tile_whose_row_blocks_share_out_evenly() -> None:
    """MobileNetV2's 1 x 1 convolutions at 14 x 14 (small weights: split by rows): with two
    threads the tile's row blocks are an even count, so the split stays by rows and each
    thread reads the rows it wrote before (7 x 2 pixels, 7 row blocks, turned it channel
    major and ran 1.1 to 1.2 times slower in the model); one thread has nothing to share."""
    op = get_operator("conv2d")
    two = Target.make("cpu", fingerprint="synthetic-avx512-2", vector_bits=512, vector_lanes=16,
                      vector_registers=32, threads=2)  # fmt: skip
    for raw in ("C=384,H=14,W=14,K=64", "C=576,H=14,W=14,K=96", "C=256,H=56,W=56,K=64"):
        pairs = dict(kv.split("=") for kv in raw.split(","))
        args = op.parse_args({**pairs, "R": "1", "S": "1", "N": "1", "layout": "NHWC"})
        cfg = op.default_config(args, two)
        assert cfg["outer"] == "rows" and -(-int(pairs["H"]) // cfg["ohr"]) % 2 == 0, cfg


def test_a_channels_last_default_keeps_its_live_vectors_in_the_registers() -> None:
    """Accumulators, a step's weight vectors and the broadcast input fit the 32 registers:
    at 7 x 7, four vectors of channels by 7 pixels (28 + 4 + 1) spilled; two by 7 do not."""
    op = get_operator("conv2d")
    for raw in ("C=512,H=7,W=7,K=512,R=3,S=3,pad=1", "C=512,H=7,W=7,K=2048,R=1,S=1"):
        args = op.parse_args(
            {**dict(kv.split("=") for kv in raw.split(",")), "N": "1", "layout": "NHWC"}
        )
        cfg = op.default_config(args, AVX512)
        v = -(-cfg["kr"] // 16)
        assert v * cfg["owr"] * cfg["ohr"] + v + 1 <= 32 - 1, cfg
        assert v * cfg["owr"] * cfg["ohr"] >= 14, cfg


def test_a_channels_last_default_takes_the_widest_tile_the_registers_hold() -> None:
    """At 14 x 14 and 56 x 56 (no edge tile either way) two vectors of channels by 7 x 2
    pixels: 28 accumulators, 31 live vectors of AVX-512's 32; one vector wide (its loads
    bound it) it stays at half the registers."""
    op = get_operator("conv2d")
    for raw in ("C=256,H=14,W=14,K=256,R=3,S=3,pad=1", "C=256,H=56,W=56,K=64,R=1,S=1"):
        pairs = dict(kv.split("=") for kv in raw.split(","))
        cfg = op.default_config(op.parse_args({**pairs, "N": "1", "layout": "NHWC"}), AVX512)
        assert (cfg["kr"], cfg["owr"] * cfg["ohr"]) == (32, 14), cfg
    pairs = {"C": "104", "H": "28", "W": "28", "K": "104", "R": "1", "S": "1", "N": "1"}
    args = op.parse_args({**pairs, "layout": "NHWC", "weights": "blocked", "block": "8"})
    cfg = op.default_config(args, AVX512)
    assert cfg["owr"] * cfg["ohr"] <= 16, cfg


def test_a_channels_last_default_fills_half_the_registers_on_an_output_no_tile_divides() -> None:
    """Over a 71 x 71 output (Inception v3's 80 -> 192 channels, 3 x 3) the tile holds at
    least 16 accumulators of the 32 registers, one of which stays free; with 16 registers
    the tile leaves one free too."""
    op = get_operator("conv2d")
    raw = {"C": "80", "H": "73", "W": "73", "K": "192", "R": "3", "S": "3", "N": "1"}
    args = op.parse_args({**raw, "layout": "NHWC"})
    cfg = op.default_config(args, AVX512)
    v = -(-cfg["kr"] // 16)
    assert v * cfg["owr"] * cfg["ohr"] >= 16, cfg
    assert v * cfg["owr"] * cfg["ohr"] + v + 1 <= 32 - 1, cfg
    avx2 = Target.make("cpu", vector_lanes=8, vector_registers=16, threads=2)
    cfg = op.default_config(args, avx2)
    v = -(-cfg["kr"] // 8)
    assert v * cfg["owr"] * cfg["ohr"] + v + 1 <= 16 - 1, cfg


def test_the_l1_set_pressure_counts_the_lines_one_set_holds() -> None:
    """Lines 4 kB apart share a set of a 32 kB, 8-way L1 (64 sets); 2 kB apart, two sets;
    one line apart, each its own. Lines past the ways cost as many times as they overflow."""
    from search_spaces._target import set_overflow, set_pressure

    l1 = Target.make("cpu", l1d_bytes=32768, l1d_ways=8)
    assert l1.l1d_sets == 64
    assert set_pressure([i * 4096 for i in range(14)], l1) == 14
    assert set_pressure([i * 2048 for i in range(14)], l1) == 7
    assert set_pressure([i * 64 for i in range(14)], l1) == 1
    assert set_pressure([0, 16, 32], l1) == 1  # one line
    assert set_overflow([i * 4096 for i in range(8)], l1) == 1.0
    assert set_overflow([i * 4096 for i in range(14)], l1) == 14 / 8
    assert set_overflow([i * 2048 for i in range(14)], l1) == 1.0
    assert Target.make("cpu").l1d_ways == 8  # a target that does not say
    assert Target.from_name("cpu").l1d_ways >= 1


def test_a_channels_last_tile_overflows_an_l1_set_only_where_it_pays() -> None:
    """1024 input channels put a channels-last image's pixels 4 kB apart, every one in the
    same L1 set: ResNet-50's 1 x 1 of 1024 -> 256 at 14 x 14 in two vectors of channels by
    7 x 2 pixels (14 in one set of 8 ways) ran 1.8 times slower than by 7 x 1 on AMD Zen 4,
    and 1.1 times faster on an AVX-512 Xeon (12 ways). On 8 ways the default's pixels fit
    the ways, dense, strided and depthwise; on 12 the two-vector tile takes its 14 pixels
    (overflowing by 14/12 costs less than half its accumulators), and with ways enough for
    anything it does too."""
    from search_spaces._conv_tiles import _pixel_offsets
    from search_spaces._target import set_pressure

    op = get_operator("conv2d")
    caps = {"vector_bits": 512, "vector_lanes": 16, "vector_registers": 32, "threads": 2}
    eight, twelve = (Target.make("cpu", l1d_bytes=b, l1d_ways=w, **caps) for b, w in ((32768, 8), (49152, 12)))  # fmt: skip
    shapes = (
        "C=1024,H=14,W=14,K=256,R=1,S=1,block=32,weights=blocked",
        "C=1024,H=14,W=14,K=512,R=1,S=1",
        "C=512,H=28,W=28,K=1024,R=1,S=1,stride=2",
        "C=2048,H=7,W=7,K=512,R=1,S=1",
        "C=1024,H=14,W=14,K=1024,R=3,S=3,pad=1,groups=1024",
        "C=256,H=56,W=56,K=512,R=1,S=1,stride=2",
    )

    def default(raw: str, target: Target) -> tuple[dict, int]:
        pairs = dict(kv.split("=") for kv in raw.split(","))
        args = op.parse_args({**pairs, "N": "1", "layout": "NHWC"})
        cfg = op.default_config(args, target)
        return cfg, set_pressure(
            _pixel_offsets(Conv2d.from_args(args), cfg["owr"], cfg["ohr"]), target
        )

    for raw in shapes:
        cfg, pressure = default(raw, eight)
        assert pressure <= eight.l1d_ways, (raw, cfg)
    cfg, pressure = default(shapes[0], eight)
    assert cfg["owr"] * cfg["ohr"] == 7, cfg
    cfg, pressure = default(shapes[0], twelve)
    assert (cfg["owr"] * cfg["ohr"], pressure) == (14, 14), cfg
    roomy = Target.make("cpu", l1d_bytes=1 << 20, l1d_ways=256, **caps)
    cfg, _ = default(shapes[0], roomy)
    assert cfg["owr"] * cfg["ohr"] == 14, cfg


def test_a_tile_that_streams_its_weights_from_l2_takes_more_pixels() -> None:
    """A panel of weights too large for L1 is read from L2 once per tile step for all of the
    tile's pixels: ResNet-50's 1 x 1 of 1024 -> 512 at 14 x 14 ran four vectors by 2 x 2
    pixels 1.27 times slower than two by 7 x 2 (AVX-512 Xeon). A panel that fits, or an
    output of one tile, costs nothing more."""
    from search_spaces._conv_tiles import _weight_stream

    caps = {"vector_bits": 512, "vector_lanes": 16, "vector_registers": 32, "threads": 2}
    xeon = Target.make("cpu", l1d_bytes=49152, l1d_ways=12, **caps)
    big = Conv2d.from_args(get_operator("conv2d").parse_args(
        {"N": 1, "C": 1024, "H": 14, "W": 14, "K": 512, "R": 1, "S": 1, "layout": "NHWC"}
    ))  # fmt: skip
    assert _weight_stream(big, 64, 2, 2, 16, xeon) > _weight_stream(big, 32, 7, 2, 16, xeon) > 1
    small = Conv2d.from_args(get_operator("conv2d").parse_args(
        {"N": 1, "C": 32, "H": 14, "W": 14, "K": 512, "R": 1, "S": 1, "layout": "NHWC"}
    ))  # fmt: skip
    assert _weight_stream(small, 64, 2, 2, 16, xeon) == 1.0
    pooled = Conv2d.from_args(get_operator("conv2d").parse_args(
        {"N": 1, "C": 1024, "H": 1, "W": 1, "K": 512, "R": 1, "S": 1, "layout": "NHWC"}
    ))  # fmt: skip
    assert _weight_stream(pooled, 64, 1, 1, 16, xeon) == 1.0
    cfg = get_operator("conv2d").default_config(
        get_operator("conv2d").parse_args(
            {"N": 1, "C": 1024, "H": 14, "W": 14, "K": 512, "R": 1, "S": 1, "layout": "NHWC"}
        ),
        xeon,
    )
    assert cfg["owr"] * cfg["ohr"] >= 7, cfg


def test_an_output_of_one_row_shares_its_channel_blocks_out() -> None:
    """A 1 x 1 convolution over one row of pixels (ConvNeXt's linear layers) has one row block:
    split by rows, it ran on one thread (1.8 times slower than in pairs on the Xeon)."""
    op = get_operator("conv2d")
    caps = {"vector_bits": 512, "vector_lanes": 16, "vector_registers": 32, "threads": 2}
    xeon = Target.make("cpu", l1d_bytes=49152, l1d_ways=12, **caps)
    for k in (80, 96, 160):
        args = {"N": 1, "C": 384, "H": 1, "W": 3136, "K": k, "R": 1, "S": 1, "layout": "NHWC"}
        for blocked in ({}, {"block": 32, "weights": "blocked"}):
            cfg = op.default_config(op.parse_args({**args, **blocked}), xeon)
            assert cfg["parallel"] and cfg["outer"] != "rows", (k, blocked, cfg)
