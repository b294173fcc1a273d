"""2-D convolutions: ``conv2d`` (groups, dilation, NCHW or NHWC, fused bias and relu),
its knobs and schedule. It shares with ``depthwise_conv2d`` the parameters
(``_conv_params``), the definition (``_conv_define``) and the NumPy references
(``_conv_numpy``).

Inputs follow PyTorch: ``X[N, C, H, W]`` (or ``X[N, H, W, C]`` in NHWC), the
weight ``W[K, C/groups, R, S]`` in both layouts, an optional bias ``B[K]``; the
output is ``Y[N, K, OH, OW]`` (or ``Y[N, OH, OW, K]``). Padding is a stage
``Xp`` of the padded input, copied once at the root, inlined into the
convolution as a conditional load, or copied per block of output rows (the
rows that block reads, just before their use: ``pad_at=rows``), or, where a
block of output channels reads only some input channels (groups), per channel
block of those rows (``pad_at=block``). With an
epilogue in NHWC, each register tile's sum is a stage computed inside the
output's tile loop, so the epilogue reads it back from L1 right after it.

The schedule is a direct convolution, register-blocked like a matmul micro-kernel::

    pack W into [K/KR][C][R][S][KR] panels (order of the reduction loops)    (pack_w)
    for row in N * OH/OHR:                  # parallel; or ko outermost (outer=channels)
      for ko in K / KR:
        for owo in OW / OWR:
          OHR x OWR x KR accumulator tile in registers (cache_write "local"), zeroed
          for c, r, s (or r, s, c):         # reduction, s unrolled if unroll_window
            for ohi, owi, ki:               # the tile: KR channels (or OWR columns) one SIMD axis
              acc[ohi, owi, ki] += Xp[n, c, oh*stride + r*dil, ow*stride + s*dil] * Wpack[ko, c, r, s, ki]
          store the tile into Y

With ``chunk`` (channels-last, channel blocks outermost), the reduction over input
channels goes in chunks, each over every row block of the channel block while its slice
of the weights stays in L1; the block's partial sums wait in a buffer between chunks
(the epilogue runs on the block once the last chunk is done)::

    for ko in K / KR:                       # parallel
      for co in C / chunk:
        for row, owo:
          load the tile's partial sums (zero at the first chunk)
          for r, s, c in chunk: ...         # as above
          store them

With ``prefetch`` (weights not packed), each chunk prefetches the next one's weights, a
share at each row block, so the panel streams from memory during the work; unchunked,
with the row blocks outermost, each channel block prefetches the next one's over its
reduction's first loop (``tuner.lower.prefetch``).

``vector=k`` makes the output channels the SIMD axis (a vector load of packed
weights times a broadcast input, the layout NCHWc kernels use; the only choice
in NHWC, where channels are contiguous); ``vector=ow`` makes the output columns
the SIMD axis (a vector load of a row of the input times a broadcast weight).
The register constraint keeps the tile within the target's vector registers
less four (12 with AVX2, 28 with AVX-512's 32); the SIMD axis is whole
vectors of the target's lanes, one to four of them. A bias, a
relu or ``epilogue`` steps (``search_spaces._epilogue``: a residual add, a
per-channel scale, clip, gelu ...) make the convolution a stage computed
inside the output's row (and channel block) loop, so the epilogue reads a
tile that is still in cache. The epilogue's extra inputs follow ``B``.

>>> p = Conv2d.from_args({"N": 1, "C": 64, "H": 56, "W": 56, "K": 64, "R": 3, "S": 3})
>>> target = Target.make("cpu", vector_lanes=8, vector_registers=16)
>>> s, tensors = schedule(default_config(p, target), p, target)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tuner import te
from tuner.schedule import Schedule
from tuner.space import ConfigSpace
from tuner.target import Target
from tuner.te import Tensor

from . import Operator, Param, register_operator
from ._conv_define import arguments, stages
from ._conv_numpy import numpy_fast, reference
from ._conv_params import Conv2d
from ._conv_tiles import (
    channel_tiles,
    channels_last_default,
    chunks,
    column_tiles,
    default_config,
    exact_channel_tiles,
    vectors,
)
from ._cuda import conv2d as gpu
from ._cuda import is_gpu
from ._epilogue import NONE, PARAM_DOC
from ._gemm import accumulator_budget
from ._target import resolve

__all__ = [
    "IMAGE_PARAMS",
    "WINDOW_PARAMS",
    "Conv2d",
    "bytes_moved",
    "channels_last_default",
    "chunks",
    "config_space",
    "default_config",
    "define",
    "flops",
    "numpy_fast",
    "reference",
    "reference_from_args",
    "schedule",
    "vectors",
]


# -- definition (the stages: _conv_define) -------------------------------------------------


def define(p: Conv2d) -> list[Tensor]:
    """The kernel's arguments: ``X``, ``W``, (``B``,) the epilogue's extra inputs, ``Y``."""
    return arguments(p, stages(p))


def flops(p: Conv2d) -> float:
    """Multiply-adds of the convolution, two FLOPs each, and one per output per epilogue step
    (the bias and the relu are not counted)."""
    return 2.0 * p.macs + p.steps.flops(p.N * p.K * p.OH * p.OW)


def bytes_moved(p: Conv2d) -> float:
    """Compulsory traffic: input, weight and output once each (float32)."""
    return 4.0 * (p.N * p.C * p.H * p.W + p.K * p.Cg * p.R * p.S + p.N * p.K * p.OH * p.OW)


# -- conv2d knobs and schedule (the tile extents and defaults: _conv_tiles) ----------------


def config_space(p: Conv2d, target: Target | None = None) -> ConfigSpace:
    """Register tile (KR, OWR, OHR and its SIMD axis), loop orders, packing, padding, threads.

    The tile reads ``target`` (the host CPU when None): its accumulators fit
    the vector registers less four, its SIMD axis is whole vectors of the
    float32 lanes.
    """
    tgt = resolve(target)
    L, budget = tgt.lanes("float32"), accumulator_budget(tgt)
    sp = ConfigSpace()
    sp.define_knob("vector", ["k"] if p.nhwc else ["k", "ow"])
    sp.define_knob("kr", [p.block] if p.blocked else channel_tiles(p, L))
    sp.define_knob("owr", column_tiles(p, L))
    sp.define_knob("ohr", [1, 2, 3, 4])
    sp.define_knob("reduction", ["crs", "rsc"])
    sp.define_knob("outer", ["rows", "channels", "both"])
    sp.define_knob("pack_w", [False] if p.blocked else [True, False])
    sp.define_knob("pad_at", _pad_places(p))
    sp.define_knob("unroll_window", [False, True])
    sp.define_knob("parallel", [True, False])
    sp.define_knob("chunk", [0, *chunks(p)], absent=0)
    sp.define_knob("prefetch", [False, True], absent=False)

    def accumulators(c: Any) -> int:
        if c["vector"] == "k":
            return vectors(c["kr"], L) * c["owr"] * c["ohr"]
        return c["kr"] * vectors(c["owr"], L) * c["ohr"]

    sp.add_constraint(
        lambda c: accumulators(c) <= budget,
        f"the OHR x OWR x KR accumulator tile fits {budget} vector registers of {L} lanes",
    )
    sp.add_constraint(
        lambda c: (
            (c["kr"] if c["vector"] == "k" else c["owr"]) % L == 0
            or (c["kr"] >= p.K if c["vector"] == "k" else c["owr"] >= p.OW)
            or (c["vector"] == "k" and c["kr"] in exact_channel_tiles(p.K, L))
        ),
        f"the SIMD axis of the tile is whole {L}-lane vectors, covers its whole extent or"
        " divides the channels in half vectors",
    )
    sp.add_constraint(
        lambda c: c["kr"] < p.K + L and c["owr"] < p.OW + L and c["ohr"] <= p.OH,
        "tiles no larger than the output (by less than one vector)",
    )
    sp.add_constraint(
        lambda c: c["pad_at"] != "block" or c["outer"] == "rows",
        "the padded rows are copied per channel block only with the row blocks outermost",
    )
    sp.add_constraint(
        lambda c: c["chunk"] == 0 or c["outer"] == "channels",
        "the reduction is chunked only with the channel blocks outermost",
    )
    sp.add_constraint(
        lambda c: not c["prefetch"] or (not c["pack_w"] and c["outer"] != "both"),
        "weights are prefetched unpacked, the next chunk's or the next channel block's (not"
        " in a loop of row and channel block pairs)",
    )
    return sp.freeze()


def _pad_places(p: Conv2d) -> list[str]:
    """Where the input is padded (``pad_at``): a copy of the whole image, inline, the rows
    each row block reads, and, where a channel block reads only some of the input channels
    (groups), those rows of its own channels (``block``)."""
    if not p.pad:
        return ["none"]
    return ["root", "inline", "rows", *(["block"] if p.groups > 1 else [])]


def _tile_axes(p: Conv2d, s: Schedule, T: Tensor) -> tuple[Any, Any, Any, Any]:
    """``T``'s spatial axes as (n, k, oh, ow) whatever the layout."""
    if p.nhwc:
        n, oh, ow, k = s[T].op.axis
    else:
        n, k, oh, ow = s[T].op.axis
    return n, k, oh, ow


