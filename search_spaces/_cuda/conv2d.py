"""Direct 2-D convolution on a GPU: a thread per output pixel, a few output channels each.

For NCHW (NHWC the same, channels last)::

    for n in N:                          # blockIdx.z
      for kb in K / kr:                  # blockIdx.y
        for pb in OH*OW / threads:       # blockIdx.x
          for t in threads:              # threadIdx.x: one output pixel
            acc[kr] = 0                  # registers (cache_write "local")
            for c, r, s:
              for kk in kr:              # unrolled
                acc[kk] += Xp[n, c, oh*stride + r, ow*stride + s] * W[kb*kr + kk, c, r, s]
            Y[n, kb*kr + kk, oh, ow] = epilogue(acc[kk])

Neighbouring threads read neighbouring pixels of the input, and every thread
of a block reads the same weights (one broadcast load). The padding is
inlined as a conditional load; a bias, activation or epilogue is applied as
each thread stores its channels.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner import te
from tuner.schedule import Schedule
from tuner.space import ConfigSpace
from tuner.target import Target
from tuner.te import Tensor

from .._conv_define import arguments, stages
from .._conv_params import Conv2d
from . import pow2_at_least, threads_per_block

__all__ = ["config_space", "default_config", "schedule"]

_THREADS = [32, 64, 128, 256, 512]
_KR = [1, 2, 4, 8]


def config_space(p: Conv2d, target: Target) -> ConfigSpace:
    """Threads per block (pixels), output channels per thread."""
    limit = threads_per_block(target)
    pixels = pow2_at_least(p.OH * p.OW)
    sp = ConfigSpace()
    sp.define_knob("threads", _THREADS)
    sp.define_knob("kr", _KR)
    sp.add_constraint(lambda c: c["threads"] <= limit, f"at most {limit} threads per block")
    sp.add_constraint(
        lambda c: c["threads"] <= max(pixels, _THREADS[0]), "a block no wider than the image"
    )
    sp.add_constraint(lambda c: c["kr"] <= pow2_at_least(p.K // p.groups), "kr within a group")
    return sp.freeze()


def default_config(p: Conv2d, target: Target) -> dict[str, Any]:
    """128 pixels per block (fewer for small images), 4 channels per thread."""
    pixels = max(pow2_at_least(p.OH * p.OW), _THREADS[0])
    threads = max(t for t in _THREADS if t <= min(128, pixels, threads_per_block(target)))
    kr = max(k for k in _KR if k <= min(4, pow2_at_least(p.K // p.groups)))
    return {"threads": threads, "kr": kr}


def _pixel_tiles(p: Conv2d, s: Schedule, T: Tensor, threads: int, kr: int) -> tuple[Any, Any]:
    """``T``'s loops as the grid and the threads; returns the thread loop and the channel tile."""
    if p.nhwc:
        n, oh, ow, k = s[T].op.axis
    else:
        n, k, oh, ow = s[T].op.axis
    pixel = s[T].fuse(oh, ow) if not p.nhwc else None
    kb, kk = s[T].split(k, factor=kr)
    if pixel is None:  # NHWC: the pixel axes are not adjacent to each other after k's split
        s[T].reorder(n, kb, oh, ow, kk)
        pixel = s[T].fuse(oh, ow)
    pb, pt = s[T].split(pixel, factor=threads)
    s[T].reorder(n, kb, pb, pt, kk)
    s[T].bind(n, "blockIdx.z")
    s[T].bind(kb, "blockIdx.y")
    s[T].bind(pb, "blockIdx.x")
    s[T].bind(pt, "threadIdx.x")
    return pt, kk


def schedule(cfg: Mapping[str, Any], p: Conv2d) -> tuple[Schedule, list[Tensor]]:
    threads, kr = int(cfg["threads"]), int(cfg["kr"])
    t = stages(p)
    conv, Y = t["conv"], t["Y"]
    s = te.create_schedule(Y)
    if "Xp" in t:
        s[t["Xp"]].compute_inline()
    pt, kk = _pixel_tiles(p, s, Y, threads, kr)
    if conv is Y:
        s[Y].reorder(*s[Y].op.reduce_axis, kk)
        CL = s.cache_write(Y, "local")
        s[CL].compute_at(s[Y], pt)
    else:
        s[conv].compute_at(s[Y], pt)
        s[conv].reorder(*s[conv].op.reduce_axis, *s[conv].op.axis)
    s[Y].unroll(kk)
    return s, arguments(p, t)
