"""Edge tiles of a register block: computed whole, with reads clamped, and still exact."""

from __future__ import annotations

import numpy as np
import pytest

import tuner
from tuner import te

from .ops import matmul


def _blocked(m: int, n: int, k: int, mr: int = 4, nr: int = 8, mc: int = 8, kc: int = 8):  # type: ignore[no-untyped-def]
    """C's rows split into MC blocks of MR tiles, columns into NR tiles, K into KC blocks."""
    (A, B), C, ref = matmul(m, n, k)
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    (r,) = s[C].op.reduce_axis
    io, ii = s[C].split(i, factor=mc)
    ib, ir = s[C].split(ii, factor=mr)
    jb, jv = s[C].split(j, factor=nr)
    ko, ki = s[C].split(r, factor=kc)
    s[C].reorder(ko, io, jb, ib, ki, ir, jv)
    CL = s.cache_write(C, "local")
    s[CL].compute_at(s[C], ib)
    s[C].vectorize(jv)
    return s, [A, B, C], ref


def _run(s, args, ref, m: int, n: int, k: int) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = np.full((m, n), np.nan, np.float32)
    tuner.build(s, args)(a, b, c)
    np.testing.assert_allclose(c, ref(a, b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "m, n, k",
    [
        (9, 21, 10),  # a row tile wholly past the edge (rows 12-15), ragged columns and K
        (13, 8, 16),  # ragged rows only
        (8, 13, 3),  # ragged columns, K shorter than its block
        (1, 1, 1),
    ],
)
def test_edge_tiles_match_numpy(m: int, n: int, k: int) -> None:
    s, args, ref = _blocked(m, n, k)
    _run(s, args, ref, m, n, k)


def test_edge_tile_computes_the_whole_tile_with_clamped_reads() -> None:
    s, args, _ = _blocked(9, 21, 16)
    text = str(tuner.lower(s, args))
    edge = text[text.index("else:") :]
    compute = edge[edge.index("for k_i") :]
    compute = compute[: compute.index("\n", compute.index("+="))]
    # Constant extents (unrolled and vectorized by LLVM), not min(4, rows left).
    assert "for i_i_i in range(4):" in compute
    assert "for j_i in range(8):" in compute
    # A's row is clamped to the last valid one; B's column likewise.
    assert compute.count("min(") == 2, compute


def test_tile_wider_than_the_tensor_keeps_bounded_loops() -> None:
    """Its local buffer is clipped to the tensor, so the whole tile would not fit in it."""
    s, args, ref = _blocked(5, 3, 7, nr=8)
    text = str(tuner.lower(s, args))
    assert "min(j_i" not in text
    _run(s, args, ref, 5, 3, 7)


def test_max_reduction_edge_tiles() -> None:
    A = te.placeholder((7, 11), "float32", name="A")
    r = te.reduce_axis(11, name="r")
    M = te.compute((7, 5), lambda i, j: te.max(A[i, r] * (j + 1), axis=r), name="M")
    s = te.create_schedule(M)
    i, j = s[M].op.axis
    io, jo, ii, ji = s[M].tile(i, j, 4, 4)
    (rr,) = s[M].op.reduce_axis
    s[M].reorder(io, jo, rr, ii, ji)
    ML = s.cache_write(M, "local")
    s[ML].compute_at(s[M], jo)
    a = np.random.default_rng(1).standard_normal((7, 11), dtype=np.float32)
    out = np.zeros((7, 5), np.float32)
    tuner.build(s, [A, M])(a, out)
    expected = (a[:, :, None] * np.arange(1, 6, dtype=np.float32)).max(axis=1)
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_an_edge_tile_copies_in_loops_of_the_columns_it_holds() -> None:
    """The edge version runs where the full version's condition (13 - 8 * j_o >= 8) fails, so
    its copies in and out run ``13 - 8 * j_o`` columns, not ``min(8, 13 - 8 * j_o)``:
    the renderer would write a loop of 8 for the latter that never runs there."""
    s, args, ref = _blocked(8, 13, 16)
    text = str(tuner.lower(s, args))
    tile = text[text.index("if (") :]  # (the zeroing before the tiles runs min(8, ...))
    full, edge = tile[: tile.index("else:")], tile[tile.index("else:") :]
    assert "range(8):" in full and "range(min(" not in full
    assert "range(min(" not in edge and edge.count("range(((0 - (8 * j_o)) + 13)):") == 2, edge
    _run(s, args, ref, 8, 13, 16)
