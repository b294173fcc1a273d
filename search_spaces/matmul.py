"""Matmul ``C[M, N] = A[M, K] @ B[K, N]``: definition, NumPy reference, knobs, schedule.

The schedule space is the GotoBLAS loop nest (what OpenBLAS does by hand)::

    pack A into [M/MR][K][MR] panels                    (if pack_a, at "once")
    for jo in N / NC:                  # parallel across cores if chosen
      for ko in K / KC:
        pack B[ko, jo] into [NC/NR][KC][NR] panels      (if pack_b)
        for io in M / MC:
          pack A[io, ko] into [MC/MR][KC][MR] panels    (if pack_a, at "block")
          for jb in NC / NR:
            for ib in MC / MR:
              MR x NR register tile, loaded from C, += over KC (k_unroll steps a trip), stored back

The knobs pick MR, NR, KC, MC and NC, the k loop's unrolling, whether B and
A are packed (and A where), and whether ``jo`` runs in parallel; a constraint
keeps the register tile within the target's vector registers. int8 inputs
accumulate in int32.

The register tile reads the target: NR is one to four vectors of its float32
lanes, and the tile's accumulators fit its vector registers less four (kept
for the B vectors and the A broadcast), MR running up to what that budget
holds with two vectors a row. With AVX2's 8 lanes and 16 registers that is
12 accumulators (6x16, 4x24, 3x32 ...); with AVX-512's 16 lanes and 32
registers 28 (14x32, 12x32, 8x48, 6x64 ...).

Transposed operands keep the same register tile. ``trans_b`` reads B as
``[N, K]`` (a PyTorch ``Linear`` weight, attention's keys): packing copies it
into the same ``[NC/NR][KC][NR]`` panels, so the tile's inner loop still
loads NR adjacent values of B per k (unpacked, it would gather them with a
stride of K). ``trans_a`` reads A as ``[K, M]``: the tile's MR values of A for
one k are then adjacent, and packing A makes its panels contiguous too.

:func:`register_blocked` applies this nest to any stage that is a sum of
products over one reduction axis, so ``batch_matmul`` (with a batch loop
outside) and ``dense`` (computed inside its epilogue's loops) reuse it.

>>> avx2 = Target.make("cpu", vector_lanes=8, vector_registers=16)
>>> space = config_space(512, 512, 512, target=avx2)
>>> s, tensors = schedule(space.sample(np.random.default_rng(0)), 512, 512, 512)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuner import te
from tuner.schedule import Schedule
from tuner.schedule.schedule import AxisRef
from tuner.space import ConfigSpace
from tuner.target import Target
from tuner.te import Tensor

from ._target import resolve

__all__ = [
    "RESERVED_REGISTERS",
    "GemmLoops",
    "Packing",
    "accumulator_budget",
    "accumulator_lanes",
    "config_space",
    "default_config",
    "default_k_unroll",
    "define",
    "define_gemm_knobs",
    "flops",
    "gemm_default",
    "kc_choices",
    "mr_choices",
    "nr_choices",
    "operand_packing",
    "pack_panels",
    "reference",
    "register_blocked",
    "schedule",
    "tile_registers",
]

#: Vector registers a register tile leaves for the B vectors and the A broadcast.
RESERVED_REGISTERS = 4


def define(
    M: int,
    N: int,
    K: int,
    dtype: str = "float32",
    trans_a: bool = False,
    trans_b: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    """The tensors ``A`` (``[M, K]``, or ``[K, M]`` with trans_a), ``B`` and ``C``.

    ``B`` is ``[K, N]``, or ``[N, K]`` with trans_b; int8 inputs give an int32 ``C``.
    """
    A = te.placeholder((K, M) if trans_a else (M, K), dtype, name="A")
    B = te.placeholder((N, K) if trans_b else (K, N), dtype, name="B")
    k = te.reduce_axis(K, name="k")
    acc = "int32" if dtype == "int8" else dtype

    def body(i: Any, j: Any) -> te.Expr:
        a = A[k, i] if trans_a else A[i, k]
        b = B[j, k] if trans_b else B[k, j]
        return te.sum(a.astype(acc) * b.astype(acc), axis=k)

    C = te.compute((M, N), body, name="C")
    return A, B, C


def reference(
    a: np.ndarray, b: np.ndarray, trans_a: bool = False, trans_b: bool = False
) -> np.ndarray:
    acc = np.int32 if a.dtype == np.int8 else a.dtype
    a = a.T if trans_a else a
    b = b.T if trans_b else b
    return a.astype(acc) @ b.astype(acc)


def flops(M: int, N: int, K: int) -> float:
    return 2.0 * M * N * K


# -- the GotoBLAS nest, shared with batch_matmul and dense ------------------------------------


def kc_choices(K: int) -> list[int]:
    """Powers of two from 32 to 512, K itself up to 1024, and K cut into even blocks of <= 256 or 512.

    A KC that leaves a short last block runs that block's reduction loop with
    a bounded trip count (the register tile itself stays unrolled and vectorized).
    K itself (one pass, each tile loaded and stored once) won for dense with
    vectors along the batch: at 128 x 768 x 3072, KC 768 against 384 gave
    7.5 against 7.7 ms on one thread.
    """
    even = {-(-K // -(-K // block)) for block in (256, 512)}
    return sorted({32, 64, 128, 256, 512, *even, *([K] if K <= 1024 else [])})


def accumulator_budget(target: Target) -> int:
    """Vector registers the MR x NR accumulators may use: the target's less the reserved ones."""
    return max(1, target.vector_registers - RESERVED_REGISTERS)


