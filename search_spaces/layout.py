"""Data movement: ``transpose`` (2-D), ``nchw_to_nhwc`` and ``pad`` (constant, NCHW).

Pure copies: nothing is computed, so the only question is the order in which
memory is touched, and every figure is in GB/s.

``transpose M N``: ``Y[N, M] = X[M, N].T``. A row of ``Y`` is a column of ``X``,
so one side of the copy is strided whatever the loop order; tiling bounds the
damage: a ``tile_j x tile_i`` block of ``Y`` reads ``tile_i`` short rows of
``X`` and writes ``tile_j`` short rows of ``Y``, all of them in cache::

    for jo in N / tile_j:                   # parallel across cores if chosen
      for io in M / tile_i:
        X_local = X[io-block, jo-block]     # pack: one contiguous tile (if chosen)
        for ji in tile_j:                   # inner="write": Y's rows innermost
          for ii in tile_i:                 #   (contiguous stores)
            Y[jo*tile_j + ji, io*tile_i + ii] = X[io*tile_i + ii, jo*tile_j + ji]

``inner="read"`` (the default for a matrix) swaps ``ji`` and ``ii``: contiguous
loads, strided stores. ``unroll`` writes the innermost tile loop out, so that
LLVM vectorizes the loop around it instead (one strided side stays scalar
either way). ``pack`` copies the source tile into a stack buffer first.

``nchw_to_nhwc N C H W``: ``Y[n, h, w, c] = X[n, c, h, w]``, PyTorch's
``x.permute(0, 2, 3, 1).contiguous()``: for each ``(n, h)`` a ``C x W`` matrix
is transposed into a ``W x C`` one, with the same tiles over ``w`` and ``c``
and parallel over ``n*h``.

``pad N C H W pad_h pad_w``: ``Y[N, C, H + 2*pad_h, W + 2*pad_w]`` with zeros
around ``X``, ``torch.nn.functional.pad(x, (pad_w, pad_w, pad_h, pad_h))``::

    for nc in N*C:                          # parallel, planes_per_task per task
      for h in H + 2*pad_h:
        for wo in Wp / w_split:
          for wi in w_split:                # vectorized: a masked load per vector
            Y[nc, h, w] = X[nc, h - pad_h, w - pad_w] if inside else 0

>>> s, tensors = schedule_transpose(default_transpose(4096, 4096), 4096, 4096)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tuner import te
from tuner.schedule import AxisRef, Schedule, StageRef
from tuner.space import ConfigSpace
from tuner.target import Target
from tuner.te import Tensor

from ._target import resolve
from .reduce import PARALLEL_MIN_BYTES

__all__ = [
    "default_nchw_to_nhwc",
    "default_pad",
    "default_transpose",
    "define_nchw_to_nhwc",
    "define_pad",
    "define_transpose",
    "numpy_pad",
    "pad_reference",
    "pad_space",
    "schedule_nchw_to_nhwc",
    "schedule_pad",
    "schedule_transpose",
    "transpose_space",
]

_TILES = (8, 16, 32, 64, 128)
_W_SPLITS = (0, 8, 16, 32, 64)  # 0: the whole row


# -- transposes ------------------------------------------------------------


def define_transpose(M: int, N: int) -> tuple[Tensor, Tensor]:
    """``X[M, N]`` and ``Y[N, M] = X.T``."""
    X = te.placeholder((M, N), "float32", name="X")
    Y = te.compute((N, M), lambda j, i: X[i, j], name="Y")
    return X, Y


def define_nchw_to_nhwc(N: int, C: int, H: int, W: int) -> tuple[Tensor, Tensor]:
    """``X[N, C, H, W]`` and ``Y[N, H, W, C]``."""
    X = te.placeholder((N, C, H, W), "float32", name="X")
    Y = te.compute((N, H, W, C), lambda n, h, w, c: X[n, c, h, w], name="Y")
    return X, Y


def _tiles(vector_lanes: int) -> list[int]:
    """``_TILES`` and one vector (4 lanes give a tile narrower than 8)."""
    return sorted({vector_lanes, *_TILES})


def transpose_space(rows: int, cols: int, target: Target | None = None) -> ConfigSpace:
    """Tiles of a ``rows x cols`` source matrix (``M x N``, or ``C x W`` per image row)."""
    vector_lanes = resolve(target).lanes("float32")
    sp = ConfigSpace()
    sp.define_knob("tile_i", _tiles(vector_lanes))  # source rows per tile
    sp.define_knob("tile_j", _tiles(vector_lanes))  # source columns per tile
    sp.define_knob("inner", ["write", "read"])
    sp.define_knob("pack", [True, False])
    sp.define_knob("unroll", [True, False])
    sp.define_knob("parallel", [True, False])
    sp.add_constraint(
        lambda c: c["tile_i"] <= max(rows, vector_lanes) and c["tile_j"] <= max(cols, vector_lanes),
        f"tiles no larger than the matrix or one {vector_lanes}-lane vector",
    )
    sp.add_constraint(
        lambda c: not c["pack"] or c["tile_i"] * c["tile_j"] <= 64 * 64,
        "a packed tile holds at most 64 x 64 floats (16 KiB, in L1)",
    )
    sp.add_constraint(
        lambda c: not c["unroll"] or c["tile_i" if c["inner"] == "write" else "tile_j"] <= 32,
        "unroll an inner tile loop of at most 32 iterations",
    )
    return sp.freeze()


def default_transpose(rows: int, cols: int, target: Target | None = None) -> dict[str, Any]:
    """32 x 32 tiles with contiguous loads, parallel over column blocks.

    Measured on one (busy) thread, CPU time: a 4096 x 4096 transpose took 17 ms
    with contiguous loads (``inner="read"``) and 53 ms with contiguous stores (its
    32 source rows, 16 KiB apart, share one set of the 8-way L1), NumPy's
    ``np.copyto(out, x.T)`` 137 ms; 3000 x 2000: 7.4 ms, 8.7 ms and 29 ms.
    A matrix smaller than 8 gets one vector of the target's lanes.
    """
    lanes = resolve(target).lanes("float32")
    return {
        "tile_i": next(t for t in (32, 16, 8, lanes) if t <= max(rows, lanes)),
        "tile_j": next(t for t in (32, 16, 8, lanes) if t <= max(cols, lanes)),
        "inner": "read",
        "pack": False,
        "unroll": False,
        "parallel": 8.0 * rows * cols >= PARALLEL_MIN_BYTES,
    }


def default_nchw_to_nhwc(
    N: int, C: int, H: int, W: int, target: Target | None = None
) -> dict[str, Any]:
    """All channels (up to 64) by 8 columns, stores contiguous, parallel over ``n*h``.

    For 8 x 64 x 56 x 56 on one (busy) thread, CPU time: 1.4 ms, NumPy's
    ``np.copyto(out, x.transpose(0, 2, 3, 1))`` 1.3 to 1.4 ms, the 8 columns
    unrolled inside contiguous loads 1.6 ms, 32 x 32 tiles 1.9 to 2.2 ms. One
    side of the copy stays scalar (a gather or a scatter of single floats):
    beating NumPy by more needs an in-register 8 x 8 transpose (shuffles),
    which the schedule language cannot express. Fewer than 8 columns with
    4-lane vectors get one vector.
    """
    lanes = resolve(target).lanes("float32")
    return {
        "tile_i": next(t for t in (64, 32, 16, 8, lanes) if t <= max(C, lanes)),
        "tile_j": 8 if max(W, lanes) >= 8 else lanes,
        "inner": "write",
        "pack": False,
        "unroll": False,
        "parallel": 8.0 * N * C * H * W >= PARALLEL_MIN_BYTES,
    }


def _tile_copy(
    s: Schedule, cfg: Mapping[str, Any], X: Tensor, Y: Tensor, j: AxisRef, i: AxisRef
) -> tuple[StageRef, AxisRef]:
    """Tile ``Y``'s loops ``j`` (source column) and ``i`` (source row); the outer tile loop."""
    st = s[Y]
    jo, ji = st.split(j, factor=int(cfg["tile_j"]))
    io, ii = st.split(i, factor=int(cfg["tile_i"]))
    if cfg["inner"] == "write":
        st.reorder(jo, io, ji, ii)
        innermost = ii
    else:
        st.reorder(jo, io, ii, ji)
        innermost = ji
    if cfg["unroll"]:
        st.unroll(innermost)
    else:
        st.vectorize(innermost)
    if cfg["pack"]:
        XL = s.cache_read(X, "local", [Y])
        s[XL].compute_at(st, io)
    return st, jo


