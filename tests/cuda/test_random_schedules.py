"""Random legal GPU schedules of a matmul, on shapes no tile divides, against NumPy."""

from __future__ import annotations

import pytest

pytest.importorskip("numba.cuda", reason="the cuda extra (numba-cuda) is not installed")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tuner import te

from ..core.ops import matmul
from .helpers import run_gpu, tiled_matmul

SMALL = st.sampled_from([1, 2, 3, 5, 8])
SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)


@SETTINGS
@given(
    m=SMALL,
    n=SMALL,
    k=st.sampled_from([1, 3, 4, 7]),
    ty=st.sampled_from([1, 2, 4]),
    tx=st.sampled_from([1, 2, 4]),
    ry=st.sampled_from([1, 2, 3]),
    rx=st.sampled_from([1, 2]),
    kc=st.sampled_from([1, 2, 3]),
    shared=st.booleans(),
    local=st.booleans(),
)
def test_random_gpu_matmul_schedules(gpu, m, n, k, ty, tx, ry, rx, kc, shared, local) -> None:  # type: ignore[no-untyped-def]
    inputs, C, ref = matmul(m, n, k)
    s = te.create_schedule(C)
    tiled_matmul(s, C, *inputs, ty=ty, tx=tx, ry=ry, rx=rx, kc=kc, shared=shared, local=local)
    run_gpu(inputs, C, ref, s, gpu)
