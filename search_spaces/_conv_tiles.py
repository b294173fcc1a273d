"""conv2d's register tiles: the extents its knobs take, and the default configs that pick them.

Two defaults, by layout. NCHW (``default_config``): 12 accumulators in a row of
pixels, measured shapes only. Channels-last (``channels_last_default``): the tile
of least estimated cost, its vectors along the output channels (what the model
compiler's layout pass runs; ``tuner.graph.layout``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from tuner.target import CACHE_LINE, Target

from ._conv_padding import pad_at
from ._gemm import accumulator_budget
from ._target import evenness, parallel_pays, resolve, set_overflow

if TYPE_CHECKING:
    from ._conv_params import Conv2d

__all__ = [
    "channel_tiles",
    "channels_last_default",
    "chunks",
    "column_tiles",
    "default_config",
    "tiles",
    "vectors",
]

#: Accumulators of the default register tile (as matmul's: two FMA units of latency 5 busy).
_DEFAULT_ACCUMULATORS = 12


_TILES = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32]


def tiles(lanes: int) -> list[int]:
    """Tile extents: ``_TILES`` and one to four vectors of ``lanes`` (48 and 64 with 16)."""
    return sorted({*_TILES, *(lanes * v for v in (1, 2, 3, 4))})


def vectors(n: int, lanes: int) -> int:
    """Vectors of ``lanes`` that ``n`` values take."""
    return -(-n // lanes)


def exact_channel_tiles(k: int, lanes: int) -> list[int]:
    """Channel tiles of whole half vectors that divide ``k`` exactly and are not whole
    vectors: 24 for 72 channels with 16 lanes (MobileNetV3, EfficientNet and MNASNet have
    72, 120, 240, 480, 672 and 1152). In whole vectors 72 is four tiles of 16 and an edge
    of 8 that runs element by element; in tiles of 24 (a vector and a half) it has none."""
    half = max(1, lanes // 2)
    return [d for d in range(half, 4 * lanes + 1, half) if k % d == 0 and d % lanes]


def channel_tiles(p: Conv2d, lanes: int) -> list[int]:
    """``tiles`` and, channels-last, the exact half-vector tiles of the output channels."""
    return sorted({*tiles(lanes), *(exact_channel_tiles(p.K, lanes) if p.nhwc else ())})


def column_tiles(p: Conv2d, lanes: int) -> list[int]:
    """``tiles`` and, channels-last, the output's width and its divisors up to 32: a row of
    7 or 14 pixels in whole tiles (the vectors run along the channels there)."""
    out = set(tiles(lanes))
    if p.nhwc:
        out |= {d for d in range(1, min(p.OW, 32) + 1) if p.OW % d == 0}
    return sorted(out)


def chunks(p: Conv2d) -> list[int]:
    """Input channels a chunked reduction takes at a time (``chunk``): 8 to 64 that divide
    the group's channels, fewer than all of them; channels-last only."""
    return [c for c in (8, 16, 32, 64) if p.nhwc and c < p.Cg and p.Cg % c == 0]


def _largest(choices: list[int], limit: int) -> int:
    return max([v for v in choices if v <= max(limit, 1)], default=1)


#: Work the default's edge tiles may waste (padding columns and rows computed and dropped)
#: before it trades the widest column tile for one that fits the output better.
_DEFAULT_WASTE = 1.25


