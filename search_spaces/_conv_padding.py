"""Where a channels-last convolution's default pads its input (``pad_at``): the padded rows of
a row block, a depthwise channel block's own rows, or the padding read inline.

Part of the channels-last default (``_conv_tiles.channels_last_default``), apart from
its register tile: the choice reads the shape and the tile's width only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._conv_params import Conv2d

__all__ = ["pad_at"]


#: Output planes of at most this many pixels read a depthwise window's padding inline.
_SMALL_PLANE = 64

#: Share of a depthwise window's taps in the padding up to which it reads the padding inline.
_INLINE_PADDING = 0.1


def _padding_share(p: Conv2d) -> float:
    """Share of the window taps over all output pixels that fall in the zero padding."""

    def outside(size: int, out: int, taps: int) -> float:
        spots = (o * p.stride - p.pad + t * p.dilation for o in range(out) for t in range(taps))
        return sum(not 0 <= x < size for x in spots) / (out * taps)

    rows, cols = outside(p.H, p.OH, p.R), outside(p.W, p.OW, p.S)
    return 1 - (1 - rows) * (1 - cols)


def pad_at(p: Conv2d, depthwise: bool, kr: int, lanes: int, outer: str) -> str:
    """Where a channels-last convolution pads its input: per row block; a depthwise one inline
    or per channel block of those rows.

    A padded copy of the whole image (``root``) is written, then read again from
    memory after it has left the cache; the rows a block of output rows reads,
    padded just before their use (``rows``), are read while they are in cache.
    For a depthwise convolution, one multiply-add per loaded input, the whole
    copy costs as much as the convolution (AMD Zen 5, 2 cores, 2026-12-05,
    MNASNet's and MobileNetV2's depthwise layers, bias and relu fused): rows
    against root and inline, ms, 48 x 112 x 112 stride 2 0.046 / 0.057 / 0.064,
    240 x 28 x 28 5 x 5 stride 2 0.038 / 0.040 / 0.063, 480 x 14 x 14 5 x 5
    0.047 / 0.047 / 0.110. A dense convolution's multiply-adds outnumber the
    copy by its output channels, yet the copy's trip through memory still shows
    (same machine, rows against root, ms): ResNet's 3 x 3 at 64 x 56 x 56
    0.457 / 0.492, 256 x 14 x 14 0.457 / 0.485, 64 -> 128 stride 2 0.257 / 0.327,
    MobileNet's stem 0.062 / 0.071, RegNet's grouped 104 x 56 x 56 stride 2 0.073 /
    0.087; even at 7 x 7 (0.574 / 0.566) and 5 x 5 windows (0.376 / 0.370).
    On planes of a few pixels (7 x 7 outputs) most of a depthwise window's taps fall in
    the padding and any copy costs more than its conditional loads: inline 0.023
    and 0.027 ms against rows 0.031 and 0.043 (576 x 14 x 14 5 x 5 stride 2; 1152 x
    7 x 7 5 x 5); a dense convolution's conditional load is in its innermost loop
    (inline: 0.98 ms against 0.46 at 64 x 56 x 56), so it always copies.

    A depthwise block of channels reads only its own input channels, so its padded rows
    are copied per channel block (``block``: 44 kB of MobileNetV2's 56 x 56 x 144 at 2
    rows against 134 kB for all channels, in L1 rather than L2); on larger planes, tiles of
    whole vectors of channels read their padding inline, their conditional loads cheaper
    than any copy, where at most a tenth of the window's taps fall in the padding
    (``_padding_share``: 9 % for 3 x 3 at 14 x 14, 16 % for 5 x 5 at 14 x 14, 8 % at 28 x
    28, 4 % for 5 x 5 stride 2 at 56 x 56). An AVX-512 Xeon (2 threads), every depthwise
    layer of MobileNetV2 and MNASNet in the model, rows / block / inline, ms: 28 x 28 x 192
    0.068 / 0.055 / 0.035, 14 x 14 x 576 0.058 / 0.031 / 0.030, 112 x 112 x 96 stride 2
    0.211 / 0.200 / 0.145, 56 x 56 x 144 0.125 / 0.134 / 0.127; but tiles of a vector and
    a half inline ran twice as slow (MNASNet's 72 channels in 24s: 0.083 / 0.069 / 0.125),
    and 5 x 5 windows at stride 1 (more taps in the padding) slower too (480 x 14 x 14:
    0.098 / 0.069 / 0.076; 120 x 28 x 28 in 40s: 0.097 / 0.090 / 0.106), while EfficientNet's
    5 x 5 on planes of 28 and 56 ran faster inline (240 x 28 x 28 block 0.159, inline
    0.128; 144 x 56 x 56 stride 2 0.106 / 0.082; whole model 1.008x). The Zen 5 figures
    above are from before the copy per block; not re-measured there.
    """
    if not p.pad:
        return "none"
    if not depthwise:
        return "rows"
    if p.OH * p.OW <= _SMALL_PLANE or (kr % lanes == 0 and _padding_share(p) <= _INLINE_PADDING):
        return "inline"
    return "block" if outer == "rows" else "rows"
