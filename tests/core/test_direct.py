"""Kernel functions lowered from their syntax tree (``tuner.codegen.cpu.direct``) compute what
Numba's own front end compiles from the same source, edge cases of Python's semantics included."""

from __future__ import annotations

import importlib.util
import itertools
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tuner import te
from tuner.codegen.backend import BuildOptions
from tuner.codegen.build import build
from tuner.codegen.cpu import direct
from tuner.target import Target

from .ops import matmul

_HEADER = """\
import math

import numba
import numpy as np

from tuner.codegen.cpu.direct import body as lowered_body
from tuner.codegen.cpu.runtime import NoAliasCompiler, carray, flush_denormals, restore_fp, stack_empty, maxnum, sigmoid32, erf32
from tuner.codegen.cpu.vectors import vload8, vstore8, vbcast8, vadd8, vmul8, vmax8
"""
_FLAGS = "cache=False, error_model='numpy', boundscheck=False, pipeline_class=NoAliasCompiler"
_counter = itertools.count()


def _module(tmp_path: Path, source: str) -> Any:
    name = f"direct_test_{next(_counter)}"
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _both(tmp_path: Path, sig: str, func: str) -> tuple[Any, Any]:
    """``func`` (named ``f``) compiled by Numba and by ``direct``; the second must be rewritten."""
    source = _HEADER + f"\n@numba.njit(numba.void({sig}), {_FLAGS})\n" + textwrap.dedent(func)
    fallbacks: list[tuple[str, str]] = []
    lowered = direct.rewrite(source, lambda name, why: fallbacks.append((name, why)))
    assert not fallbacks, fallbacks
    assert "f_ir = lowered_body(f)" in lowered
    return _module(tmp_path, source).f, _module(tmp_path, lowered).f


def _same(tmp_path: Path, sig: str, func: str, *args: Any) -> None:
    numba_f, direct_f = _both(tmp_path, sig, func)
    a = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
    b = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
    numba_f(*a)
    direct_f(*b)
    for x, y in zip(a, b, strict=True):
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y)


def test_integer_division_and_modulo_floor_as_python(tmp_path: Path) -> None:
    """``//`` and ``%`` round toward minus infinity for every sign; ``min``/``max`` of ints."""
    vals = np.array([-7, -6, -1, 0, 1, 5, 6, 7, 13], np.int64)
    out = np.zeros(4 * len(vals) ** 2, np.int64)
    _same(
        tmp_path,
        "numba.int64[::1], numba.int64[::1]",
        """
        def f(v, out):
            n = 0
            for i in range(9):
                for j in range(9):
                    d = v[np.uint64(j)]
                    if d != 0:
                        out[np.uint64(n)] = v[np.uint64(i)] // d
                        out[np.uint64(n + 1)] = v[np.uint64(i)] % d
                    out[np.uint64(n + 2)] = min(v[np.uint64(i)], d) - max(3, d)
                    out[np.uint64(n + 3)] = -v[np.uint64(i)] * 3 - (d if d > 0 else 2 * d)
                    n += 4
        """,
        vals,
        out,
    )


def test_narrow_integers_keep_their_width_as_numpy_does(tmp_path: Path) -> None:
    """Two int32 (uint8, ...) operands add, subtract and multiply in their own width, as
    NumPy and the tensor expression say, where Numba widens to int64; wider or mixed
    operands are typed as Numba types them. Seen through a conversion to float32."""
    a = np.array([2**31 - 1, 1, 65536, 200], np.int32)
    b = np.array([250, 10], np.uint8)
    out = np.zeros(6, np.float32)
    _, direct_f = _both(
        tmp_path,
        "numba.int32[::1], numba.uint8[::1], numba.float32[::1]",
        """
        def f(a, b, out):
            x = a[np.uint64(0)] + a[np.uint64(1)]
            x += a[np.uint64(1)]
            out[np.uint64(0)] = np.float32(x)
            out[np.uint64(1)] = np.float32(a[np.uint64(2)] * a[np.uint64(2)])
            out[np.uint64(2)] = np.float32(b[np.uint64(0)] + b[np.uint64(1)])
            out[np.uint64(3)] = np.float32(b[np.uint64(1)] - b[np.uint64(0)])
            out[np.uint64(4)] = np.float32(a[np.uint64(0)] + 1)
            out[np.uint64(5)] = np.float32(a[np.uint64(3)] + np.int32(b[np.uint64(0)]))
        """,
    )
    direct_f(a, b, out)
    with np.errstate(over="ignore"):
        want = [
            a[0] + a[1] + a[1], a[2] * a[2], b[0] + b[1], b[1] - b[0], 2**31, a[3] + 250,
        ]  # fmt: skip
    np.testing.assert_array_equal(out, np.array(want, np.float64).astype(np.float32))


def test_float_typing_casts_and_helpers(tmp_path: Path) -> None:
    """float32 with a float64 literal computes in float64 (as Numba types it), casts truncate and
    wrap, ``math``, ``np.inf`` and the runtime's float32 helpers."""
    x = np.array([-3.7, -1.5, -0.0, 0.25, 1.5, 2.5, 100.3, 1e-30], np.float32)
    out = np.zeros(8 * len(x), np.float32)
    ints = np.zeros(2 * len(x), np.int32)
    _same(
        tmp_path,
        "numba.float32[::1], numba.float32[::1], numba.int32[::1]",
        """
        def f(x, out, ints):
            best = -np.inf
            for i in range(8):
                v = x[np.uint64(i)]
                out[np.uint64(8 * i)] = v * 0.1 + np.float32(1.0) / np.float32(3.0)
                out[np.uint64(8 * i + 1)] = math.sqrt(abs(v))
                out[np.uint64(8 * i + 2)] = sigmoid32(v)
                out[np.uint64(8 * i + 3)] = erf32(v)
                out[np.uint64(8 * i + 4)] = maxnum(v, np.float32(0.5))
                out[np.uint64(8 * i + 5)] = max(v, np.float32(0.0)) / np.float32(7.0)
                best = max(best, v * 2.0)
                out[np.uint64(8 * i + 6)] = best
                out[np.uint64(8 * i + 7)] += v
                ints[np.uint64(2 * i)] = np.int32(np.int8(np.int64(v * 50.0)))
                ints[np.uint64(2 * i + 1)] = np.int32(v) * 3
        """,
        x,
        out,
        ints,
    )


