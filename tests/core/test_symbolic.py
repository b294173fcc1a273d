"""Symbolic extents: one kernel, compiled once, called at many shapes, always equal to NumPy.

Hypothesis draws which extents are symbolic (``te.var``), a random legal
schedule over them (splits no runtime extent need divide, reorders, fuses,
parallel loops, register caches, compute_at) and the shapes each kernel is
then called at: 1, primes, and extents past every tile.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import tuner
from tuner import te
from tuner.schedule import ScheduleError

from .ops import chain, conv2d, row_max
from .test_compute_at_chain import softmax
from .test_random_schedules import matmul_schedule, place_padding, random_loops

SETTINGS = settings(
    max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)
SIZES = st.sampled_from([1, 2, 3, 7, 13, 17, 40])
RNG = np.random.default_rng(0)


def extent(draw, name: str):  # type: ignore[no-untyped-def]
    """A symbolic extent (bounded or not) or a constant one."""
    if draw(st.booleans()):
        return te.var(name, max=draw(st.sampled_from([None, 64])))
    return draw(SIZES)


def value(draw, e):  # type: ignore[no-untyped-def]
    return draw(SIZES) if isinstance(e, te.Var) else e


def call(kernel, inputs, out, ref, values, rtol=1e-4, atol=1e-5):  # type: ignore[no-untyped-def]
    """Run ``kernel`` with the symbols at ``values``; compare with the reference."""

    def shape(t):  # type: ignore[no-untyped-def]
        return tuple(values[d.name] if isinstance(d, te.Var) else int(d.value) for d in t.shape)

    arrays = [(RNG.random(shape(t)) * 2 - 1).astype(t.dtype) for t in inputs]
    result = np.full(shape(out), 12345, out.dtype)
    kernel(*arrays, result)
    np.testing.assert_allclose(result, ref(*arrays), rtol=rtol, atol=atol)


def calls(draw, kernel, inputs, out, ref, **kw):  # type: ignore[no-untyped-def]
    symbols = {v.name for v in kernel.lowered.symbols}
    for _ in range(3):
        values = {name: draw(SIZES) for name in symbols}
        note(f"symbols {values}")
        call(kernel, inputs, out, ref, values, **kw)


@st.composite
def matmul_case(draw):  # type: ignore[no-untyped-def]
    return matmul_schedule(draw, extent(draw, "M"), extent(draw, "N"), extent(draw, "K"))


@given(matmul_case(), st.data())
@SETTINGS
def test_symbolic_matmul_under_random_schedules(case, data) -> None:  # type: ignore[no-untyped-def]
    inputs, C, ref, s = case
    note(s.dumps())
    try:
        kernel = tuner.build(s, [*inputs, C])
    except ScheduleError as exc:  # a register tile over a symbolic extent: said, not built
        assert "symbolic extent" in str(exc)
        return
    calls(data.draw, kernel, inputs, C, ref)


@given(st.data())
@SETTINGS
def test_symbolic_reductions_and_chains(data) -> None:  # type: ignore[no-untyped-def]
    draw = data.draw
    m, n = extent(draw, "m"), extent(draw, "n")
    kind = draw(st.sampled_from(["max", "chain"]))
    inputs, out, ref = row_max(m, n) if kind == "max" else chain(m, n)
    s = te.create_schedule(out)
    random_loops(draw, s, out)
    if kind == "chain" and draw(st.booleans()):
        s[out.op.inputs[0]].compute_inline()
    note(s.dumps())
    kernel = tuner.build(s, [*inputs, out])
    calls(draw, kernel, inputs, out, ref, rtol=1e-5, atol=2e-6)


@given(st.data())
@SETTINGS
def test_symbolic_softmax_with_stages_at_the_row(data) -> None:  # type: ignore[no-untyped-def]
    """The row chain over a symbolic row length: the buffers at the row are sized at run time."""
    draw = data.draw
    m, n = extent(draw, "m"), extent(draw, "n")
    inputs, stages, out, ref = softmax(m, n)
    s = te.create_schedule(out)
    row = s[out].op.axis[0]
    if draw(st.booleans()):
        s[out].parallel(row)
    for T in stages:
        s[T].compute_at(s[out], row)
    _, col = s[out].op.axis
    s[out].split(col, factor=draw(st.integers(1, 9)))
    note(s.dumps())
    kernel = tuner.build(s, [*inputs, out])
    calls(draw, kernel, inputs, out, ref, rtol=1e-5, atol=1e-6)


def test_a_kernel_refuses_a_shape_outside_its_bounds_or_divisors() -> None:
    n = te.var("n", min=2, max=32, multiple_of=2)
    A = te.placeholder((n, 4), "float32", name="A")
    B = te.compute((n, 4), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B)
    s[B].split(s[B].op.axis[0], factor=2)
    kernel = tuner.build(s, [A, B])
    assert "if " not in kernel.source  # a multiple of 2 split by 2 needs no bound check
    a = np.ones((6, 4), np.float32)
    b = np.empty((6, 4), np.float32)
    kernel(a, b)
    assert (b == 2).all()
    for rows, why in ((34, "at most 32"), (7, "multiple of 2")):
        with pytest.raises(TypeError, match=why):
            kernel(np.ones((rows, 4), np.float32), np.empty((rows, 4), np.float32))
    with pytest.raises(TypeError, match=r"argument B must be float32\[n=6, 4\]"):
        kernel(a, np.empty((8, 4), np.float32))


def test_a_symbol_must_be_a_whole_dimension_of_an_argument() -> None:
    n = te.var("n")
    A = te.placeholder((n,), "float32", name="A")
    T = te.compute((n,), lambda i: A[i] * 2.0, name="T")
    B = te.compute((4,), lambda j: T[0] + j.astype("float32"), name="B")
    s = te.create_schedule(B)
    with pytest.raises(ScheduleError, match="symbolic extent n is not a whole dimension"):
        tuner.lower(s, [B])


def conv_reference(x: np.ndarray, wt: np.ndarray, stride: int, pad: int) -> np.ndarray:
    n, _, h, w = x.shape
    r = wt.shape[2]
    oh, ow = (h + 2 * pad - r) // stride + 1, (w + 2 * pad - r) // stride + 1
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.zeros((n, wt.shape[0], oh, ow), np.float32)
    for dy in range(r):
        for dx in range(r):
            patch = xp[:, :, dy : dy + stride * oh : stride, dx : dx + stride * ow : stride]
            out += np.einsum("nchw,kc->nkhw", patch, wt[:, :, dy, dx])
    return out


@given(st.data())
@SETTINGS
def test_symbolic_conv2d_image_size_under_random_schedules(data) -> None:  # type: ignore[no-untyped-def]
    """Output extents ``(h + 2*pad - r) // stride + 1`` of symbols: padding guards and windows."""
    draw = data.draw
    r, stride = draw(st.sampled_from([1, 3])), draw(st.sampled_from([1, 2]))
    pad = draw(st.integers(0, r // 2 + 1))
    h, w = te.var("h", min=r, max=64), te.var("w", min=r)
    inputs, O, _ = conv2d(1, 2, h, w, 3, r, stride, pad)
    s = te.create_schedule(O)
    random_loops(draw, s, O)
    place_padding(draw, s, O, draw(st.sampled_from(["root", "inline", "at"])))
    note(s.dumps())
    kernel = tuner.build(s, [*inputs, O])
    for _ in range(3):
        hh, ww = draw(st.integers(r, 17)), draw(st.integers(r, 17))
        x = (RNG.random((1, 2, hh, ww)) * 2 - 1).astype(np.float32)
        wt = (RNG.random((3, 2, r, r)) * 2 - 1).astype(np.float32)
        want = conv_reference(x, wt, stride, pad)
        out = np.full(want.shape, 12345, np.float32)
        kernel(x, wt, out)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_an_axis_may_not_share_its_name_with_a_symbol() -> None:
    h = te.var("h")
    X = te.placeholder((h,), "float32", name="X")
    with pytest.raises(te.TensorError, match="names an axis h, the name of a symbolic extent"):
        te.compute((h + 2,), lambda h: te.if_then_else(h < X.shape[0], X[h], 0.0), name="P")


def test_a_symbol_named_like_a_buffer_is_renamed_in_the_source() -> None:
    W = te.var("W")
    A = te.placeholder((W,), "float32", name="W")
    B = te.compute((W,), lambda i: A[i] * 3.0, name="B")
    kernel = tuner.build(te.create_schedule(B), [A, B])
    a = np.arange(5, dtype=np.float32)
    b = np.empty(5, np.float32)
    kernel(a, b)
    np.testing.assert_array_equal(b, a * 3)


def test_bounds_of_a_quotient_and_remainder_by_a_symbolic_extent() -> None:
    from tuner.lower.simplify import bounds
    from tuner.te.expr import Var

    seq, v = Var("seq", "int64", 8, 512), Var("v", "int64")
    tiles = (seq + 31) // 32  # 1 ... 16
    ranges = {"seq": (8, 512), "v": (0, 191)}
    assert bounds(v // tiles, ranges) == (0, 191)
    assert bounds(v % tiles, ranges) == (0, 15)
    assert bounds(v % tiles, {**ranges, "v": (0, 3)}) == (0, 3)
    assert bounds(v // tiles, {"v": (0, 191)}) is None  # the divisor's range is unknown


def test_a_generic_batch_matmul_keeps_its_register_tile_free_of_guards() -> None:
    """A symbolic column count makes the fused parallel loop's quotient and remainder
    symbolic; the guards ``index >= 0`` on them are proven, so no ``if`` sits inside a
    vectorized loop (where one kept the attention score matmul scalar, 90x slower)."""
    from tuner.kernels.dynamic import DynamicOpKernel
    from tuner.lower.ir import For, If
    from tuner.lower.visitor import walk_stmts

    seq = te.var("seq", min=8, max=512)
    target = tuner.Target.from_name("cpu", num_threads=2)
    dyn = DynamicOpKernel("batch_matmul", {"B": 12, "M": seq, "N": seq, "K": 64}, target)
    func = tuner.lower(dyn._sched, dyn.tensors, "kernel", target=target)
    vectorized = [s for s in walk_stmts(func.body) if isinstance(s, For) and s.kind == "vectorize"]
    assert vectorized
    for loop in vectorized:
        assert not any(isinstance(s, If) for s in walk_stmts(loop.body)), loop.var
    # The fused loop's quotient and remainder by the symbolic tile count are named once per
    # iteration, not divided again in the register tile (where it kept it scalar, 3x).
    source = dyn.kernel_for({}).kernel.source
    tile = [
        line
        for line in source.splitlines()
        if ("C_local[" in line and "+=" in line) or re.search(r"vstore\d+\(C_local,", line)
    ]
    assert tile and not any("//" in line or "%" in line for line in tile)
    assert "d0_ = " in source
    a = np.random.default_rng(0).standard_normal((12, 100, 64)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((12, 64, 100)).astype(np.float32)
    np.testing.assert_allclose(dyn(a, b), a @ b, rtol=1e-4, atol=1e-4)
