"""ConfigSpace: the declared search space of one operator template.

A template declares its knobs and constraints once (``Declaration``); search
strategies then draw, step through and encode points of the space, and the
tuner checks every config read back from a log with ``validate``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import operator
from collections.abc import Iterator, Mapping, Sequence, Set
from typing import Any

import numpy as np

from ._config import Config
from ._declare import Constraint, Declaration
from ._errors import ConfigError, SpaceError
from ._knobs import JsonValue, json_value

__all__ = ["ConfigSpace"]

_MAX_TRIES = 10_000
#: Spaces with at most this many points (before constraints) are listed once for sampling.
_LIST_BELOW = 50_000


class ConfigSpace(Declaration):
    """The knobs of an operator template, their legal values and constraints.

    A space is declared append-only: ``define_*`` adds knobs (names are unique
    identifiers), ``add_constraint`` adds constraints. The first query that
    makes or reads configs (``sample``, ``validate``, ``encode``...) freezes
    the space, as does ``freeze()``; defining afterwards raises ``SpaceError``,
    so that every config and feature vector of a space has the same knobs.

    >>> sp = ConfigSpace()
    >>> _ = sp.define_split("tile", extent=8, num_outputs=2)
    >>> _ = sp.define_knob("unroll", [True, False])
    >>> sp.add_constraint(lambda c: c["tile"][1] > 1 or not c["unroll"], "unroll needs a tile")
    >>> sp.size, len(list(sp.enumerate()))
    (8, 7)
    """

    def restricted(self, keys: Set[str], description: str) -> ConfigSpace:
        """The same knobs and constraints, limited to configs whose key is in ``keys``.

        For replaying a finite set of measured configs:

        >>> sp = ConfigSpace(); _ = sp.define_knob("kc", [64, 128, 256]); sp.freeze() is sp
        True
        >>> sub = sp.restricted({'{"kc":128}'}, "measured"); [c["kc"] for c in sub.enumerate()]
        [128]
        """
        self.freeze()
        members = []
        for key in sorted(keys):
            try:
                members.append(self.validate(json.loads(key)))
            except (ConfigError, ValueError):
                continue  # recorded under another version of the space
        sub = _Restricted(members)
        sub._knobs = dict(self._knobs)
        sub._absent = dict(self._absent)
        listed = {m.key for m in members}  # keys as the current knobs write them
        sub._constraints = [*self._constraints, Constraint(lambda c: c.key in listed, description)]
        return sub.freeze()

    def choices(self) -> dict[str, list[JsonValue]]:
        """Knob name -> its legal values as JSON, in order (for categorical samplers).

        >>> sp = ConfigSpace(); _ = sp.define_knob("kc", [64, 128]); sp.choices()
        {'kc': [64, 128]}
        """
        self.freeze()
        return {name: [json_value(v) for v in knob.values] for name, knob in self._knobs.items()}

    @property
    def version(self) -> str:
        """A hash of what this space is: its knobs and their values, absent values, constraints.

        Records store it beside their knob values: where today's space has
        another version, the knob values may mean another schedule, and the
        compiler replays the record's stored trace instead (``tuner.kernels.resolve``).
        Constraints count by their descriptions.

        >>> sp = ConfigSpace(); _ = sp.define_knob("kc", [64, 128]); len(sp.version)
        16
        """
        self.freeze()
        data = {
            "knobs": self.choices(),
            "absent": {k: json_value(v) for k, v in sorted(self._absent.items())},
            "constraints": [c.description for c in self._constraints],
        }
        text = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    # Reading configs -----------------------------------------------------------------------

    def validate(self, data: Mapping[str, Any]) -> Config:
        """The config ``data`` denotes (lists read as tuples), checked against the space.

        Raises ``ConfigError`` with one sentence naming the missing, unknown or
        illegal knob, or the violated constraint. Nothing in ``data`` is evaluated.
        """
        config = self._at(self._indices(data))
        broken = self._violated(config)
        if broken is not None:
            raise ConfigError(f"config {config.key} violates constraint {broken.description!r}")
        return config

    def is_valid(self, data: Mapping[str, Any]) -> bool:
        """Whether ``validate(data)`` would succeed."""
        try:
            self.validate(data)
        except ConfigError:
            return False
        return True

    def index_of(self, config: Mapping[str, Any]) -> int:
        """Mixed-radix index of ``config`` in the unconstrained space.

        The first knob is the most significant digit, so index order is
        ``enumerate`` order.
        """
        index = 0
        for knob, digit in zip(self._knobs.values(), self._indices(config), strict=True):
            index = index * knob.size + digit
        return index

    def from_index(self, index: int) -> Config:
        """The point at ``index`` of the unconstrained space (it may violate constraints).

        >>> sp = ConfigSpace(); _ = sp.define_knob("kc", [64, 128]); sp.from_index(1)
        Config(kc=128)
        """
        index = operator.index(index)
        if not 0 <= index < self.size:
            raise ConfigError(f"index {index} is outside the space of {self.size} points")
        digits = []
        for knob in reversed(self._knobs.values()):
            index, digit = divmod(index, knob.size)
            digits.append(digit)
        return self._at(digits[::-1])

    def from_indices(self, indices: Mapping[str, int]) -> Config:
        """The point whose knob ``name`` takes value number ``indices[name]``.

        Constraints are not checked; this suits samplers that pick categorical
        indices from ``choices()``.
        """
        self._check_names(indices)
        digits = []
        for name, knob in self._knobs.items():
            digit = indices[name]
            integer = isinstance(digit, int | np.integer) and not isinstance(digit, bool)
            if not (integer and 0 <= digit < knob.size):
                raise ConfigError(f"knob {name!r} has index {digit!r}; expected 0..{knob.size - 1}")
            digits.append(int(digit))
        return self._at(digits)

    def encode(self, config: Mapping[str, Any]) -> np.ndarray:
        """Numeric features of ``config`` for a cost model, named by ``feature_names()``."""
        features: list[float] = []
        for knob, digit in zip(self._knobs.values(), self._indices(config), strict=True):
            features += knob.encode(knob.values[digit])
        return np.asarray(features, dtype=np.float64)

    def feature_names(self) -> list[str]:
        """Names of the ``encode`` features: log2 split factors, axis positions, one-hots..."""
        self.freeze()
        return [name for knob in self._knobs.values() for name in knob.feature_names()]

    # Searching -----------------------------------------------------------------------------

    def sample(self, rng: np.random.Generator, *, max_tries: int = _MAX_TRIES) -> Config:
        """A uniformly random valid config, by rejection; ``SpaceError`` after ``max_tries``.

        >>> sp = ConfigSpace(); _ = sp.define_knob("kc", [64, 128])
        >>> sp.sample(np.random.default_rng(0))["kc"] in (64, 128)
        True
        """
        self.freeze()
        for _ in range(max_tries):
            config = self._draw(rng)
            if self._violated(config) is None:
                return config
        reasons = "; ".join(c.description for c in self._constraints)
        raise SpaceError(f"no config out of {max_tries} random draws satisfied: {reasons}")

    def sample_many(
        self,
        rng: np.random.Generator,
        n: int,
        exclude: Set[str] = frozenset(),
        *,
        max_tries: int = _MAX_TRIES,
    ) -> list[Config]:
        """Up to ``n`` distinct valid configs whose keys are not in ``exclude``.

        Each is uniform among the valid configs not yet taken. Small spaces
        are listed once and drawn from without replacement, so fewer than
        ``n`` means that no other valid config exists; large ones are drawn by
        rejection, and fewer than ``n`` come back when ``max_tries`` draws in
        a row found nothing new.
        """
        self.freeze()
        listed = self._listed()
        if listed is not None:
            free = [c for c in listed if c.key not in exclude]
            picks = rng.permutation(len(free))[:n]
            return [free[int(i)] for i in picks]
        found: dict[str, Config] = {}
        misses = 0
        while len(found) < n and misses < max_tries:
            config = self._draw(rng)
            taken = config.key in exclude or config.key in found
            if taken or self._violated(config) is not None:
                misses += 1
            else:
                found[config.key] = config
                misses = 0
        return list(found.values())

    def neighbours(
        self, config: Mapping[str, Any], rng: np.random.Generator | None = None
    ) -> list[Config]:
        """Valid configs one step away: one knob moved to an adjacent value.

        In knob order, the lower step first; shuffled when ``rng`` is given.
        """
        digits = self._indices(config)
        found = []
        for position, knob in enumerate(self._knobs.values()):
            for step in (-1, 1):
                digit = digits[position] + step
                if 0 <= digit < knob.size:
                    moved = self._at((*digits[:position], digit, *digits[position + 1 :]))
                    if self._violated(moved) is None:
                        found.append(moved)
        if rng is not None:
            found = [found[i] for i in rng.permutation(len(found))]
        return found

    def mutate(self, config: Mapping[str, Any], rng: np.random.Generator) -> Config:
        """A uniformly random valid neighbour; ``SpaceError`` when there is none."""
        options = self.neighbours(config)
        if not options:
            raise SpaceError(f"config {self._at(self._indices(config)).key} has no valid neighbour")
        return options[int(rng.integers(len(options)))]

    def enumerate(self, limit: int | None = None) -> Iterator[Config]:
        """Every valid config (at most ``limit``), in ``index_of`` order."""
        self.freeze()
        names = list(self._knobs)
        points = itertools.product(*(knob.values for knob in self._knobs.values()))
        configs = (Config(tuple(zip(names, point, strict=True))) for point in points)
        valid = (config for config in configs if self._violated(config) is None)
        return itertools.islice(valid, limit)

    # Internals -----------------------------------------------------------------------------

    def _listed(self) -> list[Config] | None:
        """Every valid config, listed once, when the space is small enough; else None."""
        if self.size > _LIST_BELOW:
            return None
        cached: list[Config] | None = self.__dict__.get("_valid_configs")
        if cached is None:
            cached = list(self.enumerate())
            self.__dict__["_valid_configs"] = cached
        return cached

    def _draw(self, rng: np.random.Generator) -> Config:
        sizes = [knob.size for knob in self._knobs.values()]
        return self._at(rng.integers(0, sizes, size=len(sizes)).tolist())

    def _check_names(self, data: Mapping[str, Any]) -> None:
        self.freeze()  # every path that reads a config passes here
        if not isinstance(data, Mapping):
            raise ConfigError(f"a config must map knob names to values, not {type(data).__name__}")
        for name in data:
            if name not in self._knobs:
                known = ", ".join(self._knobs)
                raise ConfigError(f"config has unknown knob {name!r}; the knobs are: {known}")
        for name, knob in self._knobs.items():
            if name not in data and name not in self._absent:
                raise ConfigError(f"config is missing knob {name!r}; expected {knob.describe()}")

    def _indices(self, data: Mapping[str, Any]) -> tuple[int, ...]:
        self._check_names(data)
        return tuple(
            knob.index(data[name] if name in data else self._absent[name])
            for name, knob in self._knobs.items()
        )

    def complete(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """``data`` with the knobs it lacks and that have an ``absent`` value filled in.

        Nothing is checked: for bringing configs of older logs to the current
        knobs, so that one schedule has one key whichever log it came from.

        >>> sp = ConfigSpace(); _ = sp.define_knob("kc", [64, 128])
        >>> _ = sp.define_knob("pack", [True, False], absent=False); sp.complete({"kc": 64})
        {'kc': 64, 'pack': False}
        """
        missing = {k: v for k, v in self._absent.items() if k not in data}
        return {**data, **missing} if missing else dict(data)

    def _at(self, digits: Sequence[int]) -> Config:
        knobs = self._knobs.items()
        return Config(tuple((n, k.values[d]) for (n, k), d in zip(knobs, digits, strict=True)))

    def _violated(self, config: Config) -> Constraint | None:
        return next((c for c in self._constraints if not c.predicate(config)), None)


class _Restricted(ConfigSpace):
    """A space limited to a list of configs; it draws among them directly, not by rejection."""

    def __init__(self, members: list[Config]):
        super().__init__()
        self._members = members

    def _listed(self) -> list[Config] | None:
        return self._members

    def _draw(self, rng: np.random.Generator) -> Config:
        if not self._members:
            raise SpaceError("the restricted space holds no valid config")
        return self._members[int(rng.integers(len(self._members)))]
