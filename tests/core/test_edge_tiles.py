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


def _versions(text: str) -> tuple[str, str]:
    """The full tile's version and the edge tiles' (the first ``if`` and its ``else``)."""
    start = text.index("if (")
    indent = text[:start].rsplit("\n", 1)[1]
    split = text.index(f"\n{indent}else:", start)
    return text[start:split], text[split:]


def test_edge_tile_computes_the_whole_tile_with_clamped_reads() -> None:
    s, args, _ = _blocked(9, 21, 16)
    _, edge = _versions(str(tuner.lower(s, args)))
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
    """The edge version runs where the full version's condition (13 - 8 * j_o >= 8) fails,
    so its start (at the first reduction block), its copies in and out run ``13 - 8 * j_o``
    columns, not ``min(8, 13 - 8 * j_o)``: the renderer would write a loop of 8 for the
    latter that never runs there."""
    s, args, ref = _blocked(8, 13, 16)
    full, edge = _versions(str(tuner.lower(s, args)))
    assert "range(8):" in full and "range(min(" not in full
    assert "range(min(" not in edge and edge.count("range(((0 - (8 * j_o)) + 13)):") == 3, edge
    _run(s, args, ref, 8, 13, 16)


def test_a_tile_whose_reduction_fits_one_block_starts_at_zero() -> None:
    """K within one KC block: the tile starts its sums itself; nothing zeroes C first and
    nothing loads it (C starts as NaN: a sum that read it would be NaN)."""
    s, args, ref = _blocked(13, 21, 8)
    lines = [line.strip() for line in str(tuner.lower(s, args)).splitlines()]
    assert "C_local[i, j] = 0.0" in lines
    assert not any(line.startswith("C[") and line.endswith("= 0.0") for line in lines)
    assert not any("= C[" in line for line in lines)
    _run(s, args, ref, 13, 21, 8)


def test_a_tile_starts_its_sums_at_the_first_reduction_block_only() -> None:
    s, args, ref = _blocked(13, 21, 20)  # K in blocks of 8, 8 and 4
    text = str(tuner.lower(s, args))
    assert "if (k_o < 1):" in text
    lines = [line.strip() for line in text.splitlines()]
    assert not any(line.startswith("C[") and line.endswith("= 0.0") for line in lines)
    _run(s, args, ref, 13, 21, 20)


def test_a_bound_on_a_loop_outside_the_tile_that_a_reduction_sets_keeps_the_init() -> None:
    """The reduction's blocks split again by a factor that does not divide them: the
    bound on the inner block loop could skip a tile at the first block, so C is zeroed
    first and every tile loads its partial sums."""
    (A, B), C, ref = matmul(9, 16, 40)
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    (r,) = s[C].op.reduce_axis
    ib, ir = s[C].split(i, factor=4)
    jb, jv = s[C].split(j, factor=8)
    ko, ki = s[C].split(r, factor=8)
    koo, koi = s[C].split(ko, factor=2)  # 5 blocks in pairs: the last pair has one
    s[C].reorder(koo, koi, ib, jb, ki, ir, jv)
    CL = s.cache_write(C, "local")
    s[CL].compute_at(s[C], jb)
    text = str(tuner.lower(s, [A, B, C]))
    assert "k_o_i < 1" not in text and "= 0.0" in text
    _run(s, [A, B, C], ref, 9, 16, 40)


def test_a_strided_tile_loads_its_partial_sums() -> None:
    """Columns split by 2 with the outer part inside the tile: the tile at j_i = 0 holds
    columns 0 and 2 in a box of three; started at zero it would store a zero over column 1."""
    (A, B), C, ref = matmul(1, 3, 1)
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    (r,) = s[C].op.reduce_axis
    jo, ji = s[C].split(j, factor=2)
    s[C].reorder(i, ji, r, jo)
    CL = s.cache_write(C, "local")
    s[CL].compute_at(s[C], r)
    _run(s, [A, B, C], ref, 1, 3, 1)
