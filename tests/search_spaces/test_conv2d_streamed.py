"""conv2d's streamed weights: a reduction chunked over input channels and the weights'
prefetch, their defaults and their results against NumPy."""

from __future__ import annotations

import itertools

import pytest

from search_spaces import conv2d as cv
from search_spaces import get_operator
from search_spaces.conv2d import Conv2d
from tuner.lower.lower import lower
from tuner.lower.printer import render
from tuner.space import ConfigError
from tuner.target import Target

from .targets import AVX512
from .test_conv2d import _random_configs_match_numpy

#: An AVX-512 machine with the caches of a Xeon's core (48 kB of L1, 2 MB of L2).
AVX512_CACHES = Target.make(
    "cpu",
    fingerprint="synthetic-avx512-caches",
    vector_bits=512,
    vector_lanes=16,
    vector_registers=32,
    l1d_bytes=48 * 1024,
    l2_bytes=2 * 1024 * 1024,
    threads=2,
)

CHUNK_SHAPES = [
    # 3 x 3 over a 7 x 7 plane (ResNet's last stage, small); 1 x 1 on an odd plane, no
    # epilogue; a strided grouped window whose group's channels the chunk divides
    "C=48,H=7,W=7,K=40,R=3,S=3,pad=1,stride=1,block=16,weights=blocked",
    "C=96,H=5,W=9,K=24,R=1,S=1,pad=0,stride=1",
    "C=64,H=9,W=11,K=32,R=3,S=3,pad=1,stride=2,groups=2",
]


@pytest.mark.parametrize("shape", CHUNK_SHAPES)
@pytest.mark.parametrize("epilogue", ["none", "add@f;relu"])
def test_a_reduction_chunked_over_input_channels_matches_numpy(shape: str, epilogue: str) -> None:
    """``chunk``: each chunk of input channels runs over every row block of a channel block
    (the partial sums loaded back between chunks), with every kind of padding."""
    raw = dict(kv.split("=") for kv in shape.split(","))
    p = Conv2d.from_args(get_operator("conv2d").parse_args({**raw, "layout": "NHWC"}))
    assert cv.chunks(p), "the shape offers chunks"
    overrides = [
        {"chunk": chunk, "outer": "channels", "pad_at": pad_at if p.pad else "none"}
        | ({"prefetch": True, "pack_w": False} if chunk == cv.chunks(p)[0] else {"prefetch": False})
        for chunk, pad_at in itertools.product(cv.chunks(p), ["root", "inline", "rows"])
    ]
    _random_configs_match_numpy(shape, 2, epilogue, overrides, seed=5)


def test_a_chunk_needs_the_channel_blocks_outermost_and_channels_last() -> None:
    p = Conv2d(1, 64, 7, 7, 64, 3, 3, pad=1, layout="NHWC")
    space = cv.config_space(p, target=AVX512)
    cfg = dict(cv.default_config(p, target=AVX512))
    with pytest.raises(ConfigError, match="chunked only with the channel blocks"):
        space.validate({**cfg, "chunk": 16, "outer": "rows"})
    assert cv.chunks(p) == [8, 16, 32]
    assert cv.chunks(Conv2d(1, 64, 7, 7, 64, 3, 3, pad=1)) == []
    assert cv.chunks(Conv2d(1, 24, 7, 7, 24, 1, 1, layout="NHWC")) == [8]


@pytest.mark.parametrize(
    ("raw", "chunk"),
    [
        ("C=512,H=7,W=7,K=512,R=3,S=3,pad=1", 8),  # 9 MiB of weights, a 6 kB block of sums
        ("C=2048,H=7,W=7,K=512,R=1,S=1,pad=0", 64),  # a 1 x 1 chunk needs 64 steps
        ("C=1024,H=14,W=14,K=512,R=1,S=1,pad=0", 0),  # sums and input overflow L1
        ("C=64,H=56,W=56,K=64,R=3,S=3,pad=1", 0),  # weights fit L2: rows outermost
        # at stride 2 a 1 x 1 reads a quarter of the image: 7 x 7 of the 14 x 14 pixels
        ("C=1024,H=14,W=14,K=2048,R=1,S=1,pad=0,stride=2", 64),
    ],
)
def test_a_default_chunks_a_streamed_weight_reduction_where_its_block_fits_l1(
    raw: str, chunk: int
) -> None:
    op = get_operator("conv2d")
    target = AVX512_CACHES
    pairs = dict(kv.split("=") for kv in raw.split(","))
    args = op.parse_args({**pairs, "N": "1", "layout": "NHWC", "weights": "blocked", "block": "32"})
    cfg = op.default_config(args, target)
    assert cfg["chunk"] == chunk, cfg
    assert cfg["outer"] == "channels" or not chunk
    op.space(args, target).validate(cfg)


