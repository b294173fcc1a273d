"""Fixtures shared by the core compiler's tests."""

from __future__ import annotations

import numba
import pytest

from tuner.codegen import backend_kinds
from tuner.target import Target, TargetError


@pytest.fixture(params=backend_kinds())
def backend_target(request):  # type: ignore[no-untyped-def]
    """A target of each kind that has a backend, where this machine has one (the contract suite)."""
    try:
        return Target.from_name(request.param)
    except TargetError as exc:
        pytest.skip(f"no {request.param} target on this machine: {exc}")


@pytest.fixture
def two_threads():  # type: ignore[no-untyped-def]
    """Numba's thread count set to 2 (where the machine has 2) for one test."""
    saved = numba.get_num_threads()
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    yield
    numba.set_num_threads(saved)
