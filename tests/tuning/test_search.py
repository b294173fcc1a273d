"""The contract every strategy keeps, run against each registered strategy."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from tuner.search import StrategyError, get_strategy, strategies
from tuner.space import Config, ConfigSpace


def small_space() -> ConfigSpace:
    sp = ConfigSpace()
    sp.define_knob("a", [1, 2, 3, 4, 5, 6])
    sp.define_knob("b", [1, 2, 4, 8])
    sp.define_knob("c", [True, False])
    sp.add_constraint(lambda c: c["a"] * c["b"] <= 24, "a*b at most 24")
    return sp.freeze()


def cost(cfg) -> float:  # type: ignore[no-untyped-def]
    return abs(cfg["a"] - 4) + abs(math.log2(cfg["b"]) - 2) + (0.5 if cfg["c"] else 0) + 1


@pytest.mark.parametrize("name", strategies())
def test_strategy_contract(name: str) -> None:
    space = small_space()
    try:
        strat = get_strategy(name, space, seed=3)
    except StrategyError as exc:  # an optional dependency is missing: the error says which
        assert "pip install" in str(exc)
        pytest.skip(str(exc))
    seen: set[str] = set()
    # A resumed log: observations the strategy never proposed.
    prior = space.sample_many(np.random.default_rng(0), 3)
    strat.observe([(c, cost(c)) for c in prior])
    seen |= {c.key for c in prior}
    for _ in range(6):
        batch = strat.propose(5, exclude=seen)
        keys = [c.key for c in batch]
        assert len(keys) == len(set(keys)), "duplicates in one batch"
        assert not set(keys) & seen, "proposed an excluded config"
        for c in batch:
            assert space.is_valid(c)
        seen |= set(keys)
        strat.observe([(c, cost(c) if i % 4 else math.inf) for i, c in enumerate(batch)])
    total = sum(1 for _ in space.enumerate())
    rest = strat.propose(total, exclude=seen)
    assert len(rest) == total - len(seen), "the space is not exhausted"
    strat.observe([(c, cost(c)) for c in rest])
    assert strat.propose(4, exclude=seen | {c.key for c in rest}) == [], "nothing left to propose"


def test_unknown_strategy_names_the_known_ones() -> None:
    with pytest.raises(StrategyError, match=r"known strategies: .*random"):
        get_strategy("annealing-magic", small_space())


@pytest.mark.parametrize("name", ["xgb", "tpe"])
def test_trials_live_in_an_optuna_storage_and_resume_without_duplicates(
    name: str, tmp_path: Path
) -> None:
    """A study in SQLite holds every measured trial; a resumed run adds only new ones."""
    import optuna

    space = small_space()
    url = f"sqlite:///{tmp_path / 'tune.db'}"
    measured: list[tuple[Config, float]] = []

    def run(seed: int, rounds: int) -> None:
        strat = get_strategy(name, space, seed=seed, storage=url, study_name="w on cpu")
        strat.observe(measured)  # what the tuning log replays on resume
        for _ in range(rounds):
            batch = strat.propose(4, exclude={c.key for c, _ in measured})
            obs = [(c, cost(c)) for c in batch]
            strat.observe(obs)
            measured.extend(obs)

    run(seed=0, rounds=3)
    run(seed=1, rounds=2)
    study = optuna.load_study(study_name="w on cpu", storage=url)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(measured) == 20
    assert len(done) == 20, "each measured config is one completed trial, none added twice"
    by_key = {space.from_indices(t.params).key: t.value for t in done}
    assert by_key == {c.key: v for c, v in measured}
