"""Normalisations: ``layer_norm`` over the last axis and ``batch_norm`` for inference (NCHW).

Layer norm (PyTorch semantics: biased variance, ``eps`` inside the root) is a
row operator like softmax, computed in two passes over each row while it is
in cache (the centred second pass is what keeps the variance accurate when
the mean is large)::

    X_sum[i]  = sum_j X[i, j]                       # lanes partial sums
    X_mean[i] = X_sum[i] / N
    X_sq[i]   = sum_j (X[i, j] - X_mean[i])**2      # lanes partial sums
    X_rstd[i] = 1 / sqrt(X_sq[i] / N + eps)
    Y[i, j]   = (X[i, j] - X_mean[i]) * X_rstd[i] * gamma[j] + beta[j]

It shares softmax's nest (``softmax.row_schedule``) and knobs: row tasks,
parallelism, the output's column split, reduction lanes, and whether the
reductions sit at the output's row or are passes at the root. With no exp,
it is bound by loads and adds, so the lanes matter more than for softmax:
64 lanes keep LLVM's loop vectorizer on the partial sums (see the default).

Batch norm in inference mode folds the running statistics into one scale
and shift per channel, so the pass over the tensor is one multiply-add per
element::

    scale[c] = gamma[c] / sqrt(var[c] + eps);  shift[c] = beta[c] - mean[c] * scale[c]
    for p in N*C / planes_per_task:        # parallel across cores if chosen
      for each plane (n, c) of the task, for h:
        for w (split by col_split, vectorized):
          Y[n, c, h, w] = X[n, c, h, w] * scale[c] + shift[c]

With ``fold_scale`` the scale and shift are stages of ``C`` values computed
first; without (the default) they are written inside the loop and LLVM hoists
them out of the row loop: one square root and one division per row of ``W``,
no separate stage. The row loop is the only one that vectorizes (see
``batch_norm_schedule``), so small planes (7 x 7) run scalar.

>>> space = layer_norm_space(4096, 768)
>>> s, tensors = layer_norm_schedule(space.sample(np.random.default_rng(0)), 4096, 768)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuner import te
from tuner.schedule import Schedule
from tuner.space import ConfigSpace
from tuner.target import Target
from tuner.te import Tensor

from . import Operator, softmax
from ._cuda import is_gpu, rows
from ._rows_define import LayerNormStages
from ._target import resolve

__all__ = [
    "batch_norm_bytes",
    "batch_norm_default",
    "batch_norm_reference",
    "batch_norm_schedule",
    "batch_norm_space",
    "layer_norm_bytes",
    "layer_norm_default",
    "layer_norm_reference",
    "layer_norm_schedule",
    "layer_norm_space",
]

EPS = 1e-5


# -- layer norm ---------------------------------------------------------------


def layer_norm_reference(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = EPS
) -> np.ndarray:
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=-1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=-1, keepdims=True)
    return ((x64 - mean) / np.sqrt(var + eps) * gamma + beta).astype(x.dtype)


def layer_norm_bytes(M: int, N: int) -> float:
    """``X`` read and ``Y`` written once, ``gamma`` and ``beta`` read once (float32)."""
    return 4.0 * (2 * M * N + 2 * N)


def layer_norm_flops(M: int, N: int) -> float:
    """Per element: two adds, a subtract and a multiply (the variance), four for the output."""
    return 8.0 * M * N


def layer_norm_space(M: int, N: int, target: Target | None = None) -> ConfigSpace:
    """Row tasks, parallelism, column vectors (of the target's lanes), reduction lanes,
    where the reductions live."""
    vector_lanes = resolve(target).lanes("float32")
    sp = ConfigSpace()
    sp.define_knob("rows_per_task", [1, 2, 4, 8, 16, 32, 64])
    sp.define_knob("parallel", [True, False])
    sp.define_knob("col_split", [1, *(vector_lanes * f for f in (1, 2, 4, 8))])
    sp.define_knob("lanes", [1, 4, 8, 16, 32, 64, 128])
    sp.define_knob("reductions_at_row", [True, False])
    sp.define_knob("one_pass", [False, True], absent=False)
    sp.define_knob("local_partials", [True, False], absent=False)
    sp.add_constraint(lambda c: c["rows_per_task"] <= M, "a task holds no more rows than M")
    sp.add_constraint(
        lambda c: c["col_split"] <= max(N, vector_lanes),
        f"the column split is no wider than a row or one {vector_lanes}-lane vector",
    )
    sp.add_constraint(lambda c: c["lanes"] <= N, "no more reduction lanes than columns")
    sp.add_constraint(
        lambda c: not c["one_pass"] or isinstance(N, int), "one pass needs a constant row length"
    )
    sp.add_constraint(
        lambda c: not (c["one_pass"] and c["local_partials"]),
        "a tuple reduction's partials cannot live in registers",
    )
    return sp.freeze()


def layer_norm_default(M: int, N: int, target: Target | None = None) -> dict[str, Any]:
    """Softmax's nest with 64 lanes and the output's columns in 64s; parallel row tasks;
    the moments in one pass.

    One pass (a tuple reduction of two sums) against two, 4096 x 768 on two
    threads, same process, two runs: 0.91 and 0.73 ms against 1.31 and 0.98
    (AVX-512 Zen, 2026-12-02; torch.compile took 0.91 to 1.0 that day).

    LLVM unrolls a lanes loop of 32 or fewer fully before its loop vectorizer
    runs and leaves the partials scalar; at 64 the loop stays and is
    vectorized: 3.8 against 8.1 ms for 16 lanes at 4096 x 768, one thread,
    loaded machine (NumPy 20.5). The same holds for the output's column loop
    (64 was also the best of 24 tuning trials). Columns in 64s where 8
    vectors reach that far (32s with 4-lane vectors).
    """
    tgt = resolve(target)
    cfg = softmax.default_config(M, N, target=tgt)
    del cfg["exp_inline"]
    cfg["one_pass"] = isinstance(N, int)
    cfg["local_partials"] = cfg["local_partials"] and not cfg["one_pass"]
    if N >= 64:
        cfg["col_split"] = min(64, 8 * tgt.lanes("float32"))
        cfg["lanes"] = 64
    return cfg


def layer_norm_schedule(
    cfg: Mapping[str, Any], M: int, N: int, eps: float = EPS, dtype: str = "float32"
) -> tuple[Schedule, list[Tensor]]:
    """The schedule for ``cfg`` (validate configs from outside against layer_norm_space first).

    At the output's row: the mean (its sum at its row, the partials at the
    sum's row) and the reciprocal deviation (the same below it). The mean is
    read by the output and by the centred squares inside the deviation's
    nest, so it is computed first, at the output's row. With ``one_pass`` the
    moments (one tuple reduction, its partials at its row), the mean and the
    deviation are all at the output's row.
    """
    # A shape-generic kernel (symbolic N) scheduled from a concrete shape's config: two passes.
    one_pass = bool(cfg.get("one_pass", False)) and isinstance(N, int)
    ln = LayerNormStages(M, N, int(cfg["lanes"]), eps, dtype, one_pass)
    s = te.create_schedule(ln.Y)
    attach: list[tuple[Tensor, Tensor | None]]
    if ln.one_pass:  # the moments are read by the mean and the deviation: at the output's row
        attach = [(ln.sum, ln.Y), (ln.mean, ln.Y), (ln.rstd, ln.Y), (ln.sum_part, ln.sum)]
        softmax.row_schedule(s, cfg, ln.Y, attach, [ln.sum_part], [])
        return s, [ln.X, ln.gamma, ln.beta, ln.Y]
    attach = [
        (ln.sum, ln.mean),
        (ln.mean, ln.Y),
        (ln.sq, ln.rstd),
        (ln.rstd, ln.Y),
        (ln.sum_part, ln.sum),
        (ln.sq_part, ln.sq),
    ]
    softmax.row_schedule(s, cfg, ln.Y, attach, [ln.sum_part, ln.sq_part], [])
    return s, [ln.X, ln.gamma, ln.beta, ln.Y]


# -- batch norm (inference) -------------------------------------------------------


class _BatchNorm:
    def __init__(self, N: int, C: int, H: int, W: int, eps: float, dtype: str = "float32") -> None:
        X = te.placeholder((N, C, H, W), dtype, name="X")
        mean = te.placeholder((C,), dtype, name="running_mean")
        var = te.placeholder((C,), dtype, name="running_var")
        gamma = te.placeholder((C,), dtype, name="gamma")
        beta = te.placeholder((C,), dtype, name="beta")
        self.inputs = [X, mean, var, gamma, beta]
        self.scale = te.compute(
            (C,), lambda c: gamma[c] / te.sqrt(var[c] + te.const(eps, dtype)), name="scale"
        )
        scale = self.scale
        self.shift = te.compute((C,), lambda c: beta[c] - mean[c] * scale[c], name="shift")
        shift = self.shift
        self.Y = te.compute(
            (N, C, H, W), lambda n, c, h, w: X[n, c, h, w] * scale[c] + shift[c], name="Y"
        )


def batch_norm_reference(
    x: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    gamma: np.ndarray,
    beta: np.ndarray,
    eps: float = EPS,
) -> np.ndarray:
    def per_channel(v: np.ndarray) -> np.ndarray:
        return v.astype(np.float64)[None, :, None, None]

    y = (x - per_channel(mean)) / np.sqrt(per_channel(var) + eps) * per_channel(gamma)
    return (y + per_channel(beta)).astype(x.dtype)


def batch_norm_bytes(N: int, C: int, H: int, W: int) -> float:
    """``X`` read and ``Y`` written once, four per-channel vectors read once (float32)."""
    return 4.0 * (2 * N * C * H * W + 4 * C)


def batch_norm_space(N: int, C: int, H: int, W: int, target: Target | None = None) -> ConfigSpace:
    """Planes per parallel task, parallelism, the row's vector split (of the target's lanes),
    folding the statistics."""
    vector_lanes = resolve(target).lanes("float32")
    sp = ConfigSpace()
    sp.define_knob("planes_per_task", [1, 2, 4, 8, 16, 32, 64])
    sp.define_knob("parallel", [True, False])
    sp.define_knob("col_split", [1, *(vector_lanes * f for f in (1, 2, 4, 8))])
    sp.define_knob("fold_scale", [True, False])
    sp.add_constraint(
        lambda c: c["planes_per_task"] <= N * C, "a task holds no more planes than N * C"
    )
    sp.add_constraint(
        lambda c: c["col_split"] <= max(W, vector_lanes),
        f"the column split is no wider than a row or one {vector_lanes}-lane vector",
    )
    return sp.freeze()


def batch_norm_default(N: int, C: int, H: int, W: int) -> dict[str, Any]:
    """Tasks of about 16K elements; the plain row loop; the statistics folded in the loop.

    Measured at 8 x 64 x 56 x 56 (one process, loaded machine): a split row
    (``col_split`` 32) ran 0.79 ms, the plain row 0.44, with the folding
    inlined 0.36 (NumPy's two out= passes 1.6). LLVM fully unrolls short
    constant loops before its loop vectorizer runs and leaves them scalar,
    and it hoists the inlined per-channel square root and division out of
    the row loop, so the separate scale and shift stages only add a call.
    """
    plane = H * W
    per_task = max(1, min(64, 16384 // plane, N * C))
    return {
        "planes_per_task": 1 << (per_task.bit_length() - 1),
        "parallel": True,
        "col_split": 1,
        "fold_scale": False,
    }


def batch_norm_schedule(
    cfg: Mapping[str, Any], N: int, C: int, H: int, W: int, eps: float = EPS
) -> tuple[Schedule, list[Tensor]]:
    """The schedule for ``cfg`` (validate configs from outside against batch_norm_space first).

    Only ``n`` and ``c`` are fused: fusing ``h`` and ``w`` too would leave a
    division and a remainder in the innermost index, which blocks
    vectorization, so the vector loop is the row ``w``.
    """
    bn = _BatchNorm(N, C, H, W, eps)
    s = te.create_schedule(bn.Y)
    n, c, _, w = s[bn.Y].op.axis
    planes = s[bn.Y].fuse(n, c)
    task, _ = s[bn.Y].split(planes, factor=int(cfg["planes_per_task"]))
    if int(cfg["col_split"]) > 1:
        _, wi = s[bn.Y].split(w, factor=int(cfg["col_split"]))
        s[bn.Y].vectorize(wi)
    if cfg["parallel"]:
        s[bn.Y].parallel(task)
    if not cfg["fold_scale"]:
        s[bn.shift].compute_inline()
        s[bn.scale].compute_inline()
    return s, [*bn.inputs, bn.Y]


# -- registration -------------------------------------------------------------


def _eps(args: Mapping[str, Any]) -> float:
    return float(args.get("eps", EPS))


def _check_eps(op: str) -> Any:
    def check(args: Mapping[str, Any]) -> None:
        from . import OperatorError

        try:
            eps = float(args["eps"])
        except ValueError:
            eps = math.nan
        if not (math.isfinite(eps) and eps > 0):
            raise OperatorError(f"{op} argument eps must be a positive number, got {args['eps']!r}")

    return check


def _layer_norm_space(a: Mapping[str, Any], target: Target) -> ConfigSpace:
    if is_gpu(target):
        return rows.config_space(a["M"], a["N"], target)
    return layer_norm_space(a["M"], a["N"], target)


def _layer_norm_schedule(
    cfg: Mapping[str, Any], a: Mapping[str, Any], target: Target
) -> tuple[Schedule, list[Tensor]]:
    if is_gpu(target):
        return rows.layer_norm_schedule(cfg, a["M"], a["N"], _eps(a))
    return layer_norm_schedule(cfg, a["M"], a["N"], _eps(a))


def _layer_norm_default(a: Mapping[str, Any], target: Target) -> dict[str, Any]:
    if is_gpu(target):
        return rows.default_config(a["M"], a["N"], target)
    return layer_norm_default(a["M"], a["N"], target)


def _layer_norm_reference(*arrays: np.ndarray, **args: Any) -> np.ndarray:
    """``reference(*inputs, **parsed_args)``; eps defaults to PyTorch's when no args come."""
    x, gamma, beta = arrays
    return layer_norm_reference(x, gamma, beta, eps=_eps(args))


def _batch_norm_reference(*arrays: np.ndarray, **args: Any) -> np.ndarray:
    x, mean, var, gamma, beta = arrays
    return batch_norm_reference(x, mean, var, gamma, beta, eps=_eps(args))


@dataclass(frozen=True)
class _BatchNormOperator(Operator):
    """Batch norm draws running variances in [0.1, 1.1]: a variance is never negative."""

    def make_inputs(
        self, args: Mapping[str, Any], seed: int = 0, target: Target | None = None
    ) -> list[np.ndarray]:
        arrays = super().make_inputs(args, seed, target)
        arrays[2] = (np.abs(arrays[2]) + 0.1).astype(arrays[2].dtype)
        return arrays


def _register() -> None:
    from . import Param, register_operator

    eps = Param("eps", str, str(EPS), doc="added to the variance (PyTorch's default 1e-05)")
    register_operator(
        Operator(
            name="layer_norm",
            doc="Y = layer_norm(X, [N], gamma, beta) over the last axis of M x N (memory-bound)",
            params=(
                Param("M", int, doc="rows", pad=0.0),
                Param("N", int, doc="normalised columns"),
                eps,
            ),
            space=_layer_norm_space,
            schedule=_layer_norm_schedule,
            default_config=_layer_norm_default,
            reference=_layer_norm_reference,
            flops=lambda a: layer_norm_flops(a["M"], a["N"]),
            bytes_moved=lambda a: layer_norm_bytes(a["M"], a["N"]),
            check=_check_eps("layer_norm"),
        )
    )
    shape = ("N", "C", "H", "W")
    register_operator(
        _BatchNormOperator(
            name="batch_norm",
            doc="Y = batch_norm(X, running_mean, running_var, gamma, beta) in inference, NCHW",
            params=(*(Param(p, int, doc=f"{p} of NCHW") for p in shape), eps),
            space=lambda a, target: batch_norm_space(a["N"], a["C"], a["H"], a["W"], target),
            schedule=lambda cfg, a, target: batch_norm_schedule(
                cfg, a["N"], a["C"], a["H"], a["W"], _eps(a)
            ),
            default_config=lambda a, target: batch_norm_default(*(a[p] for p in shape)),
            reference=_batch_norm_reference,
            flops=lambda a: 2.0 * math.prod(a[p] for p in shape),
            bytes_moved=lambda a: batch_norm_bytes(*(a[p] for p in shape)),
            check=_check_eps("batch_norm"),
        )
    )


_register()
