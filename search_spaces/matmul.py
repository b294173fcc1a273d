"""Matmul ``C[M, N] = A[M, K] @ B[K, N]``: definition, NumPy reference, knobs, schedule.

The schedule space is the GotoBLAS loop nest (what OpenBLAS does by hand)::

    for jo in N / NC:                  # parallel across cores if chosen
      for ko in K / KC:
        pack B[ko, jo] into [NC/NR][KC][NR] panels      (if pack_b)
        for io in M / MC:
          for jb in NC / NR:
            for ib in MC / MR:
              MR x NR register tile, loaded from C, += over KC, stored back

The knobs pick MR, NR, KC, MC and NC; a constraint keeps the register tile
within the target's vector registers. int8 inputs accumulate in int32.

>>> space = config_space(512, 512, 512)
>>> s, tensors = schedule(space.sample(np.random.default_rng(0)), 512, 512, 512)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tuner import te
from tuner.schedule import Schedule
from tuner.space import ConfigSpace
from tuner.te import Tensor

__all__ = ["config_space", "default_config", "define", "flops", "reference", "schedule"]


def define(M: int, N: int, K: int, dtype: str = "float32") -> tuple[Tensor, Tensor, Tensor]:
    """The tensors ``A``, ``B`` and ``C``; int8 inputs give an int32 ``C``."""
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis(K, name="k")
    acc = "int32" if dtype == "int8" else dtype
    C = te.compute(
        (M, N), lambda i, j: te.sum(A[i, k].astype(acc) * B[k, j].astype(acc), axis=k), name="C"
    )
    return A, B, C


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    acc = np.int32 if a.dtype == np.int8 else a.dtype
    return a.astype(acc) @ b.astype(acc)


def flops(M: int, N: int, K: int) -> float:
    return 2.0 * M * N * K


def config_space(M: int, N: int, K: int, vector_lanes: int = 8) -> ConfigSpace:
    """The knobs of the GotoBLAS nest; the register tile fits 12 vector registers."""
    sp = ConfigSpace()
    sp.define_knob("mr", [1, 2, 3, 4, 5, 6, 8])
    sp.define_knob("nr", [8, 16, 24, 32])
    sp.define_knob("kc", [32, 64, 128, 256, 512])
    sp.define_knob("mc_tiles", [1, 2, 4, 8, 16, 24, 32])  # MC = mc_tiles * MR
    sp.define_knob("nc_tiles", [1, 2, 4, 8, 16, 32, 64])  # NC = nc_tiles * NR
    sp.define_knob("pack_b", [True, False])
    sp.define_knob("parallel", [True, False])
    sp.add_constraint(
        lambda c: c["mr"] * c["nr"] <= 12 * vector_lanes,
        f"the MR x NR accumulator tile fits 12 vector registers of {vector_lanes} lanes",
    )
    sp.add_constraint(
        lambda c: c["nr"] <= 2 * N + 8 and c["mr"] <= M, "tiles no larger than the matrix"
    )
    return sp.freeze()


def default_config(M: int, N: int, K: int) -> dict[str, Any]:
    """A decent schedule without tuning (6x16 tile, KC 256, B packed, parallel)."""
    return {
        "mr": 6,
        "nr": 16,
        "kc": 256,
        "mc_tiles": 16,
        "nc_tiles": 16,
        "pack_b": True,
        "parallel": True,
    }


def schedule(
    cfg: Mapping[str, Any], M: int, N: int, K: int, dtype: str = "float32"
) -> tuple[Schedule, list[Tensor]]:
    """The schedule for ``cfg`` (validate configs from outside against config_space first)."""
    mr, nr, kc = int(cfg["mr"]), int(cfg["nr"]), int(cfg["kc"])
    mc, nc = mr * int(cfg["mc_tiles"]), nr * int(cfg["nc_tiles"])
    A, B, C = define(M, N, K, dtype)
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    jo, ji = s[C].split(j, factor=nc)
    jb, jv = s[C].split(ji, factor=nr)
    ko, ki = s[C].split(k, factor=kc)
    io, ii = s[C].split(i, factor=mc)
    ib, ir = s[C].split(ii, factor=mr)
    s[C].reorder(jo, ko, io, jb, ib, ki, ir, jv)
    CL = s.cache_write(C, "local")
    s[CL].compute_at(s[C], ib)
    if cfg["pack_b"]:
        BP = s.cache_read(B, "global", [C])
        s[BP].compute_at(s[C], ko)
        bk, bj = s[BP].op.axis
        bjo, bji = s[BP].split(bj, factor=nr)
        s[BP].reorder(bjo, bk, bji)
    s[C].vectorize(jv)
    if cfg["parallel"]:
        s[C].parallel(jo)
    return s, [A, B, C]


def _register() -> None:
    from . import Operator, Param, register_operator

    register_operator(
        Operator(
            name="matmul",
            doc="C = A @ B with A: M x K, B: K x N (int8 inputs give an int32 C)",
            params=(
                Param("M", int, doc="rows of A and C"),
                Param("N", int, doc="columns of B and C"),
                Param("K", int, doc="columns of A, rows of B"),
                Param("dtype", str, "float32", ("float32", "float64", "int8")),
            ),
            space=lambda a: config_space(a["M"], a["N"], a["K"]),
            schedule=lambda cfg, a: schedule(cfg, a["M"], a["N"], a["K"], a["dtype"]),
            default_config=lambda a: default_config(a["M"], a["N"], a["K"]),
            reference=reference,
            flops=lambda a: flops(a["M"], a["N"], a["K"]),
        )
    )


_register()
