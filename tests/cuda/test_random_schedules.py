"""Random legal GPU schedules of a matmul, on shapes no tile divides, against NumPy."""

from __future__ import annotations

import pytest

pytest.importorskip("numba.cuda", reason="the cuda extra (numba-cuda) is not installed")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tuner import te

from ..core.ops import chain, matmul
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


@SETTINGS
@given(
    m=SMALL,
    n=st.sampled_from([1, 3, 4, 7, 9]),
    rows=st.sampled_from([1, 2, 3]),
    cols=st.sampled_from([1, 2, 4]),
    producer=st.sampled_from(["inline", "root", "block", "thread"]),
)
def test_random_gpu_chain_schedules(gpu, m, n, rows, cols, producer) -> None:  # type: ignore[no-untyped-def]
    """An elementwise chain on a 2-D grid; its first stage inlined, a kernel of its own, computed
    by the block's threads together into shared memory, or by each thread for itself."""
    inputs, U, ref = chain(m, n)
    T = U.op.inputs[0]
    s = te.create_schedule(U)
    i, j = s[U].op.axis
    bi, ti = s[U].split(i, factor=rows)
    bj, tj = s[U].split(j, factor=cols)
    s[U].reorder(bi, bj, ti, tj)
    for ax, tag in (
        (bi, "blockIdx.y"),
        (bj, "blockIdx.x"),
        (ti, "threadIdx.y"),
        (tj, "threadIdx.x"),
    ):
        s[U].bind(ax, tag)
    if producer == "inline":
        s[T].compute_inline()
    elif producer == "root":
        ti_, tj_ = s[T].op.axis
        s[T].bind(ti_, "blockIdx.x")
        s[T].bind(tj_, "threadIdx.x")
    elif producer == "block":
        s[T].compute_at(s[U], bj)
        flat = s[T].fuse(*s[T].op.axis)
        _, fx = s[T].split(flat, factor=rows * cols)
        s[T].bind(fx, "threadIdx.x")
    else:
        s[T].compute_at(s[U], tj)
    run_gpu(inputs, U, ref, s, gpu, rtol=1e-5, atol=2e-6)
