"""conv2d's packed weights (``HWIO``, ``blocked``) and its channels-last default."""

from __future__ import annotations

import numpy as np
import pytest

import tuner
from search_spaces import OperatorError, get_operator
from search_spaces import conv2d as cv
from search_spaces.conv2d import Conv2d

from .targets import AVX2, AVX512

#: Awkward shapes: channels no block divides (5 of 8, 17 of 16), a depthwise stride, a 7 x 7
#: first layer of 3 channels, a prime image, one pixel.
PACKED = [
    Conv2d(1, 5, 7, 9, 5, 3, 3, pad=1, layout="NHWC", weights="blocked", block=8, bias=True,
           activation="relu"),
    Conv2d(2, 6, 9, 6, 6, 3, 3, stride=2, pad=1, groups=6, layout="NHWC", weights="blocked",
           block=8),
    Conv2d(1, 7, 13, 13, 17, 1, 1, layout="NHWC", weights="HWIO"),
    Conv2d(1, 3, 11, 10, 17, 7, 7, stride=2, pad=3, layout="NHWC", weights="blocked", block=16),
    Conv2d(1, 4, 1, 1, 9, 1, 1, layout="NHWC", weights="blocked", block=8, epilogue="relu"),
    Conv2d(1, 8, 6, 5, 12, 3, 3, pad=1, groups=2, layout="NCHW", weights="HWIO"),
]  # fmt: skip