def mr_choices(target: Target) -> list[int]:
    """1 to 6 and 8 rows, then even counts up to half the register budget.

    Half the budget is the rows of a tile two vectors wide. With 16 registers
    (a budget of 12) that adds nothing; with 32 (28) it adds 10, 12 and 14,
    so that 12x32 and 14x32 tiles of 16 lanes are there.
    """
    return sorted({1, 2, 3, 4, 5, 6, 8, *range(10, accumulator_budget(target) // 2 + 1, 2)})


def nr_choices(target: Target) -> list[int]:
    """One to four vectors of the target's float32 lanes (8, 16, 24, 32 with AVX2).

    float32 lanes whatever the dtype: a float64 tile's NR is two to eight of
    its (half as wide) vectors, as it always was.
    """
    return [target.vector_lanes * v for v in (1, 2, 3, 4)]


def tile_registers(mr: int, nr: int, lanes: int) -> int:
    """Vector registers an MR x NR accumulator tile of ``lanes``-lane vectors takes."""
    return mr * -(-nr // lanes)


def define_gemm_knobs(
    sp: ConfigSpace,
    M: int,
    N: int,
    K: int,
    target: Target,
    dtype: str = "float32",
    sizes: bool = True,
) -> None:
    """The register tile (MR x NR), its k loop's unrolling, the cache blocks (KC, MC, NC).

    Unrolling the tile's k loop (``k_unroll`` steps a trip) matters as much as
    blocking: at 1024^3, 6x16, KC 512 on two threads, medians of 41
    interleaved rounds against NumPy gave 0.90 not unrolled, 1.00 by 2, 1.02
    by 4 and by 8. LLVM unrolls the loop by itself only at times (it did
    inside a prange body, not in the same loop as a plain function). The
    unrolling must divide every block of K (see ``_unroll_fits``): a bounded
    trip is not unrolled. Configs of logs written before the knob read as
    not unrolled.

    The tile's MR and NR choices and its register budget come from the target
    (see :func:`mr_choices`, :func:`nr_choices`, :func:`accumulator_budget`),
    its vectors being ``dtype``'s accumulator's.

    ``sizes=False`` leaves out "tiles no larger than the matrix", for a caller
    whose tile may run along either axis (dense): it states its own.
    """
    lanes, budget = accumulator_lanes(dtype, target), accumulator_budget(target)
    sp.define_knob("mr", mr_choices(target))
    sp.define_knob("nr", nr_choices(target))
    sp.define_knob("kc", kc_choices(K))
    sp.define_knob("mc_tiles", [1, 2, 4, 8, 16, 24, 32])  # MC = mc_tiles * MR
    sp.define_knob("nc_tiles", [1, 2, 4, 8, 16, 32, 64])  # NC = nc_tiles * NR
    sp.define_knob("k_unroll", [1, 2, 4, 8], absent=1)
    sp.add_constraint(
        lambda c: _unroll_fits(c["k_unroll"], c["kc"], K), "k_unroll divides every block of K"
    )
    sp.add_constraint(
        lambda c: tile_registers(c["mr"], c["nr"], lanes) <= budget,
        f"the MR x NR accumulator tile fits {budget} vector registers of {lanes} lanes",
    )
    if sizes:
        narrowest = target.vector_lanes
        sp.add_constraint(
            lambda c: c["nr"] <= 2 * N + narrowest and c["mr"] <= M,
            "tiles no larger than the matrix",
        )


#: Default register tiles, in vectors per row, and their efficiency: 12 accumulators
#: keep both FMA units busy; 8 leave them idle a fifth of the time (latency 5, 2 a cycle).
_DEFAULT_TILES = ((6, 2, 1.0), (4, 3, 1.0), (4, 2, 0.8))


def accumulator_lanes(dtype: str, target: Target | None = None) -> int:
    """Lanes of one vector register for ``dtype``'s accumulator on ``target`` (the host's).

    int8 accumulates in int32 (as many lanes as float32); float64 has half as many.
    """
    return resolve(target).lanes(dtype)


def _tile_cost(M: int, N: int, mr: int, nr: int, efficiency: float) -> float:
    """Rough time of covering M x N with MR x NR tiles, an edge tile costing 8 full ones.

    Edge tiles compute their whole tile (rows and columns past the edge are
    thrown away), yet shapes that cover the matrix exactly stay measurably
    faster: at batch_matmul 12 x 128 x 128 x 64 on one thread, 6x16 (a ragged
    row tile per column panel) took 0.53 ms, 4x16 (none) 0.46 ms, NumPy 0.40.
    Before edge tiles were padded the figures were 0.46 and 0.35 ms.
    """
    full = (M // mr) * (N // nr)
    tiles = -(-M // mr) * -(-N // nr)
    return (full + 8 * (tiles - full)) * mr * nr / efficiency


def _unroll_fits(u: int, kc: int, K: int) -> bool:
    """Whether K is cut into whole blocks of KC, each a whole number of ``u`` steps.

    A block shorter than KC (the last one, or the only one when KC > K)
    bounds every unrolled trip of every block: the lowering bounds the
    innermost loop of a split, not its outer one.
    """
    return u == 1 or (K % kc == 0 and kc % u == 0)


def default_k_unroll(kc: int, K: int) -> int:
    """Unroll the tile's k loop by 4 (see ``define_gemm_knobs``), or by what fits K's blocks."""
    return next(u for u in (4, 2, 1) if _unroll_fits(u, kc, K))


def gemm_default(
    M: int, N: int, K: int, target: Target | None = None, dtype: str = "float32"
) -> dict[str, Any]:
    """A register tile of 8 or 12 accumulators, KC <= 512, NC <= 256 columns, MC 16 tiles.

    The tile is 6 rows of 2 vectors, 4 of 3 or 4 of 2 (6x16, 4x24 or 4x16 with
    AVX2's 8 lanes; 6x8 or 4x8 of 4-lane float64 vectors; 6x32 or 4x32 with
    AVX-512's 16), whichever leaves the least work on edge tiles for its
    efficiency (4x24 covers a batch of 128 rows and 3072 columns exactly);
    smaller matrices get the largest tile that fits them. The accumulators
    count, not the lanes: 12 keep two FMA units of latency 5 busy, whatever
    the width (the AVX-512 defaults are not measured yet; a target with fewer
    registers gets fewer rows). KC cuts K into even blocks of at most 512:
    at 1024^3, interleaved with NumPy (ratios to it, medians of 11 rounds),
    KC 512 against 256 gave 0.90 to 0.97 against 0.83 to 0.87 on one thread
    and 0.92 against 0.84 on two; fewer passes over C's tiles, and B's panel
    still streams from L2.
    """
    tgt = resolve(target)
    lanes, budget, widths = tgt.lanes(dtype), accumulator_budget(tgt), nr_choices(tgt)
    tiles = [
        (mr, v * lanes, e)
        for mr, v, e in _DEFAULT_TILES
        if v * lanes in widths and tile_registers(mr, v * lanes, lanes) <= budget
    ]
    if not tiles:  # fewer than 16 registers: the most rows of the narrowest tile
        rows = [m for m in mr_choices(tgt) if tile_registers(m, widths[0], lanes) <= budget]
        tiles = [(max(rows, default=1), widths[0], 1.0)]
    mr, nr, _ = min(tiles, key=lambda t: _tile_cost(M, N, *t))
    if nr > 2 * N + tgt.vector_lanes:  # wider than the matrix (see define_gemm_knobs)
        nr = widths[0]
    kc = -(-K // -(-K // 512))
    return {
        "mr": min(mr, M),
        "nr": nr,
        "kc": kc,
        "k_unroll": default_k_unroll(kc, K),
        "mc_tiles": 16,
        "nc_tiles": max(t for t in (1, 2, 4, 8, 16) if t == 1 or t * nr <= 256),
    }


@dataclass(frozen=True)
class Packing:
    """An operand to copy into register-tile panels: its tensor, its m (or n) and k dims."""

    tensor: Tensor
    tile_dim: int  # the dimension the register tile runs along (m for A, n for B)
    k_dim: int


def operand_packing(operand: Tensor, transposed: bool, which: str) -> Packing:
    """How to pack ``A`` (``[..., M, K]``) or ``B`` (``[..., K, N]``), either one maybe transposed."""
    last, before = operand.ndim - 1, operand.ndim - 2
    along_tile_last = (which == "A") == transposed  # A.T and B run along m / n in their last dim
    if along_tile_last:
        return Packing(operand, tile_dim=last, k_dim=before)
    return Packing(operand, tile_dim=before, k_dim=last)


@dataclass(frozen=True)
class GemmLoops:
    """The loops :func:`register_blocked` made, outermost first (see the module's nest)."""

    jo: AxisRef
    ko: AxisRef
    io: AxisRef
    jb: AxisRef
    ib: AxisRef
    ki: AxisRef
    ir: AxisRef
    jv: AxisRef


def register_blocked(
    s: Schedule,
    C: Tensor,
    cfg: Mapping[str, Any],
    *,
    outer: Sequence[AxisRef] = (),
    pack_a: Packing | None = None,
    pack_b: Packing | None = None,
    nc: int | None = None,
) -> GemmLoops:
    """Schedule ``C``'s last two spatial axes and its reduction as the GotoBLAS nest.

    ``outer`` are ``C``'s other spatial axes (a batch), kept outside the nest.
    The register tile is ``C``'s local cache at ``ib``; a packed B is copied
    at ``ko`` (a ``KC x NC`` block in ``[NC/NR][KC][NR]`` panels), a packed A at
    ``io`` (``[MC/MR][KC][MR]``). Called on a stage computed inside another
    stage's loops, the same nest covers just the region computed there; pass
    that region's width as ``nc`` when it is narrower than the config's NC (a
    split's inner loop runs to its factor, so a wider NC would run, and pack,
    empty column panels).
    """
    mr, nr, kc = int(cfg["mr"]), int(cfg["nr"]), int(cfg["kc"])
    mc = mr * int(cfg["mc_tiles"])
    nc = nc if nc is not None else nr * int(cfg["nc_tiles"])
    *_, i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    jo, ji = s[C].split(j, factor=nc)
    jb, jv = s[C].split(ji, factor=nr)
    ko, ki = s[C].split(k, factor=kc)
    io, ii = s[C].split(i, factor=mc)
    ib, ir = s[C].split(ii, factor=mr)
    s[C].reorder(*outer, jo, ko, io, jb, ib, ki, ir, jv)
    unroll = int(cfg.get("k_unroll", 1))
    if unroll > 1:
        ki, ku = s[C].split(ki, factor=unroll)
        s[C].unroll(ku)  # copies of the whole MR x NR update, one per k step
    CL = s.cache_write(C, "local")
    s[CL].compute_at(s[C], ib)
    for packing, at, tile in ((pack_b, ko, nr), (pack_a, io, mr)):
        if packing is not None:
            pack_panels(s, packing, C, tile, at=at)
    s[C].vectorize(jv)
    return GemmLoops(jo, ko, io, jb, ib, ki, ir, jv)


def pack_panels(
    s: Schedule,
    packing: Packing,
    consumer: Tensor,
    tile: int,
    *,
    at: AxisRef | None = None,
    parallel: bool = False,
) -> None:
    """Copy ``packing``'s operand into ``[tiles][K][tile]`` panels read by ``consumer``.

    At ``at`` (a loop of ``consumer``) the copy covers the block that loop's
    body reads; without it, the whole operand is packed once before
    ``consumer`` runs, its panels split among threads with ``parallel``.
    """
    P = s.cache_read(packing.tensor, "global", [consumer])
    if at is not None:
        s[P].compute_at(s[consumer], at)
    axes = s[P].op.axis
    to, ti = s[P].split(axes[packing.tile_dim], factor=tile)
    s[P].reorder(to, axes[packing.k_dim], ti)
    s[P].vectorize(ti)
    if parallel:
        s[P].parallel(to)


# -- the matmul operator -----------------------------------------------------------------------


def config_space(
    M: int,
    N: int,
    K: int,
    dtype: str = "float32",
    trans_a: bool = False,
    trans_b: bool = False,
    target: Target | None = None,
) -> ConfigSpace:
    """The knobs of the GotoBLAS nest on ``target`` (the host CPU when None).

    The register tile fits the target's vector registers less four (see
    :func:`define_gemm_knobs`).

    A transposed B read without packing gathers NR values at a stride of K for
    every k, so with ``trans_b`` B is always packed. Packing A matters most
    with ``trans_a`` (one k to the next is a stride of M, a cache line per k).
    An untransposed A is read as MR rows at a stride of K: at K = 1024 that is
    4 KiB, so the rows share one set of the L1 cache. Packed (once per NC
    block, so it pays with a wide NC), matmul 1024^3 on one thread went from
    66 to 76 GFLOP/s (6x16 tile, KC 512, MC 96, NC 512; NumPy 78); on the
    dense shape (M = 128) it was slower. Configs of logs written before the
    untransposed space had the knob read as ``pack_a=False``.

    ``pack_a_at``: "block" packs A's ``MC x KC`` block at ``io``, so each
    thread packs all of A once per column block; "once" packs all of A before
    the nest, split among the threads. At 1024^3 with k_unroll 4, 41 rounds
    against NumPy: 1.08 against 1.03 on two threads, 1.05 against 0.97 on one.
    The 200-trial tune of the benchmark suite chose "once".
    """
    sp = ConfigSpace()
    define_gemm_knobs(sp, M, N, K, resolve(target), dtype)
    sp.define_knob("pack_b", [True, False])
    sp.define_knob("parallel", [True, False])
    sp.define_knob("pack_a", [True, False], absent=None if trans_a else False)
    sp.define_knob("pack_a_at", ["block", "once"], absent="block")
    sp.add_constraint(
        lambda c: c["pack_a"] or c["pack_a_at"] == "block",
        "pack_a_at only matters when A is packed",
    )
    if trans_b:
        sp.add_constraint(
            lambda c: c["pack_b"], "a transposed B is packed (unpacked it is gathered)"
        )
    return sp.freeze()


def default_config(
    M: int,
    N: int,
    K: int,
    trans_a: bool = False,
    dtype: str = "float32",
    target: Target | None = None,
) -> dict[str, Any]:
    """A decent schedule without tuning (12-accumulator tile, KC <= 512, B packed, parallel).

    A transposed A is packed too: its MR values per k are adjacent, but one k
    to the next is a stride of M, a cache line per k otherwise.
    """
    cfg = {**gemm_default(M, N, K, target, dtype), "pack_b": True, "parallel": True}
    return {**cfg, "pack_a": trans_a}


def schedule(
    cfg: Mapping[str, Any],
    M: int,
    N: int,
    K: int,
    dtype: str = "float32",
    trans_a: bool = False,
    trans_b: bool = False,
) -> tuple[Schedule, list[Tensor]]:
    """The schedule for ``cfg`` (validate configs from outside against config_space first)."""
    A, B, C = define(M, N, K, dtype, trans_a, trans_b)
    s = te.create_schedule(C)
    pack_a = operand_packing(A, trans_a, "A") if cfg["pack_a"] else None
    once = cfg.get("pack_a_at", "block") == "once"
    loops = register_blocked(
        s,
        C,
        cfg,
        pack_a=None if once else pack_a,
        pack_b=operand_packing(B, trans_b, "B") if cfg["pack_b"] else None,
    )
    if once and pack_a is not None:
        pack_panels(s, pack_a, C, int(cfg["mr"]), parallel=cfg["parallel"])
    if cfg["parallel"]:
        s[C].parallel(loops.jo)
    return s, [A, B, C]


def _register() -> None:
    from . import Operator, Param, register_operator

    register_operator(
        Operator(
            name="matmul",
            doc="C = A @ B with A: M x K, B: K x N (int8 inputs give an int32 C);"
            " trans_a / trans_b take A as K x M / B as N x K",
            params=(
                Param("M", int, doc="rows of A and C"),
                Param("N", int, doc="columns of B and C"),
                Param("K", int, doc="columns of A, rows of B"),
                Param("dtype", str, "float32", ("float32", "float64", "int8")),
                Param("trans_a", bool, False, doc="A is given as K x M (C = A.T @ B)"),
                Param("trans_b", bool, False, doc="B is given as N x K (C = A @ B.T)"),
            ),
            space=lambda a, target: config_space(
                a["M"], a["N"], a["K"], a["dtype"], a["trans_a"], a["trans_b"], target
            ),
            schedule=lambda cfg, a, target: schedule(
                cfg, a["M"], a["N"], a["K"], a["dtype"], a["trans_a"], a["trans_b"]
            ),
            default_config=lambda a, target: default_config(
                a["M"], a["N"], a["K"], a["trans_a"], a["dtype"], target
            ),
            reference=_registry_reference,
            flops=lambda a: flops(a["M"], a["N"], a["K"]),
        )
    )


def _registry_reference(*arrays: np.ndarray, **args: Any) -> np.ndarray:
    """``reference(*inputs, **parsed_args)`` as the registry calls it (the flags are args)."""
    a, b = arrays
    return reference(
        a, b, trans_a=bool(args.get("trans_a", False)), trans_b=bool(args.get("trans_b", False))
    )


_register()
