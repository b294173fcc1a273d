"""The CUDA tests: each module skips without numba-cuda (``pytest.importorskip``); kernels run
on Numba's simulator (``NUMBA_ENABLE_CUDASIM``, set in tests/conftest.py)."""

from __future__ import annotations

import pytest

from tuner.target import Target, TargetError


@pytest.fixture(scope="session")
def gpu() -> Target:
    """The cuda target: the simulator's fixed capabilities in CI, a real device elsewhere."""
    try:
        return Target.from_name("cuda")
    except TargetError as exc:
        pytest.skip(str(exc))
