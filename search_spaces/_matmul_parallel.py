"""Where matmul's default runs its threads: column blocks or row blocks, and how wide.

The register tile and cache blocks come from ``_gemm.gemm_default``; these rules
then place the parallel loop for the shape and the thread count (see
``matmul.default_config``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner.target import Target

from ._gemm import (
    accumulator_budget,
    blocks,
    busiest_share,
    nr_choices,
    tile_registers,
)

__all__ = ["EPILOGUE_BLOCK_COLUMNS", "ROW_BLOCK_TILES", "WHOLE_ROWS_TILES", "parallel_rows"]


#: The narrowest column block of a nest whose epilogue reads it back (default config): an
#: epilogue over blocks one 32-column panel wide (128 bytes of each row of the output and
#: the residual) ran at a third of the nest's speed on two threads, and slower than on
#: one (512 x 784 x 128, bias, residual and relu on the rows, AMD Zen 4, 6 x 32 tiles,
#: 96-row blocks: 2.30 ms on two threads, 1.55 on one; two panels a block: 0.86 and
#: 1.46; without the epilogue one panel was as fast as two). Blocks of 48 columns
#: (one panel of a 4 x 48 tile) kept their speed.
EPILOGUE_BLOCK_COLUMNS = 48


def parallel_rows(
    M: int, N: int, K: int, cfg: Mapping[str, Any], target: Target, dtype: str = "float32"
) -> dict[str, Any]:
    """Row blocks in parallel (and one column block) where they share the work out better
    than column blocks do: a few dozen columns over many rows (a pointwise convolution of a
    7 x 7 or 14 x 14 image), K one block (B is packed before the parallel loop, by one
    thread). Two threads, bias and clip on the rows, rows against columns: 1280 x 49 x 320
    0.53 against 0.61 ms, 576 x 196 x 96 0.32 against 0.41; with K = 4608 (9 blocks of B
    packed serially) rows lost, 3.1 against 2.5. The row blocks are the size that shares
    the rows out most evenly: 256 rows of 6-row tiles in blocks of 96 left one thread
    two blocks of three, as column blocks of 128 over 196 columns did.
    """
    threads = target.threads or int(target.get("cores", 1))
    if threads < 2 or cfg.get("pack_a") or not cfg.get("parallel", True):
        return {}
    if dtype == "float32":  # measured for float32 only
        whole = _row_blocks_over_narrow_columns(M, N, cfg, target, threads)
        if whole:
            return whole
    mr, nr = int(cfg["mr"]), int(cfg["nr"])
    cover = -(-N // nr)  # column panels: one block of them all
    if cover * nr > 256 or int(cfg["kc"]) < K:
        return {}  # B's one panel block is packed by one thread: cheap only when small
    by_cols = busiest_share(blocks(N, nr * int(cfg["nc_tiles"])), threads)
    # The row block that shares the rows out most evenly (the largest of equals).
    shares = {t: busiest_share(blocks(M, mr * t), threads) for t in ROW_BLOCK_TILES}
    mc_tiles = min(shares, key=lambda t: (shares[t], -t))
    if shares[mc_tiles] >= by_cols - 0.05:
        return {}
    tiles = next(t for t in (1, 2, 4, 8, 16) if t * nr >= N or t == 16)
    return {"parallel_at": "rows", "nc_tiles": tiles, "mc_tiles": mc_tiles}


#: Row blocks the parallel-rows default chooses among, in register tiles (MC / MR).
ROW_BLOCK_TILES = (4, 8, 16, 24, 32)


#: The row block of :func:`_row_blocks_over_narrow_columns`: 32 tiles of 4 rows.
_WHOLE_ROWS_TILE, WHOLE_ROWS_TILES = 4, 32


def _row_blocks_over_narrow_columns(
    M: int, N: int, cfg: Mapping[str, Any], target: Target, threads: int
) -> dict[str, Any]:
    """Blocks of 128 rows in parallel over one block of all the columns, with a tile of
    4 rows of 3 vectors, where column blocks would be one panel wide (the most even
    split of a few hundred columns) and 128-row blocks share the rows out evenly.

    One-panel column blocks with an epilogue ran far below the nest's speed on two
    threads (AVX2), and a tuning run on ResNet-50 found row blocks for each of its
    14 x 14 products. Defaults against this, interleaved rounds, medians: with bias
    (and residual and relu) on the rows, 1024 x 196 x 256 2.49 against 0.77 ms,
    1024 x 196 x 512 3.83 against 1.38, 256 x 196 x 2304 2.07 against 1.54,
    512 x 196 x 1024 1.49 against 1.39, 480 x 196 x 80 0.235 against 0.180,
    256 x 196 x 1024 0.77 against 0.75; without an epilogue 1.93 against 1.64
    (256 x 196 x 2304) and even (1024 x 196 x 256). With 6 x 16 tiles the same
    blocks split 1024 rows 6 : 5 and lost to these at every shape. A single block
    of 128 rows (M = 128) stays on column blocks: rows lost there, 0.48 against 0.54.
    """
    lanes = target.vector_lanes
    mr, nr = _WHOLE_ROWS_TILE, 3 * lanes
    rows = mr * WHOLE_ROWS_TILES
    cover = -(-N // nr) * nr
    if (
        int(cfg["nc_tiles"]) != 1
        or nr not in nr_choices(target)
        or tile_registers(mr, nr, lanes) > accumulator_budget(target)
        or cover > 256
        or busiest_share(blocks(M, rows), threads) > 1 / threads + 0.05
    ):
        return {}
    tiles = next((t for t in (1, 2, 4, 8, 16) if t * nr >= N), None)
    if tiles is None:
        return {}
    return {
        "mr": mr,
        "nr": nr,
        "mc_tiles": WHOLE_ROWS_TILES,
        "nc_tiles": tiles,
        "parallel_at": "rows",
    }
