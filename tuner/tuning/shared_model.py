"""One cost model for all of a model's tasks: what one task measured ranks another's candidates.

Each task's ``xgb`` strategy keeps its own search (pool, mutations, study),
but its cost model is a *view* of one shared model: the view's ``fit``
hands the task's observations to the shared model, which trains on every
task's, each task a ranking group of its own (times are compared within a
task only). Features are the loop-nest features alone, which mean the same
for every task; knob encodings do not. So a task that has measured nothing
yet already has its first batch ranked by what the other tasks taught.

Training is lazy: the shared model refits when a view is next asked to
predict after some task's data changed, not once per task per batch.

>>> shared = SharedCostModel("xgb", seed=0)
>>> share_cost_model(strategy, shared, task)   # strategy: a ModelBasedSearch of task
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cost_models import CostModel, get_cost_model

from ..search.base import Strategy
from ..search.model_based import ModelBasedSearch
from ..task import Task
from .featurize import Featurizer

__all__ = ["SharedCostModel", "share_cost_model"]

#: At most this many of a task's observations are trained on (the fastest first; failures last).
PER_TASK = 512


class SharedCostModel:
    """A cost model trained on the observations of many tasks; ``view(i)`` is task i's handle."""

    def __init__(self, name: str = "xgb", seed: int = 0, per_task: int = PER_TASK):
        self.model = get_cost_model(name, seed=seed)
        self.per_task = per_task
        self._data: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._stale = False
        self.fits = 0  # how often it trained (for tests and curiosity)

    def view(self, index: int) -> CostModel:
        return _TaskView(self, index)

    def set_data(self, index: int, features: np.ndarray, seconds: np.ndarray) -> None:
        """Task ``index``'s observations, replacing what it gave before."""
        if len(seconds) > self.per_task:
            keep = np.argsort(seconds, kind="stable")[: self.per_task]
            features, seconds = features[keep], seconds[keep]
        self._data[index] = (features, seconds)
        self._stale = True

    def refresh(self) -> None:
        """Train on every task's observations, if any changed since the last training."""
        if not self._stale:
            return
        self._stale = False
        parts = [(i, x, t) for i, (x, t) in sorted(self._data.items()) if len(t)]
        if not parts:
            return
        x = np.vstack([p[1] for p in parts])
        t = np.concatenate([p[2] for p in parts])
        groups = np.concatenate([np.full(len(p[2]), p[0], dtype=np.int64) for p in parts])
        self.model.fit(x, t, groups)
        self.fits += 1


class _TaskView(CostModel):
    """One task's side of a :class:`SharedCostModel` (the ``CostModel`` contract, shared state)."""

    def __init__(self, shared: SharedCostModel, index: int):
        self.shared, self.index = shared, index

    def fit(
        self, features: np.ndarray, seconds: np.ndarray, groups: np.ndarray | None = None
    ) -> None:
        x, t = np.asarray(features, dtype=np.float64), np.asarray(seconds, dtype=np.float64)
        own = np.ones(len(t), dtype=bool) if groups is None else np.asarray(groups) == 0
        self.shared.set_data(self.index, x[own], t[own])

    def predict(self, features: np.ndarray) -> np.ndarray:
        self.shared.refresh()
        return self.shared.model.predict(features)

    @property
    def is_fitted(self) -> bool:
        self.shared.refresh()
        return self.shared.model.is_fitted


def share_cost_model(
    strategy: Strategy, shared: SharedCostModel, index: int, task: Task, workers: Any = None
) -> bool:
    """Give ``strategy`` (task ``index``'s) the shared model and loop-nest features, if it has a model.

    Returns whether it was shared: strategies without a cost model (random,
    Optuna's samplers) are left as they are. Call it before the strategy
    observes anything.
    """
    if not isinstance(strategy, ModelBasedSearch):
        return False
    strategy.model = shared.view(index)
    strategy.featurize = Featurizer(task, workers=workers)  # loop-nest features alone
    return True
