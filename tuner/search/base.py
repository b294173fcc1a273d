"""Search strategies: ask/tell over a knob space; the tuning loop belongs to the tuner.

A strategy ``propose``s configs it wants measured and ``observe``s what was
measured (its own proposals, and earlier records when resuming). It never
measures anything itself, so strategies are tested on replayed measurements.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..space import Config, ConfigSpace

if TYPE_CHECKING:
    from .study import KnobStudy

__all__ = [
    "Observation",
    "Strategy",
    "StrategyError",
    "get_strategy",
    "register_strategy",
    "strategies",
]


class StrategyError(ValueError):
    """An unknown strategy, or one whose optional dependency is missing."""


#: A measured config and its median seconds (``inf`` for any failure).
Observation = tuple[Config, float]


class Strategy(ABC):
    """Proposes configs of ``space``; learns from observations.

    Contract: ``propose(n, exclude)`` returns at most ``n`` distinct valid
    configs whose keys are not in ``exclude`` (fewer only when the space is
    exhausted); ``observe`` accepts any configs of the space, in any order,
    including ones it never proposed.

    ``study``: the Optuna study of its trials, when it keeps one (every
    sampler does; every strategy does under ``--storage``, where the study is
    shared with other workers and holds their claims). ``observe`` tells it.
    """

    name = ""
    study: KnobStudy | None = None

    def __init__(self, space: ConfigSpace, seed: int = 0, **options: Any):
        self.space = space
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.history: list[Observation] = []

    @abstractmethod
    def propose(self, n: int, exclude: set[str]) -> list[Config]: ...

    def observe(self, observations: Sequence[Observation]) -> None:
        self.history.extend(observations)
        if self.study is not None:
            for cfg, seconds in observations:
                self.study.tell(cfg, seconds)

    def predicted(self, config: Config) -> float | None:
        """The strategy's score for ``config`` when it has a model (for the log)."""
        return None

    @property
    def best_seconds(self) -> float:
        return min((s for _, s in self.history), default=math.inf)


_REGISTRY: dict[str, Callable[..., Strategy]] = {}


def register_strategy(name: str) -> Callable[[Callable[..., Strategy]], Callable[..., Strategy]]:
    def deco(factory: Callable[..., Strategy]) -> Callable[..., Strategy]:
        _REGISTRY[name] = factory
        return factory

    return deco


def strategies() -> list[str]:
    from . import builtin, model_based  # noqa: F401  (they register themselves)

    return sorted(_REGISTRY)


def get_strategy(
    name: str,
    space: ConfigSpace,
    seed: int = 0,
    *,
    storage: str | None = None,
    study_name: str | None = None,
    claim_timeout: float | None = None,
    **options: Any,
) -> Strategy:
    """The strategy registered as ``name`` (``random``, ``grid``, ``tpe``, ``xgb``, ...).

    ``storage``, ``study_name`` and ``claim_timeout`` say where its study lives
    (a :class:`~tuner.search.study.StudyPlace`); the other options are the strategy's own.
    """
    from .study import CLAIM_TIMEOUT, StudyPlace

    known = strategies()
    if name not in _REGISTRY:
        raise StrategyError(f"unknown strategy {name!r}; known strategies: {', '.join(known)}")
    timeout = CLAIM_TIMEOUT if claim_timeout is None else claim_timeout
    place = StudyPlace(storage, study_name, timeout)
    return _REGISTRY[name](space, seed=seed, place=place, **options)
