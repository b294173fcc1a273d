"""Split knobs: value layout, policies, candidates and their errors."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tuner.space import SpaceError, SplitKnob

EXTENTS = [1, 7, 97, 1000, 1024]


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def assert_layout(knob: SplitKnob) -> None:
    assert len(set(knob.values)) == knob.size > 0
    for value in knob.values:
        assert len(value) == knob.num_outputs
        assert all(isinstance(f, int) and f >= 1 for f in value)
        assert value[0] == ceil_div(knob.extent, math.prod(value[1:]))
        assert math.prod(value[1:]) <= knob.extent
        if knob.max_factor is not None:
            assert max(value[1:], default=1) <= knob.max_factor


@pytest.mark.parametrize("extent", EXTENTS)
@pytest.mark.parametrize("num_outputs", [1, 2, 3])
def test_factors_split_divides_exactly(extent: int, num_outputs: int) -> None:
    knob = SplitKnob.create("t", extent=extent, num_outputs=num_outputs, policy="factors")
    assert_layout(knob)
    assert all(math.prod(v) == extent for v in knob.values)


@pytest.mark.parametrize(
    ("extent", "num_outputs", "size"),
    [(1, 3, 1), (7, 2, 2), (97, 3, 3), (1000, 2, 16), (1024, 3, 66)],
)
def test_factors_split_lists_every_ordered_factorisation(
    extent: int, num_outputs: int, size: int
) -> None:
    assert SplitKnob.create("t", extent=extent, num_outputs=num_outputs).size == size


@pytest.mark.parametrize("extent", EXTENTS)
@pytest.mark.parametrize("max_factor", [None, 1, 8, 256])
def test_power2_split_respects_max_factor(extent: int, max_factor: int | None) -> None:
    knob = SplitKnob.create(
        "t", extent=extent, num_outputs=3, policy="power2", max_factor=max_factor
    )
    assert_layout(knob)
    for value in knob.values:
        assert all(f & (f - 1) == 0 for f in value[1:])


def test_power2_allows_non_dividing_factors() -> None:
    knob = SplitKnob.create("t", extent=1000, num_outputs=2, policy="power2", max_factor=256)
    assert [v[1] for v in knob.values] == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert (4, 256) in knob.values  # 4 * 256 covers 1000 with a guarded remainder


@given(
    extent=st.integers(1, 5000),
    num_outputs=st.integers(1, 4),
    policy=st.sampled_from(["factors", "power2"]),
    max_factor=st.none() | st.integers(1, 300),
)
def test_any_split_has_a_legal_layout(
    extent: int, num_outputs: int, policy: str, max_factor: int | None
) -> None:
    knob = SplitKnob.create(
        "t", extent=extent, num_outputs=num_outputs, policy=policy, max_factor=max_factor
    )
    assert_layout(knob)
    assert (extent, *[1] * (num_outputs - 1)) in knob.values


def test_candidates_are_kept_in_order() -> None:
    knob = SplitKnob.create(
        "t", extent=64, num_outputs=2, policy="candidate", candidates=[[8, 8], (4, 16)]
    )
    assert knob.values == ((8, 8), (4, 16))


def test_candidate_may_leave_a_remainder() -> None:
    knob = SplitKnob.create("t", extent=10, num_outputs=2, policy="candidate", candidates=[(3, 4)])
    assert knob.values == ((3, 4),)


@pytest.mark.parametrize(
    "candidate",
    [(5, 16), (4,), (4, 16, 1), (4.0, 16), (True, 64), (0, 16), (1, 128), ("4", "16"), 64],
)
def test_illegal_candidates_are_rejected(candidate: object) -> None:
    with pytest.raises(SpaceError, match="knob 't' has candidate"):
        bad = [candidate]
        SplitKnob.create("t", extent=64, num_outputs=2, policy="candidate", candidates=bad)  # type: ignore[arg-type]


def test_duplicate_candidates_are_rejected() -> None:
    with pytest.raises(SpaceError, match="duplicate"):
        SplitKnob.create(
            "t", extent=64, num_outputs=2, policy="candidate", candidates=[(4, 16), [4, 16]]
        )


def test_max_factor_and_filter_apply_to_every_policy() -> None:
    knob = SplitKnob.create(
        "t",
        extent=64,
        num_outputs=2,
        policy="candidate",
        candidates=[(4, 16), (8, 8), (2, 32)],
        max_factor=16,
        filter=lambda v: v[0] != 8,
    )
    assert knob.values == ((4, 16),)
    factors = SplitKnob.create("t", extent=12, num_outputs=2, filter=lambda v: v[1] % 2 == 0)
    assert [v[1] for v in factors.values] == [2, 4, 6, 12]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"extent": 0, "num_outputs": 2}, "extent 0"),
        ({"extent": True, "num_outputs": 2}, "extent true"),
        ({"extent": "8", "num_outputs": 2}, "extent"),
        ({"extent": 8, "num_outputs": 0}, "num_outputs 0"),
        ({"extent": 8, "num_outputs": 2, "max_factor": 0}, "max_factor 0"),
        ({"extent": 8, "num_outputs": 2, "policy": "fibonacci"}, "unknown policy 'fibonacci'"),
        ({"extent": 8, "num_outputs": 2, "policy": "candidate"}, "no non-empty candidates"),
        ({"extent": 8, "num_outputs": 2, "candidates": [(1, 8)]}, "only with policy='candidate'"),
        ({"extent": 8, "num_outputs": 2, "filter": lambda v: False}, "no legal split of 8"),
    ],
)
def test_bad_definitions_name_the_knob(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(SpaceError, match="knob 't'") as error:
        SplitKnob.create("t", **kwargs)  # type: ignore[arg-type]
    assert message in str(error.value)


def test_description_states_the_rule() -> None:
    knob = SplitKnob.create("tile_k", extent=1000, num_outputs=2, policy="power2", max_factor=256)
    assert knob.describe() == ("a split of 1000 into 2 factors (power-of-two inner factors <= 256)")


def test_encoding_is_log2_of_every_extent() -> None:
    knob = SplitKnob.create("t", extent=64, num_outputs=3)
    assert knob.feature_names() == ["t.log2[0]", "t.log2[1]", "t.log2[2]"]
    assert knob.encode((4, 2, 8)) == [2.0, 1.0, 3.0]
