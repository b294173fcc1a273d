"""The built-in strategies: random, grid, and Optuna's samplers by name."""

from __future__ import annotations

from typing import Any

from ..space import Config, ConfigSpace
from .base import Strategy, StrategyError, register_strategy
from .study import IN_MEMORY, KnobStudy, StudyPlace

__all__ = ["GridSearch", "KnobStudy", "OptunaSearch", "RandomSearch"]


def _shared_study(place: StudyPlace, space: ConfigSpace, seed: int) -> KnobStudy | None:
    """For a strategy without a sampler: a study only when it is kept in a storage."""
    import optuna

    return place.open(space, optuna.samplers.RandomSampler(seed=seed)) if place.shared else None


@register_strategy("random")
class RandomSearch(Strategy):
    """Uniform sampling among valid configs not measured yet."""

    name = "random"

    def __init__(
        self,
        space: ConfigSpace,
        seed: int = 0,
        place: StudyPlace = IN_MEMORY,
        **options: Any,
    ):
        super().__init__(space, seed)
        self.study = _shared_study(place, space, seed)

    def propose(self, n: int, exclude: set[str]) -> list[Config]:
        return self.space.sample_many(self.rng, n, exclude=exclude)


@register_strategy("grid")
class GridSearch(Strategy):
    """Every valid config in a fixed order (for small spaces)."""

    name = "grid"

    def __init__(
        self,
        space: ConfigSpace,
        seed: int = 0,
        place: StudyPlace = IN_MEMORY,
        **options: Any,
    ):
        super().__init__(space, seed)
        self._points = space.enumerate()
        self.study = _shared_study(place, space, seed)

    def propose(self, n: int, exclude: set[str]) -> list[Config]:
        out: list[Config] = []
        for cfg in self._points:
            if cfg.key not in exclude:
                out.append(cfg)
                if len(out) == n:
                    break
        return out


class OptunaSearch(Strategy):
    """One of Optuna's samplers, driven through ask/tell over knob indices."""

    name = "optuna"

    def __init__(
        self,
        space: ConfigSpace,
        seed: int = 0,
        sampler: str = "tpe",
        place: StudyPlace = IN_MEMORY,
        **options: Any,
    ):
        super().__init__(space, seed)
        self.name = sampler
        self.study: KnobStudy = place.open(space, _sampler(sampler, seed))

    #: Rejected asks in a row after which the rest of a batch is drawn at random.
    max_misses = 16

    def propose(self, n: int, exclude: set[str]) -> list[Config]:
        """The sampler's points; when it keeps naming invalid or measured ones, random ones.

        A sampler over knob indices knows neither the constraints nor what
        is left in a nearly exhausted (or replayed) space: after
        ``max_misses`` rejections in a row, the rest of the batch is drawn
        uniformly from the valid unmeasured configs (they become trials when
        claimed or told).
        """
        out: list[Config] = []
        misses = 0
        while len(out) < n and misses < self.max_misses:
            trial, cfg = self.study.ask()
            if (
                not self.space.is_valid(cfg)
                or cfg.key in exclude
                or any(c.key == cfg.key for c in out)
            ):
                self.study.reject(trial)
                misses += 1
                continue
            misses = 0
            self.study.hold(trial, cfg)
            out.append(cfg)
        if len(out) < n:
            taken = exclude | {c.key for c in out}
            out += self.space.sample_many(self.rng, n - len(out), exclude=taken)
        return out


def _json(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


_SAMPLERS = ("tpe", "cmaes", "gp", "qmc", "nsgaii", "optuna-random")


#: Python modules each sampler needs beyond Optuna itself.
_NEEDS = {"cmaes": ("cmaes",), "gp": ("torch", "scipy"), "qmc": ("scipy",)}


def _sampler(name: str, seed: int) -> Any:
    import importlib.util

    import optuna

    missing = [m for m in _NEEDS.get(name, ()) if importlib.util.find_spec(m) is None]
    if missing:
        raise StrategyError(
            f"strategy {name!r} needs {', '.join(missing)}; install it with pip install {' '.join(missing)}"
        )

    factories = {
        "tpe": lambda: optuna.samplers.TPESampler(seed=seed, multivariate=True),
        "cmaes": lambda: optuna.samplers.CmaEsSampler(seed=seed),
        "gp": lambda: optuna.samplers.GPSampler(seed=seed),
        "qmc": lambda: optuna.samplers.QMCSampler(seed=seed),
        "nsgaii": lambda: optuna.samplers.NSGAIISampler(seed=seed),
        "optuna-random": lambda: optuna.samplers.RandomSampler(seed=seed),
    }
    return factories[name]()


def _register_samplers() -> None:
    for sampler in _SAMPLERS:

        def factory(
            space: ConfigSpace, seed: int = 0, _s: str = sampler, **options: Any
        ) -> Strategy:
            return OptunaSearch(space, seed, sampler=_s, **options)

        register_strategy(sampler)(factory)


_register_samplers()
