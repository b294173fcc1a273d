"""Shared spaces for the knob-space tests."""

from __future__ import annotations

import numpy as np
import pytest

from tuner.space import ConfigSpace

from .space_examples import matmul_space, small_space


@pytest.fixture
def space() -> ConfigSpace:
    return matmul_space()


@pytest.fixture
def small() -> ConfigSpace:
    return small_space()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20240601)
