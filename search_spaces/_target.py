"""The target a template helper works for when its caller names none, and how evenly a
parallel loop shares out over its threads."""

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
