"""``conv2d_winograd``: a 3 x 3, stride-1 convolution of channels-last images by Winograd's
minimal filtering F(2 x 2, 3 x 3) (Lavin and Gray, 2015), bias, relu and epilogue fused.

Each 2 x 2 block of output pixels (a *tile*) of one output channel comes from the 4 x 4
input patch under it and the channel's 3 x 3 window: with ``d`` the patch, ``g`` the
window and the constant matrices ``BT`` (4 x 4), ``G`` (4 x 3) and ``AT`` (2 x 4),
``Y = AT [(G g G^T) * (BT d B)] A``, where ``*`` multiplies the 16 elements one by one.
Summed over the input channels, the 16 products per tile are 16 matrix products
``M[e] = V[e] @ U[e]`` of the transformed patches ``V[e][tile, c]`` by the transformed
weights ``U[e][c, k]``: 16 multiply-adds per tile and channel pair where the direct
convolution does 36, 2.25 times fewer. The transforms are additions (``BT`` and
``AT`` hold 0 and +-1); the weight's (``G`` holds halves) is the model compiler's,
once, at compile time (:func:`transform_weights`), so the kernel reads ``U[4, 4, C, K]``.

Stages, NHWC, over tiles ``(th, tw)`` of ``TH x TW = ceil(OH/2) x ceil(OW/2)``::

    Xp[n, h, w, c]       = X[n, h - pad, w - pad, c] inside the image, else 0
    V[n, th, tw, a, b, c] = sum_ij BT[a, i] BT[b, j] Xp[n, 2th + i, 2tw + j, c]
    M[n, th, tw, a, b, k] = sum_c V[n, th, tw, a, b, c] * U[a, b, c, k]
    Y[n, oh, ow, k]       = epilogue(sum_ab AT[oh % 2, a] AT[ow % 2, b] M[n, oh//2, ow//2, a, b, k])

The schedule computes all four per row of tiles (the parallel loop): the padded
rows it reads, their transforms (the 16 of a tile unrolled, two vectors of channels
at a time), the products (a register tile of ``twr`` tiles by ``kr``
channels, the channel sum inside, like a matmul's micro-kernel) and the output tile
by tile, its four pixels unrolled and the epilogue on them while the products are in
cache.

Which convolutions run this way is the model compiler's choice (``pays``): a cost
estimate of both kernels on the target (its lanes, registers and L2), where the
transforms and U, re-read for every row of tiles once it outgrows L2, weigh against
the multiply-adds saved. Small images lose (7 x 7: 16 tiles cover 64 pixels of 49,
and U streams once per row of tiles), so do few channels (a first layer's 3).

The transforms' rounding: every value passes two additions in and at most three out,
so the result stays within a few float32 ulps of the sum's magnitude; the weight
transform is computed in float64.

>>> p = params({"N": 1, "C": 8, "H": 6, "W": 6, "K": 8, "pad": 1})
>>> tiles(p)
(3, 3)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tuner import te
from tuner.schedule import Schedule
from tuner.space import ConfigSpace
from tuner.target import Target
from tuner.te import Tensor

from . import Operator, OperatorError, Param, register_operator
from ._conv_define import arguments, finish, padded
from ._conv_numpy import finish as finish_numpy
from ._conv_params import Conv2d
from ._conv_tiles import _spare
from ._cuda import is_gpu
from ._epilogue import NONE, PARAM_DOC
from ._gemm import accumulator_budget
from ._target import resolve

__all__ = [
    "applies",
    "config_space",
    "default_config",
    "params",
    "reference",
    "schedule",
    "stages",
    "tiles",
    "transform_weights",
]

#: The weight transform of F(2 x 2, 3 x 3): ``U = G g G^T`` (4 x 4 from 3 x 3).
G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])
#: The input transform: ``V = BT d BT^T`` (4 x 4 from the 4 x 4 patch).
BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64)
#: The output transform: ``Y = AT M AT^T`` (2 x 2 from 4 x 4).
AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64)


def params(a: Mapping[str, Any]) -> Conv2d:
    """The workload as a :class:`Conv2d` (3 x 3, stride 1, NHWC; the weight is ``U``)."""
    fixed = {"R": 3, "S": 3, "stride": 1, "dilation": 1, "groups": 1, "layout": "NHWC"}
    return Conv2d.from_args({**a, **fixed, "weights": "HWIO", "block": 0})


def applies(p: Conv2d) -> bool:
    """Whether ``p`` is a convolution this operator computes: 3 x 3, stride and dilation 1,
    one group, channels last, padding at most 1 (wider padding reads whole zero tiles)."""
    return (
        p.R == p.S == 3
        and p.stride == p.dilation == p.groups == 1
        and p.nhwc
        and p.pad <= 1
        and min(p.OH, p.OW) >= 1
    )


def tiles(p: Conv2d) -> tuple[int, int]:
    """Rows and columns of 2 x 2 output tiles (the last ones partial on odd extents)."""
    return -(-p.OH // 2), -(-p.OW // 2)


def transform_weights(w: np.ndarray) -> np.ndarray:
    """A ``[K, C, 3, 3]`` weight as ``U[4, 4, C, K]`` (float64 arithmetic, float32 result)."""
    u = np.einsum("ai,kcij,bj->abck", G, np.asarray(w, np.float64), G)
    return np.ascontiguousarray(u, dtype=np.float32)


# -- definition -------------------------------------------------------------------------------


def _combine(rows: np.ndarray, e: te.Expr, f: Callable[[int], te.Expr]) -> te.Expr:
    """``sum_i rows[e, i] * f(i)`` for a transform's row ``e`` (a loop variable the schedule
    unrolls, so the selection folds to one row's additions): the rows hold 0 and +-1."""
    out: te.Expr | None = None
    for r in range(rows.shape[0] - 1, -1, -1):
        terms = sorted(((int(c), i) for i, c in enumerate(rows[r]) if c), key=lambda t: -t[0])
        value = f(terms[0][1])  # every row has a +1: it comes first
        for c, i in terms[1:]:
            value = value + f(i) if c > 0 else value - f(i)
        out = value if out is None else te.if_then_else(te.equal(e, r), value, out)
    assert out is not None
    return out