def schedule_transpose(cfg: Mapping[str, Any], M: int, N: int) -> tuple[Schedule, list[Tensor]]:
    """Tiles over ``Y``'s rows (``X``'s columns) and columns; threads over column blocks."""
    X, Y = define_transpose(M, N)
    s = te.create_schedule(Y)
    j, i = s[Y].op.axis
    st, jo = _tile_copy(s, cfg, X, Y, j, i)
    if cfg["parallel"]:
        st.parallel(jo)
    return s, [X, Y]


def schedule_nchw_to_nhwc(
    cfg: Mapping[str, Any], N: int, C: int, H: int, W: int
) -> tuple[Schedule, list[Tensor]]:
    """Per image row ``(n, h)``: tiles over ``w`` and ``c``; threads over ``n*h``."""
    X, Y = define_nchw_to_nhwc(N, C, H, W)
    s = te.create_schedule(Y)
    n, h, w, c = s[Y].op.axis
    nh = s[Y].fuse(n, h)
    st, _ = _tile_copy(s, cfg, X, Y, w, c)
    if cfg["parallel"]:
        st.parallel(nh)
    return s, [X, Y]


# -- constant padding ------------------------------------------------------


def define_pad(N: int, C: int, H: int, W: int, ph: int, pw: int) -> tuple[Tensor, Tensor]:
    """``X[N, C, H, W]`` and the zero-padded ``Y[N, C, H + 2*ph, W + 2*pw]``."""
    X = te.placeholder((N, C, H, W), "float32", name="X")
    zero = te.const(0.0, "float32")
    Y = te.compute(
        (N, C, H + 2 * ph, W + 2 * pw),
        lambda n, c, h, w: te.if_then_else(
            (h >= ph) & (h < H + ph) & (w >= pw) & (w < W + pw), X[n, c, h - ph, w - pw], zero
        ),
        name="Y",
    )
    return X, Y