def test_short_circuit_guards_and_negative_index(tmp_path: Path) -> None:
    """``and``/``or`` evaluate their right side only when needed (a guard keeps a read in
    bounds); a signed index counts from the end, as Numba's; empty and reversed ranges."""
    a = np.arange(10, dtype=np.float32)
    out = np.zeros(40, np.float32)
    _same(
        tmp_path,
        "numba.float32[::1], numba.float32[::1], numba.int64, numba.int64",
        """
        def f(a, out, lo, hi):
            for i in range(lo, hi):
                k = i - 2
                if (k >= 0 and a[np.uint64(k)] > 3.0) or (k < -100 and a[np.uint64(k + 1000000)] > 0.0):
                    out[np.uint64(i)] = a[np.uint64(k)]
                elif not (k >= 0 and k < 10):
                    out[np.uint64(i)] = a[-1] + a[k % 10]
                else:
                    out[np.uint64(i)] = (a[np.uint64(k)] if k < 5 else -a[np.uint64(k)]) * 2.0
            for i in range(hi, lo):
                out[np.uint64(i)] = 99.0
            for j in range(0):
                out[np.uint64(j)] = 98.0
        """,
        a,
        out,
        0,
        14,
    )


def test_stack_arrays_and_vectors(tmp_path: Path) -> None:
    """A stack array in a loop, vector loads, arithmetic and stores, FP state saved and restored."""
    a = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    out = np.zeros(64, np.float32)
    _same(
        tmp_path,
        "numba.float32[::1], numba.float32[::1]",
        """
        def f(a, out):
            mx_ = flush_denormals()
            acc = carray(stack_empty(16, np.float32), (16,))
            for t in range(2):
                vstore8(acc, 8 * t, vbcast8(np.float32(0.0)))
            for i in range(4):
                tmp = carray(stack_empty(8, np.float32), (8,))
                vstore8(tmp, 0, vmax8(vload8(a, 16 * i), vbcast8(0.0)))
                for t in range(2):
                    vstore8(acc, 8 * t, vadd8(vload8(acc, 8 * t), vmul8(vload8(tmp, 0), vload8(a, 16 * i + 8 * t))))
                for j in range(8):
                    out[np.uint64(16 * i + j)] = tmp[np.uint64(j)] + acc[np.uint64(j + 8)]
            restore_fp(mx_)
        """,
        a,
        out,
    )


def test_outside_the_language_is_left_to_numba(tmp_path: Path) -> None:
    """A heap allocation, a ``while`` loop and a reassigned parameter each keep Numba's front end;
    the module still compiles and runs."""
    source = _HEADER + textwrap.dedent(f"""
        @numba.njit(numba.void(numba.float32[::1]), {_FLAGS})
        def heap(a):
            t = np.empty(4, np.float32)
            for i in range(4):
                t[np.uint64(i)] = a[np.uint64(i)]
                a[np.uint64(i)] = t[np.uint64(i)] + 1.0

        @numba.njit(numba.void(numba.float32[::1]), {_FLAGS})
        def loop(a):
            i = 0
            while i < 4:
                a[np.uint64(i)] += 1.0
                i += 1

        @numba.njit(numba.void(numba.float32[::1], numba.int64), {_FLAGS})
        def param(a, n):
            n = n + 1
            a[np.uint64(0)] = n

        @numba.njit(numba.void(numba.float32[::1]), {_FLAGS})
        def fine(a):
            a[np.uint64(1)] += 1.0
    """)
    fallbacks: dict[str, str] = {}
    lowered = direct.rewrite(source, fallbacks.__setitem__)
    assert set(fallbacks) == {"heap", "loop", "param"}
    assert "fine_ir = lowered_body(fine)" in lowered
    m = _module(tmp_path, lowered)
    a = np.zeros(4, np.float32)
    for f in (m.heap, m.loop, m.param, m.fine):
        f(*((a, 2) if f is m.param else (a,)))
    np.testing.assert_array_equal(a, [3.0, 3.0, 2.0, 2.0])


@pytest.mark.parametrize("shape", [(64, 48, 32), (49, 13, 17)])
def test_kernels_match_numba_front_end(shape: tuple[int, int, int]) -> None:
    """A scheduled matmul (register tile, vectorized, parallel) through both front ends: the
    direct one is taken, and both equal NumPy."""
    M, N, K = shape
    (A, B), C, _ = matmul(M, N, K)
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=4)
    jo, ji = s[C].split(j, factor=16)
    s[C].reorder(io, jo, s[C].op.reduce_axis[0], ii, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    target = Target.from_name("cpu")
    outs = {}
    for fe in ("direct", "numba"):
        k = build(s, [A, B, C], target, name=f"mm_{fe}", options=BuildOptions(front_end=fe))
        assert ("lowered_body(" in k.source) == (fe == "direct")
        outs[fe] = np.zeros((M, N), np.float32)
        k(a, b, outs[fe])
        np.testing.assert_allclose(outs[fe], a @ b, rtol=1e-4, atol=1e-4)
