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

The register tile reads the target (see ``search_spaces._gemm``, where the
nest's knobs, default and schedule live; this module re-exports them): with
AVX2's 8 lanes and 16 registers up to 12 accumulators, with AVX-512's 16 lanes
and 32 registers up to 28.

Transposed operands keep the same register tile. ``trans_b`` reads B as
``[N, K]`` (a PyTorch ``Linear`` weight, attention's keys): packing copies it
into the same ``[NC/NR][KC][NR]`` panels, so the tile's inner loop still
loads NR adjacent values of B per k (unpacked, it would gather them with a
stride of K). ``trans_a`` reads A as ``[K, M]``: the tile's MR values of A for
one k are then adjacent, and packing A makes its panels contiguous too.

``epilogue`` (``search_spaces._epilogue``, float dtypes only) fuses
elementwise steps after the product (a bias ``add@c``, a residual ``add@f``,
an activation), a channel being a column of ``C`` (a row with
``channels="rows"``: a 1 x 1 convolution's output channels, computed as
``W[K, C] @ X[C, H*W]``): the output is then a stage
``Y`` that computes ``C`` one ``MC x NC`` block at a time while it is in
cache (:func:`search_spaces._gemm.blocked_output`), with the same knobs.

:func:`register_blocked` applies this nest to any stage that is a sum of
products over one reduction axis, so ``batch_matmul`` (with a batch loop
outside) and ``dense`` (computed inside its epilogue's loops) reuse it.

>>> avx2 = Target.make("cpu", vector_lanes=8, vector_registers=16)
>>> space = config_space(512, 512, 512, target=avx2)
>>> s, tensors = schedule(space.sample(np.random.default_rng(0)), 512, 512, 512)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tuner import te
from tuner.schedule import Schedule
from tuner.space import ConfigSpace
from tuner.target import Target
from tuner.te import Tensor

from . import _int8 as int8_dot
from ._cuda import is_gpu
from ._cuda import matmul as gpu
from ._epilogue import NONE, PARAM_DOC, apply_numpy, check_epilogue
from ._epilogue import parse as parse_epilogue
from ._gemm import (
    RESERVED_REGISTERS,
    GemmLoops,
    Packing,
    accumulator_budget,
    accumulator_lanes,
    balanced_nc_tiles,
    blocked_output,
    default_k_unroll,
    define_gemm_knobs,
    gemm_default,
    kc_choices,
    mr_choices,
    nr_choices,
    operand_packing,
    output_stage,
    pack_panels,
    register_blocked,
    tile_registers,
)
from ._matmul_parallel import EPILOGUE_BLOCK_COLUMNS, parallel_rows
from ._target import parallel_pays, resolve

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
    a: np.ndarray,
    b: np.ndarray,
    trans_a: bool = False,
    trans_b: bool = False,
    epilogue: str = NONE,
    extras: Sequence[np.ndarray] = (),
    channels: str = "cols",
) -> np.ndarray:
    """The product (float64 sums for an epilogue, applied to ``extras`` in float64 too)."""
    acc = np.int32 if a.dtype == np.int8 else a.dtype
    a = a.T if trans_a else a
    b = b.T if trans_b else b
    if epilogue == NONE:
        return a.astype(acc) @ b.astype(acc)
    y = a.astype(np.float64) @ b.astype(np.float64)
    y = apply_numpy(epilogue, y, extras, channel_axis=_CHANNEL_AXIS[channels] % 2)
    return y.astype(parse_epilogue(epilogue).out_dtype(np.dtype(acc).name))


def flops(M: int, N: int, K: int, epilogue: str = NONE) -> float:
    """Multiply-adds, and one operation per output per epilogue step."""
    return 2.0 * M * N * K + parse_epilogue(epilogue).flops(M * N)


# -- the matmul operator -----------------------------------------------------------------------


def config_space(
    M: int,
    N: int,
    K: int,
    dtype: str = "float32",
    trans_a: bool = False,
    trans_b: bool = False,
    target: Target | None = None,
    epilogue: str = NONE,
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

    With an epilogue, ``epilogue_at`` computes the product an ``MC x NC`` block
    ("block") or an ``MC x NR`` panel ("panel") at a time before the epilogue
    reads it back (see :func:`search_spaces._gemm.blocked_output`).
    """
    sp = ConfigSpace()
    define_gemm_knobs(sp, M, N, K, resolve(target), dtype)
    sp.define_knob("pack_b", [True, False])
    sp.define_knob("parallel", [True, False])
    sp.define_knob("pack_a", [True, False], absent=None if trans_a else False)
    sp.define_knob("pack_a_at", ["block", "once"], absent="block")
    sp.define_knob("parallel_at", ["cols", "rows"], absent="cols")
    sp.add_constraint(
        lambda c: c["parallel"] or c["parallel_at"] == "cols",
        "parallel_at only matters when the nest runs in parallel",
    )
    sp.add_constraint(
        lambda c: c["parallel_at"] == "cols" or not c["pack_a"] or c["pack_a_at"] == "once",
        "row blocks run in parallel with A packed once or not at all",
    )
    if epilogue != NONE:
        sp.define_knob("epilogue_at", ["block", "panel"], absent="block")
    sp.add_constraint(
        lambda c: c["pack_a"] or c["pack_a_at"] == "block",
        "pack_a_at only matters when A is packed",
    )
    if trans_b:
        sp.add_constraint(
            lambda c: c["pack_b"], "a transposed B is packed (unpacked it is gathered)"
        )
    if dtype == "int8" and int8_dot.supported(resolve(target)):
        _int8_dot_knob(sp, K)
    return sp.freeze()


def _int8_dot_knob(sp: ConfigSpace, K: int) -> None:
    """``int8_dot``: the nest of ``search_spaces._int8`` (the target's int8 dot product).

    Its operands are always packed its own way, and column blocks run in
    parallel, so the packing knobs keep one value there.
    """
    sp.define_knob("int8_dot", [True, False], absent=False)
    sp.add_constraint(
        lambda c: (
            not c["int8_dot"] or (c["pack_b"] and not c["pack_a"] and c["parallel_at"] == "cols")
        ),
        "the int8 dot nest packs its operands itself, in parallel column blocks",
    )
    sp.add_constraint(
        lambda c: not c["int8_dot"] or int8_dot.blocks_fit(c, K),
        "KC is whole groups of 4 bytes of K, and k_unroll divides its groups",
    )


def default_config(
    M: int,
    N: int,
    K: int,
    trans_a: bool = False,
    dtype: str = "float32",
    target: Target | None = None,
    epilogue: str = NONE,
) -> dict[str, Any]:
    """A decent schedule without tuning (12-accumulator tile, KC <= 512, B packed, parallel).

    A transposed A is packed too: its MR values per k are adjacent, but one k
    to the next is a stride of M, a cache line per k otherwise. An epilogue
    reads panels back where one row block holds every row (B's panels are
    then packed once anyway), blocks otherwise: on two threads, bias and clip
    on the rows, 96 x 12544 x 16 took 0.43 ms by panels against 0.76 by
    blocks (0.48 without the epilogue), 1280 x 49 x 320 0.43 against 0.40.
    """
    tgt = resolve(target)
    if dtype == "int8" and int8_dot.supported(tgt):
        return int8_dot.dot_default(M, N, K, tgt)
    cfg = {**gemm_default(M, N, K, target, dtype), "pack_b": True}
    cfg["parallel"] = parallel_pays(M * N * K, tgt)
    cfg["pack_a"] = trans_a
    cfg.update(parallel_rows(M, N, K, cfg, tgt, dtype))
    if epilogue != NONE:
        rows_per_block = int(cfg["mr"]) * int(cfg["mc_tiles"])
        cfg["epilogue_at"] = "panel" if rows_per_block >= M else "block"
        if cfg.get("parallel_at", "cols") == "cols":
            threads = tgt.threads or int(tgt.get("cores", 1))
            cfg["nc_tiles"] = balanced_nc_tiles(
                N, int(cfg["nr"]), threads, narrowest=EPILOGUE_BLOCK_COLUMNS
            )
    return cfg


def schedule(
    cfg: Mapping[str, Any],
    M: int,
    N: int,
    K: int,
    dtype: str = "float32",
    trans_a: bool = False,
    trans_b: bool = False,
    epilogue: str = NONE,
    channels: str = "cols",
) -> tuple[Schedule, list[Tensor]]:
    """The schedule for ``cfg`` (validate configs from outside against config_space first).

    With an epilogue the output is a stage ``Y`` after the product ``C``, the
    nest computing ``C`` one ``MC x NC`` block at a time inside ``Y``'s block
    loops (see :func:`search_spaces._gemm.blocked_output`); the knobs are the same.
    """
    if cfg.get("int8_dot", False):
        return int8_dot.schedule(cfg, M, N, K, resolve(None), trans_a, trans_b)
    A, B, C = define(M, N, K, dtype, trans_a, trans_b)
    steps = parse_epilogue(epilogue)
    extras, Y = output_stage(C, steps, _CHANNEL_AXIS[channels]) if steps else ([], C)
    s = te.create_schedule(Y)
    panel = cfg.get("epilogue_at", "block") == "panel"
    outer, nc, y_rows = blocked_output(s, Y, C, cfg, panel) if steps else ([], None, None)
    rows = cfg.get("parallel_at", "cols") == "rows"
    pack_a = operand_packing(A, trans_a, "A") if cfg["pack_a"] else None
    once = cfg.get("pack_a_at", "block") == "once"
    loops = register_blocked(
        s,
        C,
        cfg,
        pack_a=None if once else pack_a,
        pack_b=operand_packing(B, trans_b, "B") if cfg["pack_b"] else None,
        nc=nc,
    )
    if once and pack_a is not None:
        pack_panels(s, pack_a, C, int(cfg["mr"]), parallel=cfg["parallel"])
    if cfg["parallel"]:
        if outer:
            s[Y].parallel(y_rows if rows and y_rows is not None else outer[-1])
        else:
            s[C].parallel(loops.io if rows else loops.jo)
    return s, [A, B, *extras, Y]


def _register() -> None:
    from . import Operator, Param, register_operator

    register_operator(
        Operator(
            name="matmul",
            doc="C = A @ B with A: M x K, B: K x N (int8 inputs give an int32 C);"
            " trans_a / trans_b take A as K x M / B as N x K",
            params=(
                Param("M", int, doc="rows of A and C", pad=0.0),
                Param("N", int, doc="columns of B and C", pad=0.0),
                Param("K", int, doc="columns of A, rows of B", pad=0.0),
                Param("dtype", str, "float32", ("float32", "float64", "int8")),
                Param("trans_a", bool, False, doc="A is given as K x M (C = A.T @ B)"),
                Param("trans_b", bool, False, doc="B is given as N x K (C = A @ B.T)"),
                Param("epilogue", str, NONE, doc=PARAM_DOC + " (float dtypes only)"),
                Param(
                    "channels",
                    str,
                    "cols",
                    ("cols", "rows"),
                    doc="the axis of C an epilogue's per-channel (@c) inputs run along",
                ),
            ),
            space=_space,
            schedule=_schedule,
            default_config=_default,
            reference=_registry_reference,
            flops=lambda a: flops(a["M"], a["N"], a["K"], _epi(a)),
            check=lambda a: check_epilogue(_epi(a), a["dtype"], "matmul"),
        )
    )


def _space(a: Mapping[str, Any], target: Target) -> ConfigSpace:
    if is_gpu(target):
        return gpu.config_space(a["M"], a["N"], a["K"], a["dtype"], target)
    return config_space(
        a["M"], a["N"], a["K"], a["dtype"], a["trans_a"], a["trans_b"], target, _epi(a)
    )


def _schedule(
    cfg: Mapping[str, Any], a: Mapping[str, Any], target: Target
) -> tuple[Schedule, list[Tensor]]:
    if cfg.get("int8_dot", False):
        return int8_dot.schedule(cfg, a["M"], a["N"], a["K"], target, a["trans_a"], a["trans_b"])
    if is_gpu(target):
        A, B, C = define(a["M"], a["N"], a["K"], a["dtype"], a["trans_a"], a["trans_b"])
        steps = parse_epilogue(_epi(a))
        if not steps:
            return gpu.schedule(cfg, A, B, C)
        extras, Y = output_stage(C, steps, _CHANNEL_AXIS[str(a.get("channels", "cols"))])
        return gpu.schedule(cfg, A, B, C, extras, Y)
    return schedule(
        cfg,
        a["M"],
        a["N"],
        a["K"],
        a["dtype"],
        a["trans_a"],
        a["trans_b"],
        _epi(a),
        str(a.get("channels", "cols")),
    )


def _default(a: Mapping[str, Any], target: Target) -> dict[str, Any]:
    if is_gpu(target):
        return gpu.default_config(a["M"], a["N"], a["K"], target)
    return default_config(a["M"], a["N"], a["K"], a["trans_a"], a["dtype"], target, _epi(a))


def _registry_reference(*arrays: np.ndarray, **args: Any) -> np.ndarray:
    """``reference(*inputs, **parsed_args)`` as the registry calls it (the flags are args)."""
    a, b, *extras = arrays
    return reference(
        a,
        b,
        trans_a=bool(args.get("trans_a", False)),
        trans_b=bool(args.get("trans_b", False)),
        epilogue=_epi(args),
        extras=extras,
        channels=str(args.get("channels", "cols")),
    )


#: The axis of C an epilogue's channel runs along.
_CHANNEL_AXIS = {"cols": -1, "rows": -2}


def _epi(args: Mapping[str, Any]) -> str:
    """The epilogue argument (absent where the caller passes the arguments of an old log)."""
    return str(args.get("epilogue", NONE))


_register()
