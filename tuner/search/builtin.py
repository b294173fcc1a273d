"""The built-in strategies: random, grid, and Optuna's samplers by name."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..space import Config, ConfigSpace
from .base import Observation, Strategy, StrategyError, register_strategy


@register_strategy("random")
class RandomSearch(Strategy):
    """Uniform sampling among valid configs not measured yet."""

    name = "random"

    def propose(self, n: int, exclude: set[str]) -> list[Config]:
        return self.space.sample_many(self.rng, n, exclude=exclude)


@register_strategy("grid")
class GridSearch(Strategy):
    """Every valid config in a fixed order (for small spaces)."""

    name = "grid"

    def __init__(self, space: ConfigSpace, seed: int = 0, **options: Any):
        super().__init__(space, seed)
        self._points = space.enumerate()

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
        storage: str | None = None,
        study_name: str | None = None,
        **options: Any,
    ):
        super().__init__(space, seed)
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.name = sampler
        self._choices = space.choices()
        self.study = optuna.create_study(
            direction="minimize",
            sampler=_sampler(sampler, seed),
            storage=storage,
            study_name=study_name,
            load_if_exists=study_name is not None,
        )
        self._pending: dict[str, Any] = {}

    def _indices(self, cfg: Config) -> dict[str, int]:
        return {name: self._choices[name].index(_json(cfg[name])) for name in self._choices}

    def propose(self, n: int, exclude: set[str]) -> list[Config]:
        import optuna

        out: list[Config] = []
        tries = 0
        while len(out) < n and tries < 50 * n:
            tries += 1
            trial = self.study.ask()
            idx = {k: trial.suggest_int(k, 0, len(v) - 1) for k, v in self._choices.items()}
            cfg = self.space.from_indices(idx)
            if (
                not self.space.is_valid(cfg)
                or cfg.key in exclude
                or any(c.key == cfg.key for c in out)
            ):
                # Tell the sampler this point is no use, so that it moves on.
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
                continue
            self._pending[cfg.key] = trial
            out.append(cfg)
        return out

    def observe(self, observations: Sequence[Observation]) -> None:
        import optuna

        super().observe(observations)
        for cfg, seconds in observations:
            trial = self._pending.pop(cfg.key, None)
            value = seconds if math.isfinite(seconds) else None
            if trial is not None:
                if value is None:
                    self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
                else:
                    self.study.tell(trial, value)
            elif value is not None:  # measured before (a resumed log): teach the sampler
                dists: dict[str, optuna.distributions.BaseDistribution] = {
                    k: optuna.distributions.IntDistribution(0, len(v) - 1)
                    for k, v in self._choices.items()
                }
                self.study.add_trial(
                    optuna.trial.create_trial(
                        params=self._indices(cfg), distributions=dists, value=value
                    )
                )


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
