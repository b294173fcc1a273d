"""Configs: JSON round trips, validation errors, encoding and indexing."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner.space import Config, ConfigError, ConfigSpace

from .space_examples import matmul_space

SPACE = matmul_space()
SPACE.freeze()
seeds = st.integers(0, 2**32 - 1)


def good(space: ConfigSpace) -> dict[str, Any]:
    return space.sample(np.random.default_rng(1)).to_json()


@given(seed=seeds)
def test_validate_round_trips_json(seed: int) -> None:
    config = SPACE.sample(np.random.default_rng(seed))
    assert SPACE.validate(json.loads(json.dumps(config.to_json()))) == config
    assert SPACE.validate(config) == config


def test_config_is_a_frozen_hashable_mapping() -> None:
    config = SPACE.validate(good(SPACE))
    assert list(config.keys()) == list(SPACE.knobs)
    assert dict(config.items())["kc"] == config["kc"]
    assert "kc" in config and "nope" not in config and len(config) == 7
    assert isinstance(config["tile_i"], tuple)
    assert hash(config) == hash(SPACE.validate(config.to_json()))
    with pytest.raises(AttributeError):
        config.entries = ()  # type: ignore[misc]
    with pytest.raises(KeyError):
        config["nope"]


def test_key_is_canonical_json_and_repr_is_readable() -> None:
    config = Config((("tile", (4, 16)), ("order", ("jo", "io")), ("par", True)))
    assert config.key == '{"order":["jo","io"],"par":true,"tile":[4,16]}'
    assert repr(config) == "Config(tile=(4, 16), order=('jo', 'io'), par=True)"
    assert config.to_json() == {"tile": [4, 16], "order": ["jo", "io"], "par": True}


def test_validate_reads_numpy_scalars() -> None:
    data = good(SPACE)
    data["tile_i"] = np.array(data["tile_i"], dtype=np.int64).tolist()
    data["kc"] = np.int64(data["kc"])
    assert SPACE.validate(data)["kc"] == data["kc"]


@pytest.mark.parametrize(
    ("knob", "bad", "message"),
    [
        (
            "tile_k",
            [3, 5],
            "knob 'tile_k' has value [3, 5]; expected a split of 1000 into 2"
            " factors (power-of-two inner factors <= 256)",
        ),
        ("tile_k", "[500, 2]", "knob 'tile_k' has value \"[500, 2]\""),
        ("tile_k", [500.0, 2.0], "knob 'tile_k' has value [500.0, 2.0]"),
        ("tile_k", [500, 2, 1], "knob 'tile_k'"),
        ("tile_k", [True, 2], "knob 'tile_k'"),
        (
            "tile_j",
            [2, 32],
            "knob 'tile_j' has value [2, 32]; expected a split of 64 into 2"
            " factors (the template's candidates; one of [[4, 16], [8, 8]])",
        ),
        ("order", ["io", "io", "ko"], 'expected a permutation of ["io", "jo", "ko"]'),
        ("ann", ["fast", "none"], 'knob \'ann\' has value ["fast", "none"]; expected one'),
        ("parallel", 1, "knob 'parallel' has value 1; expected one of [true, false]"),
        ("kc", 100, "knob 'kc' has value 100; expected one of [64, 128, 256]"),
        ("kc", "128", "knob 'kc' has value \"128\""),
        ("kc", 128.0, "knob 'kc' has value 128.0"),
        ("kc", None, "knob 'kc' has value null"),
        ("kc", {"$eval": 1}, "knob 'kc'"),
        ("kc", "__import__('os')", "knob 'kc' has value \"__import__('os')\"; expected one of"),
        ("tile_i", "__import__('os').system('true')", "knob 'tile_i' has value"),
    ],
)
def test_validate_names_the_knob_with_an_illegal_value(knob: str, bad: Any, message: str) -> None:
    data = good(SPACE)
    data[knob] = bad
    with pytest.raises(ConfigError) as error:
        SPACE.validate(data)
    assert message in str(error.value)
    assert str(error.value).count(". ") == 0  # one sentence
    assert not SPACE.is_valid(data)


def test_validate_rejects_missing_and_unknown_knobs() -> None:
    data = good(SPACE)
    del data["kc"]
    with pytest.raises(ConfigError, match=r"config is missing knob 'kc'; expected one of \[64"):
        SPACE.validate(data)
    data = {**good(SPACE), "unroll": True}
    with pytest.raises(
        ConfigError, match="config has unknown knob 'unroll'; the knobs are: tile_i"
    ):
        SPACE.validate(data)
    with pytest.raises(ConfigError, match="must map knob names to values, not list"):
        SPACE.validate([("kc", 64)])  # type: ignore[arg-type]


def test_validate_rejects_a_violated_constraint() -> None:
    data = {**good(SPACE), "tile_i": [4, 16, 16], "tile_j": [4, 16]}
    with pytest.raises(ConfigError, match="violates constraint 'register block at most 128"):
        SPACE.validate(data)


json_scalars = st.none() | st.booleans() | st.integers(-5, 2000) | st.floats() | st.text(max_size=8)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4), max_leaves=8)


@settings(max_examples=200)
@given(knob=st.sampled_from(list(SPACE.knobs)), value=json_values)
def test_validate_only_ever_raises_config_error(knob: str, value: Any) -> None:
    data = {**good(SPACE), knob: value}
    try:
        config = SPACE.validate(data)
    except ConfigError as error:
        assert f"knob {knob!r}" in str(error) or "violates constraint" in str(error)
    else:
        assert config[knob] in SPACE.knobs[knob].values


@given(seed=seeds)
def test_encoding_is_fixed_length_and_deterministic(seed: int) -> None:
    config = SPACE.sample(np.random.default_rng(seed))
    features = SPACE.encode(config)
    assert features.dtype == np.float64
    assert features.shape == (len(SPACE.feature_names()),)
    np.testing.assert_array_equal(features, SPACE.encode(config.to_json()))
    assert np.isfinite(features).all()


def test_feature_names_are_unique_and_readable() -> None:
    names = SPACE.feature_names()
    assert len(names) == len(set(names))
    assert names[:4] == ["tile_i.log2[0]", "tile_i.log2[1]", "tile_i.log2[2]", "tile_k.log2[0]"]
    assert "order.pos[io]" in names and "ann[ji]=vec" in names and names[-2:] == ["parallel", "kc"]


@given(index=st.integers(0, SPACE.size - 1))
def test_index_round_trips(index: int) -> None:
    config = SPACE.from_index(index)
    assert SPACE.index_of(config) == index
    assert SPACE.index_of(config.to_json()) == index


def test_index_order_is_mixed_radix_with_the_first_knob_most_significant() -> None:
    assert SPACE.index_of(SPACE.from_index(0)) == 0
    last = SPACE.from_index(SPACE.size - 1)
    assert all(last[name] == knob.values[-1] for name, knob in SPACE.knobs.items())
    assert SPACE.from_index(1)["kc"] == 128 and SPACE.from_index(3)["parallel"] is False
    for bad in (-1, SPACE.size):
        with pytest.raises(ConfigError, match="outside the space"):
            SPACE.from_index(bad)


def test_choices_line_up_with_from_indices() -> None:
    choices = SPACE.choices()
    assert list(choices) == list(SPACE.knobs)
    assert choices["tile_j"] == [[4, 16], [8, 8]]
    picks = {name: len(values) - 1 for name, values in choices.items()}
    config = SPACE.from_indices(picks)
    assert config.to_json() == {name: values[-1] for name, values in choices.items()}
    json.dumps(choices)  # JSON-ready
    with pytest.raises(ConfigError, match=r"knob 'kc' has index 3; expected 0..2"):
        SPACE.from_indices({**picks, "kc": 3})
    with pytest.raises(ConfigError, match="missing knob 'kc'"):
        SPACE.from_indices({k: v for k, v in picks.items() if k != "kc"})


def _grown() -> ConfigSpace:
    """A space that gained the knob ``pack`` after configs without it were logged."""
    sp = ConfigSpace()
    sp.define_knob("kc", [64, 128])
    sp.define_knob("pack", [True, False], absent=False)
    return sp.freeze()


def test_a_knob_added_later_reads_old_configs_with_its_absent_value() -> None:
    sp = _grown()
    assert sp.validate({"kc": 64}) == sp.validate({"kc": 64, "pack": False})
    assert sp.complete({"kc": 128}) == {"kc": 128, "pack": False}
    assert sp.complete({"kc": 128, "pack": True}) == {"kc": 128, "pack": True}
    replayed = sp.restricted({'{"kc":128}'}, "measured")  # a key as the old log wrote it
    assert [c.to_json() for c in replayed.enumerate()] == [{"kc": 128, "pack": False}]


def test_an_absent_value_must_be_one_of_the_knobs_values() -> None:
    with pytest.raises(ConfigError, match="pack"):
        ConfigSpace().define_knob("pack", [True, False], absent="yes")
