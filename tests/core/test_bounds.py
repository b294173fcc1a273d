"""Bounds inference when several stages computed in one loop read each other."""

from __future__ import annotations

import numpy as np
import pytest

import tuner
from tuner import te
from tuner.schedule import ScheduleError


def _stages():  # type: ignore[no-untyped-def]
    A = te.placeholder((4, 8), "float32", name="A")
    B = te.compute((4, 8), lambda i, j: A[i, j] + 1, name="B")
    k = te.reduce_axis(8, name="k")
    P = te.compute((4,), lambda i: te.sum(B[i, k], axis=k), name="P")
    C = te.compute((4,), lambda i: P[i] + B[i, 7], name="C")
    return A, B, P, C


def test_a_stage_read_by_a_sibling_covers_the_siblings_reads() -> None:
    """C reads one column of B, P (computed beside B) the whole row: B's row is computed."""
    A, B, P, C = _stages()
    s = te.create_schedule(C)
    s[B].compute_at(s[C], s[C].op.axis[0])
    s[P].compute_at(s[C], s[C].op.axis[0])
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    c = np.full(4, np.nan, np.float32)
    tuner.build(s, [A, C])(a, c)
    b = a + 1
    np.testing.assert_allclose(c, b.sum(1) + b[:, 7])


def test_a_sibling_deeper_in_the_loop_widens_the_region_too() -> None:
    A = te.placeholder((6, 8), "float32", name="A")
    B = te.compute((6, 8), lambda i, j: A[i, j] * 2, name="B")
    k = te.reduce_axis(8, name="k")
    P = te.compute((6,), lambda i: te.max(B[i, k], axis=k), name="P")
    C = te.compute((6, 8), lambda i, j: B[i, 0] - P[i] + j, name="C")
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=2)
    s[B].compute_at(s[C], io)
    s[P].compute_at(s[C], ii)
    a = np.random.default_rng(0).standard_normal((6, 8)).astype(np.float32)
    c = np.full((6, 8), np.nan, np.float32)
    tuner.build(s, [A, C])(a, c)
    b = a * 2
    np.testing.assert_allclose(c, b[:, :1] - b.max(1, keepdims=True) + np.arange(8), rtol=1e-6)


def test_a_sibling_at_an_outer_loop_cannot_read_a_stage_computed_inside() -> None:
    A = te.placeholder((6, 8), "float32", name="A")
    B = te.compute((6, 8), lambda i, j: A[i, j] * 2, name="B")
    k = te.reduce_axis(8, name="k")
    P = te.compute((6,), lambda i: te.max(B[i, k], axis=k), name="P")
    C = te.compute((6, 8), lambda i, j: B[i, j] - P[i], name="C")
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=2)
    s[B].compute_at(s[C], ii)
    s[P].compute_at(s[C], io)
    with pytest.raises(
        ScheduleError, match="P reads B at loop i_o, outside the loop B is computed in"
    ):
        tuner.lower(s, [A, C])


def test_a_reader_nested_inside_a_sibling_gets_its_box_not_the_whole_tensor() -> None:
    """Lane partials inside a row sum read one row of B: B is computed one row at a time."""
    A = te.placeholder((4, 8), "float32", name="A")
    B = te.compute((4, 8), lambda i, j: A[i, j] + 1, name="B")
    k = te.reduce_axis(2, name="k")
    part = te.compute((4, 4), lambda i, lane: te.sum(B[i, 4 * k + lane], axis=k), name="part")
    m = te.reduce_axis(4, name="m")
    P = te.compute((4,), lambda i: te.sum(part[i, m], axis=m), name="P")
    C = te.compute((4, 8), lambda i, j: B[i, j] / P[i], name="C")
    s = te.create_schedule(C)
    row = s[C].op.axis[0]
    s[B].compute_at(s[C], row)
    s[P].compute_at(s[C], row)
    s[part].compute_at(s[P], s[P].op.axis[0])
    assert "for B_i in range(1):" in str(tuner.lower(s, [A, C]))
    a = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    c = np.full((4, 8), np.nan, np.float32)
    tuner.build(s, [A, C])(a, c)
    b = a + 1
    np.testing.assert_allclose(c, b / b.sum(1, keepdims=True), rtol=1e-5)


def _row_softmax_like(m: int, n: int):  # type: ignore[no-untyped-def]
    A = te.placeholder((m, n), "float32", name="A")
    B = te.compute((m, n), lambda i, j: te.exp(A[i, j]), name="B")
    k = te.reduce_axis(n, name="k")
    P = te.compute((m,), lambda i: te.sum(B[i, k], axis=k), name="P")
    C = te.compute((m, n), lambda i, j: B[i, j] / P[i], name="C")

    def ref(a: np.ndarray) -> np.ndarray:
        e = np.exp(a)
        return e / e.sum(1, keepdims=True)

    return A, B, P, C, ref