def _waste(p: Conv2d, owr: int, ohr: int) -> float:
    """Output pixels an OHR x OWR tiling computes per pixel it keeps (edge tiles run whole)."""
    return (-(-p.OW // owr) * owr * -(-p.OH // ohr) * ohr) / (p.OW * p.OH)


def _default_tile(p: Conv2d, pixels: int) -> tuple[int, int]:
    """(OWR, OHR) of the default: the widest row of ``pixels`` columns, unless its edge tile
    wastes over a quarter of the work; then 3 x 2 or 1 x 4, whichever wastes least.

    An edge tile computes whole (its columns past the output clamped, see the schedule),
    so 6 columns over a 7-column output compute 12 (ResNet's last stage), over 14
    compute 18. Measured on one thread beside onnxruntime, medians of 9 rounds
    (experiments/bench_conv_defaults.py): 3 x 3, 256 -> 256 channels, 14 x 14:
    6 x 1 3.96 ms, 3 x 2 3.63, 2 x 3 6.26; 512 -> 512, 7 x 7: 6 x 1 10.3, 1 x 4 8.2;
    1 x 1, 1024 -> 256, 14 x 14: 6 x 1 3.03, 3 x 2 2.72; but 1 x 1, 512 -> 2048,
    7 x 7: 6 x 1 3.39, 1 x 4 3.58. Where the waste is small the row wins: at
    28 x 28 (128 channels, 3 x 3), 6 x 1 3.24 ms, 1 x 4 3.70, 3 x 2 7.8. Which
    tiles vectorize well is irregular (4 x 1 ran 1.5 to 3 times slower than 6 x 1
    at 7 columns), so only these measured shapes are candidates.
    """
    wide = (_largest(_TILES, min(pixels, p.OW)), 1)
    if _waste(p, *wide) <= _DEFAULT_WASTE:
        return wide
    others = [(w, h) for w, h in ((3, 2), (1, 4)) if w * h <= pixels and h <= p.OH and w <= p.OW]
    return min([wide, *others], key=lambda t: _waste(p, *t))


def default_config(p: Conv2d, target: Target | None = None) -> dict[str, Any]:
    """16 output channels (two vectors) x 6 output columns, weights packed, rows in parallel.

    The shape of NUMBA_NOTES' fast direct convolution; fewer channels or columns
    where the output has fewer (a tile wider than the output only wastes lanes),
    and 3 x 2 or 1 x 4 pixels where 6 columns leave a large edge tile (7 or 14
    columns: see ``_default_tile``).
    Measured on one thread (64 -> 64 channels, 3 x 3, 56 rows): about 65 GFLOP/s
    with the reduction ordered c, r, s when the columns leave an edge tile (56
    columns), but 40 against 79 for c, r, s against r, s, c when every tile is
    full (54 columns), so r, s, c is the default there.

    Two vectors are 16 channels with AVX2's 8 lanes and 32 with AVX-512's 16
    (12 accumulators either way; the AVX-512 default is not measured yet).
    """
    tgt = resolve(target)
    if p.nhwc:
        return channels_last_default(p, tgt)
    L = tgt.lanes("float32")
    accumulators = min(_DEFAULT_ACCUMULATORS, accumulator_budget(tgt))
    kr = 2 * L if p.K > L and accumulators >= 2 else L
    owr, ohr = _default_tile(p, accumulators // vectors(kr, L))
    return {
        "vector": "k",
        "kr": kr,
        "owr": owr,
        "ohr": ohr,
        "reduction": "rsc" if p.nhwc or (p.OW % owr == 0 and p.OH % ohr == 0) else "crs",
        "outer": "rows",
        "pack_w": True,
        "pad_at": "root" if p.pad else "none",
        "unroll_window": False,
        "parallel": _splits(p, "rows", kr, ohr, tgt),
    }


def _blocks(p: Conv2d, kr: int, ohr: int) -> tuple[int, int]:
    """(row blocks of all images, channel blocks) of a KR x OHR tiling."""
    return p.N * -(-p.OH // ohr), -(-p.K // kr)


def _splits(p: Conv2d, outer: str, kr: int, ohr: int, target: Target) -> bool:
    """Whether the parallel loop (the outermost: row blocks or channel blocks) has more than
    one iteration to share, and enough multiply-adds to pay for waking the other threads
    (``_target.parallel_pays``). A squeeze-and-excitation
    1 x 1 convolution of a 1 x 1 image has one row block and a few channel blocks, and
    launching threads for it cost more than its work (Zen 5, two threads: 24 -> 72 channels
    3.0 us serial against 6.3 parallel; 120 -> 480 4.2 against 7.3; 960 -> 240, 230 thousand
    multiply-adds, 10.3 against 9.0)."""
    rows, channels = _blocks(p, kr, ohr)
    blocks = {"rows": rows, "channels": channels}.get(outer, rows * channels)
    return blocks > 1 and parallel_pays(p.macs, target)


def _shared_out(p: Conv2d, outer: str, kr: int, ohr: int, threads: int) -> str:
    """``outer``, or ``both`` where the one loop of (channel block, row block) pairs shares
    out over the threads better than ``outer``'s loop alone does.

    Each thread runs one contiguous run of the parallel loop's iterations: MNASNet's
    1 x 1 convolution of 1152 -> 320 channels at 7 x 7 has 5 channel blocks of 64, so one
    thread did 3 and the other 2 (0.110 ms against onnxruntime's 0.080, Zen 5); 35 pairs
    share out evenly. An output of one row (ConvNeXt's linear layers, 3136 pixels in a row)
    has one row block: one thread worked (1.69 ms against 0.92 in pairs, AVX-512 Xeon)."""
    rows, channels = _blocks(p, kr, ohr)
    blocks = rows if outer == "rows" else channels
    if threads < 2:
        return outer
    share = evenness(blocks, 1, threads)
    if share < 0.9 and share < evenness(rows * channels, 1, threads):
        return "both"
    return outer


#: An edge tile (one past the output's channels, columns or rows) costs this many full
#: ones: matmul's measure (``_gemm.tile_cost``), and here 144 channels in tiles of 32 ran
#: 4.6 times slower than in tiles of 16 (depthwise 3 x 3 at 56 x 56, one edge block of 5).
_EDGE_COST = 8


def _efficiency(accumulators: int, depthwise: bool, registers: int, width: int = 2) -> float:
    """Share of the FMA units' peak a register tile ``width`` vectors wide keeps busy.

    Accumulators hide the FMA's latency and the loads between them: 7/8 of the peak from
    half the vector registers (at least 8), all of it from three quarters (at least 12),
    linear between; below half, 3/4 less for each half of them missing (1/2 at a quarter).
    With 16 registers, matmul's 12 ran at 1.0 and 8 at 0.8. With 32 (speed per useful
    multiply-add, the best tile 1.0): Zen 5, Inception v3's 3 x 3 of 80 -> 192 channels at
    71 x 71, four vectors of channels, 8 accumulators 0.49, 12 0.74, 16 0.95, 24 1.0; an
    AVX-512 Xeon (2 threads), ResNet-50's 3 x 3 of 256 channels at 14 x 14, 16 (four
    vectors by 2 x 2 pixels) 0.74, 14 (two by 7) 0.80, 28 (two by 14) 1.0, and at 7 x 7 of
    512 channels two by 7 0.80, two by 14 1.0. A tile one vector wide loads a broadcast
    input for each FMA, so past half the registers its loads bound it: one vector by 14,
    21 and 28 pixels ran 0.70 to 0.83 on the Xeon's 3 x 3, and RegNet's 1 x 1 of 104
    channels in blocks of 8 at 28 x 28 1.2 times slower in 6 x 4 pixels than in 4 x 4. A
    depthwise tile loads a vector for each FMA, so its loads bound it from 4 on.
    """
    if depthwise:
        return min(1.0, accumulators / 4)
    half, full = max(8, registers // 2), max(12, 3 * registers // 4)
    if accumulators <= half or width == 1:
        below = min(accumulators, half)
        return max(0.875 - 0.75 * (half - below) / half, 0.875 * below / half)
    return min(1.0, 0.875 + 0.125 * (accumulators - half) / (full - half))


#: Multiply-adds' time one line of weights read from L2 costs a register tile: an AVX-512
#: Xeon (2 threads), the kernel alone, ResNet-50's 1 x 1 of 1024 -> 512 channels at 14 x 14,
#: four vectors by 7 x 1 pixels (one line a step for each 7 pixels) 0.83 ms against two by
#: 7 x 2 (one for each 14) 0.77; four by 2 x 2 (one for each 2) 0.98.
_L2_LINE_FMAS = 1.2


def _weight_stream(p: Conv2d, kr: int, owr: int, ohr: int, lanes: int, target: Target) -> float:
    """How many times its time a register tile takes where its panel of weights (every tap
    and input channel of its ``kr`` output channels) is too large to stay in L1 beside the
    image: each reduction step then reads its ``kr`` weights from L2, once for all of the
    tile's pixels; the fewer the pixels, the more lines a multiply-add waits for. A chunked
    reduction keeps its chunk's slice of the panel in L1 (``_chunk``); an output of one
    tile reads each weight once, wherever it lies."""
    tiles = p.N * -(-p.OH // ohr) * -(-p.OW // owr)
    if tiles == 1 or 4 * p.Cg * p.R * p.S * kr <= target.l1d_bytes // 2:
        return 1.0
    lines = 4 * kr / CACHE_LINE
    return 1.0 + _L2_LINE_FMAS * lines / (vectors(kr, lanes) * owr * ohr)


def _tile_cost(
    p: Conv2d, kr: int, owr: int, ohr: int, lanes: int, depthwise: bool, registers: int
) -> float:
    """Rough time of covering the output with KR x OWR x OHR tiles (see ``_EDGE_COST``)."""
    cover = [(p.K, kr), (p.OW, owr), (p.OH, ohr)]
    full = math.prod(n // t for n, t in cover)
    count = math.prod(-(-n // t) for n, t in cover)
    work = (full + _EDGE_COST * (count - full)) * vectors(kr, lanes) * lanes * owr * ohr
    v = vectors(kr, lanes)
    return work / _efficiency(v * owr * ohr, depthwise, registers, v)


def _spare(registers: int) -> int:
    """Vector registers a tile leaves free beside its live vectors (``_live_vectors``): one.

    Two vectors of channels by 14 pixels (28 accumulators, 31 live) compile without a spill
    (LLVM's code for the Xeon and for Zen 5 alike: two weight vectors, the broadcast input
    in one or two registers) and were the fastest tile on an AVX-512 Xeon (2 threads) for
    ResNet-50's and GoogLeNet's convolutions at 56 x 56 to 14 x 14, 1.05 to 1.35 times
    faster than 14 accumulators. Zen 5 measured the opposite on GoogLeNet's 1 x 1 at 14 x
    14 (1.1 to 1.2 times slower than tiles of 14), and a tenth of the registers stayed free
    until 2026-12-06; not measured there since. Four vectors by 7 pixels (33 live) spill on
    both.
    """
    return 1


def _live_vectors(kr: int, owr: int, ohr: int, lanes: int) -> int:
    """Vector registers a tile's reduction step holds: its accumulators, the ``kr`` channels
    of weights every pixel multiplies, and the broadcast input.

    Four vectors of channels by a row of 7 pixels (28 accumulators) fit AVX-512's 28
    accumulator registers but not the 33 live ones, and spilled: ResNet's 3 x 3
    convolution of 512 channels at 7 x 7 ran 0.551 ms in that tile against 0.450 in two
    vectors by 7, its 1 x 1 512 -> 2048 0.236 against 0.191 (Zen 5, 2 threads)."""
    v = vectors(kr, lanes)
    return v * owr * ohr + v + 1


#: Reduction steps (input channels x window taps) a chunk runs at least between two loads of
#: its partial sums.
_CHUNK_STEPS = 64


def _touched(out: int, taps: int, stride: int, dilation: int, size: int) -> int:
    """Input rows (or columns) of ``size`` that ``out`` output rows of a window of ``taps`` read:
    a strided 1 x 1 convolution reads every other row and column, a quarter of its image."""
    offsets = {o * stride + t * dilation for o in range(out) for t in range(taps)}
    return min(size, len(offsets))


def _chunk(p: Conv2d, kr: int, target: Target) -> int:
    """Input channels each chunk of a streamed-weight convolution's reduction takes (0: none).

    With the channel blocks outermost (weights larger than half of L2), each row block
    of a channel block read the block's whole weight panel again, from L2 (and from L3
    the first time, the panel cold from the previous inference); the row block's FMAs
    waited on it. Chunked, a chunk of input channels runs over every row block while its
    slice of the panel stays in L1, the partial sums of the whole block kept in a buffer
    and loaded back at the next chunk; the panel then streams once, spread over all the
    block's work. It pays where the block's partial sums, the chunk's weights and its
    slice of the input fit L1 together, and each chunk has enough steps (``_CHUNK_STEPS``)
    to pay for loading the partial sums back: the smallest such chunk. On an AVX-512 Xeon
    (2 threads, ResNet-50 in the model, default tiles, ms): 3 x 3 of 512 channels at 7 x 7
    1.54 unchunked, 1.06 in chunks of 8, 1.15 of 16; 512 at 14 x 14 stride 2 1.73 / 1.27
    / 1.33; 256 at 14 x 14 0.96 / 0.85 / 0.85; 1 x 1 2048 -> 512 at 7 x 7 0.63 / 0.58 in
    chunks of 64; but 1 x 1 1024 -> 512 at 14 x 14 (100 kB of partial sums and input per
    chunk) 0.82 unchunked, 0.90 in chunks of 64, 1.09 of 16. The input counted is what the
    windows read (``_touched``): 1 x 1 1024 -> 2048 at stride 2 (kernel alone, three vectors
    by 7 x 1) 0.87 unchunked, 0.78 in chunks of 64.
    """
    pixels = p.N * p.OH * p.OW
    padded = (
        p.N
        * _touched(p.OH, p.R, p.stride, p.dilation, p.H + 2 * p.pad)
        * _touched(p.OW, p.S, p.stride, p.dilation, p.W + 2 * p.pad)
    )
    for cc in chunks(p):
        steps = cc * p.R * p.S
        footprint = 4 * (pixels * kr + steps * kr + padded * cc)
        if steps >= _CHUNK_STEPS and footprint <= target.l1d_bytes:
            return cc
    return 0


#: Times each thread reads a 1 x 1 convolution's weight panel (its row blocks times its
#: column blocks) up to which the default prefetches the next channel block's weights.
_PREFETCH_REPEATS = 32


def _prefetches(
    p: Conv2d, chunk: int, outer: str, kr: int, owr: int, ohr: int, threads: int
) -> bool:
    """Whether the default prefetches the weights (unpacked ones only): the next chunk's in a
    chunked reduction; else the next channel block's during this one's reduction over
    input channels (1 x 1 only: a window's reduction starts with its 3 taps, a third of
    the panel each, too much at once, ``tuner.lower.prefetch``).

    The weights come from memory at each inference; the first row block of each thread
    waits on them, the others find them in L2 and only pay for the prefetches, so it
    pays where each thread reads the panel few times. ResNet-50's 1 x 1 convolutions in
    the model (Xeon with AVX-512, 2 threads, each kernel's median in the model's profile,
    prefetching against not): 1 MB of weights at 14 x 14, each thread's panel read 7
    times, 0.89 to 0.94x; 256 kB at 28 x 28, 28 times, 0.94 to 0.98x; 64 to 128 kB at
    56 x 56, 112 times, 0.98 to 1.07x. With the channel blocks outermost (in parallel,
    each thread a run of them) and no chunk, the next block's panel the same way, each
    block reading its panel once per row block: 1024 -> 2048 at 14 x 14 stride 2 0.96x,
    512 -> 1024 at 28 x 28 stride 2 0.99x (whole models 1.003x ResNet-50, 1.009x
    WRN-50-2, 1.050x ResNeXt-50).
    """
    if p.weights == "OIHW":
        return False
    if chunk:
        return True
    if outer == "both" or p.R * p.S > 1:
        return False
    rows = _blocks(p, kr, ohr)[0]
    if outer == "rows":  # the threads share out the row blocks
        rows = -(-rows // max(threads, 1))
    return rows * -(-p.OW // owr) <= _PREFETCH_REPEATS


def _pixel_offsets(p: Conv2d, owr: int, ohr: int) -> list[int]:
    """Byte offsets of the input values a channels-last tile of OWR x OHR pixels reads at one
    reduction step (one input channel, one window tap), from its first pixel's.

    A padded convolution reads rows padded to ``W + 2 * pad`` (``_conv_padding.pad_at``) of
    float32 (a quantized image's too: ``_conv_define.padded``), else the input itself."""
    size = 4 if p.pad else np.dtype(p.x_dtype).itemsize
    column = size * p.C * p.stride
    row = size * p.C * (p.W + 2 * p.pad) * p.stride
    return [oh * row + ow * column for oh in range(ohr) for ow in range(owr)]


def channels_last_default(p: Conv2d, target: Target) -> dict[str, Any]:
    """NHWC's default: the register tile of least estimated cost, output channels its vectors.

    Candidates are one to four vectors of channels (or the exact half-vector tiles of
    ``exact_channel_tiles``) by any column tile (the width's divisors among them) by one to
    four rows, within the accumulator registers and with ``_spare`` registers free beside
    the live vectors (``_live_vectors``); the cost (``_tile_cost``) weighs the work edge
    tiles waste against how well the tile keeps the FMA units busy (``_efficiency``), times
    how many times over its pixels fill one set of the L1 cache (``_target.set_overflow``:
    1024 channels put every pixel in one set), and,
    where the threads share out row blocks (``outer=rows``), how evenly they do. An odd
    count of row blocks turns the split channel-major (``_shared_out``), each thread then
    reading the whole input image, half of it written by the other core's previous kernel:
    on an AVX-512 Xeon (2 threads) two vectors by 7 x 2 pixels at 14 x 14 (7 row blocks)
    ran MobileNetV2's 1 x 1 convolutions 1.1 to 1.2 times slower in the model than 7 x 1
    did, and as fast alone; counting the evenness, 14 x 1 pixels instead (whole models,
    default schedules, against the defaults before:
    ResNet-50 42.6-45.3 -> 37.7-38.8 ms, MobileNetV2 4.82-4.94 -> 4.48-4.58, GoogLeNet
    14.4-14.9 -> 13.2-14.3, MNASNet 5.06-5.23 -> 4.59-4.80). Weights larger than half of
    L2 are streamed once per channel block (``outer=channels``) rather than once per row
    block, their reduction in chunks where ``_chunk`` finds one that fits L1, each chunk
    prefetching the next one's weights (they come from memory at each inference: 100 MB
    for ResNet-50; Xeon with AVX-512, 2 threads, whole models, default schedules in one
    process with the prefetch against without, 7 rounds: ResNet-50 1.026x, ResNet-18
    1.021x, WRN-50-2 1.038x, ResNeXt-50 1.055x; 1 x 1 2048 -> 512 at 7 x 7 in the model
    0.54 -> 0.41 ms, onnxruntime's 0.40), and a 1 x 1 convolution whose threads read its
    weights few times prefetches them too (``_prefetches``); the weight's layout HWIO
    needs no packing; padding as ``_conv_padding.pad_at`` says.

    An output of one pixel per image (the squeeze-and-excitation layers' 1 x 1 convolutions
    of a pooled image) takes whole vectors only: there a tile of two and a half vectors ran
    3 to 6 times slower than whole ones (Zen 5, 2 threads, kernel alone: 110 -> 440
    channels 7.6 us in 40s against 1.2 in 64s; 32 -> 120, 0.9 against 0.3), while at 28 x
    28 pixels it is the fastest (40 -> 120: 23.4 us, against 37 in 64s).
    """
    L, budget = target.lanes("float32"), accumulator_budget(target)
    depthwise = p.Cg == 1 and p.groups == p.K
    widths = (
        [p.block]
        if p.blocked
        else [v * L for v in (1, 2, 3, 4) if v == 1 or v * L < p.K + L]
        + (exact_channel_tiles(p.K, L) if p.OH * p.OW > 1 else [])
    )
    candidates = [
        (kr, owr, ohr)
        for kr in widths
        for owr in column_tiles(p, L)
        if owr < p.OW + L
        for ohr in (1, 2, 3, 4)
        if ohr <= p.OH
        and vectors(kr, L) * owr * ohr <= budget
        and _live_vectors(kr, owr, ohr, L)
        <= target.vector_registers - _spare(target.vector_registers)
    ]
    weight_bytes = 4 * p.K * p.Cg * p.R * p.S
    image_bytes = 4 * p.N * p.H * p.W * p.C
    l2 = int(target.get("l2_bytes", 1 << 20))
    outer = "channels" if weight_bytes > l2 // 2 and weight_bytes > image_bytes else "rows"

    def shared(t: tuple[int, int, int]) -> float:
        """How evenly the tile's row blocks share out over the threads, where they do."""
        if outer != "rows" or target.threads < 2:
            return 1.0
        return evenness(_blocks(p, t[0], t[2])[0], 1, target.threads)

    def cost(t: tuple[int, int, int]) -> float:
        """The tile's estimated time: its work over its efficiency, times what L1 set
        overflow and weights streamed from L2 (none in a chunked reduction) add, over how
        evenly its row blocks share out."""
        kr, owr, ohr = t
        chunked = outer == "channels" and _chunk(p, kr, target)
        return (
            _tile_cost(p, kr, owr, ohr, L, depthwise, target.vector_registers)
            * set_overflow(_pixel_offsets(p, owr, ohr), target)
            * (1.0 if chunked else _weight_stream(p, kr, owr, ohr, L, target))
            / shared(t)
        )

    kr, owr, ohr = min(candidates, key=lambda t: (cost(t), -t[0]))
    outer = _shared_out(p, outer, kr, ohr, target.threads)
    chunk = _chunk(p, kr, target) if outer == "channels" else 0
    return {
        "chunk": chunk,
        "prefetch": _prefetches(p, chunk, outer, kr, owr, ohr, target.threads),
        "vector": "k",
        "kr": kr,
        "owr": owr,
        "ohr": ohr,
        "reduction": "rsc",
        "outer": outer,
        "pack_w": p.weights == "OIHW",
        "pad_at": pad_at(p, depthwise, kr, L, outer),
        "unroll_window": False,
        "parallel": _splits(p, outer, kr, ohr, target),
    }
