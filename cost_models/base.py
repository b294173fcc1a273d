"""The cost-model contract and the registry that finds models by name.

A cost model learns, from measured candidates, to rank unmeasured ones: the
search scores many lowered programs by their features and measures only the
best few. Only the order of the scores matters, so a model is free to learn
a ranking rather than a running time.

>>> model = get_cost_model("random", seed=0)
>>> model.fit(np.zeros((3, 2)), np.array([1.0, 2.0, np.inf]))
>>> model.predict(np.zeros((4, 2))).shape
(4,)
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

__all__ = [
    "CostModel",
    "CostModelError",
    "available_cost_models",
    "check_features",
    "check_groups",
    "check_training_data",
    "get_cost_model",
    "register_cost_model",
]


class CostModelError(ValueError):
    """An unknown cost model, a missing optional dependency, or malformed training data."""


class CostModel(abc.ABC):
    """Scores feature vectors so that a higher score means a predicted faster program.

    The contract every implementation keeps (``tests/cost_models`` checks it
    for every registered model):

    * ``fit(features, seconds)`` trains from scratch on ``features`` of shape
      ``(n, d)`` and measured times ``seconds`` of shape ``(n,)``. A failed
      candidate has ``seconds = inf`` (as do NaN and non-positive times) and
      ranks below every success. Malformed input raises ``CostModelError``.
    * ``predict(features)`` returns ``n`` finite float64 scores for an
      ``(n, d)`` array; only their order carries meaning. It never mutates
      ``features``.
    * ``is_fitted`` says whether the scores reflect training data. An unfitted
      model predicts zeros, so a search falls back to its own order (a model
      may decline to fit on too little data and stay unfitted).
    """

    @abc.abstractmethod
    def fit(
        self, features: np.ndarray, seconds: np.ndarray, groups: np.ndarray | None = None
    ) -> None:
        """Train on measured candidates, replacing anything learnt before.

        ``groups`` labels each row with its workload (integers): times are
        compared only within a group. ``None`` means one group.
        """

    @abc.abstractmethod
    def predict(self, features: np.ndarray) -> np.ndarray:
        """One score per row of ``features``; higher means predicted faster."""

    @property
    @abc.abstractmethod
    def is_fitted(self) -> bool:
        """Whether ``predict`` reflects training data (if not, it returns zeros)."""


def check_features(features: np.ndarray, width: int | None = None) -> np.ndarray:
    """``features`` as a 2-D float64 array, checked; ``width`` is the expected column count."""
    x = np.asarray(features, dtype=np.float64)
    if x.ndim != 2:
        raise CostModelError(f"features must be a 2-D array (n, d), got shape {x.shape}")
    if width is not None and x.shape[1] != width:
        raise CostModelError(f"features have {x.shape[1]} columns; the model was fit on {width}")
    return x


def check_training_data(features: np.ndarray, seconds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Checked ``(features, seconds)``; NaN and non-positive times become ``inf`` (failed)."""
    x = check_features(features)
    t = np.asarray(seconds, dtype=np.float64)
    if t.ndim != 1 or t.shape[0] != x.shape[0]:
        raise CostModelError(
            f"seconds must be a 1-D array with one time per feature row ({x.shape[0]}), "
            f"got shape {t.shape}"
        )
    t = np.where(np.isnan(t) | (t <= 0), np.inf, t)
    return x, t


def check_groups(groups: np.ndarray | None, n: int) -> np.ndarray:
    """Integer group labels for ``n`` rows; all zeros when ``groups`` is None."""
    if groups is None:
        return np.zeros(n, dtype=np.int64)
    g = np.asarray(groups)
    if g.shape != (n,) or not np.issubdtype(g.dtype, np.integer):
        raise CostModelError(
            f"groups must be {n} integer labels, one per row, got {g.dtype}{list(g.shape)}"
        )
    return g.astype(np.int64)


Factory = Callable[..., CostModel]
_F = TypeVar("_F", bound=Factory)
_REGISTRY: dict[str, Factory] = {}


def register_cost_model(name: str) -> Callable[[_F], _F]:
    """Class decorator: make a cost model available to ``get_cost_model(name)``::

        @register_cost_model("my-model")
        class MyModel(CostModel): ...

    Registering a different factory under a taken name raises ``CostModelError``.
    """

    def add(factory: _F) -> _F:
        if name in _REGISTRY and _REGISTRY[name] is not factory:
            raise CostModelError(f"a cost model named {name!r} is already registered")
        _REGISTRY[name] = factory
        return factory

    return add


def available_cost_models() -> list[str]:
    """The registered names, sorted."""
    return sorted(_REGISTRY)


def get_cost_model(name: str, **options: Any) -> CostModel:
    """A new cost model ``name`` built with ``options`` (its keyword arguments).

    >>> get_cost_model("xgb", n_estimators=50).is_fitted
    False
    """
    factory = _REGISTRY.get(name)
    if factory is None:
        known = ", ".join(available_cost_models()) or "none"
        raise CostModelError(f"unknown cost model {name!r}; available: {known}")
    try:
        return factory(**options)
    except TypeError as e:
        raise CostModelError(f"bad options for cost model {name!r}: {e}") from e
