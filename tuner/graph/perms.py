"""Permutations of a tensor's axes, for the layout pass (:mod:`tuner.graph.layout`).

A value held in a layout ``perm`` is stored as ``logical.transpose(perm)``:
physical axis ``i`` is logical axis ``perm[i]``. Axes of extent 1 carry no
bytes, so two layouts that order the other axes alike are the same bytes and
differ by a free reshape (:func:`same_bytes`). A ``Reshape`` of a held value
is itself a reshape of the stored bytes when each group of logical axes it
merges or splits lies together, in order, in the layout (:func:`reshape_layout`).

>>> compose((0, 2, 3, 1), (0, 3, 1, 2))
(0, 1, 2, 3)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Perm = tuple[int, ...]

__all__ = [
    "Perm",
    "compose",
    "identity",
    "inverse",
    "reshape_layout",
    "same_bytes",
]


def identity(rank: int) -> Perm:
    return tuple(range(rank))


def inverse(perm: Sequence[int]) -> Perm:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def compose(first: Sequence[int], then: Sequence[int]) -> Perm:
    """The one transpose that does ``x.transpose(first).transpose(then)``."""
    return tuple(first[t] for t in then)


def _order(shape: Sequence[int], perm: Sequence[int]) -> list[int]:
    return [a for a in perm if shape[a] != 1]


def same_bytes(shape: Sequence[int], a: Sequence[int], b: Sequence[int]) -> bool:
    """Whether a tensor of logical ``shape`` stored in layouts ``a`` and ``b`` has the same
    bytes (they order the axes longer than 1 alike)."""
    return _order(shape, a) == _order(shape, b)


def with_units(shape: Sequence[int], order: Sequence[int]) -> Perm:
    """A layout with the axes longer than 1 in ``order``, those of extent 1 first."""
    return tuple(a for a in range(len(shape)) if shape[a] == 1) + tuple(order)


def _groups(src: Sequence[int], dst: Sequence[int]) -> list[tuple[list[int], list[int]]] | None:
    """The axes (longer than 1) of ``src`` and ``dst`` that a reshape merges or splits into
    each other, as (source axes, destination axes) in order; None for extents that do not
    line up."""
    a = [i for i, d in enumerate(src) if d != 1]
    b = [i for i, d in enumerate(dst) if d != 1]
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        ga, gb = [a[i]], [b[j]]
        pa, pb = src[a[i]], dst[b[j]]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb and i < len(a):
                ga.append(a[i])
                pa *= src[a[i]]
                i += 1
            elif pb < pa and j < len(b):
                gb.append(b[j])
                pb *= dst[b[j]]
                j += 1
            else:
                return None
        groups.append((ga, gb))
    if i != len(a) or j != len(b):
        return None
    return groups


def reshape_layout(
    src: Sequence[int], perm: Sequence[int], dst: Sequence[int]
) -> tuple[Perm, Perm] | None:
    """How a value of logical shape ``src`` held in ``perm`` reshapes to ``dst`` without
    leaving its layout: ``(source layout, destination layout)``. The source layout is
    ``perm`` when every merged or split group lies together and in order in it; otherwise
    the nearest layout where it does (each group gathered where its first axis is, a
    transpose of the stored bytes). None when the extents do not line up."""
    if math.prod(src) != math.prod(dst):
        return None
    groups = _groups(src, dst)
    if groups is None:
        return None
    owner = {a: g for g, (ga, _) in enumerate(groups) for a in ga}
    seen: list[int] = []
    for a in _order(src, perm):
        if owner[a] not in seen:
            seen.append(owner[a])
    src_order = [a for g in seen for a in groups[g][0]]
    source = tuple(perm) if src_order == _order(src, perm) else with_units(src, src_order)
    return source, with_units(dst, [b for g in seen for b in groups[g][1]])
