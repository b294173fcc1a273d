"""Pooling on a GPU: a thread per output pixel, planes on the grid's y.

::

    for plane in N * C:                  # blockIdx.y
      for pb in OH*OW / threads:         # blockIdx.x
        for t in threads:                # threadIdx.x: one output pixel
          R = max (or sum) over the window of Xp[n, c, oh*stride + rh, ow*stride + rw]
          Y[n, c, oh, ow] = R            # (R / area for an average)

The padding is inlined as a conditional load; neighbouring threads read
neighbouring pixels. A global average pool takes one block per plane instead
(see :func:`global_schedule`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner import te
from tuner.schedule import Schedule
from tuner.space import ConfigSpace
from tuner.target import Target
from tuner.te import Tensor

from . import pow2_at_least, threads_per_block

__all__ = [
    "config_space",
    "default_config",
    "global_config_space",
    "global_default_config",
    "global_schedule",
    "schedule",
]

_THREADS = [32, 64, 128, 256, 512]


def config_space(pixels: int, target: Target) -> ConfigSpace:
    """Threads (output pixels) per block."""
    limit = threads_per_block(target)
    most = max(pow2_at_least(pixels), _THREADS[0])
    sp = ConfigSpace()
    sp.define_knob("threads", _THREADS)
    sp.add_constraint(lambda c: c["threads"] <= limit, f"at most {limit} threads per block")
    sp.add_constraint(lambda c: c["threads"] <= most, "a block no wider than the image")
    return sp.freeze()


def default_config(pixels: int, target: Target) -> dict[str, Any]:
    """128 pixels per block (fewer for small images)."""
    most = max(pow2_at_least(pixels), _THREADS[0])
    return {"threads": max(t for t in _THREADS if t <= min(128, most, threads_per_block(target)))}


def schedule(
    cfg: Mapping[str, Any], X: Tensor, Xp: Tensor | None, R: Tensor, Y: Tensor
) -> tuple[Schedule, list[Tensor]]:
    s = te.create_schedule(Y)
    if Xp is not None:
        s[Xp].compute_inline()
    n, c, oh, ow = s[Y].op.axis
    plane = s[Y].fuse(n, c)
    pb, pt = s[Y].split(s[Y].fuse(oh, ow), factor=int(cfg["threads"]))
    s[Y].bind(plane, "blockIdx.y")
    s[Y].bind(pb, "blockIdx.x")
    s[Y].bind(pt, "threadIdx.x")
    s[R].compute_at(s[Y], pt)
    return s, [X, Y]


def global_config_space(W: int, target: Target) -> ConfigSpace:
    """Threads per plane (one block per plane), each summing columns of it."""
    limit = threads_per_block(target)
    sp = ConfigSpace()
    sp.define_knob("threads", [1, 2, 4, 8, 16, 32, 64, 128, 256])
    sp.add_constraint(lambda c: c["threads"] <= limit, f"at most {limit} threads per block")
    sp.add_constraint(lambda c: c["threads"] <= pow2_at_least(W), "no more threads than columns")
    return sp.freeze()


def global_default_config(W: int, target: Target) -> dict[str, Any]:
    """One thread per column, up to 256."""
    return {"threads": min(256, pow2_at_least(W), threads_per_block(target))}


def global_schedule(
    cfg: Mapping[str, Any], X: Tensor, P: Tensor, S: Tensor, Y: Tensor
) -> tuple[Schedule, list[Tensor]]:
    """One block per plane: its threads sum the plane's columns into shared memory
    (``P``, its column loop on the threads), then each adds the column sums up."""
    s = te.create_schedule(Y)
    n, c, _, _ = s[Y].op.axis
    s[Y].bind(s[Y].fuse(n, c), "blockIdx.x")
    s[S].compute_at(s[Y], s[Y].leaf_axes[0])
    s[P].compute_at(s[S], s[S].op.axis[1])
    _, _, pw = s[P].op.axis
    _, lane = s[P].split(pw, factor=int(cfg["threads"]))
    s[P].bind(lane, "threadIdx.x")
    return s, [X, Y]
