"""Buffers for a model's intermediate values, planned once by liveness.

Every value a kernel writes and a later kernel reads gets a place in one
arena (a byte array allocated when the module is built), chosen so that two
values live at the same time never overlap: a value's lifetime runs from
the step that writes it to the last step that reads it or any view of it.
Values that reach the caller (graph outputs, and the values they view) are
not planned: each call allocates them, since the caller keeps them.

The arena and every constant start on a cache line (``BASE_ALIGN``).

Kernels never write in place over one of their inputs: generated kernels are
compiled with no-alias arguments (see ``tuner.codegen.cpu.runtime``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["ALIGN", "Interval", "aligned_array", "aligned_copy", "aligned_empty", "assign_offsets"]

#: Byte alignment of every planned buffer (a cache line; AVX-512 loads like it).
ALIGN = 64
#: Byte alignment of the arena, of every constant a module holds and of each call's
#: outputs: NumPy's allocations start wherever malloc puts them (16 bytes apart), and a
#: kernel reading an int8 weight's panels or a table with 64-byte loads from a misaligned
#: one crosses two cache lines on each (four copies of one int8 MobileNetV2 in one
#: process: 2.7 to 3.9 ms by where their weights landed, 2.3 to 2.7 aligned; BERT int8
#: 15.4-16.7 ms against 12.3-13.6; Zen 4). A page (4096) measured no better.
BASE_ALIGN = 64


@dataclass(frozen=True)
class Interval:
    """A storage need: ``nbytes`` from step ``start`` to step ``end`` (inclusive)."""

    name: str
    nbytes: int
    start: int
    end: int


def assign_offsets(needs: Sequence[Interval]) -> tuple[dict[str, int], int]:
    """Offsets in one arena such that needs alive at the same step do not overlap.

    Greedy by size (largest first), each at the lowest offset free of every
    already placed need whose lifetime meets its own: the classic offline
    planner (TFLite's and TVM's static memory planners are of this kind).
    Returns the offsets and the arena size in bytes.
    """
    placed: list[tuple[int, int, Interval]] = []  # (offset, size, need)
    offsets: dict[str, int] = {}
    for need in sorted(needs, key=lambda n: (-n.nbytes, n.start, n.name)):
        size = _aligned(need.nbytes)
        clashes = sorted(
            (off, sz)
            for off, sz, other in placed
            if other.start <= need.end and need.start <= other.end
        )
        offset = 0
        for off, sz in clashes:
            if offset + size <= off:
                break
            offset = max(offset, off + sz)
        placed.append((offset, size, need))
        offsets[need.name] = offset
    total = max((off + sz for off, sz, _ in placed), default=0)
    return offsets, total


def lifetimes(
    writes: Mapping[str, int], reads: Mapping[str, Sequence[int]], roots: Mapping[str, str]
) -> dict[str, tuple[int, int]]:
    """Each storage root's (first write, last read) over its own and its views' reads."""
    spans: dict[str, tuple[int, int]] = {}
    for value, step in writes.items():
        root = roots.get(value, value)
        first, last = spans.get(root, (step, step))
        spans[root] = (min(first, step), max(last, step))
    for value, steps in reads.items():
        root = roots.get(value, value)
        if root in spans and steps:
            first, last = spans[root]
            spans[root] = (first, max(last, *steps))
    return spans


def _aligned(n: int) -> int:
    return max(ALIGN, (n + ALIGN - 1) // ALIGN * ALIGN)


def aligned_empty(nbytes: int, align: int = BASE_ALIGN) -> np.ndarray:
    """``nbytes`` uninitialised bytes whose first lies at a multiple of ``align``."""
    raw = np.empty(nbytes + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start : start + nbytes]


def aligned_array(shape: tuple[int, ...], dtype: np.dtype | str) -> np.ndarray:
    """An uninitialised C-contiguous array whose first byte lies at a multiple of ``BASE_ALIGN``."""
    dtype = np.dtype(dtype)
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    return aligned_empty(size).view(dtype).reshape(shape)


def aligned_copy(data: np.ndarray, align: int = BASE_ALIGN) -> np.ndarray:
    """``data`` as a C-contiguous, writable array whose first byte lies at a multiple of
    ``align``: ``data`` itself where it is one, else a copy."""
    if data.flags.c_contiguous and data.flags.writeable and data.ctypes.data % align == 0:
        return data
    out = aligned_empty(data.nbytes, align).view(data.dtype).reshape(data.shape)
    out[...] = data
    return out