def pad_reference(x: np.ndarray, *, pad_h: int, pad_w: int) -> np.ndarray:
    """``np.pad`` with zeros around the last two axes."""
    out: np.ndarray = np.pad(x, ((0, 0), (0, 0), (pad_h, pad_h), (pad_w, pad_w)))
    return out


def numpy_pad(x: np.ndarray, out: np.ndarray, pad_h: int, pad_w: int) -> np.ndarray:
    """NumPy's best formulation (the benchmark's peer): zero the border of a
    preallocated ``out``, copy ``x`` into its middle."""
    h, w = x.shape[2], x.shape[3]
    out[:, :, :pad_h] = 0
    out[:, :, pad_h + h :] = 0
    out[:, :, pad_h : pad_h + h, :pad_w] = 0
    out[:, :, pad_h : pad_h + h, pad_w + w :] = 0
    out[:, :, pad_h : pad_h + h, pad_w : pad_w + w] = x
    return out


def _pad_bytes(N: int, C: int, H: int, W: int, ph: int, pw: int) -> float:
    return 4.0 * N * C * (H * W + (H + 2 * ph) * (W + 2 * pw))


def pad_space(
    N: int, C: int, H: int, W: int, ph: int, pw: int, target: Target | None = None
) -> ConfigSpace:
    """Planes per parallel task and the split of a padded row (0: none)."""
    vector_lanes = resolve(target).lanes("float32")
    sp = ConfigSpace()
    sp.define_knob("planes_per_task", [1, 2, 4, 8, 16])
    sp.define_knob("w_split", list(_W_SPLITS))
    sp.define_knob("parallel", [True, False])
    sp.add_constraint(
        lambda c: c["planes_per_task"] <= N * C, "a task holds no more planes than N*C"
    )
    sp.add_constraint(
        lambda c: c["w_split"] <= max(W + 2 * pw, vector_lanes),
        f"the row split is no wider than a padded row or one {vector_lanes}-lane vector",
    )
    return sp.freeze()


