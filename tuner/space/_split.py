"""Split knobs: how one loop of a given extent is tiled into nested loops.

A split value is a tuple of ``num_outputs`` loop extents, outermost first. The
search chooses the inner factors; the outer extent is always
``ceil(extent / prod(inner))``, so a non-dividing split leaves a remainder that
the schedule guards. For ``extent=10`` the value ``(3, 4)`` makes::

    for io in range(3):
        for ii in range(4):
            i = io * 4 + ii
            if i < 10: ...
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ._errors import SpaceError, check, show
from ._knobs import Knob, listing, plain, resolve_policy

__all__ = ["SplitKnob"]

Inner = tuple[int, ...]


def _divisors(n: int, cap: int) -> list[int]:
    """Divisors of ``n`` that are at most ``cap``, ascending."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    every = sorted({*small, *(n // d for d in small)})
    return [d for d in every if d <= cap]


def _dividing(extent: int, count: int, cap: int) -> list[Inner]:
    """Every ``count`` inner factors <= ``cap`` whose product divides ``extent``."""
    if count == 0:
        return [()]
    return [
        (d, *rest)
        for d in _divisors(extent, cap)
        for rest in _dividing(extent // d, count - 1, cap)
    ]


def _power2(extent: int, count: int, cap: int) -> list[Inner]:
    """Every ``count`` power-of-two inner factors <= ``cap`` whose product is <= ``extent``."""
    if count == 0:
        return [()]
    powers = [1 << k for k in range(min(extent, cap).bit_length())]
    return [(p, *rest) for p in powers for rest in _power2(extent // p, count - 1, cap)]


_POLICIES: Mapping[str, Callable[[int, int, int], list[Inner]]] = {
    "factors": _dividing,
    "power2": _power2,
}
_RULES = {
    "factors": "inner factors{cap} whose product divides {extent}",
    "power2": "power-of-two inner factors{cap}",
    "candidate": "the template's candidates",  # listed in full by ``describe``
}


def _positive(number: object) -> bool:
    return isinstance(number, int) and not isinstance(number, bool) and number >= 1


def _split_of(extent: int, inner: Inner) -> tuple[int, ...]:
    return (-(-extent // math.prod(inner)), *inner)


def _int_tuple(raw: object, length: int) -> tuple[int, ...] | None:
    if not isinstance(raw, list | tuple) or len(raw) != length:
        return None
    items = [plain(x) for x in raw]
    ints = [x for x in items if isinstance(x, int) and not isinstance(x, bool)]
    return tuple(ints) if len(ints) == length else None


def _is_split(extent: int, value: tuple[int, ...]) -> bool:
    inner = value[1:]
    return min(value) >= 1 and math.prod(inner) <= extent and value == _split_of(extent, inner)


def _candidates(name: str, extent: int, raws: Sequence[Sequence[int]], n: int) -> list[Inner]:
    inners = []
    for raw in raws:
        value = _int_tuple(raw, n)
        if value is None or not _is_split(extent, value):
            raise SpaceError(
                f"knob {name!r} has candidate {show(raw)}; expected {n} positive ints, the"
                f" inner ones multiplying to at most {extent} and the first being"
                f" ceil({extent} / their product)"
            )
        inners.append(value[1:])
    check(len(set(inners)) == len(inners), f"knob {name!r} has duplicate candidates")
    return inners


@dataclass(frozen=True, kw_only=True)
class SplitKnob(Knob[tuple[int, ...]]):
    """Tiling of a loop of ``extent`` into ``num_outputs`` nested loops, outermost first.

    ``max_factor`` bounds every inner factor (never the outer one); ``filtered``
    records that a template filter removed some values.

    >>> knob = SplitKnob.create("tile", extent=12, num_outputs=2)
    >>> knob.values
    ((12, 1), (6, 2), (4, 3), (3, 4), (2, 6), (1, 12))
    """

    extent: int
    num_outputs: int
    policy: str
    max_factor: int | None = None
    filtered: bool = False

    @classmethod
    def create(
        cls,
        name: str,
        *,
        extent: int,
        num_outputs: int,
        policy: str = "factors",
        max_factor: int | None = None,
        candidates: Sequence[Sequence[int]] | None = None,
        filter: Callable[[tuple[int, ...]], bool] | None = None,
    ) -> SplitKnob:
        """Build the knob from a policy: "factors", "power2" or "candidate"."""
        for what, number in (("extent", extent), ("num_outputs", num_outputs)):
            check(
                _positive(number),
                f"knob {name!r} has {what} {show(number)}; expected a positive int",
            )
        check(
            max_factor is None or _positive(max_factor),
            f"knob {name!r} has max_factor {show(max_factor)}; expected a positive int or None",
        )
        cap = extent if max_factor is None else max_factor
        generate = resolve_policy(name, policy, _POLICIES, candidates)
        if generate is not None:
            inners = generate(extent, num_outputs - 1, cap)
        else:
            assert candidates is not None
            inners = [
                inner
                for inner in _candidates(name, extent, candidates, num_outputs)
                if all(f <= cap for f in inner)
            ]
        values = [_split_of(extent, inner) for inner in inners]
        if filter is not None:
            values = [v for v in values if filter(v)]
        check(
            len(values) > 0,
            f"knob {name!r} has no legal split of {extent} left after max_factor and filter",
        )
        return cls(
            name=name,
            values=tuple(values),
            extent=extent,
            num_outputs=num_outputs,
            policy=policy,
            max_factor=max_factor,
            filtered=filter is not None,
        )

    def _canonical(self, raw: object) -> tuple[int, ...] | None:
        return _int_tuple(raw, self.num_outputs)

    def describe(self) -> str:
        cap = "" if self.max_factor is None else f" <= {self.max_factor}"
        rule = _RULES[self.policy].format(extent=self.extent, cap=cap)
        if self.filtered:
            rule += ", passing the template's filter"
        if self.policy == "candidate" or self.filtered:
            rule += f"; {listing(self.values)}"
        return f"a split of {self.extent} into {self.num_outputs} factors ({rule})"

    def feature_names(self) -> list[str]:
        return [f"{self.name}.log2[{i}]" for i in range(self.num_outputs)]

    def encode(self, value: tuple[int, ...]) -> list[float]:
        """log2 of every loop extent, outermost first."""
        return [math.log2(f) for f in value]
