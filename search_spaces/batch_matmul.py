"""Batched matmul ``C[b] = A[b] @ B[b]``: definition, NumPy reference, knobs, schedule.

``A`` is ``[B, M, K]`` and ``B`` is ``[B, K, N]`` (``[B, N, K]`` with
``trans_b``, attention's ``Q @ K.T``), as ``torch.bmm`` takes them. Each batch
is matmul's GotoBLAS nest (:func:`search_spaces._gemm.register_blocked`), with the batch
loop outside; the batch and the column blocks are fused into one parallel
loop, so that a batch of small matrices still feeds every core::

    for b_jo in B * N / NC:                 # parallel across cores if chosen
      for ko in K / KC:
        pack B[b, ko, jo] into [NC/NR][KC][NR] panels     (if pack_b)
        for io in M / MC:
          for jb in NC / NR:
            for ib in MC / MR:
              MR x NR register tile, loaded from C, += over KC, stored back

Attention's matrices are small (a 128 x 64 block of B is 32 KiB), so packing
B may cost more than it saves unless B is transposed, hence the knob.

``epilogue`` (``search_spaces._epilogue``) fuses elementwise steps after the
product, a channel being a column of ``C``: the output is then a stage ``Y``
that computes ``C`` block by block while it is in cache, with the same knobs.

>>> target = Target.make("cpu", vector_lanes=8, vector_registers=16)
>>> space = config_space(12, 128, 128, 64, target=target)
>>> s, tensors = schedule(default_config(12, 128, 128, 64, target=target), 12, 128, 128, 64)
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

from ._cuda import is_gpu
from ._cuda import matmul as gpu
from ._epilogue import NONE, PARAM_DOC, apply_numpy, check_epilogue
from ._epilogue import parse as parse_epilogue
from ._gemm import (
    blocked_output,
    define_gemm_knobs,
    gemm_default,
    operand_packing,
    output_stage,
    register_blocked,
)
from ._target import parallel_pays, resolve

__all__ = ["config_space", "default_config", "define", "flops", "reference", "schedule"]


def define(
    batch: int, M: int, N: int, K: int, dtype: str = "float32", trans_b: bool = False
) -> tuple[Tensor, Tensor, Tensor]:
    """The tensors ``A`` (``[B, M, K]``), ``B`` (``[B, K, N]`` or ``[B, N, K]``) and ``C``."""
    A = te.placeholder((batch, M, K), dtype, name="A")
    B = te.placeholder((batch, N, K) if trans_b else (batch, K, N), dtype, name="B")
    k = te.reduce_axis(K, name="k")

    def body(b: Any, i: Any, j: Any) -> te.Expr:
        return te.sum(A[b, i, k] * (B[b, j, k] if trans_b else B[b, k, j]), axis=k)

    C = te.compute((batch, M, N), body, name="C")
    return A, B, C


def reference(
    a: np.ndarray,
    b: np.ndarray,
    trans_b: bool = False,
    epilogue: str = NONE,
    extras: Sequence[np.ndarray] = (),
) -> np.ndarray:
    """The products (float64 sums for an epilogue, applied to ``extras`` in float64 too)."""
    bt = b.transpose(0, 2, 1) if trans_b else b
    if epilogue == NONE:
        return np.matmul(a, bt)
    y = np.matmul(a.astype(np.float64), bt.astype(np.float64))
    return apply_numpy(epilogue, y, extras, channel_axis=2).astype(a.dtype)


def flops(batch: int, M: int, N: int, K: int, epilogue: str = NONE) -> float:
    """Multiply-adds, and one operation per output per epilogue step."""
    return 2.0 * batch * M * N * K + parse_epilogue(epilogue).flops(batch * M * N)


def config_space(
    batch: int,
    M: int,
    N: int,
    K: int,
    dtype: str = "float32",
    trans_b: bool = False,
    target: Target | None = None,
) -> ConfigSpace:
    """Matmul's register tile and cache blocks on ``target``, packing B, the parallel batches."""
    sp = ConfigSpace()
    define_gemm_knobs(sp, M, N, K, resolve(target), dtype)
    sp.define_knob("pack_b", [True, False])
    sp.define_knob("parallel", [True, False])
    if trans_b:
        sp.add_constraint(
            lambda c: c["pack_b"], "a transposed B is packed (unpacked it is gathered)"
        )
    return sp.freeze()