def _outer_loops(
    cfg: Mapping[str, Any], s: Schedule, T: Tensor, n: Any, oho: Any, ko: Any
) -> list[Any]:
    """Fuse the image and row-block loops; order them with the channel blocks by ``outer``
    (``both``: channel blocks outermost, as ``channels``; ``_fused_outer`` then fuses them)."""
    s[T].reorder(n, oho, ko)
    row = s[T].fuse(n, oho)
    return [row, ko] if cfg["outer"] == "rows" else [ko, row]


def _fused_outer(cfg: Mapping[str, Any], s: Schedule, T: Tensor, outer: list[Any]) -> list[Any]:
    """``outer`` once the nest is ordered; with ``outer=both``, its two loops fused into one:
    every (channel block, row block) pair, which shares out over the threads where neither
    loop alone does (see ``_conv_tiles.channels_last_default``)."""
    return [s[T].fuse(*outer)] if cfg["outer"] == "both" else outer


def schedule(
    cfg: Mapping[str, Any], p: Conv2d, target: Target | None = None
) -> tuple[Schedule, list[Tensor]]:
    """The schedule for ``cfg`` (validate configs from outside against config_space first).

    ``target`` (the host CPU when None) gives the epilogue's vector width.
    """
    kr, ohr = int(cfg["kr"]), int(cfg["ohr"])
    chunk = int(cfg.get("chunk", 0))  # absent from configs written before the knob
    t = stages(p)
    conv, Y = t["conv"], t["Y"]
    s = te.create_schedule(Y)
    if "Xp" in t:
        if cfg["pad_at"] == "inline":
            s[t["Xp"]].compute_inline()
        elif cfg["pad_at"] == "root" and cfg["parallel"]:
            s[t["Xp"]].parallel(s[t["Xp"]].op.axis[1])
    row_loop: tuple[Tensor, Any] | None = None
    if p.has_epilogue and p.nhwc:
        # The epilogue of each register tile right after its sum, while it is in L1:
        # the sum is a stage computed at the output's tile loop.
        n, k, oh, ow = _tile_axes(p, s, Y)
        oho, ohi = s[Y].split(oh, factor=ohr)
        ko, ki = s[Y].split(k, factor=kr)
        owo, owi = s[Y].split(ow, factor=int(cfg["owr"]))
        outer = _outer_loops(cfg, s, Y, n, oho, ko)
        s[Y].reorder(*outer, owo, ohi, owi, ki)
        outer = _fused_outer(cfg, s, Y, outer)
        s[Y].vectorize(ki)
        # chunked, the sum of a whole channel block (every row) is done chunk by chunk
        s[conv].compute_at(s[Y], outer[0] if chunk else owo)
        if cfg["parallel"]:
            s[Y].parallel(outer[0])
        if not chunk:
            row_loop = (Y, _pad_loop(cfg, outer))
    elif p.has_epilogue:
        n, k, oh, ow = _tile_axes(p, s, Y)
        oho, ohi = s[Y].split(oh, factor=ohr)
        ko, ki = s[Y].split(k, factor=kr)
        outer = _outer_loops(cfg, s, Y, n, oho, ko)
        inner = [ohi, ow, ki] if p.nhwc else [ki, ohi, ow]
        s[Y].reorder(*outer, *inner)
        outer = _fused_outer(cfg, s, Y, outer)
        lanes = resolve(target).lanes("float32")
        if inner[-1] == ow and lanes < p.OW:
            _, owv = s[Y].split(ow, factor=lanes)
            s[Y].vectorize(owv)
        elif inner[-1] == ki:
            s[Y].vectorize(ki)
        s[conv].compute_at(s[Y], outer[-1])
        if cfg["parallel"]:
            s[Y].parallel(outer[0])
        row_loop = (Y, _pad_loop(cfg, outer))
    nest_row = _conv_nest(cfg, p, s, t, parallel=bool(cfg["parallel"]) and not p.has_epilogue)
    if cfg["pad_at"] in ("rows", "block"):
        stage, loop = row_loop or (conv, nest_row)
        s[t["Xp"]].compute_at(s[stage], loop)
    return s, arguments(p, t)


