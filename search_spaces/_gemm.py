"""The GotoBLAS loop nest that matmul, batch_matmul and dense share: knobs, default, schedule.

What OpenBLAS does by hand, as schedule steps over any stage that is a sum of
products over one reduction axis (see ``matmul`` for the nest as a picture)::

    for jo in N / NC:
      for ko in K / KC:
        pack B[ko, jo] into [NC/NR][KC][NR] panels      (if B is packed)
        for io in M / MC:
          pack A[io, ko] into [MC/MR][KC][MR] panels    (if A is packed here)
          for jb in NC / NR:
            for ib in MC / MR:
              MR x NR register tile, += over KC, k_unroll steps a trip

The register tile reads the target: NR is one to four vectors of its float32
lanes, and the tile's accumulators fit its vector registers less four (kept
for the B vectors and the A broadcast), MR running up to what that budget
holds with two vectors a row. With AVX2's 8 lanes and 16 registers that is
12 accumulators (6x16, 4x24, 3x32 ...); with AVX-512's 16 lanes and 32
registers 28 (14x32, 12x32, 8x48, 6x64 ...).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tuner import te
from tuner.schedule import Schedule
from tuner.schedule.intrin import TensorIntrin
from tuner.schedule.schedule import AxisRef
from tuner.space import ConfigSpace
from tuner.target import Target
from tuner.te import Tensor
from tuner.te.expr import Const

from ._epilogue import Epilogue
from ._target import resolve

__all__ = [
    "RESERVED_REGISTERS",
    "GemmLoops",
    "Packing",
    "accumulator_budget",
    "accumulator_lanes",
    "blocked_output",
    "blocks",
    "busiest_share",
    "default_k_unroll",
    "define_gemm_knobs",
    "gemm_default",
    "kc_choices",
    "mr_choices",
    "nr_choices",
    "operand_packing",
    "output_stage",
    "pack_panels",
    "register_blocked",
    "tile_cost",
    "tile_registers",
]

#: Vector registers a register tile leaves for the B vectors and the A broadcast.
RESERVED_REGISTERS = 4


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
    sp.add_constraint(  # the int8 dot nest unrolls groups of 4 (search_spaces._int8)
        lambda c: c.get("int8_dot", False) or _unroll_fits(c["k_unroll"], c["kc"], K),
        "k_unroll divides every block of K",
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


def tile_cost(M: int, N: int, mr: int, nr: int, efficiency: float) -> float:
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
    mr, nr, _ = min(tiles, key=lambda t: tile_cost(M, N, *t))
    if nr > 2 * N + tgt.vector_lanes:  # wider than the matrix (see define_gemm_knobs)
        nr = widths[0]
    kc = -(-K // -(-K // 512))
    return {
        "mr": min(mr, M),
        "nr": nr,
        "kc": kc,
        "k_unroll": default_k_unroll(kc, K),
        "mc_tiles": 16,
        "nc_tiles": balanced_nc_tiles(N, nr, tgt.threads or int(tgt.get("cores", 1))),
    }


def busiest_share(sizes: Sequence[int], threads: int) -> float:
    """The share of the work the busiest thread gets when ``threads`` take contiguous runs
    of blocks of ``sizes`` (``tuner.codegen.cpu.threads.chunks``): 1 / threads at best."""
    from tuner.codegen.cpu.threads import chunks

    runs = chunks(len(sizes), max(1, threads))
    return max(sum(sizes[a:b]) for a, b in runs) / max(1, sum(sizes))


def blocks(n: int, size: int) -> list[int]:
    """``n`` cut into blocks of ``size`` (the last one shorter)."""
    return [min(size, n - lo) for lo in range(0, n, size)]


def balanced_nc_tiles(N: int, nr: int, threads: int, widest: int = 256, narrowest: int = 0) -> int:
    """NC / NR for a nest whose ``jo`` loop (N / NC blocks) runs in parallel: the widest
    block of at most ``widest`` columns that leaves no thread with more columns than
    narrower blocks would.

    Threads take contiguous runs of blocks (``tuner.codegen.cpu.threads.chunks``), so
    one block of 256 columns over a matrix of 196 leaves the second core idle: the
    product of a ResNet-50 3 x 3 convolution as a matmul, 256 x 196 x 2304, took
    3.76 ms with NC 256 and 2.10 with NC 16 on two threads; 2048 x 49 x 512 took
    1.59 ms with NC 256 and 0.92 with NC 32.

    ``narrowest``: no block narrower than this many columns where wider ones
    still give every thread a block, for a nest whose epilogue reads each
    block back (see ``matmul.default_config``).
    """
    from tuner.codegen.cpu.threads import chunks

    def busiest(t: int) -> int:
        nc = t * nr
        cols = [min(nc, N - lo) for lo in range(0, N, nc)]
        return max(sum(cols[a:b]) for a, b in chunks(len(cols), max(1, threads)))

    fits = [t for t in (1, 2, 4, 8, 16) if t == 1 or t * nr <= widest]
    wide = [t for t in fits if t * nr >= narrowest and -(-N // (t * nr)) >= threads]
    fits = wide or fits
    least = min(busiest(t) for t in fits)
    return max(t for t in fits if busiest(t) == least)


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
    dot: TensorIntrin | None = None,
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

    With ``dot`` (a tensor intrinsic, ``search_spaces._int8``) the tile's k loop
    runs over groups of ``dot.depth`` and each of its vectors is one ``dot``:
    ``for k4: for ir: for jvo: dot(jvi, q)``; ``k_unroll`` counts groups.
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
    if dot is not None:
        ki, q = s[C].split(ki, factor=dot.depth)
        jvo, jvi = s[C].split(jv, factor=dot.lanes)
        s[C].reorder(ki, ir, jvo, jvi, q)
    unroll = int(cfg.get("k_unroll", 1))
    if unroll > 1:
        ki, ku = s[C].split(ki, factor=unroll)
        s[C].unroll(ku)  # copies of the whole MR x NR update, one per k step
    CL = s.cache_write(C, "local")
    s[CL].compute_at(s[C], ib)
    if dot is None and C.dtype == "float32" and isinstance(C.shape[-1], Const):
        # The tile's loads and stores of C (partial sums across KC blocks) in whole vectors
        # too, not scalar loops for LLVM to unroll and pack (its SLP pass was a quarter of
        # a build's LLVM time).
        s[CL].vectorize(s[CL].op.axis[-1])
    for packing, at, tile in ((pack_b, ko, nr), (pack_a, io, mr)):
        if packing is not None:
            pack_panels(s, packing, C, tile, at=at)
    if dot is None:
        s[C].vectorize(jv)
    else:
        s[C].tensorize(jvi, dot.name)
        if nr > dot.lanes:
            s[C].unroll(jvo)
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


def output_stage(
    C: Tensor, epilogue: Epilogue, channel_axis: int = -1
) -> tuple[list[Tensor], Tensor]:
    """The epilogue's extra inputs and the output ``Y = epilogue(C)``.

    The channel of an element is its column (``C``'s last dim), as a Linear's
    output features, or its row with ``channel_axis=-2`` (a 1 x 1 convolution
    as ``W[K, C] @ X[C, H*W]``); a ``@f`` input has ``C``'s shape.
    """
    # ints, or symbolic extents for a generic kernel
    shape: tuple[Any, ...] = tuple(int(d.value) if isinstance(d, Const) else d for d in C.shape)
    extras = epilogue.placeholders(shape[channel_axis], shape, C.dtype)
    Y = te.compute(shape, lambda *i: epilogue.apply(C[i], i[channel_axis], i, extras), name="Y")
    return extras, Y


def blocked_output(
    s: Schedule, Y: Tensor, C: Tensor, cfg: Mapping[str, Any], panel: bool = False
) -> tuple[list[AxisRef], int, AxisRef]:
    """Compute ``C`` block by block inside the epilogue ``Y``'s loops, while it is in cache.

    ``Y``'s columns and rows are cut as the nest's NC and MC blocks; ``C``'s
    nest (:func:`register_blocked`, to be called next) covers one ``MC x NC``
    block at ``io``, and the epilogue reads the block back from L2, row by
    row, ``NR`` lanes at a time::

        for jo in N / NC:                     # returned: Y's outer axes (a batch) and jo
          for io in M / MC:
            C's nest on this MC x NC block
            for ii in MC:
              for jb in NC / NR:
                for jv in NR:                 # vectorized
                  Y = epilogue(C)

    With ``panel`` the piece is an ``MC x NR`` panel at ``jb`` instead, read
    back from L1 (dense's ``epilogue_at="panel"``); B's panel is then packed
    once per row block.

    Returns ``Y``'s outer loops (a batch, then ``jo``), the piece's width,
    ``min(NC, N)`` or NR: the ``nc`` to pass to :func:`register_blocked`, so
    that a matrix narrower than NC runs no empty column panels, and ``io``.
    """
    mr, nr = int(cfg["mr"]), int(cfg["nr"])
    mc, nc = mr * int(cfg["mc_tiles"]), nr * int(cfg["nc_tiles"])
    *outer, i, j = s[Y].op.axis
    jo, ji = s[Y].split(j, factor=nc)
    jb, jv = s[Y].split(ji, factor=nr)
    io, ii = s[Y].split(i, factor=mc)
    if panel:
        ib, ir = s[Y].split(ii, factor=mr)
        s[Y].reorder(*outer, jo, io, jb, ib, ir, jv)
    else:
        s[Y].reorder(*outer, jo, io, ii, jb, jv)
    s[Y].vectorize(jv)
    s[C].compute_at(s[Y], jb if panel else io)
    width = Y.shape[-1]  # a symbolic width (a generic kernel's) gets whole NC blocks
    piece = min(nc, int(width.value)) if isinstance(width, Const) else nc
    return [*outer, jo], nr if panel else piece, io
