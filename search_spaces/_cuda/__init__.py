"""CUDA schedule spaces of the operator templates: blocks of threads, shared and local memory.

An operator's registry entry picks these when its target runs GPU threads
(the ``max_threads_per_block`` capability), never by the target's name; the
definitions and NumPy references are the operator's own.
"""

from __future__ import annotations

from tuner.target import Target

__all__ = ["is_gpu", "pow2_at_least", "threads_per_block"]


def is_gpu(target: Target) -> bool:
    """Whether ``target`` runs blocks of GPU threads."""
    return int(target.get("max_threads_per_block", 0)) > 0


def threads_per_block(target: Target) -> int:
    return int(target.get("max_threads_per_block", 0))


def pow2_at_least(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for n <= 1)."""
    p = 1
    while p < n:
        p *= 2
    return p