def test_a_stage_computed_at_a_loop_gets_a_buffer_the_size_of_its_region() -> None:
    """B computed per block of 3 rows is a 3 x 8 buffer, indexed relative to the block."""
    A, B, P, C, ref = _row_softmax_like(7, 8)
    s = te.create_schedule(C)
    io, ii = s[C].split(s[C].op.axis[0], factor=3)  # 7 rows: the last block holds one
    s[B].compute_at(s[C], io)
    s[P].compute_at(s[C], ii)
    text = str(tuner.lower(s, [A, C]))
    assert "B = allocate(float32[3, 8]" in text and "P = allocate(float32[1]" in text
    assert "float32[7, 8]" not in text.replace("# A: float32[7, 8]", "").replace(
        "# C: float32[7, 8]", ""
    )
    a = np.random.default_rng(1).standard_normal((7, 8)).astype(np.float32)
    c = np.full((7, 8), np.nan, np.float32)
    tuner.build(s, [A, C])(a, c)
    np.testing.assert_allclose(c, ref(a), rtol=1e-5)


@pytest.mark.usefixtures("two_threads")
def test_region_buffers_inside_a_parallel_loop_are_per_iteration() -> None:
    """Threads computing different rows never share a region buffer."""
    A, B, P, C, ref = _row_softmax_like(37, 19)
    s = te.create_schedule(C)
    io, ii = s[C].split(s[C].op.axis[0], factor=4)
    s[B].compute_at(s[C], ii)
    s[P].compute_at(s[C], ii)
    s[C].parallel(io)
    a = np.random.default_rng(2).standard_normal((37, 19)).astype(np.float32)
    c = np.full((37, 19), np.nan, np.float32)
    for _ in range(3):
        tuner.build(s, [A, C])(a, c)
        np.testing.assert_allclose(c, ref(a), rtol=1e-5)


def test_a_stage_that_a_cache_copies_keeps_its_whole_buffer() -> None:
    """A cache_read copy addresses its source by absolute index, so B is not cut to its region."""
    A, B, P, C, ref = _row_softmax_like(5, 12)
    s = te.create_schedule(C)
    row = s[C].op.axis[0]
    s[B].compute_at(s[C], row)
    s[P].compute_at(s[C], row)
    BB = s.cache_read(B, "global", [C])
    s[BB].compute_at(s[C], row)
    assert "B = allocate(float32[5, 12]" in str(tuner.lower(s, [A, C]))
    a = np.random.default_rng(3).standard_normal((5, 12)).astype(np.float32)
    c = np.full((5, 12), np.nan, np.float32)
    tuner.build(s, [A, C])(a, c)
    np.testing.assert_allclose(c, ref(a), rtol=1e-5)


@pytest.mark.parametrize("threads", [False, True])
def test_a_register_tiled_stage_computed_at_a_loop_gets_its_region(threads: bool, request) -> None:  # type: ignore[no-untyped-def]
    """C's register tile (cache_write) loads and stores back relative to C's block buffer.

    C (a product, 11 x 13) is computed per block of 5 of Y's columns, tiled 3 x 4
    with edge tiles on both axes; Y = C + 1 reads the block back.
    """
    if threads:
        request.getfixturevalue("two_threads")
    A = te.placeholder((11, 6), "float32", name="A")
    B = te.placeholder((6, 13), "float32", name="B")
    k = te.reduce_axis(6, name="k")
    C = te.compute((11, 13), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    Y = te.compute((11, 13), lambda i, j: C[i, j] + 1.0, name="Y")
    s = te.create_schedule(Y)
    yi, yj = s[Y].op.axis
    block, inner = s[Y].split(yj, factor=5)
    s[Y].reorder(block, yi, inner)
    if threads:
        s[Y].parallel(block)
    s[C].compute_at(s[Y], block)
    ci, cj = s[C].op.axis
    io, ii = s[C].split(ci, factor=3)
    jo, ji = s[C].split(cj, factor=4)
    s[C].reorder(io, jo, s[C].op.reduce_axis[0], ii, ji)
    CL = s.cache_write(C, "local")
    s[CL].compute_at(s[C], jo)
    text = str(tuner.lower(s, [A, B, Y]))
    assert "C = allocate(float32[11, 5]" in text
    rng = np.random.default_rng(4)
    a = rng.standard_normal((11, 6)).astype(np.float32)
    b = rng.standard_normal((6, 13)).astype(np.float32)
    y = np.full((11, 13), np.nan, np.float32)
    tuner.build(s, [A, B, Y])(a, b, y)
    np.testing.assert_allclose(y, a @ b + 1, rtol=1e-5, atol=1e-5)


def test_a_block_index_divided_back_covers_one_block() -> None:
    """C reads P[c // 4, c % 4] with c split by 4: P computed at the block loop is one block.

    The inner loop's range proves ``(4*co + ci) // 4 == co``; without it the whole of
    P (every block) was computed at each block.
    """
    A = te.placeholder((12, 5), "float32", name="A")
    P = te.compute((3, 5, 4), lambda b, h, ci: A[b * 4 + ci, h] * 3, name="P")
    C = te.compute((12, 5), lambda c, h: P[c // 4, h, c % 4] + 1, name="C")
    s = te.create_schedule(C)
    c, h = s[C].op.axis
    co, ci = s[C].split(c, factor=4)
    s[C].reorder(co, h, ci)
    s[P].compute_at(s[C], co)
    f = tuner.build(s, [A, C])
    assert "np.empty(20, np.float32)" in f.source or "stack_empty(20," in f.source
    a = np.random.default_rng(1).standard_normal((12, 5)).astype(np.float32)
    out = np.full((12, 5), np.nan, np.float32)
    f(a, out)
    np.testing.assert_allclose(out, a * 3 + 1, rtol=1e-6)
