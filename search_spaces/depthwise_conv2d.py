"""Depthwise 2-D convolution (``groups = C``, ``W[C, 1, R, S]``, NCHW): knobs and schedule.

``depthwise_conv2d`` has no reduction over channels, so no register tile
reuses an input across channels. Its nest sweeps each channel's output in
OHR x OWR tiles, the window taps outside the tile's rows and columns::

    for plane in N * C:                     # parallel
      for oho, owo:
        for r, s:                           # unrolled s if unroll_window
          for ohi, owi:                     # owi the SIMD axis
            Y[n, c, oh, ow] += Xp[n, c, oh*stride + r*dil, ow*stride + s*dil] * W[c, 0, r, s]

accumulating in the output row while it is in cache (``registers=False``:
LLVM's loop vectorizer, which handles rows of any width), or in a register tile
(``registers=True``: the SLP vectorizer over constant tiles). The padded input
is copied once (``pad_at=root``), per channel plane just before its use
(``channel``), or inlined as a conditional load.

``epilogue`` (``search_spaces._epilogue``) fuses elementwise steps after the
sum, a channel being ``C``: the sum is then a stage computed tile by tile
inside the output's loops (see :func:`depthwise_schedule`), with the same knobs.

The parameters, the definition and the reference are conv2d's
(``search_spaces.conv2d``); this module adds the NumPy peer, the knobs and
the schedule.

>>> p = Conv2d.from_args({"N": 1, "C": 32, "H": 56, "W": 56, "R": 3, "S": 3, "pad": 1})
>>> target = Target.make("cpu", vector_lanes=8, vector_registers=16)
>>> s, tensors = depthwise_schedule(depthwise_default_config(p, target), p)
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
from ._conv_define import stages
from ._conv_params import Conv2d
from ._cuda import conv2d as gpu
from ._cuda import is_gpu
from ._epilogue import NONE, PARAM_DOC
from ._gemm import accumulator_budget
from ._target import resolve
from .conv2d import (
    IMAGE_PARAMS,
    WINDOW_PARAMS,
    bytes_moved,
    flops,
    reference_from_args,
    vectors,
)

__all__ = [
    "depthwise_config_space",
    "depthwise_default_config",
    "depthwise_numpy_fast",
    "depthwise_schedule",
]


def depthwise_numpy_fast(p: Conv2d, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Depthwise by NumPy: one multiply-add of a shifted slice per window tap, into out= buffers."""
    xp = np.pad(x, ((0, 0), (0, 0), (p.pad, p.pad), (p.pad, p.pad)))
    y = np.zeros((p.N, p.C, p.OH, p.OW), np.float32)
    tmp = np.empty_like(y)
    st, d = p.stride, p.dilation
    for r in range(p.R):
        for s in range(p.S):
            h0, w0 = r * d, s * d
            tap = xp[:, :, h0 : h0 + st * (p.OH - 1) + 1 : st, w0 : w0 + st * (p.OW - 1) + 1 : st]
            np.multiply(tap, w[None, :, 0, r, s, None, None], out=tmp)
            y += tmp
    return y


def depthwise_config_space(p: Conv2d, target: Target | None = None) -> ConfigSpace:
    """A register tile of OHR rows x OWR columns (the SIMD axis), padding, unrolling, threads."""
    tgt = resolve(target)
    L, budget = tgt.lanes("float32"), accumulator_budget(tgt)
    sp = ConfigSpace()
    sp.define_knob("owr", sorted({1, 2, 4, *(L * f for f in range(1, 9))}))
    sp.define_knob("ohr", [1, 2, 3, 4, 6, 8])
    sp.define_knob("registers", [True, False])
    sp.define_knob("pad_at", ["channel", "root", "inline"] if p.pad else ["none"])
    sp.define_knob("unroll_window", [False, True])
    sp.define_knob("parallel", [True, False])
    sp.add_constraint(
        lambda c: not c["registers"] or vectors(c["owr"], L) * c["ohr"] <= budget,
        f"a register tile of OHR x OWR accumulators fits {budget} vector registers of {L} lanes",
    )
    sp.add_constraint(
        lambda c: c["owr"] % L == 0 or c["owr"] >= p.OW,
        f"the column tile is whole {L}-lane vectors or covers a whole output row",
    )
    sp.add_constraint(
        lambda c: c["owr"] < p.OW + L and c["ohr"] <= p.OH,
        "tiles no larger than the output (by less than one vector)",
    )
    return sp.freeze()