def _conv_nest(
    cfg: Mapping[str, Any], p: Conv2d, s: Schedule, t: dict[str, Tensor], parallel: bool
) -> Any:
    """Tile the convolution stage: outer loops, the register tile and the reduction inside it.

    Returns the loop where ``pad_at=rows`` or ``block`` copies the padded input
    (``_pad_loop``).
    """
    kr, owr, ohr = int(cfg["kr"]), int(cfg["owr"]), int(cfg["ohr"])
    T = t["conv"]
    n, k, oh, ow = _tile_axes(p, s, T)
    c, r, sw = s[T].op.reduce_axis
    ko, ki = s[T].split(k, factor=kr)
    oho, ohi = s[T].split(oh, factor=ohr)
    owo, owi = s[T].split(ow, factor=owr)
    chunk: list[Any] = []
    if cfg.get("chunk", 0):
        co, c = s[T].split(c, factor=int(cfg["chunk"]))
        chunk = [co]
    red = [c, r, sw] if cfg["reduction"] == "crs" else [r, sw, c]
    tile = [ohi, owi, ki] if cfg["vector"] == "k" else [ohi, ki, owi]
    outer = _outer_loops(cfg, s, T, n, oho, ko)
    # a chunk of input channels goes over every row block of the channel block, its
    # weights in L1 meanwhile (see ``_conv_tiles._chunk``)
    s[T].reorder(outer[0], *chunk, *outer[1:], owo, *red, *tile)
    outer = _fused_outer(cfg, s, T, outer)
    if cfg.get("prefetch", False) and chunk:
        # the next chunk's weights come from memory while this one computes
        s[T].prefetch(t["W"], chunk[0])
    elif cfg.get("prefetch", False):
        # the next channel block's weights, over the first reduction loop of this one's
        # (where that is a window's row of 3 taps, a third of the panel at once: none); a
        # parallel loop of channel blocks gives each thread a run of them
        extent = {c: p.Cg, r: p.R, sw: p.S}
        s[T].prefetch(t["W"], ko, next((x for x in red if extent[x] > 1), red[0]))
    if parallel:
        s[T].parallel(outer[0])
    s[T].vectorize(tile[-1])
    if cfg["unroll_window"]:
        s[T].unroll(sw)
    TL = s.cache_write(T, "local")
    s[TL].compute_at(s[T], owo)
    ln, lk, loh, low = _tile_axes(p, s, TL)
    s[TL].reorder(ln, loh, *((low, lk) if cfg["vector"] == "k" else (lk, low)))
    if cfg["pack_w"]:
        WP = s.cache_read(t["W"], "global", [T])
        if p.hwio:
            wr, ws, wc, wk = s[WP].op.axis
        else:
            wk, wc, wr, ws = s[WP].op.axis
        wko, wki = s[WP].split(wk, factor=kr)
        s[WP].reorder(wko, *([wc, wr, ws] if cfg["reduction"] == "crs" else [wr, ws, wc]), wki)
    return _pad_loop(cfg, outer)


