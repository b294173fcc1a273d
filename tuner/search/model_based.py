"""``xgb``: candidates ranked by a cost model trained on what was measured.

Each batch: a pool of unmeasured valid configs (random ones, plus mutations
of the best measured so far), evolved for a few rounds on the model's
predictions; the best-predicted are proposed, with a share of random pool
members kept for exploration. The pool's best-predicted unproposed members
carry over to the next batch, which draws only a quarter of a pool of new
random ones: each new config is lowered once for its features, the search's
own main cost (a new pool every batch was ~290 configs lowered per batch of a
matmul tune, 5.1 of its 38 s on Zen 4; carried, 2.7 s). The model refits on
every observation. With ``transfer`` (records of other workloads, ``--transfer-from``) it is fitted before the first batch, each
workload a ranking group of its own. Its trials live in an Optuna study
(``KnobStudy``), so ``--storage`` keeps them as it does for the Optuna samplers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..space import Config, ConfigSpace
from .base import Observation, Strategy, register_strategy
from .study import IN_MEMORY, KnobStudy, StudyPlace

#: Features of one config (knob encoding, loop-nest features of its lowering, ...). One that
#: also has ``many(configs) -> rows`` is given every new config of a ranking at once.
Featurizer = Callable[[Config], np.ndarray]


class ModelBasedSearch(Strategy):
    """Proposes what the cost model ranks highest; see the module docstring."""

    def __init__(
        self,
        space: ConfigSpace,
        seed: int = 0,
        model: str = "xgb",
        features: Featurizer | None = None,
        pool: int = 192,
        explore: float = 0.125,
        rounds: int = 2,
        min_observations: int = 8,
        place: StudyPlace = IN_MEMORY,
        transfer: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
        **options: Any,
    ):
        super().__init__(space, seed)
        import optuna

        from cost_models import get_cost_model

        #: Proposals become its trials when claimed or told (its sampler is never asked).
        self.study: KnobStudy = place.open(space, optuna.samplers.RandomSampler(seed=seed))
        self.name = model
        self.model = get_cost_model(model, seed=seed)
        self.featurize = features or space.encode
        self.pool, self.explore, self.rounds = pool, explore, rounds
        self.min_observations = min_observations
        self._features: dict[str, np.ndarray] = {}
        #: The unmeasured configs kept from the last batch's pool, best-predicted first.
        self._carried: dict[str, Config] = {}
        self._scores: dict[str, float] = {}
        #: Other workloads' records: features (as ``features`` makes them), seconds,
        #: and a group label >= 1 per workload. The model starts from them.
        self.transfer = transfer
        if transfer is not None:
            self._fit()

    def _feats(self, cfgs: Sequence[Config]) -> np.ndarray:
        """The features of ``cfgs``, one row each; those not seen before are made in one call
        of ``featurize.many`` where the featurizer has it (``tuner.tuning.featurize``)."""
        new = list({c.key: c for c in cfgs if c.key not in self._features}.values())
        if new:
            many = getattr(self.featurize, "many", None)
            rows = many(new) if many is not None else [self.featurize(c) for c in new]
            for cfg, row in zip(new, rows, strict=True):
                self._features[cfg.key] = np.asarray(row, dtype=np.float64)
        return np.stack([self._features[c.key] for c in cfgs])

    def observe(self, observations: Sequence[Observation]) -> None:
        super().observe(observations)
        if len(self.history) >= self.min_observations or self.transfer is not None:
            self._fit()

    def _fit(self) -> None:
        """Refit on this workload's observations (group 0) and the transferred records."""
        parts_x = [self._feats([c for c, _ in self.history])] if self.history else []
        parts_t = [np.array([s for _, s in self.history], dtype=np.float64)]
        parts_g = [np.zeros(len(self.history), dtype=np.int64)]
        if self.transfer is not None:
            tx, tt, tg = self.transfer
            parts_x.append(tx)
            parts_t.append(tt)
            parts_g.append(tg)
        if parts_x:
            self.model.fit(np.vstack(parts_x), np.concatenate(parts_t), np.concatenate(parts_g))

    def _score(self, cfgs: list[Config]) -> np.ndarray:
        scores = self.model.predict(self._feats(cfgs))
        self._scores.update({c.key: float(s) for c, s in zip(cfgs, scores, strict=True)})
        return scores

    def predicted(self, config: Config) -> float | None:
        return self._scores.get(config.key)

    def propose(self, n: int, exclude: set[str]) -> list[Config]:
        if n <= 0:
            return []
        if not self.model.is_fitted:
            return self.space.sample_many(self.rng, n, exclude=exclude)
        pool = {k: c for k, c in self._carried.items() if k not in exclude}
        fresh = max(self.pool - len(pool), self.pool // 4)
        taken = set(exclude) | set(pool)
        pool.update((c.key, c) for c in self.space.sample_many(self.rng, fresh, exclude=taken))
        if not pool:  # every valid config is measured (or excluded)
            return []
        parents = [c for c, s in sorted(self.history, key=lambda o: o[1]) if math.isfinite(s)][:8]
        for _ in range(self.rounds):
            for cfg in parents:
                for child in self.space.neighbours(cfg, self.rng)[:6]:
                    if child.key not in exclude:
                        pool.setdefault(child.key, child)
            cands = list(pool.values())
            parents = [cands[i] for i in np.argsort(-self._score(cands), kind="stable")[:8]]
        cands = list(pool.values())
        order = np.argsort(-self._score(cands), kind="stable")
        n_explore = min(len(cands), max(1, round(n * self.explore))) if n > 1 else 0
        chosen = [cands[i] for i in order[: n - n_explore]]
        rest = [cands[i] for i in order[n - n_explore :]]
        if rest and n_explore:
            picks = self.rng.choice(len(rest), size=min(n_explore, len(rest)), replace=False)
            chosen += [rest[i] for i in picks]
        chosen = chosen[:n]
        proposed = {c.key for c in chosen}
        kept = [cands[i] for i in order if cands[i].key not in proposed][: self.pool]
        self._carried = {c.key: c for c in kept}
        return chosen


@register_strategy("xgb")
def _xgb(space: ConfigSpace, seed: int = 0, **options: Any) -> Strategy:
    return ModelBasedSearch(space, seed, model="xgb", **options)
