"""Kernels compile with their arrays marked ``noalias``, and refuse outputs that overlap an argument."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest

import tuner
from tuner import te
from tuner.codegen.cpu.backend import _dispatchers

from .ops import matmul

RNG = np.random.default_rng(5)


def _axpy(n: int):  # type: ignore[no-untyped-def]
    X = te.placeholder((n,), "float32", name="X")
    Z = te.placeholder((n,), "float32", name="Z")
    Y = te.compute((n,), lambda i: X[i] * 2.0 + Z[i], name="Y")
    s = te.create_schedule(Y)
    return s, [X, Z, Y]


@pytest.mark.parametrize("parallel", ["threads", "prange"])
def test_every_compiled_function_takes_noalias_arrays(parallel: str) -> None:
    (A, B), C, _ = matmul(24, 20, 16)
    s = te.create_schedule(C)
    s[C].parallel(s[C].op.axis[0])
    kern = tuner.build(s, [A, B, C], options=tuner.BuildOptions(parallel=parallel, cache=False))
    module = sys.modules[kern._fn.__module__]
    for dispatcher in _dispatchers(module):
        (llvm,) = dispatcher.inspect_llvm().values()
        name = dispatcher.py_func.__name__
        define = next(
            line for line in llvm.splitlines() if line.startswith("define") and name in line
        )
        # Numba passes an array as its fields; the data pointer is the 5th (%arg.A.4).
        data = set(re.findall(r"ptr noalias [^,%]*%arg\.(\w+)\.4\b", define))
        assert {"A", "B", "C"} <= data, define


def test_an_output_overlapping_an_input_is_refused_with_one_line() -> None:
    s, args = _axpy(32)
    kern = tuner.build(s, args)
    x = RNG.standard_normal(32).astype(np.float32)
    z = RNG.standard_normal(32).astype(np.float32)
    with pytest.raises(ValueError, match=r"^argument Y shares memory with argument X: .*separate"):
        kern(x, z, x)
    both = np.zeros(64, np.float32)
    with pytest.raises(ValueError, match="argument Y shares memory with argument Z"):
        kern(x, both[:32], both[:32])
    y = np.empty(32, np.float32)
    kern(x, z, y)
    np.testing.assert_allclose(y, x * 2 + z, rtol=1e-6)


def test_inputs_may_share_memory_with_each_other() -> None:
    """LLVM's noalias concerns only memory that is written: A @ A is fine."""
    (A, B), C, _ = matmul(16, 16, 16)
    kern = tuner.build(te.create_schedule(C), [A, B, C])
    a = RNG.standard_normal((16, 16)).astype(np.float32)
    out = np.empty((16, 16), np.float32)
    kern(a, a, out)
    np.testing.assert_allclose(out, a @ a, rtol=1e-4, atol=1e-4)


def test_the_same_small_arrays_again_skip_the_checks_and_anything_else_is_checked() -> None:
    """A kernel called again on the arrays of its last call (timed, or run in a loop) takes
    them as checked; a new array, or one whose shape changed in place, is checked again."""
    from tuner.codegen.cpu.backend import MEMO_BYTES

    s, args = _axpy(32)
    kern = tuner.build(s, args)
    x = RNG.standard_normal(32).astype(np.float32)
    z = RNG.standard_normal(32).astype(np.float32)
    y = np.empty(32, np.float32)
    for _ in range(2):
        kern(x, z, y)
        np.testing.assert_allclose(y, x * 2 + z, rtol=1e-6)
    assert kern._memo is not None and kern._memo[0][2] is y
    with pytest.raises(ValueError, match="argument Y shares memory with argument X"):
        kern(x, z, x)
    y.shape = (4, 8)  # the same object, another shape
    with pytest.raises(TypeError, match=r"argument Y must be float32\[32\]"):
        kern(x, z, y)
    n = MEMO_BYTES // 4
    big = tuner.build(*_axpy(n))
    xs, zs, ys = (np.ones(n, np.float32) for _ in range(3))
    big(xs, zs, ys)
    assert big._memo is None, "large arrays are not held between calls"
    np.testing.assert_allclose(ys, 3.0)