def _pad_loop(cfg: Mapping[str, Any], outer: list[Any]) -> Any:
    """The loop ``pad_at=rows`` or ``block`` copies the padded input at: the row block's
    (inside the channel block's with the channel blocks outermost), or, ``block``, the
    channel block's inside the row block's."""
    if cfg["pad_at"] == "block":
        return outer[1]
    return outer[-1 if cfg["outer"] == "channels" else 0]


# -- registration ---------------------------------------------------------------------------


#: The parameters conv2d and depthwise_conv2d share: the images, then the window.
#: Images, rows and columns pad with zeros: an output inside the unpadded extents reads
#: the appended rows only where the convolution's own zero padding lies. Channels do not
#: (with groups, a channel's group depends on their number).
IMAGE_PARAMS = (
    Param("N", int, 1, doc="images", pad=0.0),
    Param("C", int, doc="input channels"),
    Param("H", int, doc="input height", pad=0.0),
    Param("W", int, doc="input width", pad=0.0),
)
WINDOW_PARAMS = (
    Param("R", int, 3, doc="window height"),
    Param("S", int, 3, doc="window width"),
    Param("stride", int, 1, doc="step of the window, both directions"),
    Param("pad", int, 0, doc="zeros on every side of the input", minimum=0),
    Param("dilation", int, 1, doc="spacing of the window's taps"),
)


