"""``matmul_integer``: ONNX's MatMulInteger, int8 or uint8 ``A`` times int8 ``B`` into int32,
with a float epilogue that may end by quantizing (what a quantized model's layers compute).

::

    C[i, j] = sum_k (int32(A[i, k]) - int32(AZ[0])) * int32(B[k, j])           # int32
    C[i, j] = epilogue(float32(that))                                          # with an epilogue

``AZ`` is A's zero point (a one-element input of A's type: a constant of a
statically quantized model, computed at run time by a dynamic one). B's zero
point is zero (symmetric weights, what ``onnxruntime.quantization`` writes);
``B`` is ``[K, N]``, or ``[N, K]`` with ``trans_b``. A quantized model's
convolutions reach it channels-last, as ``A = X[H*W, C]`` (or its windows,
``im2col_nhwc``) times ``B = W[C*R*S, K]``; its epilogue scales by the two
operands' scales, adds the bias, applies the activation and quantizes
(``quant_int8:<scale>:<zero_point>``: the output is int8).

A model's constant weight comes laid out in the register tile's panels (``b_panels``,
``_int8.pack_panels``, once at compile time), which the kernel reads as they are; a
``B`` of ``[K, N]`` is packed into them at every call (a pass over B for each block of rows).

The nest is ``search_spaces._int8``'s: on a target with an int8 dot product (x86 VNNI)
each register-tile step is one ``vpdpbusd`` per vector, A's bytes taken as they
are when they are uint8 and shifted into that range when int8; the zero point
and the shift cost one multiply-add per output, by B's column sums. Elsewhere
(``int8_dot`` False) the same nest runs on int32 vectors.

>>> from search_spaces import get_operator
>>> op = get_operator("matmul_integer")
>>> args = op.parse_args({"M": 196, "N": 256, "K": 1024, "a_dtype": "uint8"})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tuner.schedule import Schedule
from tuner.space import ConfigSpace
from tuner.target import Target
from tuner.te import Tensor

from . import Operator, OperatorError, Param, register_operator
from . import _int8 as int8_dot
from ._epilogue import NONE, PARAM_DOC
from ._epilogue import parse as parse_epilogue
from ._gemm import (
    accumulator_budget,
    blocks,
    busiest_share,
    define_gemm_knobs,
    mr_choices,
    nr_choices,
)
from ._matmul_parallel import ROW_BLOCK_TILES
from ._target import resolve

__all__ = ["config_space", "default_config", "reference", "schedule"]


def reference(
    a: np.ndarray,
    b: np.ndarray,
    az: np.ndarray,
    *extras: np.ndarray,
    trans_b: bool = False,
    epilogue: str = NONE,
    colsums: bool = False,
    b_panels: int = 0,
    K: int = 0,
    N: int = 0,
) -> np.ndarray:
    """The exact int32 product of the zero-point-shifted A and B; an epilogue on its float32.

    With ``b_panels`` B is given in panels (``_int8.pack_panels``) of a ``K x N`` matrix.

    With ``colsums`` the first extra is ``BS``, taken as B's column sums: the product is
    computed as the kernel does, ``sum_k u(A) B - (shift + AZ) * BS`` (``u(A)`` A itself
    for uint8, ``A + 128`` for int8), which is the product where BS is what it says.
    """
    if b_panels:
        b = int8_dot.unpack_panels(b, K, N)
    b = b.T if trans_b else b
    zero = np.int64(az.reshape(-1)[0])
    if colsums:
        sums, *rest = extras
        extras = tuple(rest)
        shift = 128 if a.dtype == np.int8 else 0
        acc = (a.astype(np.int64) + shift) @ b.astype(np.int64)
        acc = acc - (shift + zero) * np.asarray(sums, np.int64).reshape(1, -1)
    else:
        acc = (a.astype(np.int64) - zero) @ b.astype(np.int64)
    c = acc.astype(np.int32)
    steps = parse_epilogue(epilogue)
    if not steps:
        return c
    return steps.apply_numpy(c.astype(np.float32), list(extras), channel_axis=1)


def config_space(
    M: int, N: int, K: int, trans_b: bool = False, target: Target | None = None, b_panels: int = 0
) -> ConfigSpace:
    """The int8 GotoBLAS knobs (tile, KC, MC, NC, k unrolling, threads) and ``int8_dot``,
    offered where the target has the instruction; the tile as wide as B's panels where B
    comes in panels."""
    tgt = resolve(target)
    sp = ConfigSpace()
    define_gemm_knobs(sp, M, N, K, tgt, "int8")
    if b_panels:
        if b_panels not in nr_choices(tgt):
            raise OperatorError(
                f"matmul_integer b_panels {b_panels} is no tile width of this target"
                f" ({', '.join(map(str, nr_choices(tgt)))})"
            )
        sp.add_constraint(lambda c: c["nr"] == b_panels, f"B's panels are {b_panels} wide")
    sp.define_knob("parallel", [True, False])
    sp.define_knob("parallel_at", ["cols", "rows"])
    sp.define_knob("p_at", ["block", "root"])
    sp.define_knob("int8_dot", [True, False] if int8_dot.supported(tgt) else [False])
    sp.add_constraint(
        lambda c: c["p_at"] == "root" or not c["int8_dot"] or N % c["nr"] == 0,
        "a tile at a column edge of a block is plain loops: the product at the root there",
    )
    sp.add_constraint(
        lambda c: c["parallel"] or c["parallel_at"] == "cols",
        "parallel_at only matters when the nest runs in parallel",
    )
    sp.add_constraint(
        lambda c: int8_dot.blocks_fit(c, K) and (c["int8_dot"] or c["k_unroll"] == 1),
        "KC is whole groups of 4 bytes of K, k_unroll divides its groups (int8_dot only)",
    )
    return sp.freeze()


def default_config(
    M: int, N: int, K: int, target: Target | None = None, b_panels: int = 0
) -> dict[str, Any]:
    """``search_spaces._int8.dot_default``'s tile and blocks, the tile's width a divisor of
    N where one fits (else the product is computed at the root, whole panels wide: a tile
    at a column edge runs as plain loops), row blocks in parallel over few columns.
    Without the instruction, the same nest on int32 vectors, not unrolled."""
    tgt = resolve(target)
    cfg = int8_dot.dot_default(M, N, K, tgt)
    keep = ("mr", "nr", "kc", "k_unroll", "mc_tiles", "nc_tiles", "parallel")
    out = {k: cfg[k] for k in keep}
    out["int8_dot"] = int8_dot.supported(tgt)
    if not out["int8_dot"]:
        out["k_unroll"] = 1
    lanes, mr, nr = tgt.lanes("int32"), int(out["mr"]), int(out["nr"])
    if b_panels and b_panels != nr:  # B's panels set the tile's width
        nr = b_panels
        fit = accumulator_budget(tgt) // -(-nr // lanes)
        mr = max(m for m in mr_choices(tgt) if m <= max(1, min(mr, fit)))
    elif N % nr:
        wide = [n for n in nr_choices(tgt) if N % n == 0 and n <= 2 * nr]
        if wide:
            nr = max(wide)
            fit = accumulator_budget(tgt) // -(-nr // lanes)
            mr = max(m for m in mr_choices(tgt) if m <= max(1, min(mr, fit)))
    out.update(mr=mr, nr=nr, p_at="block" if N % nr == 0 else "root", parallel_at="cols")
    threads = tgt.threads or int(tgt.get("cores", 1))
    if out["parallel"] and threads > 1:
        out.update(_parallel_rows(M, N, mr, nr, int(out["nc_tiles"]), threads))
    if out["p_at"] == "block":  # column blocks that divide N: a ragged one ran 4x slower
        out["nc_tiles"] = max(
            t for t in _NC_TILES if t <= int(out["nc_tiles"]) and N % (t * nr) == 0
        )
    return out


#: The ``nc_tiles`` knob's choices (``_gemm.define_gemm_knobs``).
_NC_TILES = (1, 2, 4, 8, 16, 32, 64)


def _parallel_rows(M: int, N: int, mr: int, nr: int, nc_tiles: int, threads: int) -> dict[str, Any]:
    """Row blocks in parallel where they share the work out more evenly than column blocks:
    a quantized CNN's early layers have a few dozen output channels (one column block) over
    thousands of pixels. Each row block then packs its own panels of B (K x N bytes, small
    there). The row block is the one that shares the rows most evenly (the largest of equals).
    """
    by_cols = busiest_share(blocks(N, nr * nc_tiles), threads)
    shares = {t: busiest_share(blocks(M, mr * t), threads) for t in ROW_BLOCK_TILES}
    # The largest block within a few percent of the most even: each block allocates its
    # piece of the product, which costs as much as a small block's work.
    best = min(shares.values())
    mc_tiles = max(t for t in shares if shares[t] <= best + 0.03)
    if shares[mc_tiles] >= by_cols - 0.05:
        return {}
    cover = next(t for t in (1, 2, 4, 8, 16, 32, 64) if t * nr >= N or t == 64)
    return {"parallel_at": "rows", "mc_tiles": mc_tiles, "nc_tiles": cover}


def schedule(
    cfg: Mapping[str, Any], a: Mapping[str, Any], target: Target
) -> tuple[Schedule, list[Tensor]]:
    """The nest for ``cfg``; arguments A, B, AZ, the epilogue's inputs, C."""
    return int8_dot.schedule(
        {**cfg, "pack_b": True, "pack_a": False},
        a["M"],
        a["N"],
        a["K"],
        resolve(target),
        trans_b=a["trans_b"],
        a_dtype=a["a_dtype"],
        zero_point=True,
        epilogue=str(a["epilogue"]),
        colsums=bool(a.get("colsums", False)),
        b_panels=bool(a.get("b_panels", 0)),
    )


