"""Dense (PyTorch's ``Linear``) ``Y = act(X @ W.T + bias)``: definition, reference, knobs, schedule.

``X`` is ``[batch, in_features]``, ``W`` is ``[out_features, in_features]`` as
PyTorch stores it, ``bias`` is ``[out_features]`` (if any), and the activation
is none, relu, gelu (PyTorch's default, the erf form), sigmoid or tanh.

The product ``C`` is matmul's GotoBLAS nest (:func:`search_spaces._gemm.register_blocked`)
with W packed from its ``[N, K]`` rows into ``[KC][NR]`` panels; the bias and
the activation (the epilogue) are the output stage ``Y``, and ``C`` is
computed inside ``Y``'s loops, so each piece of ``C`` is finished and read back
while it is still in cache. With ``epilogue_at="panel"`` (the default) that
piece is an ``MC x NR`` panel, in L1::

    for jo in N / NC:                         # parallel across cores if chosen
      for io in M / MC:
        for jb in NC / NR:
          for ko in K / KC:                   # C's nest, on this MC x NR panel
            pack W[jb, ko] into [KC][NR]
            for ib in MC / MR:
              MR x NR register tile += over KC
          for ib in MC / MR:                  # the epilogue, on the same panel
            for ir in MR:
              for jv in NR:                   # vectorized
                Y = act(C + bias)

With ``epilogue_at="block"`` ``C`` is computed for an ``MC x NC`` block at
``io`` (W packed as ``[NC/NR][KC][NR]`` once per ko, matmul's own order) and
the epilogue reads the block back from L2. Panels read all of X's row block
(``MC x K``, in L2 at the suite's 128 x 768) for every NR columns, blocks an
``MC x KC`` piece for every NC columns.

With ``vectors="batch"`` the roles turn round: the product is computed
transposed, X is packed once per call and W is read in place, so the weight
is never copied (see :func:`_batch_vectors`).

Why not at the register tile's store: with K split into KC blocks the tile is
stored once per block and only the last store holds the finished sum, and the
schedule language has no "on the last block" epilogue; computing ``C`` at
``Y``'s tile loop instead would pack W once per tile (a cache_read can only be
computed at a loop of a stage that reads it). Without bias and activation the
output is the product itself, scheduled exactly like matmul.

``epilogue`` (``search_spaces._epilogue``) adds elementwise steps after the
activation, a channel being an output feature; they are computed in ``Y``
with the bias, so the space is that of a bias.

One module past the usual size on purpose, like every template here: one
operator's definition, reference, knobs, defaults and schedule read together;
the shared pieces are already apart (``_gemm``'s nest, ``_gemv``, ``_cuda``).

>>> target = Target.make("cpu", vector_lanes=8, vector_registers=16)
>>> cfg = config_space(128, 768, 3072, True, "relu", target).validate(
...     default_config(128, 768, 3072, True, "relu", target=target))
>>> s, tensors = schedule(cfg, 128, 768, 3072, True, "relu")
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tuner import te
from tuner.graph.ops.activations import NP, TE
from tuner.lower.extent import normal
from tuner.schedule import Schedule
from tuner.space import ConfigSpace
from tuner.target import Target
from tuner.te import Tensor

from ._cuda import is_gpu
from ._cuda import matmul as gpu
from ._epilogue import NONE, PARAM_DOC, UNARY, apply_numpy, check_epilogue
from ._epilogue import parse as parse_epilogue
from ._gemm import (
    Packing,
    accumulator_budget,
    default_k_unroll,
    define_gemm_knobs,
    gemm_default,
    kc_choices,
    mr_choices,
    operand_packing,
    pack_panels,
    register_blocked,
    tile_registers,
)
from ._gemv import gemv_product, schedule_gemv
from ._target import parallel_pays, resolve

__all__ = [
    "ACTIVATIONS",
    "config_space",
    "default_config",
    "define",
    "flops",
    "reference",
    "schedule",
]

#: The activations ``activation=`` takes, on the biased product: the epilogue language's own
#: (``_epilogue.UNARY``), so the kernel and the reference compute the same function.
ACTIVATIONS = ("none", "relu", "gelu", "sigmoid", "tanh")


def _activation(name: str) -> Callable[[te.Expr], te.Expr]:
    if name == "none":
        return lambda v: v
    fn = UNARY[name].fn
    return lambda v: fn(TE, v)  # type: ignore[no-any-return]


def _stages(
    M: int,
    K: int,
    N: int,
    bias: bool,
    activation: str,
    transposed: bool = False,
    epilogue: str = NONE,
    gemv_lanes: int = 0,
) -> tuple[list[Tensor], Tensor, Tensor]:
    """The inputs, the product ``C`` and the output ``Y`` (``C`` itself with no epilogue).

    ``transposed`` computes the product as ``C[j, i]`` (``N x M``), which the
    output then reads transposed, with or without an epilogue. ``gemv_lanes``
    computes it as lane-wise partial sums along ``k`` (``search_spaces._gemv``),
    ``C`` then being their sum. The inputs are X, W, the bias (if any) and the
    extra inputs of ``epilogue``'s steps.
    """
    X = te.placeholder((M, K), "float32", name="X")
    W = te.placeholder((N, K), "float32", name="W")
    inputs = [X, W]
    k = te.reduce_axis(K, name="k")
    steps = parse_epilogue(epilogue)
    plain = not bias and activation == "none" and not transposed and not steps
    tail = None
    if gemv_lanes:
        _, C, tail = gemv_product(X, W, gemv_lanes)
        plain = False  # the output adds the tail, or copies C
    elif transposed:
        C = te.compute((N, M), lambda j, i: te.sum(W[j, k] * X[i, k], axis=k), name="C")
    else:
        C = te.compute(
            (M, N), lambda i, j: te.sum(X[i, k] * W[j, k], axis=k), name="Y" if plain else "C"
        )
    if plain:
        return inputs, C, C

    def product(i: Any, j: Any) -> te.Expr:
        if tail is not None:
            return C[i, j] + tail[i, j]
        return C[j, i] if transposed else C[i, j]

    act = _activation(activation)
    b = te.placeholder((N,), "float32", name="bias") if bias else None
    extras = steps.placeholders(N, (M, N))
    inputs += [*([b] if b is not None else []), *extras]

    def output(i: Any, j: Any) -> te.Expr:
        v = product(i, j) if b is None else product(i, j) + b[j]
        return steps.apply(act(v), j, (i, j), extras)

    Y = te.compute((M, N), output, name="Y")
    return inputs, C, Y


def define(
    batch: int,
    in_features: int,
    out_features: int,
    bias: bool = True,
    activation: str = "none",
    epilogue: str = NONE,
) -> list[Tensor]:
    """``X``, ``W``, ``bias`` (if any), the epilogue's extra inputs and the output ``Y``."""
    inputs, _, Y = _stages(batch, in_features, out_features, bias, activation, epilogue=epilogue)
    return [*inputs, Y]


