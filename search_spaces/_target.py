"""The target a template helper works for when its caller names none, how evenly a
parallel loop shares out over its threads, from how much work threads pay, and how many
of a tile's rows share one set of the L1 cache."""

from __future__ import annotations

import math
from collections.abc import Iterable

from tuner.target import CACHE_LINE, Target


def resolve(target: Target | None) -> Target:
    """``target``, or the host CPU where it is None (module-level helpers, notebooks, docs).

    The operator registry always passes its target; only direct calls of a
    template's functions without one read the machine they run on.
    """
    return target if target is not None else Target.from_name("cpu")


def evenness(units: int, per_task: int, threads: int) -> float:
    """Share of the threads' time spent working when ``units`` of work are cut into tasks of
    ``per_task`` (the last may be short) and each thread runs one contiguous run of them
    (``tuner.codegen.cpu.launch``): the busiest thread does ``ceil(tasks / threads)``."""
    rounds = math.ceil(math.ceil(units / per_task) / threads)
    return units / (threads * rounds * per_task)


#: The multiply-adds from which a product's default shares its work among the threads:
#: waking them costs more than a small product's work. Zen 5, two threads, 2026-12-05,
#: serial against parallel: matrix-vector products with bias 1 x 110 -> 440 7.0 us against
#: 16.0, 1 x 16 -> 16 4.0 against 8.6, 1 x 512 -> 1000 25.5 against 21.1; squeeze-and-
#: excitation 1 x 1 convolutions 24 -> 72 channels 3.0 against 6.3, 120 -> 480 4.2 against
#: 7.3, 960 -> 240 (230 thousand) 10.3 against 9.0.
PARALLEL_FROM_MACS = 1 << 17


def parallel_pays(macs: float, target: Target) -> bool:
    """Whether a product of ``macs`` multiply-adds runs faster on ``target``'s threads than
    on one (``PARALLEL_FROM_MACS``)."""
    return target.threads != 1 and macs >= PARALLEL_FROM_MACS


def set_pressure(offsets: Iterable[int], target: Target) -> int:
    """Most of the cache lines at byte ``offsets`` (from one aligned base) that fall in one set
    of ``target``'s L1 data cache.

    A register tile reads one value or vector from each of its pixels (rows) at every
    reduction step, and reads each line again at the next steps, until it has used all
    of it. Where the pixels lie a multiple of 4 kB apart (1024 float32 channels,
    channels-last; 512 at stride 2) every one of them maps to the same set, and more
    of them than the set has ways evict each other at every step: each read then comes
    from L2. ResNet-50's 1 x 1 convolution of 1024 -> 256 channels at 14 x 14 (AMD
    Zen 4, 8 ways, 2 threads, the kernel alone): two vectors of channels by 7 x 2 pixels
    (14 in one set) 0.975 ms, by 7 x 1 0.537 (onnxruntime in the model: 0.50).
    """
    sets: dict[int, set[int]] = {}
    for off in offsets:
        line = off // CACHE_LINE
        sets.setdefault(line % target.l1d_sets, set()).add(line)
    return max((len(lines) for lines in sets.values()), default=0)


def set_overflow(offsets: Iterable[int], target: Target) -> float:
    """How many times over the lines at ``offsets`` fill the fullest L1 set: ``set_pressure``
    over the ways, 1 where they fit; a default's register tile costs that many times its time.

    Filling a set does no harm: the weights a tile reads beside its pixels stream through
    every set in turn (the same Zen 4, ResNet-50's 1 x 1 convolutions at stride 2, 2 kB
    apart, 8 pixels of a 7 x 2 tile in one set, 6 in another: 7 x 2 ran 1.01 ms where 14 x
    1, 7 and 7, ran 1.06). Past the ways a tile's time grows about as its lines outnumber
    them. In 8 ways (Zen 4, 1024 channels, the kernel alone) two vectors by 7 x 2 pixels,
    14 lines in one set, ran 1.65 times slower than by 7 x 1. In 12 ways (an AVX-512 Xeon),
    1024 channels against 1040 (the same work, its pixels in one set against spread out),
    14 lines cost 1.02 to 1.13 times, 21 1.5, 28 1.4 (one vector by 14 x 1, 7 x 2, 7 x 3
    and 14 x 2). So a set short of two ways of twelve costs
    less than half a tile's accumulators (two vectors by 14 x 1 pixels ran 1.1 times faster
    than by 7 x 1 there, conflicts and all), short of six ways of eight far more."""
    return max(1.0, set_pressure(offsets, target) / target.l1d_ways)