def _arrays(p: Conv2d, seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Inputs with the weight in PyTorch's layout, and the same with it packed."""
    rng = np.random.default_rng(seed)
    xshape = (p.N, p.H, p.W, p.C) if p.nhwc else (p.N, p.C, p.H, p.W)
    x = rng.standard_normal(xshape).astype(np.float32)
    w = rng.standard_normal((p.K, p.Cg, p.R, p.S)).astype(np.float32)
    b = [rng.standard_normal(p.K).astype(np.float32)] if p.bias else []
    return [x, w, *b], [x, p.pack_weights(w), *b]


def _run(p: Conv2d, cfg: dict, target=AVX2) -> None:  # type: ignore[no-untyped-def]
    plain, packed = _arrays(p)
    s, tensors = cv.schedule(cfg, p, target=target)
    assert tensors[1].shape_ints == p.weight_shape
    out = np.full(tensors[-1].shape_ints, 12345, np.float32)
    tuner.build(s, tensors)(*packed, out)
    unpacked = Conv2d.from_args({**p.__dict__, "weights": "OIHW", "block": 0})
    np.testing.assert_allclose(out, cv.reference(unpacked, *plain), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("p", PACKED, ids=str)
def test_packing_round_trips_and_the_reference_reads_either_layout(p: Conv2d) -> None:
    plain, packed = _arrays(p)
    np.testing.assert_array_equal(p.oihw(packed[1]), plain[1])
    assert packed[1].shape == p.weight_shape
    unpacked = Conv2d.from_args({**p.__dict__, "weights": "OIHW", "block": 0})
    np.testing.assert_allclose(cv.reference(p, *packed), cv.reference(unpacked, *plain), rtol=1e-6)


@pytest.mark.parametrize("p", PACKED, ids=str)
def test_default_and_random_configs_match_numpy(p: Conv2d) -> None:
    space = cv.config_space(p, target=AVX2)
    _run(p, space.validate(cv.default_config(p, target=AVX2)))
    rng = np.random.default_rng(7)
    for _ in range(2):
        _run(p, space.sample(rng))


def test_an_avx512_default_builds_and_matches_numpy() -> None:
    p = Conv2d(1, 16, 7, 7, 48, 3, 3, pad=1, layout="NHWC", weights="blocked", block=48, bias=True)
    _run(p, cv.config_space(p, target=AVX512).validate(cv.default_config(p, target=AVX512)), AVX512)


@pytest.mark.parametrize("target", [AVX2, AVX512], ids=["avx2", "avx512"])
@pytest.mark.parametrize(
    ("C", "size", "K", "R", "stride", "groups"),
    [
        (64, 56, 64, 3, 1, 1), (512, 7, 512, 3, 1, 1), (256, 14, 256, 3, 1, 1),
        (144, 56, 144, 3, 1, 144), (96, 112, 96, 3, 2, 96), (3, 224, 64, 7, 2, 1),
        (1024, 14, 2048, 1, 2, 1), (16, 112, 96, 1, 1, 1), (13, 49, 169, 3, 1, 1),
    ],
)  # fmt: skip
def test_the_channels_last_default_tiles_whole_vectors_and_wastes_little(
    target, C: int, size: int, K: int, R: int, stride: int, groups: int
) -> None:
    """Structure, not speed: the tile is whole vectors of channels within the registers, no
    wider than the channels by a vector, and wastes at most an edge tile's share."""
    p = Conv2d(1, C, size, size, K, R, R, stride=stride, pad=R // 2, groups=groups,
               layout="NHWC", weights="HWIO")  # fmt: skip
    cfg = cv.config_space(p, target=target).validate(cv.default_config(p, target=target))
    lanes = target.lanes("float32")
    assert cfg["vector"] == "k" and cfg["kr"] % lanes == 0 and cfg["kr"] < K + lanes
    assert cv.vectors(cfg["kr"], lanes) * cfg["owr"] * cfg["ohr"] <= cv.accumulator_budget(target)
    assert cfg["pack_w"] is False  # HWIO loads in place
    covered = -(-p.OW // cfg["owr"]) * cfg["owr"] * -(-p.OH // cfg["ohr"]) * cfg["ohr"]
    assert covered <= 1.5 * p.OW * p.OH


def test_a_block_goes_with_blocked_weights_only() -> None:
    op = get_operator("conv2d")
    base = {"C": "4", "H": "5", "W": "5", "K": "8", "layout": "NHWC"}
    with pytest.raises(OperatorError, match="weights=blocked"):
        op.parse_args({**base, "block": "8"})
    with pytest.raises(OperatorError, match="weights=blocked"):
        op.parse_args({**base, "weights": "blocked"})
    args = op.parse_args({**base, "weights": "blocked", "block": "8"})
    assert [a.shape for a in op.make_inputs(args)] == [(1, 5, 5, 4), (1, 3, 3, 4, 8)]


#: A quantized image (a QDQ model's depthwise and grouped convolutions read their int8
#: activations): depthwise with a stride, groups, a zero point in the padding.
QUANTIZED = [
    Conv2d(1, 6, 9, 7, 6, 3, 3, stride=2, pad=1, groups=6, layout="NHWC", weights="blocked",
           block=8, bias=True, epilogue="clip:0.0:6.0;quant_uint8:0.05:3.0", x_dtype="uint8",
           x_zero_point=131),
    Conv2d(2, 8, 5, 6, 12, 3, 3, pad=2, dilation=2, groups=4, layout="NHWC", weights="blocked",
           block=16, x_dtype="int8", x_zero_point=-9),
]  # fmt: skip


@pytest.mark.parametrize("p", QUANTIZED, ids=str)
def test_a_quantized_image_is_read_less_its_zero_point(p: Conv2d) -> None:
    rng = np.random.default_rng(3)
    info = np.iinfo(p.x_dtype)
    x = rng.integers(info.min, info.max + 1, (p.N, p.H, p.W, p.C)).astype(p.x_dtype)
    w = (rng.standard_normal((p.K, p.Cg, p.R, p.S)) * 0.01).astype(np.float32)
    b = [rng.standard_normal(p.K).astype(np.float32)] if p.bias else []
    space = cv.config_space(p, target=AVX2)
    default = space.validate(cv.default_config(p, target=AVX2))
    # The padding at each of its places: a copy holds float32(x) - zero point, read as is;
    # inline, the image is read less its zero point at each tap.
    places = [{**default, "pad_at": at} for at in space.choices()["pad_at"]]
    cfgs = [default, space.sample(rng), *[c for c in places if space.is_valid(c)]]
    want = cv.reference(p, x, p.pack_weights(w), *b)
    xf = x.astype(np.float32) - p.x_zero_point  # the same convolution of a float image
    floating = Conv2d.from_args({**p.__dict__, "x_dtype": "float32", "x_zero_point": 0})
    np.testing.assert_array_equal(want, cv.reference(floating, xf, p.pack_weights(w), *b))
    for cfg in cfgs:
        s, tensors = cv.schedule(cfg, p, target=AVX2)
        assert tensors[0].dtype == p.x_dtype
        out = np.zeros(tensors[-1].shape_ints, tensors[-1].dtype)
        tuner.build(s, tensors)(x, p.pack_weights(w), *b, out)
        if out.dtype == np.float32:
            np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
        else:  # quantized: within one step
            assert np.abs(out.astype(np.int32) - want.astype(np.int32)).max() <= 1


def test_a_zero_point_goes_with_an_integer_image() -> None:
    with pytest.raises(OperatorError, match="x_zero_point"):
        get_operator("conv2d").parse_args({"C": 4, "H": 5, "W": 5, "K": 4, "x_zero_point": 3})
    with pytest.raises(OperatorError, match="not a uint8"):
        get_operator("conv2d").parse_args(
            {"C": 4, "H": 5, "W": 5, "K": 4, "x_dtype": "uint8", "x_zero_point": -3}
        )
