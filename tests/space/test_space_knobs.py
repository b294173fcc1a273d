"""Reorder, annotate and choice knobs, and the rules on knob names."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest

from tuner.space import ANNOTATIONS, AnnotateKnob, ChoiceKnob, ConfigSpace, ReorderKnob, SpaceError


@pytest.mark.parametrize("axes", [["i"], ["io", "jo"], ["io", "jo", "ko"], list("abcde")])
def test_reorder_all_lists_every_permutation(axes: list[str]) -> None:
    knob = ReorderKnob.create("order", axes=axes)
    assert knob.size == math.factorial(len(axes))
    assert set(knob.values) == set(itertools.permutations(axes))
    assert knob.describe() == f"a permutation of {str(axes).replace(chr(39), chr(34))}"


def test_reorder_candidates_must_be_permutations() -> None:
    knob = ReorderKnob.create(
        "order", axes=["io", "jo"], policy="candidate", candidates=[["jo", "io"]]
    )
    assert knob.values == (("jo", "io"),)
    for bad in (["io", "io"], ["io"], ["io", "ko"], "iojo", [1, 2]):
        with pytest.raises(SpaceError, match=r"knob 'order' has candidate .* permutation"):
            bad_list: Any = [bad]
            ReorderKnob.create("order", axes=["io", "jo"], policy="candidate", candidates=bad_list)


def test_reorder_of_many_axes_needs_candidates() -> None:
    with pytest.raises(SpaceError, match="9 axes, 362880 orders"):
        ReorderKnob.create("order", axes=[f"a{i}" for i in range(9)])


@pytest.mark.parametrize("axes", [[], ["io", "io"], ["io", "j-o"], "io", [3]])
def test_axes_must_be_distinct_identifiers(axes: object) -> None:
    with pytest.raises(SpaceError, match="knob 'order' has axes"):
        ReorderKnob.create("order", axes=axes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("policy", "options"),
    [
        ("try_unroll", ("none", "unroll")),
        ("try_vec", ("none", "vec")),
        ("try_unroll_vec", ("none", "unroll", "vec")),
        ("try_parallel", ("none", "parallel")),
    ],
)
@pytest.mark.parametrize("n_axes", [1, 2, 3])
def test_annotate_policies(policy: str, options: tuple[str, ...], n_axes: int) -> None:
    axes = [f"a{i}" for i in range(n_axes)]
    knob = AnnotateKnob.create("ann", axes=axes, policy=policy)
    assert knob.size == len(options) ** n_axes
    assert knob.options == options
    assert all(len(v) == n_axes and set(v) <= set(options) for v in knob.values)
    assert len(knob.feature_names()) == len(knob.encode(knob.values[-1])) == n_axes * len(options)


def test_annotate_candidates_come_from_the_vocabulary() -> None:
    knob = AnnotateKnob.create(
        "ann",
        axes=["ii", "ji"],
        policy="candidate",
        candidates=[("unroll", "vec"), ("none", "none")],
    )
    assert knob.options == ("none", "unroll", "vec")
    assert knob.encode(("unroll", "vec")) == [0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    for bad in (("fast", "vec"), ("vec",), ["vec", 1]):
        with pytest.raises(SpaceError, match="knob 'ann' has candidate"):
            bad_list: Any = [bad]
            AnnotateKnob.create("ann", axes=["ii", "ji"], policy="candidate", candidates=bad_list)
    assert set(ANNOTATIONS) == {"none", "unroll", "vec", "parallel"}


def test_annotate_unknown_policy_lists_the_known_ones() -> None:
    with pytest.raises(SpaceError, match="unknown policy 'try_magic'; known: try_unroll"):
        AnnotateKnob.create("ann", axes=["ii"], policy="try_magic")


def test_choice_knob_accepts_json_scalars() -> None:
    values: Any = [1, 2.5, "x", True, np.int64(7)]
    knob = ChoiceKnob.create("k", values)
    assert knob.values == (1, 2.5, "x", True, 7)
    assert type(knob.values[-1]) is int
    assert knob.index(True) == 3 and knob.index(1) == 0  # True is not 1


@pytest.mark.parametrize(
    "values", [[], [None], [[1, 2]], [float("nan")], [float("inf")], [1, 1], ["a", "a"], "abc"]
)
def test_choice_knob_rejects_bad_values(values: object) -> None:
    with pytest.raises(SpaceError, match="knob 'k'"):
        ChoiceKnob.create("k", values)  # type: ignore[arg-type]


def test_choice_encoding_is_numeric_value_or_index() -> None:
    numbers = ChoiceKnob.create("kc", [64, 128, 256])
    assert numbers.feature_names() == ["kc"] and numbers.encode(128) == [128.0]
    flags = ChoiceKnob.create("parallel", [True, False])
    assert flags.encode(False) == [0.0]
    words = ChoiceKnob.create("layout", ["nchw", "nhwc"])
    assert words.feature_names() == ["layout.index"] and words.encode("nhwc") == [1.0]


@pytest.mark.parametrize("name", ["", "tile-i", "1x", "a b", 3])
def test_knob_names_must_be_identifiers(name: object) -> None:
    with pytest.raises(SpaceError, match="is not an identifier"):
        ConfigSpace().define_knob(name, [1])  # type: ignore[arg-type]


def test_knob_names_are_unique() -> None:
    sp = ConfigSpace()
    sp.define_knob("kc", [1, 2])
    with pytest.raises(SpaceError, match="knob 'kc' is already defined"):
        sp.define_split("kc", extent=8, num_outputs=2)


def test_a_queried_space_is_frozen() -> None:
    sp = ConfigSpace()
    sp.define_knob("kc", [1, 2])
    sp.sample(np.random.default_rng(0))
    with pytest.raises(SpaceError, match="cannot define knob 'late': the space is frozen"):
        sp.define_knob("late", [1])
    with pytest.raises(SpaceError, match="frozen"):
        sp.add_constraint(lambda c: True, "too late")
    assert ConfigSpace().freeze().size == 1


def test_space_exposes_its_declaration(space: ConfigSpace) -> None:
    assert list(space.knobs) == ["tile_i", "tile_k", "tile_j", "order", "ann", "parallel", "kc"]
    assert (
        space.size == math.prod(k.size for k in space.knobs.values()) == 66 * 9 * 2 * 6 * 9 * 2 * 3
    )
    assert [c.description for c in space.constraints] == ["register block at most 128 accumulators"]
    assert repr(space).startswith("ConfigSpace(tile_i:66, tile_k:9, tile_j:2,")
    with pytest.raises(TypeError):
        space.knobs["x"] = space.knobs["kc"]  # type: ignore[index]