def depthwise_default_config(p: Conv2d, target: Target | None = None) -> dict[str, Any]:
    """Whole output rows (up to 64 columns) accumulated in cache where rows are wide and the
    window steps by one; a register tile of 4 rows x one or two vectors elsewhere.

    LLVM's loop vectorizer (chosen when there is no register tile) handles rows of
    any width; measured at 128 x 56 x 56, 3 x 3, this beat register tiles of
    2 x 32 by two to four times (measured when edge tiles were still scalar loops).
    A strided window (its loads gather every other column) or a narrow row leaves the
    loop vectorizer little: MobileNetV2's depthwise convolutions on one thread
    (experiments/bench_conv_defaults.py --only mb2_dw), rows against the 4 x 8
    register tile: 96 x 112 x 112 stride 2 0.96 against 0.85 ms, 144 x 56 x 56
    stride 2 0.58 against 0.28, 192 x 28 x 28 0.72 against 0.24, 960 x 7 x 7 0.17
    against 0.08. With 16 lanes (AVX-512), a row of more than two vectors that
    the lanes do not divide runs whole rows too, whatever the stride: 4 x 16 tiles
    over 56 columns (three tiles and a ragged one) took 0.63 ms at 144 x 56 x 56
    against 0.24 for rows, and 0.51 against 0.35 at 96 x 112 x 112 stride 2;
    wider tiles (64 columns) were slower still (0.8 to 1.1 ms). Narrow rows keep
    the register tile there: 0.072 against 0.32 ms at 192 x 28 x 28 (all on two
    threads, 2026-12-02). Each plane is padded just before its use, while it is in cache
    (``channel``): on two threads against one padded copy first (``root``), every
    one of the nine shapes was as fast or faster, 1.43 ms in all against 1.73
    (192 x 28 x 28: 0.146 against 0.182; 384 x 14 x 14: 0.077 against 0.108).
    """
    L = resolve(target).lanes("float32")
    if (p.stride == 1 and p.OW >= 4 * L) or _ragged_wide(p.OW, L):
        owr = next(v for v in (1, 2, 4, *(L * f for f in range(1, 9))) if v >= min(p.OW, 8 * L))
        return {
            "owr": owr,
            "ohr": 1,
            "registers": False,
            "pad_at": "channel" if p.pad else "none",
            "unroll_window": False,
            "parallel": True,
        }
    pad_at = "channel" if p.pad else "none"
    return {
        "owr": 2 * L if L < p.OW <= 2 * L else L,
        "ohr": max(h for h in (1, 2, 3, 4) if h <= p.OH),
        "registers": True,
        "pad_at": pad_at,
        "unroll_window": False,
        "parallel": True,
    }


def _ragged_wide(OW: int, L: int) -> bool:
    """A row of more than two vectors of 16 or more lanes that the lanes do not divide."""
    return L >= 16 and OW > 2 * L and OW % L != 0


def depthwise_schedule(cfg: Mapping[str, Any], p: Conv2d) -> tuple[Schedule, list[Tensor]]:
    """The schedule for ``cfg``: (image, channel) fused and parallel, the tile inside.

    With an epilogue the sum is a stage ``conv`` computed inside the output's
    tile loop: each OHR x OWR tile is summed (in registers with ``registers``),
    then the epilogue reads it back from L1, vectorized along the columns::

        for plane in N * C:                   # parallel
          for oho, owo:
            for r, s:
              for ohi, owi:                   # owi the SIMD axis
                conv[ohi, owi] += Xp[...] * W[c, 0, r, s]
            for ohi, owi:                     # owi the SIMD axis
              Y[n, c, oh, ow] = epilogue(conv[ohi, owi])
    """
    owr, ohr = int(cfg["owr"]), int(cfg["ohr"])
    t = stages(p)
    Y = t["Y"]
    T = t["conv"]  # Y itself without an epilogue
    s = te.create_schedule(Y)
    n, k, oh, ow = s[Y].op.axis
    oho, ohi = s[Y].split(oh, factor=ohr)
    owo, owi = s[Y].split(ow, factor=owr)
    if T is Y:
        _, r, sw = s[Y].op.reduce_axis  # the channel reduction has extent 1
        s[Y].reorder(n, k, oho, owo, r, sw, ohi, owi)
    else:
        s[Y].reorder(n, k, oho, owo, ohi, owi)
    plane = s[Y].fuse(n, k)
    if cfg["parallel"]:
        s[Y].parallel(plane)
    s[Y].vectorize(owi)
    if T is not Y:
        s[T].compute_at(s[Y], owo)
        tn, tk, toh, tow = s[T].op.axis
        _, r, sw = s[T].op.reduce_axis
        s[T].reorder(tn, tk, r, sw, toh, tow)
        s[T].vectorize(tow)
    if cfg["unroll_window"]:
        s[T].unroll(sw)
    if cfg["registers"]:
        TL = s.cache_write(T, "local")
        s[TL].compute_at(s[T], owo if T is Y else tk)
    if "Xp" in t:
        if cfg["pad_at"] == "inline":
            s[t["Xp"]].compute_inline()
        elif cfg["pad_at"] == "channel":
            s[t["Xp"]].compute_at(s[Y], plane)
        elif cfg["parallel"]:
            s[t["Xp"]].parallel(s[t["Xp"]].op.axis[1])
    return s, [t["X"], t["W"], *(t[f"E{i}"] for i in range(len(p.steps.extras))), Y]


def _register() -> None:
    register_operator(
        Operator(
            name="depthwise_conv2d",
            doc="Y = conv2d(X, W, groups=C) with W: C x 1 x R x S, NCHW (memory-bound)",
            params=(*IMAGE_PARAMS, *WINDOW_PARAMS, Param("epilogue", str, NONE, doc=PARAM_DOC)),
            # On a GPU, conv2d's direct nest (a thread per pixel) with one channel per group.
            space=lambda a, target: (
                gpu.config_space(Conv2d.from_args(a), target)
                if is_gpu(target)
                else depthwise_config_space(Conv2d.from_args(a), target)
            ),
            schedule=lambda cfg, a, target: (
                gpu.schedule(cfg, Conv2d.from_args(a))
                if is_gpu(target)
                else depthwise_schedule(cfg, Conv2d.from_args(a))
            ),
            default_config=lambda a, target: (
                gpu.default_config(Conv2d.from_args(a), target)
                if is_gpu(target)
                else depthwise_default_config(Conv2d.from_args(a), target)
            ),
            reference=reference_from_args,
            flops=lambda a: flops(Conv2d.from_args(a)),
            bytes_moved=lambda a: bytes_moved(Conv2d.from_args(a)),
            check=lambda a: Conv2d.from_args(a).check(),
        )
    )


_register()