def stages(p: Conv2d) -> dict[str, Tensor]:
    """Every tensor by role, as conv2d's (``_conv_define.stages``): X, W (the transformed
    weight ``U``), B, the epilogue's E0.., Xp, V, M and Y."""
    TH, TW = tiles(p)
    X = te.placeholder((p.N, p.H, p.W, p.C), "float32", name="X")
    U = te.placeholder((4, 4, p.C, p.K), "float32", name="U")
    t: dict[str, Tensor] = {"X": X, "W": U}
    Xp = padded(p, X, (2 * TH + 2, 2 * TW + 2))  # whole tiles: a row and column more if odd
    assert Xp is not None
    V = te.compute(
        (p.N, TH, TW, 4, 4, p.C),
        lambda n, th, tw, a, b, c: _combine(
            BT, a, lambda i: _combine(BT, b, lambda j: Xp[n, 2 * th + i, 2 * tw + j, c])
        ),
        name="V",
    )
    rc = te.reduce_axis(p.C, name="rc")
    M = te.compute(
        (p.N, TH, TW, 4, 4, p.K),
        lambda n, th, tw, a, b, k: te.sum(V[n, th, tw, a, b, rc] * U[a, b, rc, k], axis=rc),
        name="M",
    )
    if p.bias:
        t["B"] = te.placeholder((p.K,), "float32", name="B")
    for e in p.steps.placeholders(p.K, p.out_shape):
        t[e.name] = e

    def out(n: te.Expr, oh: te.Expr, ow: te.Expr, k: te.Expr) -> te.Expr:
        value = _combine(
            AT, oh % 2, lambda a: _combine(AT, ow % 2, lambda b: M[n, oh // 2, ow // 2, a, b, k])
        )
        return finish(p, t, value, (n, oh, ow, k), k)

    t.update(Xp=Xp, V=V, M=M, Y=te.compute(p.out_shape, out, name="Y"))
    return t


# -- knobs, default and schedule ---------------------------------------------------------------


#: Tiles a register tile of the products takes along a row of tiles.
_TILE_BLOCKS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14)


def _channel_tiles(p: Conv2d, lanes: int) -> list[int]:
    """One to four vectors of output channels; those that divide K where any does (an edge
    block of channels ran 5 to 20 times slower: 64 channels in tiles of 48, 3.7 ms against
    0.25 at 56 x 56, Zen 5)."""
    widths = [v * lanes for v in (1, 2, 3, 4) if v == 1 or v * lanes < p.K + lanes]
    return [w for w in widths if p.K % w == 0] or widths


def config_space(p: Conv2d, target: Target | None = None) -> ConfigSpace:
    """The products' register tile (``kr`` channels by ``twr`` tiles) and the threads."""
    tgt = _cpu(target)
    L, budget = tgt.lanes("float32"), accumulator_budget(tgt)
    sp = ConfigSpace()
    sp.define_knob("kr", _channel_tiles(p, L))
    sp.define_knob("twr", list(_TILE_BLOCKS))
    sp.define_knob("parallel", [True, False])
    sp.add_constraint(
        lambda c: -(-c["kr"] // L) * c["twr"] <= budget,
        f"the twr x kr accumulator tile fits {budget} vector registers of {L} lanes",
    )
    return sp.freeze()


#: Cycles per vector a transform reads, adds and writes (the input's 16 values per tile and
#: channel vector, the output's 16 sums read): fitted on 64 -> 64 channels at 56 x 56, where
#: the transforms took a fifth of the products' time (Zen 5, 2 threads).
_TRANSFORM_CYCLES = 3.2
#: Bytes per cycle a core streams from beyond its L2 in a model, where the weights of the
#: layers before have evicted U from L3: ResNet-50's 3 x 3 convolutions of 256 channels at
#: 14 x 14 (U 4 MiB, read once per row of 7 tiles by each thread) ran 0.51 ms there against
#: 0.27 alone (Zen 5, 2 threads, 4.3 GHz): 24 MiB in 0.24 ms, 11 bytes a cycle per core.
_STREAM_BYTES = 10.0
#: Accumulators from which the products run at full speed: 14 (two vectors by 7 tiles)
#: ran as fast as 16 and 28 (Zen 5: 128 channels at 28 x 28, 0.28 ms against 0.33 for
#: four vectors by 4 tiles, which compute two tiles past the row's 14).
_FULL_SPEED = 12


def _cost(p: Conv2d, kr: int, twr: int, target: Target) -> float:
    """Rough cycles of the Winograd kernel with this tile: the products' FMAs (two a cycle,
    at full speed from ``_FULL_SPEED`` accumulators; blocks of tiles past a row's end
    count) and loads (two a cycle: a panel of U per block of tiles, a broadcast of V per
    tile and channel block), the transforms, and U streamed from beyond L2 once per row
    of tiles where it does not fit in it."""
    L = target.lanes("float32")
    l2 = int(target.get("l2_bytes", 1 << 20))
    TH, TW = tiles(p)
    kv, kblocks, rows, blocks = -(-kr // L), -(-p.K // kr), p.N * TH, -(-TW // twr)
    fma = 16 * p.C * rows * blocks * twr * kblocks * kv
    loads = 16 * p.C * rows * blocks * kblocks * (kv + twr)
    speed = min(1.0, kv * twr / _FULL_SPEED)
    transforms = _TRANSFORM_CYCLES * 16 * (-(-p.C // L) + -(-p.K // L)) * rows * TW
    u_bytes = 64 * p.C * p.K
    far = u_bytes * (rows if u_bytes > l2 else 1)
    return max(fma / 2 / speed, loads / 2) + transforms + far / _STREAM_BYTES


def _direct_cost(p: Conv2d, target: Target) -> float:
    """The direct kernel's cycles on the same measure: its multiply-adds at peak, its weight
    streamed once."""
    L = target.lanes("float32")
    fma = 9 * p.C * -(-p.K // L) * p.N * p.OH * p.OW
    return fma / 2 + 4 * 9 * p.C * p.K / _STREAM_BYTES


def _best(p: Conv2d, target: Target) -> tuple[float, dict[str, Any]]:
    """The least ``_cost`` and its config, over tiles whose live vectors (accumulators, the
    panel's vectors, a broadcast) leave ``_conv_tiles._spare`` registers free; ties go to
    wider channel tiles."""
    L, budget = target.lanes("float32"), accumulator_budget(target)
    room = target.vector_registers - _spare(target.vector_registers)
    TW = tiles(p)[1]
    options = [
        (_cost(p, kr, twr, target), -kr, -twr)
        for kr in _channel_tiles(p, L)
        for twr in _TILE_BLOCKS
        if (kv := -(-kr // L)) * twr <= budget and kv * (twr + 1) + 1 <= room and twr <= TW
    ] or [(_cost(p, L, 1, target), -L, -1)]
    cost, kr, twr = min(options)
    return cost, {"kr": -kr, "twr": -twr, "parallel": p.N * tiles(p)[0] > 1}


def default_config(p: Conv2d, target: Target | None = None) -> dict[str, Any]:
    """The register tile of least ``_cost`` (``_best``)."""
    return _best(p, _cpu(target))[1]


#: How much cheaper the Winograd kernel's estimate must be than the direct one's: its
#: loads and transforms are estimated more coarsely than the direct kernel's FMAs.
_MARGIN = 1.25


def pays(p: Conv2d, target: Target) -> bool:
    """Whether a convolution runs as Winograd's: one it computes (``applies``), on a CPU
    with vectors, estimated at least ``_MARGIN`` times faster than the direct kernel.

    Kernel alone, 2 threads, Zen 5, bias and relu fused, against conv2d's default (ms):
    64 -> 64 at 56 x 56 0.25 against 0.42, 128 at 28 x 28 0.22-0.30 against 0.46, 256 at
    14 x 14 0.27 against 0.43, 128 at 112 x 112 3.8 against 7.1, 64 -> 96 at 35 x 35 0.16
    against 0.25; and 512 at 7 x 7 0.60 against 0.45 (16 tiles cover 64 pixels of 49: it
    loses, and ``pays`` says so).
    """
    if is_gpu(target) or target.lanes("float32") <= 1 or not applies(p):
        return False
    return _best(p, target)[0] * _MARGIN < _direct_cost(p, target)


def schedule(
    cfg: Mapping[str, Any], p: Conv2d, target: Target | None = None
) -> tuple[Schedule, list[Tensor]]:
    """The schedule for ``cfg`` (validated against ``config_space`` by the caller)."""
    L = _cpu(target).lanes("float32")
    t = stages(p)
    Y, M, V, Xp = t["Y"], t["M"], t["V"], t["Xp"]
    s = te.create_schedule(Y)
    n, oh, ow, k = s[Y].op.axis
    th, i = s[Y].split(oh, factor=2)
    tw, j = s[Y].split(ow, factor=2)
    ko, ki = s[Y].split(k, factor=L)
    s[Y].reorder(n, th, tw, i, j, ko, ki)
    row = s[Y].fuse(n, th)
    s[Y].unroll(i)
    s[Y].unroll(j)
    s[Y].vectorize(ki)
    if cfg["parallel"]:
        s[Y].parallel(row)
    s[M].compute_at(s[Y], row)
    mn, mth, mtw, ma, mb, mk = s[M].op.axis
    (mc,) = s[M].op.reduce_axis
    mko, mki = s[M].split(mk, factor=int(cfg["kr"]))
    mto, mti = s[M].split(mtw, factor=int(cfg["twr"]))
    s[M].reorder(mn, mth, ma, mb, mko, mto, mc, mti, mki)
    s[M].vectorize(mki)
    ML = s.cache_write(M, "local")
    s[ML].compute_at(s[M], mto)
    s[V].compute_at(s[Y], row)
    vn, vth, vtw, va, vb, vc = s[V].op.axis
    vco, vci = s[V].split(vc, factor=_chunk(p.C, L))
    s[V].reorder(vn, vth, vtw, vco, va, vb, vci)
    s[V].unroll(va)
    s[V].unroll(vb)
    s[V].vectorize(vci)
    s[Xp].compute_at(s[Y], row)
    _, xci = s[Xp].split(s[Xp].op.axis[3], factor=_chunk(p.C, L))
    s[Xp].vectorize(xci)
    return s, arguments(p, t)


def _chunk(channels: int, lanes: int) -> int:
    """The input channels one pass of the transforms takes: two vectors (all of them where
    there are fewer). Each of a tile's 16 values is a staged vector loop per vector of the
    pass, so the pass sets the kernel's length and its compile time; Zen 5, 2 threads,
    kernel alone, one / two / four vectors: 64 -> 64 channels at 56 x 56 0.248 / 0.237 /
    0.248 ms, built in 3.6 / 6.1 / 10.4 s; 128 at 28 x 28 0.278 / 0.260 / 0.238 ms, 3.5 /
    6.5 / 12.1 s; 64 -> 96 at 35 x 35 0.149 / 0.140 / 0.149 ms, 9.5 / 16.1 / 24.0 s."""
    return min(channels, 2 * lanes)


def _cpu(target: Target | None) -> Target:
    tgt = resolve(target)
    if is_gpu(tgt):
        raise OperatorError("conv2d_winograd has CPU schedules only; use conv2d on a GPU")
    return tgt


# -- reference --------------------------------------------------------------------------------


def reference(
    p: Conv2d,
    x: np.ndarray,
    u: np.ndarray,
    b: np.ndarray | None = None,
    extras: Sequence[np.ndarray] = (),
) -> np.ndarray:
    """The same algorithm in float64 NumPy, written apart from the kernel's stages: every
    tile's patch, its transform, the 16 channel sums, the output transform, cropped; then
    bias, relu and the epilogue on ``extras``."""
    TH, TW = tiles(p)
    xp = np.zeros((p.N, 2 * TH + 2, 2 * TW + 2, p.C))
    xp[:, p.pad : p.pad + p.H, p.pad : p.pad + p.W] = x
    rows = np.arange(TH)[:, None] * 2 + np.arange(4)  # [TH, 4]
    cols = np.arange(TW)[:, None] * 2 + np.arange(4)  # [TW, 4]
    d = xp[:, rows[:, :, None, None], cols[None, None, :, :]]  # [N, TH, 4, TW, 4, C]
    v = np.einsum("ai,ntiwjc,bj->ntwabc", BT, d, BT)
    m = np.einsum("ntwabc,abck->ntwabk", v, u.astype(np.float64))
    y = np.einsum("ia,ntwabk,jb->ntiwjk", AT, m, AT).reshape(p.N, 2 * TH, 2 * TW, p.K)
    y = finish_numpy(p, y[:, : p.OH, : p.OW], None if b is None else b.astype(np.float64), False)
    return p.steps.apply_numpy(y, extras, channel_axis=3).astype(p.steps.out_dtype("float32"))


def _reference_from_args(*arrays: np.ndarray, **args: Any) -> np.ndarray:
    p = params(args)
    x, u, *rest = arrays
    b = rest.pop(0) if p.bias else None
    return reference(p, x, u, b, rest)


def _flops(p: Conv2d) -> float:
    """The convolution's multiply-adds, two FLOPs each (as conv2d counts them: the work the
    kernel replaces, so that GFLOP/s compare), and one per output per epilogue step."""
    return 2.0 * p.macs + p.steps.flops(p.N * p.K * p.OH * p.OW)


def _check(a: Mapping[str, Any]) -> None:
    p = params(a)
    p.check()
    if not applies(p):
        raise OperatorError(f"conv2d_winograd needs padding 0 or 1, got pad={p.pad}")


def _register() -> None:
    register_operator(
        Operator(
            name="conv2d_winograd",
            doc="Y = conv2d(X, W) 3 x 3, stride 1, NHWC, by Winograd F(2x2, 3x3); W given as "
            "U[4, 4, C, K] (search_spaces.winograd.transform_weights)",
            params=(
                Param("N", int, 1, doc="images", pad=0.0),
                Param("C", int, doc="input channels"),
                Param("H", int, doc="input height", pad=0.0),
                Param("W", int, doc="input width", pad=0.0),
                Param("K", int, doc="output channels"),
                Param("pad", int, 1, doc="zeros on every side of the input (0 or 1)", minimum=0),
                Param("bias", bool, False, doc="add a bias B[K] in the epilogue"),
                Param("activation", str, "none", ("none", "relu"), doc="fused epilogue"),
                Param("epilogue", str, NONE, doc=PARAM_DOC),
            ),
            space=lambda a, target: config_space(params(a), target),
            schedule=lambda cfg, a, target: schedule(cfg, params(a), target),
            default_config=lambda a, target: default_config(params(a), target),
            reference=_reference_from_args,
            flops=lambda a: _flops(params(a)),
            check=_check,
        )
    )


_register()