def _check(a: Mapping[str, Any]) -> None:
    """A bad epilogue text is an OperatorError of one line (``parse`` raises it); so are
    panels of a transposed B."""
    parse_epilogue(str(a["epilogue"]))
    if a.get("b_panels", 0) and a["trans_b"]:
        raise OperatorError("matmul_integer b_panels takes B as panels: trans_b is False")


def _flops(a: Mapping[str, Any]) -> float:
    """Two integer operations per multiply-add, one per output per epilogue step."""
    return 2.0 * a["M"] * a["N"] * a["K"] + parse_epilogue(str(a["epilogue"])).flops(
        a["M"] * a["N"]
    )


def _bytes(a: Mapping[str, Any]) -> float:
    out = 4 if parse_epilogue(str(a["epilogue"])).out_dtype("int32") in ("int32", "float32") else 1
    return float(a["M"] * a["K"] + a["K"] * a["N"] + out * a["M"] * a["N"])


def _registry_reference(*arrays: np.ndarray, **args: Any) -> np.ndarray:
    a, b, az, *extras = arrays
    return reference(
        a,
        b,
        az,
        *extras,
        trans_b=bool(args["trans_b"]),
        epilogue=str(args["epilogue"]),
        colsums=bool(args.get("colsums", False)),
        b_panels=int(args.get("b_panels", 0)),
        K=int(args["K"]),
        N=int(args["N"]),
    )