def _register() -> None:
    register_operator(
        Operator(
            name="conv2d",
            doc="Y = conv2d(X, W) (+ bias, relu, epilogue steps) as PyTorch's, NCHW or NHWC",
            params=(
                *IMAGE_PARAMS,
                Param("K", int, doc="output channels"),
                *WINDOW_PARAMS,
                Param("groups", int, 1, doc="channel groups (dividing C and K)"),
                Param("layout", str, "NCHW", ("NCHW", "NHWC"), doc="of X and Y"),
                Param(
                    "weights",
                    str,
                    "OIHW",
                    ("OIHW", "HWIO", "blocked"),
                    doc="of W: [K, C/g, R, S], [R, S, C/g, K] or [K/block, R, S, C/g, block]",
                ),
                Param(
                    "block", int, 0, doc="output channels a blocked weight's panel holds", minimum=0
                ),
                Param("bias", bool, False, doc="add a bias B[K] in the epilogue"),
                Param("activation", str, "none", ("none", "relu"), doc="fused epilogue"),
                Param("epilogue", str, NONE, doc=PARAM_DOC),
                Param(
                    "x_dtype",
                    str,
                    "float32",
                    ("float32", "uint8", "int8"),
                    doc="X's type: an integer X is read as float32(X) - x_zero_point",
                ),
                Param("x_zero_point", int, 0, doc="a quantized X's zero point", minimum=-128),
            ),
            space=lambda a, target: (
                gpu.config_space(Conv2d.from_args(a), target)
                if is_gpu(target)
                else config_space(Conv2d.from_args(a), target)
            ),
            schedule=lambda cfg, a, target: (
                gpu.schedule(cfg, Conv2d.from_args(a))
                if is_gpu(target)
                else schedule(cfg, Conv2d.from_args(a), target)
            ),
            default_config=lambda a, target: (
                gpu.default_config(Conv2d.from_args(a), target)
                if is_gpu(target)
                else default_config(Conv2d.from_args(a), target)
            ),
            reference=reference_from_args,
            flops=lambda a: flops(Conv2d.from_args(a)),
            check=lambda a: Conv2d.from_args(a).check(),
        )
    )


def reference_from_args(*arrays: np.ndarray, **args: Any) -> np.ndarray:
    """``reference(*inputs, **parsed_args)`` as the registry calls it (the window needs the args)."""
    if not args:
        raise TypeError("the conv2d reference needs the operator's arguments as keywords")
    p = Conv2d.from_args(args)
    x, w, *rest = arrays
    b = rest.pop(0) if p.bias else None
    return reference(p, x, w, b, rest)


_register()