def reference(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    activation: str = "none",
    epilogue: str = NONE,
    extras: Sequence[np.ndarray] = (),
) -> np.ndarray:
    y = x.astype(np.float64) @ w.T.astype(np.float64)
    if b is not None:
        y += b
    if activation != "none":
        y = UNARY[activation].fn(NP, y)
    y = apply_numpy(epilogue, y, extras, channel_axis=1)
    return y.astype(parse_epilogue(epilogue).out_dtype("float32"))


def flops(batch: int, in_features: int, out_features: int, epilogue: str = NONE) -> float:
    """The product's multiply-adds and one operation per output per epilogue step
    (the bias and the activation are not counted)."""
    steps = parse_epilogue(epilogue)
    return 2.0 * batch * in_features * out_features + steps.flops(batch * out_features)


def config_space(
    batch: int,
    in_features: int,
    out_features: int,
    bias: bool = True,
    activation: str = "none",
    target: Target | None = None,
    epilogue: str = NONE,
) -> ConfigSpace:
    """Matmul's register tile (on ``target``, the host CPU when None) and cache blocks,
    parallel, where the epilogue reads C, and whether the tile's vectors run along the
    output features (W packed) or the batch. Epilogue steps take the knobs of a bias."""
    tgt = resolve(target)
    narrowest = tgt.vector_lanes
    sp = ConfigSpace()
    define_gemm_knobs(sp, batch, out_features, in_features, tgt, sizes=False)
    sp.define_knob("parallel", [True, False])
    has_epilogue = bias or activation != "none" or epilogue != NONE
    sp.define_knob("epilogue_at", ["panel", "block"] if has_epilogue else ["none"])
    gemv = batch <= _GEMV_UP_TO and in_features >= tgt.lanes("float32")
    sp.define_knob("vectors", ["features", "batch", *(["k"] if gemv else [])], absent="features")

    def fits(c: Any) -> bool:
        if c["vectors"] == "k":  # MR features a tile, NR lanes of partial sums along k
            return bool(c["mr"] <= out_features and c["nr"] <= in_features)
        rows, cols = (batch, out_features) if c["vectors"] == "features" else (out_features, batch)
        return bool(c["nr"] <= 2 * cols + narrowest and c["mr"] <= rows)

    sp.add_constraint(fits, "tiles no larger than the matrix (MR along the rows, NR the vectors)")
    sp.add_constraint(
        lambda c: (
            c["vectors"] == "features"
            or (c["nc_tiles"] == 1 and c["epilogue_at"] in ("panel", "none"))
        ),
        "with vectors along the batch or k, NC and epilogue_at take their first values (unused)",
    )
    first_kc = kc_choices(in_features)[0]
    sp.add_constraint(
        lambda c: (
            c["vectors"] != "k"
            or (c["kc"] == first_kc and c["mc_tiles"] == 1 and c["k_unroll"] == 1)
        ),
        "with vectors along k, KC, MC and the unrolling take their first values (unused)",
    )
    return sp.freeze()


