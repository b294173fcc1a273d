"""The target a template helper works for when its caller names none, how evenly a
parallel loop shares out over its threads, and from how much work threads pay."""

from __future__ import annotations

import math

from tuner.target import Target


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
