"""Baselines a learnt model has to beat."""

from __future__ import annotations

import numpy as np

from .base import CostModel, check_features, check_groups, check_training_data
from .base import register_cost_model as _register

__all__ = ["RandomModel"]


@_register("random")
class RandomModel(CostModel):
    """Uniform random scores from a seeded generator: search guided by chance.

    It needs no data, so it counts as fitted from the start; ``fit`` only
    checks its input. Scores are reproducible for a given seed and sequence
    of calls.

    >>> RandomModel(seed=0).predict(np.zeros((3, 5))).shape
    (3,)
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._rng = np.random.default_rng(seed)

    @property
    def is_fitted(self) -> bool:
        return True

    def fit(
        self, features: np.ndarray, seconds: np.ndarray, groups: np.ndarray | None = None
    ) -> None:
        x, _ = check_training_data(features, seconds)
        check_groups(groups, x.shape[0])

    def predict(self, features: np.ndarray) -> np.ndarray:
        x = check_features(features)
        scores: np.ndarray = self._rng.random(int(x.shape[0]))
        return scores

    def __repr__(self) -> str:
        return f"RandomModel(seed={self.seed})"
