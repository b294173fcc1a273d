"""Knob base class, value types and the plain choice knob.

Every knob is a frozen record holding its name and the ordered tuple of its
legal values. That order is the search's notion of "one step" (see
``ConfigSpace.neighbours``) and the digit order of ``ConfigSpace.index_of``.
Axis knobs (reorder, annotate) live in ``_axes``, split knobs in ``_split``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Generic, TypeVar, cast

import numpy as np

from ._errors import ConfigError, SpaceError, check, show

__all__ = [
    "ChoiceKnob",
    "JsonValue",
    "Knob",
    "KnobValue",
    "Scalar",
    "json_value",
    "listing",
    "resolve_policy",
]

Scalar = int | float | str | bool
KnobValue = Scalar | tuple[int, ...] | tuple[str, ...]
JsonValue = Scalar | list[int] | list[str]

V = TypeVar("V", bound=KnobValue)
T = TypeVar("T")


def plain(raw: object) -> object:
    """Unwrap a NumPy scalar, so that ``np.int64(8)`` reads like ``8``."""
    return raw.item() if isinstance(raw, np.generic) else raw


def resolve_policy(
    name: str, policy: str, table: Mapping[str, T], candidates: object | None
) -> T | None:
    """Look ``policy`` up in ``table``; ``None`` stands for policy "candidate".

    Checks that candidates are given exactly when the policy is "candidate".
    """
    if policy == "candidate":
        check(
            isinstance(candidates, list | tuple) and len(candidates) > 0,
            f"knob {name!r} has policy 'candidate' but no non-empty candidates list",
        )
        return None
    check(candidates is None, f"knob {name!r} takes candidates only with policy='candidate'")
    known = ", ".join([*table, "candidate"])
    check(policy in table, f"knob {name!r} has unknown policy {policy!r}; known: {known}")
    return table[policy]


def json_value(value: KnobValue) -> JsonValue:
    """The JSON form of a knob value: tuples become lists.

    >>> json_value((4, 16))
    [4, 16]
    """
    return cast(JsonValue, list(value)) if isinstance(value, tuple) else value


def listing(values: Sequence[object], limit: int = 6) -> str:
    """``"one of [a, b, ...]"``, cut after ``limit`` values."""
    shown = ", ".join(show(v) for v in values[:limit])
    return f"one of [{shown}{', ...' if len(values) > limit else ''}]"


@dataclass(frozen=True, kw_only=True)
class Knob(ABC, Generic[V]):
    """Base of all knobs: a name and the ordered tuple of its legal values.

    Subclasses say how a JSON value is read (``_canonical``), how the legal set
    is described in errors (``describe``) and how a value becomes numbers for a
    cost model (``encode``, always as long as ``feature_names``).
    """

    name: str
    values: tuple[V, ...] = field(repr=False)

    def __post_init__(self) -> None:
        named = isinstance(self.name, str) and self.name.isidentifier()
        check(named, f"knob name {self.name!r} is not an identifier")
        check(len(self.values) > 0, f"knob {self.name!r} has no legal values")

    @property
    def size(self) -> int:
        """Number of legal values."""
        return len(self.values)

    @cached_property
    def _positions(self) -> dict[tuple[type, object], int]:
        # Keyed by type too, so that True never passes for 1, nor 1.0 for 1.
        return {(type(v), v): i for i, v in enumerate(self.values)}

    def index(self, raw: object) -> int:
        """Position of ``raw`` (a value or its JSON form) in ``values``.

        Raises ``ConfigError`` naming the knob when ``raw`` is not legal.

        >>> ChoiceKnob.create("kc", [64, 128]).index(128)
        1
        """
        value = self._canonical(plain(raw))
        position = None if value is None else self._positions.get((type(value), value))
        if position is None:
            raise ConfigError(
                f"knob {self.name!r} has value {show(raw)}; expected {self.describe()}"
            )
        return position

    @abstractmethod
    def _canonical(self, raw: object) -> V | None:
        """The value ``raw`` denotes if it has the right shape and types, else ``None``."""

    @abstractmethod
    def describe(self) -> str:
        """What a legal value looks like, as a phrase to follow "expected"."""

    @abstractmethod
    def feature_names(self) -> list[str]:
        """Names of the numbers ``encode`` returns, in order."""

    @abstractmethod
    def encode(self, value: V) -> list[float]:
        """Numeric features of a legal ``value`` for a cost model."""


def _scalar(raw: object) -> Scalar | None:
    """``raw`` as a finite JSON scalar, or ``None`` if it is not one."""
    value = plain(raw)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value if isinstance(value, int | float | str) else None


@dataclass(frozen=True, kw_only=True)
class ChoiceKnob(Knob[Scalar]):
    """Any other choice: one of a list of JSON scalars (int, float, str, bool).

    >>> ChoiceKnob.create("parallel", [True, False]).describe()
    'one of [true, false]'
    """

    @classmethod
    def create(cls, name: str, values: Sequence[Scalar]) -> ChoiceKnob:
        """Build the knob, rejecting non-scalars, non-finite floats and duplicates."""
        check(
            isinstance(values, list | tuple) and len(values) > 0,
            f"knob {name!r} needs a non-empty list of values, got {show(values)}",
        )
        scalars: list[Scalar] = []
        for raw in values:
            value = _scalar(raw)
            if value is None:
                expected = "a finite int, float, str or bool"
                raise SpaceError(f"knob {name!r} has value {show(raw)}; expected {expected}")
            scalars.append(value)
        keys = {(type(v), v) for v in scalars}
        check(len(keys) == len(scalars), f"knob {name!r} has duplicate values {show(values)}")
        return cls(name=name, values=tuple(scalars))

    @cached_property
    def numeric(self) -> bool:
        """Whether every value is a number (bools count as 0 and 1)."""
        return all(isinstance(v, int | float) for v in self.values)

    def _canonical(self, raw: object) -> Scalar | None:
        return _scalar(raw)

    def describe(self) -> str:
        return listing(self.values, limit=10)

    def feature_names(self) -> list[str]:
        return [self.name if self.numeric else f"{self.name}.index"]

    def encode(self, value: Scalar) -> list[float]:
        """The value itself when numeric, else its position in ``values``."""
        return [float(value) if self.numeric else float(self.index(value))]
