"""The elementwise chain on a GPU: a flat grid of blocks, a few elements per thread.

Element ``i = (b*items + t)*threads + x`` is computed by thread ``x`` of
block ``b`` in its ``t``-th step, so one step of a block's threads touches
consecutive elements (coalesced)::

    for b in n / (threads*items):      # blockIdx.x
      for t in items:
        for x in threads:              # threadIdx.x
          Y[i] = max(X[i] * a + b, 0) * c + tanh(X[i])

Unfused, each stage is a kernel of its own with the same grid, its output in
device memory between them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner import te
from tuner.schedule import Schedule
from tuner.space import ConfigSpace
from tuner.target import Target
from tuner.te import Tensor

from . import threads_per_block

__all__ = ["config_space", "default_config", "flat_grid", "schedule"]

_THREADS = [32, 64, 128, 256, 512, 1024]
_ITEMS = [1, 2, 4, 8]


def config_space(n: int, target: Target) -> ConfigSpace:
    """Threads per block, elements per thread, and fusion of the stages."""
    limit = threads_per_block(target)
    sp = ConfigSpace()
    sp.define_knob("threads", _THREADS)
    sp.define_knob("items", _ITEMS)
    sp.define_knob("fuse", [True, False])
    sp.add_constraint(lambda c: c["threads"] <= limit, f"at most {limit} threads per block")
    sp.add_constraint(
        lambda c: c["threads"] * c["items"] <= max(n, _THREADS[0]),
        "a block covers no more than n elements",
    )
    return sp.freeze()


def default_config(n: int, target: Target) -> dict[str, Any]:
    """Fused; 256 threads of 4 elements where n has that many (fewer blocks to schedule)."""
    threads = max(t for t in _THREADS if t <= min(256, threads_per_block(target), max(n, 32)))
    items = max(i for i in _ITEMS if i <= 4 and threads * i <= max(n, _THREADS[0]))
    return {"threads": threads, "items": items, "fuse": True}


def flat_grid(s: Schedule, T: Tensor, threads: int, items: int) -> None:
    """Bind ``T``'s one axis as blocks of ``threads`` threads doing ``items`` steps each."""
    (i,) = s[T].op.axis
    b, r = s[T].split(i, factor=threads * items)
    _, x = s[T].split(r, factor=threads)
    s[T].bind(b, "blockIdx.x")
    s[T].bind(x, "threadIdx.x")


def schedule(
    cfg: Mapping[str, Any], inputs: list[Tensor], stages: list[Tensor], Y: Tensor
) -> tuple[Schedule, list[Tensor]]:
    """The schedule of the chain whose intermediate ``stages`` feed ``Y``."""
    s = te.create_schedule(Y)
    if cfg["fuse"]:
        for T in stages:
            s[T].compute_inline()
    for T in [Y] if cfg["fuse"] else [*stages, Y]:
        flat_grid(s, T, int(cfg["threads"]), int(cfg["items"]))
    return s, [*inputs, Y]