#: The smallest batch whose default tile runs its vectors along the batch, for short
#: reductions (fewer than ``_LONG_REDUCTION`` input features).
_BATCH_VECTORS_FROM = 64
#: From this many input features the batch's vectors win from the smallest batch past the
#: GEMV's: the features' orientation packs all of W on every call, N x K floats for a
#: batch of a few rows. Two threads, Zen 4, GFLOP/s features/batch at 768 -> 3072:
#: batch 16 70/203, 49 102/161; 3072 -> 768: 16 20/153, 49 54/147; 2048 -> 1000: 32
#: 37/163; but 96 -> 384, 49 rows: 89/41 (26 of 30 shapes of 9 to 63 rows went to the
#: batch, all four others at 96 features).
_LONG_REDUCTION = 256
#: The largest batch whose space has vectors along k (a matrix-vector product, or nearly).
_GEMV_UP_TO = 8
#: The largest batch whose default runs vectors along k, and the features of its tile:
#: two threads, bias, against the features default: 1 x 2048 -> 1000 (ResNet-50's
#: classifier) 0.12 against 3.52 ms, 1 x 1280 -> 1000 0.089 against 0.52, 8 x 768
#: -> 3072 0.50 against 0.68 (NumPy 0.53); 6 features a tile against 4: 0.50 against 0.58.
GEMV_DEFAULT_UP_TO = 8
_GEMV_ROWS = 6


def default_config(
    batch: int,
    in_features: int,
    out_features: int,
    bias: bool = True,
    activation: str = "none",
    vectors: str | None = None,
    target: Target | None = None,
    epilogue: str = NONE,
) -> dict[str, Any]:
    """Vectors along k up to a batch of 8 (``search_spaces._gemv``: W read once, in
    place), along the batch from 64 rows, or from 9 with 256 input features or more
    (a 6x16 tile, blocks of 48 features; see ``_LONG_REDUCTION``), else
    matmul's default tile with MC up to 144 rows (one row block for a batch of 128), panels.

    The batch tile is 6 rows of two vectors of the target's lanes (6x16 with
    AVX2, 6x32 with AVX-512: 12 accumulators either way, as matmul's default).

    At 128 x 768 x 3072 with relu, interleaved with NumPy's ``matmul``, ``add``
    and ``maximum`` (``out=``), 11 rounds: vectors along the batch 4.7 ms on two
    threads and 8.8 on one, the features default 5.4 and 9.9, NumPy 5.9 and
    10.1. A smaller batch would leave vector lanes idle.

    With vectors along the features, W is packed once per row block, so a
    row block that holds the whole batch packs each weight once. ``vectors``
    ("features" or "batch") asks for one orientation whatever the batch.
    """
    has_epilogue = bias or activation != "none" or epilogue != NONE
    epilogue_at = "panel" if has_epilogue else "none"
    tgt = resolve(target)
    cfg = gemm_default(batch, out_features, in_features, tgt)
    L = tgt.lanes("float32")
    if vectors is None and batch <= GEMV_DEFAULT_UP_TO and in_features >= L:
        vectors = "k"
    if vectors is None:
        long = in_features >= _LONG_REDUCTION
        vectors = (
            "batch"
            if batch >= (GEMV_DEFAULT_UP_TO + 1 if long else _BATCH_VECTORS_FROM)
            else "features"
        )
    if vectors == "k":
        unused = {"kc": kc_choices(in_features)[0], "mc_tiles": 1, "nc_tiles": 1, "k_unroll": 1}
        tile = {"mr": min(_GEMV_ROWS, out_features), "nr": L}
        return {
            **cfg,
            **unused,
            **tile,
            "parallel": parallel_pays(batch * in_features * out_features, tgt),
            "epilogue_at": epilogue_at,
            "vectors": "k",
        }
    if vectors == "batch":
        kc = in_features if in_features <= 1024 else cfg["kc"]
        lanes, budget = tgt.vector_lanes, accumulator_budget(tgt)
        nr = 2 * lanes
        fit = [m for m in mr_choices(tgt) if tile_registers(m, nr, lanes) <= budget]
        mr = min(6, max(fit, default=1), out_features)
        tile = {"mr": mr, "nr": nr, "kc": kc, "mc_tiles": 8, "nc_tiles": 1}
        tile["k_unroll"] = default_k_unroll(kc, in_features)
        return {**cfg, **tile, "parallel": True, "epilogue_at": epilogue_at, "vectors": "batch"}
    mr = cfg["mr"]
    fits = [t for t in (1, 2, 4, 8, 16, 24, 32) if t == 1 or t * mr <= 144]
    cfg["mc_tiles"] = next((t for t in fits if t * mr >= batch), fits[-1])
    return {**cfg, "parallel": True, "epilogue_at": epilogue_at, "vectors": "features"}


