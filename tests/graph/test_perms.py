"""Layouts as permutations: composition, free reshapes, and reshapes that keep a layout."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tuner.graph.perms import compose, inverse, reshape_layout, same_bytes


@pytest.mark.parametrize("perm", list(itertools.permutations(range(4))))
def test_compose_and_inverse_agree_with_numpy(perm):
    x = np.arange(2 * 3 * 5 * 7).reshape(2, 3, 5, 7)
    t = (0, 2, 3, 1)
    np.testing.assert_array_equal(x.transpose(t).transpose(perm), x.transpose(compose(t, perm)))
    np.testing.assert_array_equal(x.transpose(perm).transpose(inverse(perm)), x)


def test_axes_of_one_move_freely():
    assert same_bytes((1, 8, 1, 1), (0, 2, 3, 1), (0, 1, 2, 3))  # an SE block's scale
    assert same_bytes((4, 8, 1, 1), (0, 2, 3, 1), (0, 1, 2, 3))
    assert not same_bytes((1, 8, 3, 1), (0, 2, 3, 1), (0, 1, 2, 3))


def _check(src, perm, dst):
    """The plan reshapes the stored bytes into ``dst`` held in the layout it says."""
    plan = reshape_layout(src, perm, dst)
    assert plan is not None
    source, out = plan
    x = np.random.default_rng(0).standard_normal(src)
    stored = x.transpose(source)  # what the reshape reads (moved there if source != perm)
    got = np.ascontiguousarray(stored).reshape([dst[a] for a in out])
    np.testing.assert_array_equal(got, x.reshape(dst).transpose(out))
    return plan


def test_a_channel_shuffle_stays_channels_last():
    # [N, C, H, W] held NHWC, split into [N, 2, C/2, H, W]: the stored last axis splits
    source, out = _check((1, 116, 5, 7), (0, 2, 3, 1), (1, 2, 58, 5, 7))
    assert source == (0, 2, 3, 1) and out == (0, 3, 4, 1, 2)
    # after the transpose of the two channel axes, merging them back needs one copy
    source, out = _check((1, 58, 2, 5, 7), (0, 3, 4, 2, 1), (1, 116, 5, 7))
    assert source == (0, 3, 4, 1, 2) and out == (0, 2, 3, 1)


@pytest.mark.parametrize(
    ("src", "perm", "dst"),
    [
        ((2, 6, 4, 3), (0, 2, 3, 1), (2, 6, 12)),  # merges H and W
        ((2, 6, 4, 3), (0, 2, 3, 1), (2, 72)),  # a flatten: C is outside H, W in NCHW order
        ((1, 6, 1, 1), (0, 2, 3, 1), (1, 6)),
        ((3, 1, 5, 2), (2, 0, 3, 1), (3, 5, 2, 1)),
        ((4, 6, 5), (2, 0, 1), (2, 2, 6, 5)),
    ],
)
def test_reshapes_of_held_values_match_numpy(src, perm, dst):
    _check(src, perm, dst)


def test_extents_that_do_not_line_up_have_no_plan():
    assert reshape_layout((2, 6), (1, 0), (3, 5)) is None
