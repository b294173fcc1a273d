"""Features of the configs a search ranks: lowered in the build workers, the same numbers."""

from __future__ import annotations

import numpy as np

from tuner.measure import MeasureOptions, Measurer
from tuner.search.model_based import ModelBasedSearch
from tuner.target import Target
from tuner.task import Task
from tuner.tuning.featurize import Featurizer


def _task() -> Task:
    return Task.make("matmul", {"M": 49, "N": 169, "K": 61}, Target.from_name("cpu"))


def test_build_workers_make_the_same_features_in_the_same_order() -> None:
    task = _task()
    cfgs = task.space.sample_many(np.random.default_rng(3), 24)
    here = Featurizer(task, task.space).many(cfgs)
    with Measurer(MeasureOptions(jobs=2)) as m:
        there = Featurizer(task, task.space, workers=m).many(cfgs)
        assert m._pool is not None, "24 configs go to the build workers"
    assert len(there) == len(cfgs)
    for a, b in zip(here, there, strict=True):
        np.testing.assert_array_equal(a, b)
    loops = Featurizer(task).many(cfgs[:2])  # no space: the loop-nest features alone
    assert loops[0].shape[0] == here[0].shape[0] - len(task.space.feature_names())


class _Counting:
    """A featurizer that records what each ``many`` call was given."""

    def __init__(self, task: Task):
        self.inner = Featurizer(task, task.space)
        self.calls: list[list[str]] = []

    def __call__(self, cfg):  # type: ignore[no-untyped-def]
        raise AssertionError("a ranking asks for its configs' features in one call")

    def many(self, cfgs):  # type: ignore[no-untyped-def]
        self.calls.append([c.key for c in cfgs])
        return self.inner.many(cfgs)


def test_a_search_featurizes_each_config_once_in_one_call_per_ranking() -> None:
    task = _task()
    feats = _Counting(task)
    search = ModelBasedSearch(task.space, seed=0, features=feats, pool=40, min_observations=4)
    first = search.propose(6, exclude=set())
    assert not feats.calls, "no model yet: a random batch, nothing featurized"
    search.observe([(c, 1e-3 * (1 + i)) for i, c in enumerate(first)])
    assert len(feats.calls) == 1 and sorted(feats.calls[0]) == sorted(c.key for c in first)
    chosen = search.propose(6, exclude={c.key for c in first})
    assert len(chosen) == 6
    keys = [k for call in feats.calls for k in call]
    assert len(keys) == len(set(keys)), "no config is featurized twice"
    assert all(len(call) == len(set(call)) for call in feats.calls)
    assert len(feats.calls) <= 1 + 1 + search.rounds, "one call per ranking of the pool"


def test_the_pool_carries_over_so_a_batch_featurizes_a_quarter_of_a_pool_anew() -> None:
    task = Task.make("matmul", {"M": 512, "N": 512, "K": 512}, Target.from_name("cpu"))
    feats = _Counting(task)
    search = ModelBasedSearch(
        task.space, seed=1, features=feats, pool=40, rounds=0, min_observations=4
    )
    measured: set[str] = set()
    first = search.propose(6, exclude=measured)
    measured |= {c.key for c in first}
    search.observe([(c, 1e-3 * (1 + i)) for i, c in enumerate(first)])
    second = search.propose(6, exclude=measured)
    carried = dict(search._carried)
    assert len(carried) == 40 - 6 and not set(carried) & {c.key for c in second}
    measured |= {c.key for c in second}
    search.observe([(c, 1e-3 * (7 + i)) for i, c in enumerate(second)])
    before = len(feats.calls)
    third = search.propose(6, exclude=measured)
    new = {k for call in feats.calls[before:] for k in call}
    # The refit featurizes the 6 just measured (already known) and the ranking only
    # the fresh quarter of a pool: the 34 carried configs are not lowered again.
    assert new and len(new) <= 40 // 4
    assert not new & set(carried)
    assert not {c.key for c in third} & measured
    assert {c.key for c in third} <= set(carried) | new