def schedule(
    cfg: Mapping[str, Any],
    batch: int,
    in_features: int,
    out_features: int,
    bias: bool = True,
    activation: str = "none",
    epilogue: str = NONE,
) -> tuple[Schedule, list[Tensor]]:
    """The schedule for ``cfg`` (validate configs from outside against config_space first)."""
    along_batch = cfg.get("vectors", "features") == "batch"
    lanes = int(cfg["nr"]) if cfg.get("vectors") == "k" else 0
    inputs, C, Y = _stages(
        batch, in_features, out_features, bias, activation, along_batch, epilogue, lanes
    )
    s = te.create_schedule(Y)
    if lanes:
        schedule_gemv(s, cfg, Y)
        return s, [*inputs, Y]
    if along_batch:
        _batch_vectors(s, cfg, inputs[0], C, Y)
        return s, [*inputs, Y]
    W = inputs[1]
    pack = operand_packing(W, transposed=True, which="B")
    if Y is C:
        loops = register_blocked(s, C, cfg, pack_b=pack)
        if cfg["parallel"]:
            s[C].parallel(loops.jo)
        return s, [*inputs, Y]
    mr, nr = int(cfg["mr"]), int(cfg["nr"])
    mc, nc = mr * int(cfg["mc_tiles"]), nr * int(cfg["nc_tiles"])
    i, j = s[Y].op.axis
    jo, ji = s[Y].split(j, factor=nc)
    jb, jv = s[Y].split(ji, factor=nr)
    io, ii = s[Y].split(i, factor=mc)
    ib, ir = s[Y].split(ii, factor=mr)
    s[Y].reorder(jo, io, jb, ib, ir, jv)
    s[Y].vectorize(jv)
    if cfg["parallel"]:
        s[Y].parallel(jo)
    panel = cfg["epilogue_at"] == "panel"
    s[C].compute_at(s[Y], jb if panel else io)
    register_blocked(s, C, cfg, pack_b=pack, nc=nr if panel else nc)
    return s, [*inputs, Y]


#: SIMD width of the epilogue's pieces when the register tile runs along the batch.
_EPILOGUE_LANES = 16