def default_pad(N: int, C: int, H: int, W: int, ph: int, pw: int) -> dict[str, Any]:
    """Whole rows (a short split ends up fully unrolled and scalar), parallel planes."""
    return {
        "planes_per_task": next(p for p in (4, 2, 1) if (N * C) % p == 0),
        "w_split": 0,
        "parallel": _pad_bytes(N, C, H, W, ph, pw) >= PARALLEL_MIN_BYTES,
    }


def schedule_pad(
    cfg: Mapping[str, Any], N: int, C: int, H: int, W: int, ph: int, pw: int
) -> tuple[Schedule, list[Tensor]]:
    """Planes fused and cut into tasks; the row loop (or its inner split) vectorized."""
    X, Y = define_pad(N, C, H, W, ph, pw)
    s = te.create_schedule(Y)
    n, c, h, w = s[Y].op.axis
    nc = s[Y].fuse(n, c)
    task, _ = s[Y].split(nc, factor=int(cfg["planes_per_task"]))
    if cfg["parallel"]:
        s[Y].parallel(task)
    split = int(cfg["w_split"])
    inner = s[Y].split(w, factor=split)[1] if split else w
    s[Y].vectorize(inner)
    return s, [X, Y]


def _register() -> None:
    from . import Operator, Param, register_operator

    nchw = (
        Param("N", int, doc="batch"),
        Param("C", int, doc="channels"),
        Param("H", int, doc="height"),
        Param("W", int, doc="width"),
    )
    register_operator(
        Operator(
            name="transpose",
            doc="Y = X.T for an M x N float32 matrix (memory-bound)",
            params=(Param("M", int, doc="rows of X"), Param("N", int, doc="columns of X")),
            space=lambda a, target: transpose_space(a["M"], a["N"], target),
            schedule=lambda cfg, a, target: schedule_transpose(cfg, a["M"], a["N"]),
            default_config=lambda a, target: default_transpose(a["M"], a["N"], target),
            reference=lambda x, **_: np.ascontiguousarray(x.T),
            flops=lambda a: 0.0,
            bytes_moved=lambda a: 8.0 * a["M"] * a["N"],
        )
    )
    register_operator(
        Operator(
            name="nchw_to_nhwc",
            doc="Y[n, h, w, c] = X[n, c, h, w]: NCHW to NHWC for float32 (memory-bound)",
            params=nchw,
            space=lambda a, target: transpose_space(a["C"], a["W"], target),
            schedule=lambda cfg, a, target: schedule_nchw_to_nhwc(
                cfg, a["N"], a["C"], a["H"], a["W"]
            ),
            default_config=lambda a, target: default_nchw_to_nhwc(
                a["N"], a["C"], a["H"], a["W"], target
            ),
            reference=lambda x, **_: np.ascontiguousarray(x.transpose(0, 2, 3, 1)),
            flops=lambda a: 0.0,
            bytes_moved=lambda a: 8.0 * a["N"] * a["C"] * a["H"] * a["W"],
        )
    )
    pads = (
        Param("pad_h", int, doc="zero rows above and below", minimum=0),
        Param("pad_w", int, doc="zero columns left and right", minimum=0),
    )

    def shape(a: Mapping[str, Any]) -> tuple[int, int, int, int, int, int]:
        return a["N"], a["C"], a["H"], a["W"], a["pad_h"], a["pad_w"]

    register_operator(
        Operator(
            name="pad",
            doc="zero padding of an NCHW float32 tensor: Y[N, C, H + 2*pad_h, W + 2*pad_w]",
            params=nchw + pads,
            space=lambda a, target: pad_space(*shape(a), target),
            schedule=lambda cfg, a, target: schedule_pad(cfg, *shape(a)),
            default_config=lambda a, target: default_pad(*shape(a)),
            reference=lambda x, **a: pad_reference(x, pad_h=a["pad_h"], pad_w=a["pad_w"]),
            flops=lambda a: 0.0,
            bytes_moved=lambda a: (
                4.0
                * a["N"]
                * a["C"]
                * (a["H"] * a["W"] + (a["H"] + 2 * a["pad_h"]) * (a["W"] + 2 * a["pad_w"]))
            ),
        )
    )


_register()
