"""Cost models: the contract every registered model keeps, XGBoost ranking, the registry."""

from __future__ import annotations

import numpy as np
import pytest

from cost_models import (
    CostModel,
    CostModelError,
    RandomModel,
    XGBCostModel,
    XGBOptions,
    available_cost_models,
    get_cost_model,
    register_cost_model,
    relevance,
)


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def synthetic(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Ten features; time grows with feature 3 only, plus a little noise."""
    rng = np.random.default_rng(seed)
    x = rng.random((n, 10))
    seconds = 1e-3 * np.exp(2.0 * x[:, 3]) * (1 + 0.01 * rng.random(n))
    return x, seconds


# -- the contract, for every registered model ------------------------------------


@pytest.fixture(params=available_cost_models())
def model(request: pytest.FixtureRequest) -> CostModel:
    return get_cost_model(request.param)


def test_builtins_are_registered() -> None:
    assert {"xgb", "random"} <= set(available_cost_models())


def test_predict_gives_one_finite_score_per_row(model: CostModel) -> None:
    x, seconds = synthetic(40, 0)
    model.fit(x, seconds)
    scores = model.predict(x[:7])
    assert scores.shape == (7,) and scores.dtype == np.float64
    assert np.isfinite(scores).all()
    assert model.predict(np.zeros((0, 10))).shape == (0,)


def test_failed_candidates_are_accepted(model: CostModel) -> None:
    x, seconds = synthetic(20, 1)
    seconds[::3] = np.inf
    seconds[1] = np.nan
    model.fit(x, seconds)
    assert np.isfinite(model.predict(x)).all()


def test_unfitted_models_predict_zeros(model: CostModel) -> None:
    if not model.is_fitted:
        np.testing.assert_array_equal(model.predict(np.ones((3, 4))), np.zeros(3))


def test_fit_does_not_mutate_its_inputs(model: CostModel) -> None:
    x, seconds = synthetic(20, 2)
    x0, s0 = x.copy(), seconds.copy()
    model.fit(x, seconds)
    model.predict(x)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(seconds, s0)


def test_malformed_data_is_one_clear_error(model: CostModel) -> None:
    with pytest.raises(CostModelError, match="2-D"):
        model.fit(np.zeros(5), np.ones(5))
    with pytest.raises(CostModelError, match="one time per feature row"):
        model.fit(np.zeros((5, 2)), np.ones(4))
    with pytest.raises(CostModelError, match="2-D"):
        model.predict(np.zeros(3))
    with pytest.raises(CostModelError, match="integer labels, one per row"):
        model.fit(np.zeros((5, 2)), np.ones(5), groups=np.zeros(4, dtype=int))


# -- XGBoost ----------------------------------------------------------------------


def test_xgb_ranks_held_out_candidates() -> None:
    x, seconds = synthetic(300, 3)
    model = XGBCostModel()
    model.fit(x[:200], seconds[:200])
    assert model.is_fitted
    scores = model.predict(x[200:])
    assert spearman(scores, 1.0 / seconds[200:]) > 0.8


def test_xgb_learns_within_groups_of_different_scale() -> None:
    """Another workload ten times slower: its rows teach the order, not the scale.

    In one group, every pair across the two workloads would teach "the fast
    workload first" whatever the features; relevance within each group makes
    both teach the order that feature 3 sets.
    """
    x, seconds = synthetic(300, 3)
    slow = x[:150].copy()
    slow[:, 2] = np.nan  # a feature that does not apply to the other workload
    x_all = np.vstack([slow, x[150:250]])
    t_all = np.concatenate([10 * seconds[:150], seconds[150:250]])
    groups = np.array([1] * 150 + [0] * 100)
    model = XGBCostModel()
    model.fit(x_all, t_all, groups=groups)
    assert spearman(model.predict(x[250:]), 1.0 / seconds[250:]) > 0.8


def test_xgb_is_deterministic() -> None:
    x, seconds = synthetic(80, 4)
    a, b = XGBCostModel(), XGBCostModel()
    a.fit(x, seconds)
    b.fit(x, seconds)
    np.testing.assert_array_equal(a.predict(x), b.predict(x))


def test_xgb_ranks_failures_last() -> None:
    x, seconds = synthetic(120, 5)
    seconds[x[:, 7] > 0.8] = np.inf  # a second feature decides failure
    model = XGBCostModel()
    model.fit(x, seconds)
    scores = model.predict(x)
    failed = ~np.isfinite(seconds)
    assert scores[failed].mean() < scores[~failed].mean()


def test_xgb_stays_unfitted_on_too_little_or_uninformative_data() -> None:
    model = XGBCostModel()
    assert not model.is_fitted
    np.testing.assert_array_equal(model.predict(np.ones((2, 3))), np.zeros(2))
    model.fit(np.ones((3, 3)), np.array([1.0, 2.0, 3.0]))  # below min_samples
    assert not model.is_fitted
    model.fit(np.ones((6, 3)), np.full(6, np.inf))  # all failed: no order to learn
    assert not model.is_fitted
    x, seconds = synthetic(30, 6)
    model.fit(x, seconds)
    assert model.is_fitted
    model.fit(x[:2], seconds[:2])  # refitting replaces what was learnt
    assert not model.is_fitted
    np.testing.assert_array_equal(model.predict(x), np.zeros(30))


def test_xgb_rejects_features_of_another_width() -> None:
    x, seconds = synthetic(30, 7)
    model = XGBCostModel()
    model.fit(x, seconds)
    with pytest.raises(CostModelError, match="fit on 10"):
        model.predict(x[:, :5])


def test_xgb_options() -> None:
    model = get_cost_model("xgb", n_estimators=20, max_depth=3)
    assert isinstance(model, XGBCostModel)
    assert model.options == XGBOptions(n_estimators=20, max_depth=3)
    assert XGBCostModel(XGBOptions(seed=5), nthread=2).options == XGBOptions(seed=5, nthread=2)


def test_relevance_is_throughput_relative_to_the_best() -> None:
    np.testing.assert_allclose(relevance(np.array([4.0, 1.0, np.inf, 2.0])), [0.25, 1, 0, 0.5])
    np.testing.assert_array_equal(relevance(np.array([np.inf, np.inf])), [0.0, 0.0])


# -- the random baseline ----------------------------------------------------------


def test_random_model_is_seeded() -> None:
    x = np.zeros((5, 2))
    np.testing.assert_array_equal(RandomModel(seed=3).predict(x), RandomModel(seed=3).predict(x))
    assert not np.array_equal(RandomModel(seed=3).predict(x), RandomModel(seed=4).predict(x))
    assert RandomModel().is_fitted


# -- the registry -----------------------------------------------------------------


def test_unknown_model_names_the_available_ones() -> None:
    with pytest.raises(CostModelError, match=r"unknown cost model 'nope'; available: .*xgb"):
        get_cost_model("nope")


def test_bad_options_are_one_clear_error() -> None:
    with pytest.raises(CostModelError, match="bad options for cost model 'xgb'"):
        get_cost_model("xgb", trees=3)
    with pytest.raises(CostModelError, match="bad options for cost model 'random'"):
        get_cost_model("random", sead=1)


def test_a_taken_name_cannot_be_registered_again() -> None:
    with pytest.raises(CostModelError, match="already registered"):

        @register_cost_model("xgb")
        class Other(RandomModel):
            pass
