"""Knobs over a list of loop axes: their order (reorder) and their annotations."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from ._errors import SpaceError, check, show
from ._knobs import Knob, listing, resolve_policy

__all__ = ["ANNOTATIONS", "AnnotateKnob", "ReorderKnob"]

#: Every annotation an axis may carry; "none" leaves the loop as it is.
ANNOTATIONS = ("none", "unroll", "vec", "parallel")

_ANNOTATE_POLICIES: Mapping[str, tuple[str, ...]] = {
    "try_unroll": ("none", "unroll"),
    "try_vec": ("none", "vec"),
    "try_unroll_vec": ("none", "unroll", "vec"),
    "try_parallel": ("none", "parallel"),
}
_MAX_PERMUTED_AXES = 8  # 8! = 40320 orders; beyond that a template lists candidates


_REORDER_POLICIES: Mapping[str, Callable[[tuple[str, ...]], Iterable[tuple[str, ...]]]] = {
    "all": itertools.permutations,
}


def _axis_names(name: str, axes: Sequence[str]) -> tuple[str, ...]:
    check(
        isinstance(axes, list | tuple)
        and len(axes) > 0
        and all(isinstance(a, str) and a.isidentifier() for a in axes)
        and len(set(axes)) == len(axes),
        f"knob {name!r} has axes {show(axes)}; expected a non-empty list of distinct identifiers",
    )
    return tuple(axes)


def _str_tuple(raw: object, length: int) -> tuple[str, ...] | None:
    if (
        isinstance(raw, list | tuple)
        and len(raw) == length
        and all(isinstance(x, str) for x in raw)
    ):
        return tuple(raw)
    return None


def _candidates(
    name: str,
    raws: Sequence[Sequence[str]],
    length: int,
    legal: Callable[[tuple[str, ...]], bool],
    expected: str,
) -> tuple[tuple[str, ...], ...]:
    values = []
    for raw in raws:
        value = _str_tuple(raw, length)
        if value is None or not legal(value):
            raise SpaceError(f"knob {name!r} has candidate {show(raw)}; expected {expected}")
        values.append(value)
    check(len(set(values)) == len(values), f"knob {name!r} has duplicate candidates")
    return tuple(values)


@dataclass(frozen=True, kw_only=True)
class ReorderKnob(Knob[tuple[str, ...]]):
    """An order of loop axes, outermost first: a permutation of ``axes``.

    With ``axes=("io", "jo")`` the value ``("jo", "io")`` makes the loop nest::

        for jo: for io: ...

    >>> ReorderKnob.create("order", axes=["io", "jo", "ko"]).size
    6
    """

    axes: tuple[str, ...]

    @classmethod
    def create(
        cls,
        name: str,
        *,
        axes: Sequence[str],
        policy: str = "all",
        candidates: Sequence[Sequence[str]] | None = None,
    ) -> ReorderKnob:
        """Build the knob: policy "all" gives every permutation, "candidate" the listed ones."""
        names = _axis_names(name, axes)
        orders = resolve_policy(name, policy, _REORDER_POLICIES, candidates)
        if orders is not None:
            check(
                len(names) <= _MAX_PERMUTED_AXES,
                f"knob {name!r} reorders {len(names)} axes, {math.factorial(len(names))} orders;"
                " list the interesting ones with policy='candidate'",
            )
            values = tuple(orders(names))
        else:
            assert candidates is not None
            values = _candidates(
                name,
                candidates,
                len(names),
                lambda v: sorted(v) == sorted(names),
                f"a permutation of {show(names)}",
            )
        return cls(name=name, values=values, axes=names)

    def _canonical(self, raw: object) -> tuple[str, ...] | None:
        return _str_tuple(raw, len(self.axes))

    def describe(self) -> str:
        if self.size == math.factorial(len(self.axes)):
            return f"a permutation of {show(self.axes)}"
        return f"{listing(self.values)} (orders of {show(self.axes)})"

    def feature_names(self) -> list[str]:
        return [f"{self.name}.pos[{axis}]" for axis in self.axes]

    def encode(self, value: tuple[str, ...]) -> list[float]:
        """The loop depth of each axis (0 = outermost), in ``axes`` order."""
        return [float(value.index(axis)) for axis in self.axes]


@dataclass(frozen=True, kw_only=True)
class AnnotateKnob(Knob[tuple[str, ...]]):
    """One annotation per axis, each from ``ANNOTATIONS``.

    With ``axes=("ii", "ji")`` the value ``("unroll", "vec")`` makes the loop nest::

        for ii (unrolled): for ji (vectorized): ...

    >>> AnnotateKnob.create("ann", axes=["ii", "ji"], policy="try_unroll_vec").size
    9
    """

    axes: tuple[str, ...]

    @classmethod
    def create(
        cls,
        name: str,
        *,
        axes: Sequence[str],
        policy: str,
        candidates: Sequence[Sequence[str]] | None = None,
    ) -> AnnotateKnob:
        """Build the knob: a "try_*" policy gives every combination of its annotations."""
        names = _axis_names(name, axes)
        options = resolve_policy(name, policy, _ANNOTATE_POLICIES, candidates)
        if options is not None:
            values = tuple(itertools.product(options, repeat=len(names)))
        else:
            assert candidates is not None
            expected = f"{len(names)} annotations from {show(ANNOTATIONS)}"
            known = set(ANNOTATIONS).issuperset
            values = _candidates(name, candidates, len(names), known, expected)
        return cls(name=name, values=values, axes=names)

    @cached_property
    def options(self) -> tuple[str, ...]:
        """The annotations that occur in some legal value, in ``ANNOTATIONS`` order."""
        used = {a for value in self.values for a in value}
        return tuple(a for a in ANNOTATIONS if a in used)

    def _canonical(self, raw: object) -> tuple[str, ...] | None:
        return _str_tuple(raw, len(self.axes))

    def describe(self) -> str:
        if self.size == len(self.options) ** len(self.axes):
            return f"one annotation per axis of {show(self.axes)} from {show(self.options)}"
        return f"{listing(self.values)} (annotations of {show(self.axes)})"

    def feature_names(self) -> list[str]:
        return [f"{self.name}[{axis}]={a}" for axis in self.axes for a in self.options]

    def encode(self, value: tuple[str, ...]) -> list[float]:
        """One-hot per axis over ``options``."""
        return [float(v == a) for v in value for a in self.options]
