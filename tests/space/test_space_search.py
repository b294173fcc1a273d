"""Sampling, neighbours, mutation and enumeration of constrained spaces."""

from __future__ import annotations

import itertools
import re
from collections import Counter

import numpy as np
import pytest

from tuner.space import Config, ConfigSpace, SpaceError


def brute_force_valid(space: ConfigSpace) -> list[Config]:
    names = list(space.knobs)
    points = itertools.product(*(k.values for k in space.knobs.values()))
    configs = [Config(tuple(zip(names, p, strict=True))) for p in points]
    return [c for c in configs if all(rule.predicate(c) for rule in space.constraints)]


def differing_knobs(a: Config, b: Config) -> list[str]:
    return [name for name in a if a[name] != b[name]]


def test_samples_satisfy_the_constraints(space: ConfigSpace, rng: np.random.Generator) -> None:
    for _ in range(200):
        config = space.sample(rng)
        assert config["tile_i"][-1] * config["tile_j"][-1] <= 128
        assert space.validate(config) == config


def test_sampling_is_uniform_over_valid_points(rng: np.random.Generator) -> None:
    sp = ConfigSpace()
    sp.define_knob("a", [0, 1, 2, 3])
    sp.define_knob("b", [0, 1, 2])
    sp.add_constraint(lambda c: c["a"] + c["b"] <= 3, "small sum")
    draws = 9000
    counts = Counter(sp.sample(rng).key for _ in range(draws))
    assert len(counts) == 9
    expected = draws / 9
    chi_square = sum((n - expected) ** 2 / expected for n in counts.values())
    assert chi_square < 26.12  # the 0.999 quantile of chi-square with 8 degrees of freedom


def test_sampling_an_impossible_space_says_why(rng: np.random.Generator) -> None:
    sp = ConfigSpace()
    sp.define_knob("a", [1, 2])
    sp.add_constraint(lambda c: c["a"] > 5, "a above five")
    with pytest.raises(SpaceError, match="no config out of 100 random draws satisfied: a above"):
        sp.sample(rng, max_tries=100)


def test_sample_many_is_distinct_and_skips_excluded(
    space: ConfigSpace, rng: np.random.Generator
) -> None:
    first = space.sample_many(rng, 50)
    assert len({c.key for c in first}) == 50
    second = space.sample_many(rng, 50, exclude={c.key for c in first})
    assert len(second) == 50
    assert not {c.key for c in first} & {c.key for c in second}
    assert all(space.is_valid(c) for c in first + second)


def test_sample_many_stops_when_the_space_is_exhausted(
    small: ConfigSpace, rng: np.random.Generator
) -> None:
    valid = {c.key for c in brute_force_valid(small)}
    taken = {c.key for c in small.sample_many(rng, 10)}
    rest = small.sample_many(rng, 1000, exclude=taken, max_tries=2000)
    assert taken | {c.key for c in rest} == valid
    assert small.sample_many(rng, 5, exclude=valid, max_tries=50) == []


def test_neighbours_move_one_knob_by_one_step(space: ConfigSpace, rng: np.random.Generator) -> None:
    for _ in range(20):
        config = space.sample(rng)
        neighbours = space.neighbours(config)
        assert neighbours
        for other in neighbours:
            (name,) = differing_knobs(config, other)
            values = space.knobs[name].values
            assert abs(values.index(config[name]) - values.index(other[name])) == 1
            assert space.is_valid(other)
        shuffled = space.neighbours(config, rng)
        assert sorted(c.key for c in shuffled) == sorted(c.key for c in neighbours)


def test_neighbours_skip_invalid_points(small: ConfigSpace) -> None:
    config = small.validate({"tile": [2, 6], "ann": ["none"], "mode": "a"})
    keys = {c.key for c in small.neighbours(config)}
    assert '{"ann":["unroll"],"mode":"a","tile":[2,6]}' not in keys  # wide tiles are plain
    assert '{"ann":["none"],"mode":"a","tile":[3,4]}' in keys


def test_mutate_picks_a_neighbour(space: ConfigSpace, rng: np.random.Generator) -> None:
    config = space.sample(rng)
    keys = {c.key for c in space.neighbours(config)}
    assert all(space.mutate(config, rng).key in keys for _ in range(20))


def test_mutate_without_neighbours_raises(rng: np.random.Generator) -> None:
    sp = ConfigSpace()
    sp.define_knob("only", ["x"])
    with pytest.raises(SpaceError, match=re.escape('config {"only":"x"} has no')):
        sp.mutate(sp.sample(rng), rng)


def test_enumerate_yields_every_valid_point_in_index_order(small: ConfigSpace) -> None:
    configs = list(small.enumerate())
    assert configs == brute_force_valid(small)
    assert 0 < len(configs) < small.size
    indices = [small.index_of(c) for c in configs]
    assert indices == sorted(indices)
    assert list(small.enumerate(limit=5)) == configs[:5]


def test_an_empty_space_has_one_empty_point(rng: np.random.Generator) -> None:
    sp = ConfigSpace()
    assert sp.size == 1
    assert list(sp.enumerate()) == [sp.sample(rng)] == [Config(())]
    assert sp.encode(Config(())).shape == (0,)