def test_the_input_a_window_reads_counts_the_rows_and_columns_it_touches() -> None:
    from search_spaces._conv_tiles import _touched

    assert _touched(7, 1, 2, 1, 14) == 7  # 1 x 1 at stride 2: every other row
    assert _touched(7, 3, 2, 1, 16) == 15  # 3 x 3 at stride 2: overlapping windows
    assert _touched(14, 3, 1, 1, 16) == 16  # stride 1: every padded row
    assert _touched(4, 3, 1, 2, 8) == 8  # dilated: capped at the padded size


def test_a_chunked_default_prefetches_the_next_chunks_weights_unless_it_packs_them() -> None:

    op = get_operator("conv2d")
    target = AVX512_CACHES
    raw = {"C": "512", "H": "7", "W": "7", "K": "512", "R": "3", "S": "3", "pad": "1", "N": "1"}
    args = op.parse_args({**raw, "layout": "NHWC", "weights": "blocked", "block": "32"})
    cfg = op.default_config(args, target)
    assert cfg["chunk"] and cfg["prefetch"], cfg
    assert "prefetch(W[" in render(lower(*op.schedule(cfg, args, target)))
    assert "prefetch(" not in render(lower(*op.schedule({**cfg, "prefetch": False}, args, target)))
    with pytest.raises(ConfigError, match="weights are prefetched unpacked"):
        op.space(args, target).validate({**cfg, "chunk": 0, "outer": "both"})
    packed = op.default_config(op.parse_args({**raw, "layout": "NHWC"}), target)
    assert packed["chunk"] and packed["pack_w"] and not packed["prefetch"], packed


@pytest.mark.parametrize(
    ("raw", "prefetch"),
    [
        ("C=1024,H=14,W=14,K=256,R=1,S=1,pad=0", True),  # each thread reads the panel 7 times
        ("C=64,H=56,W=56,K=256,R=1,S=1,pad=0", False),  # 112 times: in L2 after the first
        ("C=128,H=28,W=28,K=128,R=3,S=3,pad=1", False),  # a window: 3 taps at once is too much
    ],
)
def test_a_rows_outermost_default_prefetches_a_1x1_panel_each_thread_reads_few_times(
    raw: str, prefetch: bool
) -> None:

    op = get_operator("conv2d")
    pairs = dict(kv.split("=") for kv in raw.split(","))
    args = op.parse_args({**pairs, "N": "1", "layout": "NHWC", "weights": "blocked", "block": "32"})
    cfg = op.default_config(args, AVX512_CACHES)
    assert cfg["outer"] == "rows" and not cfg["chunk"], cfg
    assert cfg["prefetch"] == prefetch, cfg
    source = render(lower(*op.schedule({**cfg, "prefetch": True}, args, AVX512_CACHES)))
    assert ("prefetch(W[" in source) == (raw.count("R=1") == 1), "a 1 x 1 reduction spreads it"


def test_a_streamed_1x1_panel_without_chunks_prefetches_the_next_channel_blocks() -> None:
    """1 x 1, 1024 -> 512 at 14 x 14: 2 MB of weights, channel blocks outermost (in
    parallel), no chunk fits L1; each channel block reads its panel 14 times."""
    op = get_operator("conv2d")
    raw = {"C": "1024", "H": "14", "W": "14", "K": "512", "R": "1", "S": "1", "pad": "0"}
    args = op.parse_args({**raw, "N": "1", "layout": "NHWC", "weights": "blocked", "block": "32"})
    cfg = op.default_config(args, AVX512_CACHES)
    assert cfg["outer"] == "channels" and not cfg["chunk"] and cfg["prefetch"], cfg
