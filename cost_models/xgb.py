"""Gradient-boosted trees that learn to rank candidates (XGBoost, pairwise objective).

The model never predicts seconds: it learns which of two candidates is
faster, as AutoTVM's XGBoost model does, so that its scores order unmeasured
programs. Targets are relevances from throughput, ``min(seconds) / seconds``
in ``(0, 1]``, and ``0`` for failed candidates. Candidates of one workload
form one query group; records of other workloads (transfer) come as groups
of their own, so the model learns orders within each workload only, from
features that mean the same across workloads (NaN where one does not apply).

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> x = rng.random((64, 3))
>>> model = XGBCostModel(n_estimators=50)
>>> model.fit(x, 1e-3 * (1 + x[:, 0]))    # faster when feature 0 is small
>>> scores = model.predict(x)
>>> bool(scores[x[:, 0].argmin()] > scores[x[:, 0].argmax()])
True
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .base import CostModel, CostModelError, check_features, check_groups, check_training_data
from .base import register_cost_model as _register

__all__ = ["XGBCostModel", "XGBOptions", "relevance"]


@dataclass(frozen=True)
class XGBOptions:
    """Training options; the defaults fit a few hundred samples in well under a second.

    ``nthread`` is 1 so that training never competes with a kernel being timed;
    ``min_samples`` is the fewest candidates the model will learn from.
    """

    n_estimators: int = 150
    max_depth: int = 6
    learning_rate: float = 0.1
    subsample: float = 1.0
    pairs_per_sample: int = 8
    min_samples: int = 4
    nthread: int = 1
    seed: int = 0

    def params(self) -> dict[str, Any]:
        return {
            "objective": "rank:pairwise",
            # Random pairs over the whole group order all of it; the default
            # "topk" only learns the order among the leaders.
            "lambdarank_pair_method": "mean",
            "lambdarank_num_pair_per_sample": self.pairs_per_sample,
            "max_depth": self.max_depth,
            "eta": self.learning_rate,
            "subsample": self.subsample,
            "nthread": self.nthread,
            "seed": self.seed,
            "verbosity": 0,
        }


def relevance(seconds: np.ndarray) -> np.ndarray:
    """Throughput relative to the fastest, in ``(0, 1]``; ``0`` for failed (infinite) times.

    >>> relevance(np.array([2.0, 1.0, np.inf])).tolist()
    [0.5, 1.0, 0.0]
    """
    t = np.asarray(seconds, dtype=np.float64)
    ok = np.isfinite(t) & (t > 0)
    out = np.zeros(t.shape, dtype=np.float64)
    if ok.any():
        out[ok] = t[ok].min() / t[ok]
    return out


@_register("xgb")
class XGBCostModel(CostModel):
    """XGBoost ``rank:pairwise`` on loop features; deterministic for a given seed.

    Options come as an ``XGBOptions`` or as its fields by keyword
    (``XGBCostModel(n_estimators=50)``, ``get_cost_model("xgb", max_depth=4)``).

    ``fit`` with fewer than ``min_samples`` candidates, or with candidates that
    all have the same relevance (say, all failed), learns nothing: the model is
    left unfitted and predicts zeros, since no order can be learnt from them.
    """

    def __init__(self, options: XGBOptions | None = None, **overrides: Any) -> None:
        self.options = replace(options or XGBOptions(), **overrides)
        try:
            import xgboost
        except ImportError as e:  # pragma: no cover - xgboost is a declared dependency
            raise CostModelError(
                "cost model 'xgb' needs the optional dependency xgboost (pip install xgboost)"
            ) from e
        self._xgb = xgboost
        self._booster: Any = None
        self._width: int | None = None

    @property
    def is_fitted(self) -> bool:
        return self._booster is not None

    def fit(
        self, features: np.ndarray, seconds: np.ndarray, groups: np.ndarray | None = None
    ) -> None:
        x, t = check_training_data(features, seconds)
        self._booster, self._width = None, None
        labels = check_groups(groups, x.shape[0])
        # XGBoost wants each query group's rows together; relevance is within a group.
        order = np.argsort(labels, kind="stable")
        x, t, labels = x[order], t[order], labels[order]
        _, starts, sizes = np.unique(labels, return_index=True, return_counts=True)
        rel = np.concatenate([relevance(t[a : a + n]) for a, n in zip(starts, sizes, strict=True)])
        if x.shape[0] < self.options.min_samples or np.ptp(rel) == 0:
            return
        data = self._xgb.DMatrix(x, label=rel, missing=np.nan)
        data.set_group(sizes.tolist())
        self._booster = self._xgb.train(
            self.options.params(), data, num_boost_round=self.options.n_estimators
        )
        self._width = x.shape[1]

    def predict(self, features: np.ndarray) -> np.ndarray:
        x = check_features(features, self._width)
        if self._booster is None:
            return np.zeros(x.shape[0], dtype=np.float64)
        if x.shape[0] == 0:
            return np.zeros(0, dtype=np.float64)
        scores = self._booster.predict(self._xgb.DMatrix(x))
        return np.nan_to_num(np.asarray(scores, dtype=np.float64))

    def __repr__(self) -> str:
        return f"XGBCostModel({self.options}, fitted={self.is_fitted})"