def default_config(
    batch: int,
    M: int,
    N: int,
    K: int,
    dtype: str = "float32",
    target: Target | None = None,
) -> dict[str, Any]:
    """Matmul's default tile and blocks, B packed, batches in parallel where that pays
    (``_target.parallel_pays``: attention over one token, 8 x 1 x 1 x 64, ran 9 us on two
    threads against NumPy's 0.8)."""
    tgt = resolve(target)
    parallel = parallel_pays(batch * M * N * K, tgt)
    return {**gemm_default(M, N, K, tgt, dtype), "pack_b": True, "parallel": parallel}


def schedule(
    cfg: Mapping[str, Any],
    batch: int,
    M: int,
    N: int,
    K: int,
    dtype: str = "float32",
    trans_b: bool = False,
    epilogue: str = NONE,
) -> tuple[Schedule, list[Tensor]]:
    """The schedule for ``cfg`` (validate configs from outside against config_space first).

    With an epilogue the output is a stage ``Y`` after the products ``C``;
    each batch's nest computes ``C`` one ``MC x NC`` block at a time inside
    ``Y``'s block loops (see :func:`search_spaces._gemm.blocked_output`), and
    the batch and ``Y``'s column blocks are the parallel loop.
    """
    A, B, C = define(batch, M, N, K, dtype, trans_b)
    steps = parse_epilogue(epilogue)
    extras, Y = output_stage(C, steps) if steps else ([], C)
    s = te.create_schedule(Y)
    outer, nc, _ = blocked_output(s, Y, C, cfg) if steps else ([], None, None)
    b = s[C].op.axis[0]
    pack = operand_packing(B, trans_b, "B") if cfg["pack_b"] else None
    loops = register_blocked(s, C, cfg, outer=(b,), pack_b=pack, nc=nc)
    if cfg["parallel"]:
        if outer:
            s[Y].parallel(s[Y].fuse(*outer))
        else:
            s[C].parallel(s[C].fuse(b, loops.jo))
    return s, [A, B, *extras, Y]


def _gpu_schedule(cfg: Mapping[str, Any], a: Mapping[str, Any]) -> tuple[Schedule, list[Tensor]]:
    """The GPU matmul nest (``search_spaces._cuda.matmul``), a batch per z of the grid."""
    A, B, C = define(a["B"], a["M"], a["N"], a["K"], a["dtype"], a["trans_b"])
    steps = parse_epilogue(_epi(a))
    if not steps:
        return gpu.schedule(cfg, A, B, C)
    extras, Y = output_stage(C, steps)
    return gpu.schedule(cfg, A, B, C, extras, Y)


def _register() -> None:
    from . import Operator, Param, register_operator

    register_operator(
        Operator(
            name="batch_matmul",
            doc="C[b] = A[b] @ B[b] with A: B x M x K, B: B x K x N (torch.bmm);"
            " trans_b takes B as B x N x K (attention's Q @ K.T)",
            params=(
                Param("B", int, doc="batch size", pad=0.0),
                Param("M", int, doc="rows of A and C", pad=0.0),
                Param("N", int, doc="columns of B and C", pad=0.0),
                Param("K", int, doc="columns of A, rows of B", pad=0.0),
                Param("dtype", str, "float32", ("float32", "float64")),
                Param("trans_b", bool, False, doc="B is given as B x N x K (C = A @ B.T)"),
                Param("epilogue", str, NONE, doc=PARAM_DOC),
            ),
            space=lambda a, target: (
                gpu.config_space(a["M"], a["N"], a["K"], a["dtype"], target)
                if is_gpu(target)
                else config_space(a["B"], a["M"], a["N"], a["K"], a["dtype"], a["trans_b"], target)
            ),
            schedule=lambda cfg, a, target: (
                _gpu_schedule(cfg, a)
                if is_gpu(target)
                else schedule(
                    cfg, a["B"], a["M"], a["N"], a["K"], a["dtype"], a["trans_b"], _epi(a)
                )
            ),
            default_config=lambda a, target: (
                gpu.default_config(a["M"], a["N"], a["K"], target)
                if is_gpu(target)
                else default_config(a["B"], a["M"], a["N"], a["K"], a["dtype"], target)
            ),
            reference=_registry_reference,
            flops=lambda a: flops(a["B"], a["M"], a["N"], a["K"], _epi(a)),
            check=lambda a: check_epilogue(_epi(a), a["dtype"], "batch_matmul"),
        )
    )


def _registry_reference(*arrays: np.ndarray, **args: Any) -> np.ndarray:
    """``reference(*inputs, **parsed_args)`` as the registry calls it (trans_b is an arg)."""
    a, b, *extras = arrays
    return reference(a, b, bool(args.get("trans_b", False)), _epi(args), extras)


def _epi(args: Mapping[str, Any]) -> str:
    """The epilogue argument (absent where the caller passes the arguments of an old log)."""
    return str(args.get("epilogue", NONE))


_register()
