"""SIMD loops staged through stack buffers under the SLP vectorizer (``_Renderer._stage``)."""

from __future__ import annotations

import numpy as np
import pytest

import tuner
from tuner import te

from .ops import launches, matmul

RNG = np.random.default_rng(11)
SLP = tuner.BuildOptions(vectorizer="slp")
#: The scalar source (no explicit vectors): where SIMD loops are staged for LLVM's SLP pass.
SCALAR = tuner.BuildOptions(vectorizer="slp", simd=False)


def _epilogue(m: int, n: int, lanes: int):  # type: ignore[no-untyped-def]
    """``Y = max(X * 2 + b, 0)`` with its columns split by ``lanes`` and the inner loop SIMD."""
    X = te.placeholder((m, n), "float32", name="X")
    b = te.placeholder((n,), "float32", name="b")
    Y = te.compute((m, n), lambda i, j: te.maximum(X[i, j] * 2.0 + b[j], te.const(0.0)), name="Y")
    s = te.create_schedule(Y)
    _, j = s[Y].op.axis
    _, ji = s[Y].split(j, factor=lanes)
    s[Y].vectorize(ji)
    return s, [X, b, Y]


@pytest.mark.parametrize(
    ("m", "n", "lanes", "staged"),
    [(5, 16, 8, True), (4, 64, 64, True), (3, 13, 8, True), (1, 7, 16, True)],
)
def test_staged_epilogue_matches_numpy(m: int, n: int, lanes: int, staged: bool) -> None:
    """A split that leaves a ragged last piece runs to ``min(lanes, ...)``: its full pieces
    take a branch of ``lanes`` trips, staged, and the ragged one the rest; where the loop
    around the piece runs once (7 columns in pieces of 16), its body is rendered at 0 and
    the piece is the constant 7: staged."""
    s, args = _epilogue(m, n, lanes)
    kern = tuner.build(s, args, options=SCALAR)
    assert ("Y_j_i_v = carray(stack_empty(" in kern.source) == staged
    host = tuner.Target.from_name("cpu").lanes("float32")
    if lanes % host == 0 and n >= lanes:  # in explicit vectors (the default) instead
        vectors = tuner.build(s, args, options=SLP).source
        assert f"vmax{host}(" in vectors and "Y_j_i_v = carray" not in vectors
    if n % lanes and n > lanes:
        assert f" >= {lanes}:" in kern.source  # the full pieces' branch
    x = RNG.standard_normal((m, n)).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    y = np.full((m, n), np.nan, np.float32)
    kern(x, b, y)
    np.testing.assert_allclose(y, np.maximum(x * 2 + b, 0), rtol=1e-6)


def test_loop_vectorizer_kernels_are_not_staged() -> None:
    """LLVM's loop vectorizer checks aliasing at run time itself."""
    s, args = _epilogue(4, 16, 8)
    source = tuner.build(s, args, options=tuner.BuildOptions(vectorizer="loop")).source
    assert "_v = carray" not in source


def test_read_modify_write_is_not_staged() -> None:
    """``C[i, j] += A[i, k] * B[k, j]`` with j SIMD reads what it stores: staging would be wrong
    for a loop whose iterations meet the same element, so it is left as it is."""
    (A, B), C, ref = matmul(7, 24, 5)
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    s[C].reorder(i, k, j)
    s[C].vectorize(j)
    kern = tuner.build(s, [A, B, C], options=SLP)
    assert "_v = carray" not in kern.source
    a = RNG.standard_normal((7, 5)).astype(np.float32)
    bm = RNG.standard_normal((5, 24)).astype(np.float32)
    c = np.empty((7, 24), np.float32)
    kern(a, bm, c)
    np.testing.assert_allclose(c, ref(a, bm), rtol=1e-5, atol=1e-5)


def test_packed_matmul_stages_its_copy_and_stays_correct() -> None:
    """matmul's packing copies are SIMD loops: in scalar source (``simd=False``) B's panel
    copy is staged, the tile's is not; in explicit vectors (the default) neither is."""
    from search_spaces import matmul as mm

    cfg = {**mm.default_config(37, 48, 29), "pack_a": True, "mc_tiles": 2}
    s, args = mm.schedule(cfg, 37, 48, 29)
    scalar = tuner.build(s, args, options=tuner.BuildOptions(simd=False))
    assert "B_global_ax1_i_v = carray" in scalar.source
    assert "C_local_" not in scalar.source  # the register tile's loads and stores stay as written
    kern = tuner.build(s, args)
    assert "B_global_ax1_i_v = carray" not in kern.source
    assert "vstore" in kern.source.split("def ", 1)[1]
    a = RNG.standard_normal((37, 29)).astype(np.float32)
    b = RNG.standard_normal((29, 48)).astype(np.float32)
    c = np.empty((37, 48), np.float32)
    for k in (scalar, kern):
        k(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.usefixtures("two_threads")
def test_a_parallel_loop_is_not_staged() -> None:
    """An innermost parallel loop (inside a serial one) stays parallel."""
    X = te.placeholder((3, 12), "float32", name="X")
    Y = te.compute((3, 12), lambda i, j: X[i, j] * 2.0, name="Y")
    s = te.create_schedule(Y)
    s[Y].parallel(s[Y].op.axis[1])
    kern = tuner.build(s, [X, Y], options=SLP)
    assert launches(kern.source, "kernel_p0, 12, X, Y, i")
    assert "_v = carray" not in kern.source
    x = RNG.standard_normal((3, 12)).astype(np.float32)
    y = np.empty((3, 12), np.float32)
    kern(x, y)
    np.testing.assert_allclose(y, x * 2)


def test_transcendental_lanes_are_unrolled_in_the_source() -> None:
    """``Y = X * sigmoid(X) + b`` (SiLU with a bias), 16 SIMD lanes: too heavy for LLVM to
    unroll before its SLP vectorizer, so the scalar source holds each lane already unrolled;
    the default source calls the vector sigmoid once per vector."""
    X = te.placeholder((5, 16), "float32", name="X")
    b = te.placeholder((16,), "float32", name="b")
    Y = te.compute((5, 16), lambda i, j: X[i, j] * te.sigmoid(X[i, j]) + b[j], name="Y")
    s = te.create_schedule(Y)
    s[Y].vectorize(s[Y].op.axis[1])
    kern = tuner.build(s, [X, b, Y], options=SCALAR)
    assert kern.source.count("sigmoid32(") == 16 and "Y_j_v[15] = " in kern.source
    host = tuner.Target.from_name("cpu").lanes("float32")
    if host <= 16:  # in explicit vectors (the default): one call per vector
        vectors = tuner.build(s, [X, b, Y], options=SLP).source
        assert vectors.count(f"vsigmoid{host}(") == 16 // host and "sigmoid32(" not in vectors
    x = RNG.standard_normal((5, 16)).astype(np.float32)
    bias = RNG.standard_normal(16).astype(np.float32)
    y = np.full((5, 16), np.nan, np.float32)
    kern(x, bias, y)
    np.testing.assert_allclose(y, x / (1 + np.exp(-x)) + bias, rtol=1e-5, atol=1e-6)
