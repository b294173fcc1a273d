"""Kernels run with denormal floats flushed to zero (MXCSR's FTZ and DAZ on x86), and give
each thread its floating-point state back.

A denormal costs a microcode assist per instruction; softmax probabilities that
underflow to denormals ran BERT's attention product 65 times slower. Every compiled
function of a kernel (serial, a thread's chunk, a prange iteration) sets the flags
first and restores them last, so the caller's NumPy keeps IEEE denormals.
"""

from __future__ import annotations

import platform

import numpy as np
import pytest

import tuner
from tuner import te
from tuner.target import Target

x86 = pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64"), reason="MXCSR is x86's"
)
TINY = np.float32(1e-39)  # a denormal float32


def _scale(parallel: str | None) -> tuple[object, str]:
    x = te.placeholder((64, 32), "float32", name="x")
    y = te.compute((64, 32), lambda i, j: x[i, j] * 1.5, name="y")
    s = te.create_schedule(y)
    i, j = s[y].op.axis
    if parallel:
        s[y].parallel(i)
    target = Target.from_name("cpu", num_threads=2)
    return tuner.build(s, [x, y], target=target), parallel or "serial"


@x86
@pytest.mark.parametrize("parallel", [None, "rows"])
def test_a_kernel_flushes_denormals_and_numpy_keeps_them_after(parallel: str | None) -> None:
    f, _ = _scale(parallel)
    x = np.full((64, 32), TINY, np.float32)
    x[0, 0] = 2.0
    y = np.empty_like(x)
    f(x, y)
    assert y[0, 0] == 3.0
    assert np.all(y.reshape(-1)[1:] == 0.0)  # denormal in, zero out
    assert np.all(x * np.float32(1.5) > 0)  # the caller's thread: IEEE denormals as before
    assert "flush_denormals()" in f.source and "restore_fp(" in f.source


def test_every_compiled_function_sets_and_restores_the_state() -> None:
    f, _ = _scale("rows")
    functions = f.source.count("@numba.njit(")
    assert functions >= 1
    assert f.source.count("= flush_denormals()") >= functions
    assert f.source.count("restore_fp(") == f.source.count("= flush_denormals()")
