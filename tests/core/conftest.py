"""Fixtures shared by the core compiler's tests."""

from __future__ import annotations

import numba
import pytest


@pytest.fixture
def two_threads():  # type: ignore[no-untyped-def]
    """Numba's thread count set to 2 (where the machine has 2) for one test."""
    saved = numba.get_num_threads()
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    yield
    numba.set_num_threads(saved)
