"""int8 matmul through the target's int8 dot product (x86 VNNI's ``vpdpbusd``).

The instruction multiplies unsigned bytes by signed ones, four at a time, into
int32 lanes (``tuner.schedule.intrin``). A product of two signed int8 matrices
reaches it by shifting A into the unsigned range and correcting with B's
column sums::

    A @ B = (A + 128) @ B - 128 * sum_k B[k, :]

As stages (``Kp`` is K rounded up to whole groups of 4)::

    Au[im, k4, ir, q]   = uint8(A[im MR + ir, 4 k4 + q] + 128), 0 past K   once, MR-row panels
    Bp[jn, k4, jr, q]   = B[4 k4 + q, jn NR + jr], 0 past K   NC x KC at ko, NR-wide panels
    Bs[j]               = sum_k int32(B[k, j])                once, before the nest
    P[i, j]             = sum_k int32(Au[i / MR, k / 4, i % MR, k % 4])
                               * int32(Bp[j / NR, k / 4, j % NR, k % 4])
    C[i, j]             = P[i, j] - 128 * Bs[j]

A uint8 ``A`` whose K is whole groups of 4 has no ``Au``: ``P`` reads its bytes where they
are (a row's 4 bytes of a group are contiguous there too). A quantized model's int8
activations become uint8 for this (``tuner.graph.quantized.unsigned_activations``).

``P`` is the GotoBLAS nest of ``search_spaces._gemm`` with its reduction split
into groups of 4 and its register tile's vectors tensorized: each step of a
tile row is one ``vpdpbusd`` per vector, the 4 bytes of A broadcast and 64 of
B (16 columns x 4 k) loaded from the panel. ``C`` reads each ``MC x NC``
block of ``P`` back while it is in cache (:func:`_gemm.blocked_output`).
B's zero padding makes the groups past K add nothing, whatever Au holds there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tuner import te
from tuner.lower.intrin import dot_intrinsic, intrinsic
from tuner.schedule import Schedule
from tuner.target import Target
from tuner.te import Tensor

from ._epilogue import NONE
from ._epilogue import parse as parse_epilogue
from ._gemm import (
    accumulator_budget,
    balanced_nc_tiles,
    blocked_output,
    kc_choices,
    mr_choices,
    nr_choices,
    register_blocked,
    tile_cost,
    tile_registers,
)

__all__ = [
    "DEPTH",
    "arguments",
    "blocks_fit",
    "define",
    "dot_default",
    "pack_panels",
    "schedule",
    "supported",
    "unpack_panels",
]

#: Bytes of A and B per int32 lane and step of the instruction.
DEPTH = 4
#: The shift that makes int8 values unsigned bytes.
_SHIFT = 128


def supported(target: Target) -> bool:
    """Whether ``target`` has an int8 dot product as wide as its int32 vectors."""
    return dot_intrinsic(target) is not None


def padded(K: int) -> int:
    return -(-K // DEPTH) * DEPTH


def define(
    M: int,
    N: int,
    K: int,
    mr: int,
    nr: int,
    trans_a: bool = False,
    trans_b: bool = False,
    a_dtype: str = "int8",
    zero_point: bool = False,
    epilogue: str = NONE,
    colsums: bool = False,
    b_panels: bool = False,
) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """``A``, ``B`` and the stages (``Au``, ``Bp``, ``Bs``, ``P``, ``C``) of the module docstring.

    ``a_dtype`` uint8 reads A's bytes as they are (no shift). With ``zero_point`` a
    placeholder ``AZ`` (one value of A's dtype) is subtracted from A:
    ``C = P - (shift + AZ) * Bs``. With ``colsums`` B's column sums are an input ``BS``
    (int32, a constant weight's, summed once at compile time) instead of a stage summed at
    each call. An ``epilogue`` (``search_spaces._epilogue``) runs on
    ``float32(C)``; its extra inputs ``E0``... are float32 and ``C`` is float32, or the
    integer type of a quantizing last step. With ``b_panels`` B is given as ``Bp`` would
    be (a constant weight laid out once: :func:`pack_panels`), and there is no ``Bp``.
    """
    A = te.placeholder((K, M) if trans_a else (M, K), a_dtype, name="A")
    Kp = padded(K)
    panels = -(-N // nr)
    if b_panels:
        B = te.placeholder((panels, Kp // DEPTH, nr, DEPTH), "int8", name="B")
    else:
        B = te.placeholder((N, K) if trans_b else (K, N), "int8", name="B")
    shift = _SHIFT if a_dtype == "int8" else 0

    def a_at(i: Any, k: Any) -> te.Expr:
        return A[k, i] if trans_a else A[i, k]

    def b_at(k: Any, j: Any) -> te.Expr:
        if b_panels:
            return B[j // nr, k // DEPTH, j % nr, k % DEPTH]
        return B[j, k] if trans_b else B[k, j]

    def last(x: Any, n: int) -> te.Expr:
        return te.minimum(x, n - 1)

    def shifted(i: Any, k: Any) -> te.Expr:
        if not shift:
            return a_at(i, k)
        return (a_at(i, k).astype("int32") + shift).astype("uint8")

    # Guards only where K leaves a ragged group or N a ragged panel: a guarded copy runs
    # scalar. Rows past M (in A's last panel) repeat its last row: no tile stores them.
    def a_group(im: Any, k4: Any, ir: Any, q: Any) -> te.Expr:
        i, k = last(im * mr + ir, M), k4 * DEPTH + q
        if Kp == K:
            return shifted(i, k)
        return te.if_then_else(k < K, shifted(i, last(k, K)), te.const(0, "uint8"))

    # Unsigned bytes in whole groups of 4 along a row are read where they are: each step
    # broadcasts 4 contiguous bytes of a row, as from a panel.
    in_place = not trans_a and not shift and Kp == K
    Au = None if in_place else te.compute((-(-M // mr), Kp // DEPTH, mr, DEPTH), a_group, name="Au")

    def a_byte(i: Any, k: Any) -> te.Expr:
        if Au is None:
            return A[i, k]
        return Au[i // mr, k // DEPTH, i % mr, k % DEPTH]

    def b_group(jn: Any, k4: Any, jr: Any, q: Any) -> te.Expr:
        k, j = k4 * DEPTH + q, jn * nr + jr
        if Kp == K and panels * nr == N:
            return b_at(k, j)
        inside = (k < K) & (j < N)
        return te.if_then_else(inside, b_at(last(k, K), last(j, N)), te.const(0, "int8"))

    Bp = B if b_panels else te.compute((panels, Kp // DEPTH, nr, DEPTH), b_group, name="Bp")
    r = te.reduce_axis(K, name="r")
    if colsums:
        Bs = te.placeholder((N,), "int32", name="BS")
    else:
        Bs = te.compute((N,), lambda j: te.sum(b_at(r, j).astype("int32"), axis=r), name="Bs")
    k = te.reduce_axis(Kp, name="k")
    P = te.compute(  # whole column panels: B's padding makes the columns past N zeros
        (M, panels * nr),
        lambda i, j: te.sum(
            a_byte(i, k).astype("int32")
            * Bp[j // nr, k // DEPTH, j % nr, k % DEPTH].astype("int32"),
            axis=k,
        ),
        name="P",
    )
    stages = {"Bs": Bs, "P": P}
    if Au is not None:
        stages["Au"] = Au
    if not b_panels:
        stages["Bp"] = Bp
    if zero_point:
        stages["AZ"] = te.placeholder((1,), a_dtype, name="AZ")
    steps = parse_epilogue(epilogue)
    extras = steps.placeholders(N, (M, N))

    def corrected(i: Any, j: Any) -> te.Expr:
        z: te.Expr | int = shift
        if zero_point:
            z = stages["AZ"][0].astype("int32") + shift
        if isinstance(z, int) and z == 0:
            return P[i, j]
        return P[i, j] - z * Bs[j]

    def output(i: Any, j: Any) -> te.Expr:
        if not steps:
            return corrected(i, j)
        return steps.apply(corrected(i, j).astype("float32"), j, (i, j), extras)

    C = te.compute((M, N), output, name="C")
    return A, B, {**stages, **{e.name: e for e in extras}, "C": C}


def pack_panels(b: np.ndarray, nr: int) -> np.ndarray:
    """A ``[K, N]`` int8 matrix as ``Bp`` holds it: ``[ceil(N/nr)][Kp/4][nr][4]``, zeros past
    K and N (what a model stores for a constant weight, once)."""
    K, N = b.shape
    Kp, panels = padded(K), -(-N // nr)
    wide = np.zeros((Kp, panels * nr), np.int8)
    wide[:K, :N] = b
    return np.ascontiguousarray(wide.reshape(Kp // DEPTH, DEPTH, panels, nr).transpose(2, 0, 3, 1))


def unpack_panels(p: np.ndarray, K: int, N: int) -> np.ndarray:
    """The ``[K, N]`` matrix of panels made by :func:`pack_panels`."""
    panels, groups, nr, depth = p.shape
    return p.transpose(1, 3, 0, 2).reshape(groups * depth, panels * nr)[:K, :N]


def arguments(st: Mapping[str, Tensor], A: Tensor, B: Tensor) -> list[Tensor]:
    """The kernel's arguments: A, B, (AZ,) (BS,) the epilogue's inputs E0..., C."""
    extras = sorted(
        (n for n in st if n.startswith("E") and n[1:].isdigit()), key=lambda n: int(n[1:])
    )
    given = [st["AZ"]] if "AZ" in st else []
    given += [st["Bs"]] if st["Bs"].name == "BS" else []
    return [A, B, *given, *(st[n] for n in extras), st["C"]]


def blocks_fit(cfg: Mapping[str, Any], K: int) -> bool:
    """KC is whole groups of 4 bytes, and ``k_unroll`` (in groups) divides every block."""
    kc, unroll = int(cfg["kc"]), int(cfg.get("k_unroll", 1))
    if kc % DEPTH:
        return False
    Kp = padded(K)
    return unroll == 1 or (Kp % kc == 0 and (kc // DEPTH) % unroll == 0)


#: Register tiles of the dot nest, rows x vectors, and their efficiency: each step loads
#: the row's vectors of B once and broadcasts one group of A per row.
_DOT_TILES = ((12, 2, 1.0), (8, 3, 1.0), (6, 4, 0.95), (4, 3, 0.8), (4, 2, 0.7))


def dot_default(M: int, N: int, K: int, target: Target) -> dict[str, Any]:
    """A tile of :data:`_DOT_TILES` that leaves the least work on edges, KC <= 1024 bytes.

    At 1024^3 on two threads (AVX-512, 16 lanes), 12 x 32 with NC 128 and KC
    1024 took 2.8 ms, 8 x 48 (whose panels do not divide 1024) 3.4 ms, 6 x 64
    3.7. A panel of 1024 groups of 32 columns is 32 KiB, within L1.
    """
    lanes = target.lanes("int32")
    budget = accumulator_budget(target)
    tiles = [
        (rows, vectors * lanes, e)
        for rows, vectors, e in _DOT_TILES
        if vectors * lanes in nr_choices(target)
        and tile_registers(rows, vectors * lanes, lanes) <= budget
        and rows in mr_choices(target)
    ]
    fitting = [t for t in tiles if t[0] <= M and t[1] <= 2 * N + lanes]
    if fitting:
        mr, nr, _ = min(fitting, key=lambda t: tile_cost(M, N, *t))
    else:
        mr, nr = min(M, max(m for m in mr_choices(target) if m <= budget)), lanes
    Kp = padded(K)
    whole = [c for c in kc_choices(K) if c % DEPTH == 0]
    single = [c for c in whole if Kp <= c <= 1024]
    # Else whole blocks: a ragged last block bounds the reduction loop, which ran the
    # nest at a third of its speed (784 x 128 x 1152: KC 512 0.38 ms a third... KC 384).
    dividing = [c for c in whole if c <= 1024 and Kp % c == 0]
    kc = min(single) if single else max(dividing or [c for c in whole if c <= 512])
    unroll = next((u for u in (2, 1) if blocks_fit({"kc": kc, "k_unroll": u}, K)), 1)
    threads = target.threads or target.cores
    return {
        "mr": mr,
        "nr": nr,
        "kc": kc,
        "k_unroll": unroll,
        "mc_tiles": 16,
        "nc_tiles": balanced_nc_tiles(N, nr, threads, widest=128),
        "pack_b": True,
        "pack_a": False,
        "pack_a_at": "block",
        "parallel": threads > 1,
        "parallel_at": "cols",
        "int8_dot": True,
    }


def schedule(
    cfg: Mapping[str, Any],
    M: int,
    N: int,
    K: int,
    target: Target,
    trans_a: bool = False,
    trans_b: bool = False,
    a_dtype: str = "int8",
    zero_point: bool = False,
    epilogue: str = NONE,
    colsums: bool = False,
    b_panels: bool = False,
) -> tuple[Schedule, list[Tensor]]:
    """The nest of the module docstring for ``cfg`` (the matmul space's knobs); the
    arguments of :func:`define` after the target. ``int8_dot`` False (or a target without
    the instruction refused by the caller) runs the same nest on int32 vectors."""
    intrin = dot_intrinsic(target) if cfg.get("int8_dot", True) else None
    if cfg.get("int8_dot", True) and intrin is None:
        raise ValueError(f"target {target} has no int8 dot product (int8_dot_bits)")
    mr, nr = int(cfg["mr"]), int(cfg["nr"])
    A, B, st = define(
        M, N, K, mr, nr, trans_a, trans_b, a_dtype, zero_point, epilogue, colsums, b_panels
    )
    Bs, P, C = st["Bs"], st["P"], st["C"]
    s = te.create_schedule(C)
    lanes = target.lanes("int32")
    dot = intrinsic(intrin) if intrin else None
    # matmul's int8 configs name no p_at: the root where a column edge would meet a tile.
    if cfg.get("p_at", "root" if N % nr else "block") == "root":
        # The product first, whole panels wide (its tiles never meet a column edge, which
        # would run them as plain loops), then C reads it back.
        loops = register_blocked(s, P, cfg, dot=dot)
        i, j = s[C].op.axis
        _, jv = s[C].split(j, factor=lanes)
        s[C].unroll(jv)
        if cfg["parallel"]:
            rows_first = cfg.get("parallel_at", "cols") == "rows"
            s[P].parallel(loops.io if rows_first else loops.jo)
            s[C].parallel(i)
    else:
        outer, nc, rows = blocked_output(s, C, P, cfg)
        loops = register_blocked(s, P, cfg, nc=nc, dot=dot)
        _, jvi = s[C].split(s[C].leaf_axes[-1], factor=lanes)
        s[C].unroll(jvi)
        if cfg["parallel"]:  # column blocks, or row blocks (each packs its own panels of B)
            s[C].parallel(rows if cfg.get("parallel_at", "cols") == "rows" else outer[-1])
    # Integer code is vectorized by LLVM's SLP pass here (the kernel has register tiles),
    # which needs straight-line code: one vector's lanes of the correction (above), and one
    # 64-byte group of a panel (16 columns x 4 rows of B), unrolled in the source.
    if "Bp" in st:
        Bp = st["Bp"]
        s[Bp].compute_at(s[P], loops.ko)
        *_, jr, q = s[Bp].op.axis
        _, jri = s[Bp].split(jr, factor=lanes)
        s[Bp].unroll(jri)
        s[Bp].unroll(q)
    if "Au" in st:  # once for all column blocks, in row panels
        Au = st["Au"]
        im, *_, qa = s[Au].op.axis
        s[Au].unroll(qa)
        if cfg["parallel"]:
            s[Au].parallel(im)
    if colsums:
        return s, arguments(st, A, B)
    (j,) = s[Bs].op.axis
    (r,) = s[Bs].op.reduce_axis
    if not trans_b and not b_panels:  # B's rows are contiguous: sum them into a vector
        jo, ji = s[Bs].split(j, factor=16 * lanes)
        s[Bs].reorder(jo, r, ji)
        s[Bs].vectorize(ji)
        if cfg["parallel"]:
            s[Bs].parallel(jo)
    elif cfg["parallel"]:
        s[Bs].parallel(j)
    return s, arguments(st, A, B)
