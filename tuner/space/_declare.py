"""The declaring half of a space: knobs and constraints, added once, then frozen."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Self, TypeVar

from ._axes import AnnotateKnob, ReorderKnob
from ._config import Config
from ._errors import check
from ._knobs import ChoiceKnob, Knob, Scalar
from ._split import SplitKnob

__all__ = ["Constraint", "Declaration"]

K = TypeVar("K", bound=Knob[Any])


@dataclass(frozen=True)
class Constraint:
    """A predicate that every valid config satisfies, and the one-line reason for it."""

    predicate: Callable[[Config], bool]
    description: str


class Declaration:
    """Knobs and constraints as a template declares them; ``ConfigSpace`` queries them.

    Append-only: ``define_*`` adds a knob under a new identifier, nothing is
    ever replaced or removed, and ``freeze()`` ends the declaration.
    """

    def __init__(self) -> None:
        self._knobs: dict[str, Knob[Any]] = {}
        self._constraints: list[Constraint] = []
        self._frozen = False
        #: Knob -> the value a config without it stands for (see ``define_knob``).
        self._absent: dict[str, Any] = {}

    def define_split(
        self,
        name: str,
        *,
        extent: int,
        num_outputs: int,
        policy: str = "factors",
        max_factor: int | None = None,
        candidates: Sequence[Sequence[int]] | None = None,
        filter: Callable[[tuple[int, ...]], bool] | None = None,
    ) -> SplitKnob:
        """Add a split knob; see ``SplitKnob`` for the value layout and policies.

        >>> from tuner.space import ConfigSpace
        >>> ConfigSpace().define_split("tile_k", extent=1000, num_outputs=2,
        ...                            policy="power2", max_factor=4).values
        ((1000, 1), (500, 2), (250, 4))
        """
        self._claim(name)
        return self._add(
            SplitKnob.create(
                name,
                extent=extent,
                num_outputs=num_outputs,
                policy=policy,
                max_factor=max_factor,
                candidates=candidates,
                filter=filter,
            )
        )

    def define_reorder(
        self,
        name: str,
        *,
        axes: Sequence[str],
        policy: str = "all",
        candidates: Sequence[Sequence[str]] | None = None,
    ) -> ReorderKnob:
        """Add a loop-order knob: policy "all" (every permutation) or "candidate".

        >>> from tuner.space import ConfigSpace
        >>> ConfigSpace().define_reorder("order", axes=["io", "jo"]).values
        (('io', 'jo'), ('jo', 'io'))
        """
        self._claim(name)
        return self._add(ReorderKnob.create(name, axes=axes, policy=policy, candidates=candidates))

    def define_annotate(
        self,
        name: str,
        *,
        axes: Sequence[str],
        policy: str,
        candidates: Sequence[Sequence[str]] | None = None,
    ) -> AnnotateKnob:
        """Add a per-axis annotation knob: "try_unroll", "try_vec", "try_unroll_vec",
        "try_parallel" or "candidate".

        >>> from tuner.space import ConfigSpace
        >>> ConfigSpace().define_annotate("ann", axes=["ji"], policy="try_vec").values
        (('none',), ('vec',))
        """
        self._claim(name)
        return self._add(AnnotateKnob.create(name, axes=axes, policy=policy, candidates=candidates))

    def define_knob(
        self, name: str, values: Sequence[Scalar], *, absent: Scalar | None = None
    ) -> ChoiceKnob:
        """Add a knob choosing among JSON scalars (int, float, str, bool).

        ``absent``: for a knob added to a space that logs were already written
        against, the value that a config without the knob means (the schedule
        those configs built). Such configs keep validating, read with it.

        >>> from tuner.space import ConfigSpace
        >>> ConfigSpace().define_knob("kc", [64, 128, 256]).size
        3
        >>> sp = ConfigSpace(); _ = sp.define_knob("kc", [64, 128])
        >>> _ = sp.define_knob("pack", [True, False], absent=False)
        >>> sp.validate({"kc": 64})
        Config(kc=64, pack=False)
        """
        self._claim(name)
        knob = ChoiceKnob.create(name, values)
        if absent is not None:
            knob.index(absent)  # raises unless it is one of the values
            self._absent[name] = absent
        return self._add(knob)

    def add_constraint(self, predicate: Callable[[Config], bool], description: str) -> None:
        """Require ``predicate(config)`` of every valid config; ``description`` says why."""
        check(not self._frozen, f"cannot add constraint {description!r}: the space is frozen")
        check(callable(predicate), f"constraint {description!r} is not callable")
        check(isinstance(description, str) and description != "", "a constraint needs a reason")
        self._constraints.append(Constraint(predicate, description))

    def freeze(self) -> Self:
        """Forbid further definitions; returns the space itself."""
        self._frozen = True
        return self

    @property
    def knobs(self) -> Mapping[str, Knob[Any]]:
        """Read-only view of the knobs by name, in definition order."""
        return MappingProxyType(self._knobs)

    @property
    def constraints(self) -> tuple[Constraint, ...]:
        """The constraints, in the order they were added."""
        return tuple(self._constraints)

    @property
    def size(self) -> int:
        """Number of points before constraints: the product of the knob sizes."""
        return math.prod(knob.size for knob in self._knobs.values())

    def _claim(self, name: str) -> None:
        check(not self._frozen, f"cannot define knob {name!r}: the space is frozen")
        check(
            isinstance(name, str) and name.isidentifier(),
            f"knob name {name!r} is not an identifier",
        )
        check(name not in self._knobs, f"knob {name!r} is already defined")

    def _add(self, knob: K) -> K:
        self._knobs[knob.name] = knob
        return knob

    def __repr__(self) -> str:
        knobs = ", ".join(f"{name}:{knob.size}" for name, knob in self._knobs.items())
        counts = f"size={self.size}, constraints={len(self._constraints)}"
        return f"{type(self).__name__}({knobs}; {counts})"