register_operator(
    Operator(
        name="matmul_integer",
        doc="C = (A - AZ) @ B with A: M x K int8 or uint8, B: K x N int8 (N x K with trans_b),"
        " AZ A's zero point, C int32; an epilogue runs on float32(C) and may quantize",
        params=(
            Param("M", int, doc="rows of A and C"),
            Param("N", int, doc="columns of B and C"),
            Param("K", int, doc="columns of A, rows of B"),
            Param("a_dtype", str, "uint8", ("uint8", "int8"), doc="A's type (B is int8)"),
            Param("trans_b", bool, False, doc="B is given as N x K (C = A @ B.T)"),
            Param("epilogue", str, NONE, doc=PARAM_DOC + "; on float32(C), quant_* last"),
            Param(
                "colsums",
                bool,
                False,
                doc="B's column sums are an input BS (int32, after AZ): a constant weight's,"
                " summed once instead of at each call",
            ),
            Param(
                "b_panels",
                int,
                0,
                doc="B is given in panels of this many columns ([N/b_panels][K/4][b_panels][4],"
                " zeros past K and N): a constant weight laid out once; the tile's width",
                minimum=0,
            ),
        ),
        space=lambda a, t: config_space(
            a["M"], a["N"], a["K"], a["trans_b"], t, int(a.get("b_panels", 0))
        ),
        schedule=schedule,
        default_config=lambda a, t: default_config(
            a["M"], a["N"], a["K"], t, int(a.get("b_panels", 0))
        ),
        reference=_registry_reference,
        flops=_flops,
        bytes_moved=_bytes,
        check=_check,
    )
)
