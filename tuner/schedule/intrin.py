"""Tensor intrinsics: the two-loop nests that one machine instruction computes.

``s[C].tensorize(axis, name)`` names one of these; the schedule checks the
name and the loop's extent against this table when it applies the step, and
lowering matches the loops against the intrinsic's computation
(``tuner.lower.intrin``).

The one family today is x86 VNNI's ``vpdpbusd``: ``lanes`` int32 accumulators
each add the dot product of 4 unsigned bytes (one group of ``a``, the same for
every lane) with 4 signed bytes (lane ``l``'s group of ``b``)::

    for l in range(lanes):                     # tensorized
        for q in range(4):                     # the reduction inside it
            out[o + l] += int32(a[p + q]) * int32(b[r + 4 * l + q])

``a`` is uint8 and ``b`` int8: an int8 x int8 product reaches it through
``a + 128`` and a correction by ``128 * sum(b)`` (``search_spaces._int8``).
The sums wrap at 32 bits, as the loops' int32 arithmetic does.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["INTRINSICS", "TensorIntrin"]


@dataclass(frozen=True)
class TensorIntrin:
    """``out[lane] += sum_q a[q] * b[lane, q]``: ``lanes`` x ``depth``, the capability it needs."""

    name: str
    lanes: int  # extent of the tensorized loop
    depth: int  # extent of the reduction loop inside it
    out: str  # dtypes
    a: str
    b: str
    capability: str  # a target capability that must be at least ``minimum``
    minimum: int

    @property
    def strides(self) -> dict[str, tuple[int, int]]:
        """Element strides along (the tensorized loop, the reduction loop) of each operand."""
        return {"out": (1, 0), "a": (0, 1), "b": (self.depth, 1)}


INTRINSICS: dict[str, TensorIntrin] = {
    t.name: t
    for t in (
        TensorIntrin("dot_u8s8_i32x16", 16, 4, "int32", "uint8", "int8", "int8_dot_bits", 512),
        TensorIntrin("dot_u8s8_i32x8", 8, 4, "int32", "uint8", "int8", "int8_dot_bits", 256),
    )
}