def _batch_vectors(s: Schedule, cfg: Mapping[str, Any], X: Tensor, C: Tensor, Y: Tensor) -> None:
    """The register tile's vectors run along the batch; W is read in place, X packed once.

    With vectors along the output features, W (``[N, K]``) is copied into
    ``[KC][NR]`` panels, a transposing copy of the whole weight on every call:
    at 128 x 768 x 3072 on one thread, about 1 ms of 10. Here the product is
    computed transposed, ``C[j, i]``, by matmul's nest with W as its A (read
    in place: the tile broadcasts MR values of W's rows per k) and X as its B,
    packed into ``[M/NR][K][NR]`` panels once, before the parallel loop (98K
    values for the suite's shape). The epilogue reads C back transposed::

        pack X into [M/NR][K][NR] panels           (parallel over panels)
        for jo in N / MC:                        # parallel across cores if chosen
          for ko in K / KC:                      # C's nest, on an MC x M block
            for jb in M / NR:
              for ib in MC / MR:
                MR x NR register tile += over KC (vectors along the batch)
          for i in M:                            # the epilogue, on the same block
            for jv in MC:                        # SIMD pieces, C read with a stride of M
              Y[i, j] = act(C[j, i] + bias[j])
    """
    mr, nr = int(cfg["mr"]), int(cfg["nr"])
    mc = mr * int(cfg["mc_tiles"])
    i, j = s[Y].op.axis
    block, ji = s[Y].split(j, factor=mc)
    jp, jv = s[Y].split(ji, factor=min(_EPILOGUE_LANES, mc))
    s[Y].reorder(block, i, jp, jv)
    s[Y].vectorize(jv)
    if cfg["parallel"]:
        s[Y].parallel(block)
    s[C].compute_at(s[Y], block)
    M = normal(X.shape[0])  # a symbolic batch: C's blocks of NC columns cover it in turn
    register_blocked(s, C, cfg, nc=M if isinstance(M, int) else None)
    pack_panels(s, Packing(X, tile_dim=0, k_dim=1), C, nr, parallel=cfg["parallel"])


def _gpu_schedule(
    cfg: Mapping[str, Any],
    batch: int,
    in_features: int,
    out_features: int,
    bias: bool,
    activation: str,
    epilogue: str,
) -> tuple[Schedule, list[Tensor]]:
    """The GPU matmul nest (``search_spaces._cuda.matmul``) with the bias, activation and
    epilogue applied by each thread to its register tile."""
    inputs, C, Y = _stages(batch, in_features, out_features, bias, activation, epilogue=epilogue)
    X, W, *extras = inputs
    if Y is C:
        return gpu.schedule(cfg, X, W, C)
    return gpu.schedule(cfg, X, W, C, extras, Y)


def _register() -> None:
    from . import Operator, Param, register_operator

    def arguments(a: Mapping[str, Any]) -> tuple[int, int, int, bool, str]:
        return a["batch"], a["in_features"], a["out_features"], a["bias"], a["activation"]

    def epilogue(a: Mapping[str, Any]) -> str:
        return str(a.get("epilogue", NONE))

    register_operator(
        Operator(
            name="dense",
            doc="Y = act(X @ W.T + bias) (PyTorch's Linear) with X: batch x in_features,"
            " W: out_features x in_features; the bias and activation are fused",
            params=(
                Param("batch", int, doc="rows of X and Y", pad=0.0),
                Param("in_features", int, doc="columns of X and W", pad=0.0),
                Param("out_features", int, doc="rows of W, columns of Y", pad=0.0),
                Param("bias", bool, True, doc="add a bias of out_features"),
                Param("activation", str, "none", ACTIVATIONS, doc="applied after the bias"),
                Param("epilogue", str, NONE, doc=PARAM_DOC),
            ),
            space=lambda a, target: (
                gpu.config_space(a["batch"], a["out_features"], a["in_features"], "float32", target)
                if is_gpu(target)
                else config_space(*arguments(a), target, epilogue(a))
            ),
            schedule=lambda cfg, a, target: (
                _gpu_schedule(cfg, *arguments(a), epilogue(a))
                if is_gpu(target)
                else schedule(cfg, *arguments(a), epilogue(a))
            ),
            default_config=lambda a, target: (
                gpu.default_config(a["batch"], a["out_features"], a["in_features"], target)
                if is_gpu(target)
                else default_config(*arguments(a), target=target, epilogue=epilogue(a))
            ),
            reference=_registry_reference,
            flops=lambda a: flops(a["batch"], a["in_features"], a["out_features"], epilogue(a)),
            check=lambda a: check_epilogue(epilogue(a), "float32", "dense"),
        )
    )


def _registry_reference(*arrays: np.ndarray, **args: Any) -> np.ndarray:
    """``reference(*inputs, **parsed_args)`` as the registry calls it (the activation is an arg)."""
    if "activation" not in args:
        raise TypeError("the dense reference needs the operator's arguments as keywords")
    x, w, *rest = arrays
    b = rest.pop(0) if args.get("bias", True) else None
    epilogue = str(args.get("epilogue", NONE))
    return reference(x, w, b, args["activation"], epilogue, rest)


_register()
