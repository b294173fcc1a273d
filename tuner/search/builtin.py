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


class KnobStudy:
    """An Optuna study over a space's knob indices, holding every trial a strategy runs.

    Samplers ``ask`` it for points; other strategies (``xgb``) ``enqueue`` the
    configs they chose, so every strategy's trials live in one study, in
    memory or in an Optuna storage (``--storage sqlite:///tune.db``). A named
    study in a storage is loaded when it exists: its completed trials are not
    added again when the tuning log replays them (``tell`` of a config it
    already holds is a no-op).
    """

    def __init__(
        self,
        space: ConfigSpace,
        sampler: Any,
        storage: str | None = None,
        study_name: str | None = None,
    ):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.space = space
        self.choices = space.choices()
        self.distributions: dict[str, optuna.distributions.BaseDistribution] = {
            k: optuna.distributions.IntDistribution(0, len(v) - 1) for k, v in self.choices.items()
        }
        self.study = optuna.create_study(
            direction="minimize",
            sampler=sampler,
            storage=storage,
            study_name=study_name,
            load_if_exists=study_name is not None,
        )
        self._pending: dict[str, Any] = {}
        self._done: set[str] = set()
        for t in self.study.get_trials(deepcopy=False):
            if t.state.is_finished() and set(t.params) == set(self.choices):
                self._done.add(self._key(t.params))

    def _key(self, indices: dict[str, int]) -> str:
        return self.space.from_indices(indices).key

    def indices(self, cfg: Config) -> dict[str, int]:
        return {name: self.choices[name].index(_json(cfg[name])) for name in self.choices}

    def ask(self) -> tuple[Any, Config]:
        """A trial of the study's sampler and the config its knob indices name."""
        trial = self.study.ask()
        idx = {k: trial.suggest_int(k, 0, len(v) - 1) for k, v in self.choices.items()}
        return trial, self.space.from_indices(idx)

    def reject(self, trial: Any) -> None:
        """Tell the sampler a point of no use (invalid or measured), so that it moves on."""
        import optuna

        self.study.tell(trial, state=optuna.trial.TrialState.FAIL)

    def hold(self, trial: Any, cfg: Config) -> None:
        """Keep ``trial`` open until ``cfg`` is measured."""
        self._pending[cfg.key] = trial

    def enqueue(self, cfg: Config) -> None:
        """Open a trial for a config chosen outside the sampler."""
        self.study.enqueue_trial(self.indices(cfg))
        self.hold(self.study.ask(self.distributions), cfg)

    def tell(self, cfg: Config, seconds: float) -> None:
        """Close ``cfg``'s open trial, or add a completed one for a config measured before."""
        import optuna

        value = seconds if math.isfinite(seconds) else None
        trial = self._pending.pop(cfg.key, None)
        if trial is not None:
            if value is None:
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            else:
                self.study.tell(trial, value)
        elif value is not None and cfg.key not in self._done:
            self.study.add_trial(
                optuna.trial.create_trial(
                    params=self.indices(cfg), distributions=self.distributions, value=value
                )
            )
        self._done.add(cfg.key)


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
        self.name = sampler
        self.study = KnobStudy(space, _sampler(sampler, seed), storage, study_name)

    #: Rejected asks in a row after which the rest of a batch is drawn at random.
    max_misses = 16

    def propose(self, n: int, exclude: set[str]) -> list[Config]:
        """The sampler's points; when it keeps naming invalid or measured ones, random ones.

        A sampler over knob indices knows neither the constraints nor what
        is left in a nearly exhausted (or replayed) space: after
        ``max_misses`` rejections in a row, the rest of the batch is drawn
        uniformly from the valid unmeasured configs and enqueued in the study.
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
            for cfg in self.space.sample_many(self.rng, n - len(out), exclude=taken):
                self.study.enqueue(cfg)
                out.append(cfg)
        return out

    def observe(self, observations: Sequence[Observation]) -> None:
        super().observe(observations)
        for cfg, seconds in observations:
            self.study.tell(cfg, seconds)


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
