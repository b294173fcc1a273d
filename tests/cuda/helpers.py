"""Running a schedule on the cuda target against NumPy, and small GPU schedules the tests share."""

from __future__ import annotations

from typing import Any

import numpy as np

import tuner
from search_spaces._cuda.matmul import cooperative_copy
from tuner import te
from tuner.schedule import Schedule
from tuner.target import Target

RNG = np.random.default_rng(11)


def random_inputs(inputs: list[te.Tensor]) -> list[np.ndarray]:
    arrays = []
    for t in inputs:
        if t.dtype == "int8":
            arrays.append(RNG.integers(-128, 128, t.shape_ints).astype(np.int8))
        else:
            arrays.append((RNG.random(t.shape_ints) * 2 - 1).astype(t.dtype))
    return arrays


def run_gpu(
    inputs: list[te.Tensor],
    out: te.Tensor,
    ref: Any,
    s: Schedule,
    gpu: Target,
    rtol: float = 1e-4,
    atol: float = 1e-5,
) -> tuner.Kernel:
    """Build ``s`` for ``gpu``, run it on random inputs and compare with ``ref``."""
    arrays = random_inputs(inputs)
    result = np.full(out.shape_ints, 12345, dtype=out.dtype)
    kern = tuner.build(s, [*inputs, out], target=gpu)
    kern(*arrays, result)
    np.testing.assert_allclose(result, ref(*arrays), rtol=rtol, atol=atol)
    return kern


def tiled_matmul(
    s: Schedule,
    C: te.Tensor,
    A: te.Tensor,
    B: te.Tensor,
    ty: int,
    tx: int,
    ry: int = 1,
    rx: int = 1,
    kc: int = 4,
    shared: bool = True,
    local: bool = True,
    copy_threads: tuple[int, int] | None = None,
) -> None:
    """Block tiles of ``ty x tx`` threads with ``ry x rx`` outputs each, optionally through
    shared memory (copied by ``copy_threads``, the block's own by default) and registers."""
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    bi, ri = s[C].split(i, factor=ty * ry)
    ti, ii = s[C].split(ri, factor=ry)
    bj, rj = s[C].split(j, factor=tx * rx)
    tj, ji = s[C].split(rj, factor=rx)
    ko, ki = s[C].split(k, factor=kc)
    s[C].reorder(bi, bj, ti, tj, ko, ki, ii, ji)
    s[C].bind(bi, "blockIdx.y")
    s[C].bind(bj, "blockIdx.x")
    s[C].bind(ti, "threadIdx.y")
    s[C].bind(tj, "threadIdx.x")
    if local:
        CL = s.cache_write(C, "local")
        s[CL].compute_at(s[C], tj)
    if shared:
        for T in (A, B):
            TS = s.cache_read(T, "shared", [C])
            s[TS].compute_at(s[C], ko)
            cooperative_copy(s, TS, *(copy_threads or (ty, tx)))
