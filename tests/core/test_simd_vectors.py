"""SIMD loops written in explicit vectors (``LoopRewrites._vectors``, ``codegen.cpu.vectors``)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tuner
from search_spaces import get_operator
from tuner import te
from tuner.target import Target

RNG = np.random.default_rng(17)
HOST = Target.from_name("cpu", num_threads=1)


def _narrower(lanes: int) -> Target:
    """The host with vectors of ``lanes`` float32: kernels of narrower vectors run on it too."""
    return Target.make("cpu", **{**dict(HOST.capabilities), "vector_lanes": lanes})


def _build(op: str, args: dict[str, object], target: Target, simd: bool = True):  # type: ignore[no-untyped-def]
    o = get_operator(op)
    parsed = o.parse_args(args)
    s, tensors = o.schedule(o.default_config(parsed, target), parsed, target)
    kern = tuner.build(s, tensors, target=target, options=tuner.BuildOptions(simd=simd))
    return o, parsed, kern, tensors[-1].shape_ints


@pytest.mark.parametrize("lanes", [4, 8, 16])
@pytest.mark.parametrize(("M", "N", "K"), [(49, 37, 67), (1, 53, 9), (13, 128, 1)])
def test_matmul_tiles_in_vectors_match_numpy(lanes: int, M: int, N: int, K: int) -> None:
    """The default register tile, at every vector width, over shapes no tile divides."""
    target = _narrower(lanes)
    if HOST.lanes("float32") < lanes:
        pytest.skip(f"this machine has no vectors of {lanes} float32")
    _, _, kern, _ = _build("matmul", {"M": M, "N": N, "K": K}, target)
    if M > 1 < N:  # (a single row or column is a matrix-vector product: no tile)
        assert f"vstore{lanes}(" in kern.source
    a = RNG.standard_normal((M, K)).astype(np.float32)
    b = RNG.standard_normal((K, N)).astype(np.float32)
    c = np.full((M, N), np.nan, np.float32)
    kern(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_without_simd_the_source_has_no_vectors() -> None:
    _, _, kern, _ = _build("matmul", {"M": 64, "N": 64, "K": 64}, HOST, simd=False)
    assert "vstore" not in kern.source.split("def ", 1)[1]


@pytest.mark.parametrize(
    "args",
    [
        {"N": 1, "C": 5, "H": 13, "W": 11, "K": 37, "R": 3, "S": 3, "pad": 1},
        {"N": 2, "C": 16, "H": 7, "W": 7, "K": 49, "R": 1, "S": 1, "stride": 2},
    ],
)
def test_channels_last_convolution_in_vectors_matches_numpy(args: dict[str, int]) -> None:
    """conv2d's channels-last tile (bias and relu after it, staged as before)."""
    full = {**args, "layout": "NHWC", "weights": "HWIO", "bias": True, "activation": "relu"}
    op, parsed, kern, shape = _build("conv2d", full, HOST)
    lanes = HOST.lanes("float32")
    assert f"vstore{lanes}(" in kern.source
    inputs = op.make_inputs(parsed, target=HOST)
    out = np.full(shape, np.nan, np.float32)
    kern(*inputs, out)
    np.testing.assert_allclose(out, op.reference(*inputs, **parsed), rtol=1e-4, atol=1e-4)


def _shifted(n: int, lanes: int):  # type: ignore[no-untyped-def]
    """``Y[i, j] = X[i, j] * 2 - b[j]`` and ``Y[i, j] = Y[i, j] + 1`` on a loop of ``lanes``."""
    X = te.placeholder((3, n), "float32", name="X")
    b = te.placeholder((n,), "float32", name="b")
    Y = te.compute((3, n), lambda i, j: X[i, j] * 2.0 - b[j], name="Y")
    s = te.create_schedule(Y)
    _, j = s[Y].op.axis
    _, ji = s[Y].split(j, factor=lanes)
    s[Y].vectorize(ji)
    return s, [X, b, Y]


@pytest.mark.parametrize("n", [16, 40, 7])
def test_elementwise_loop_in_vectors(n: int) -> None:
    """A subtraction and a constant, a broadcast of nothing; pieces short of a vector stay loops."""
    lanes = HOST.lanes("float32")
    s, args = _shifted(n, lanes)
    kern = tuner.build(s, args, target=HOST, options=tuner.BuildOptions(vectorizer="slp"))
    assert (f"vstore{lanes}(" in kern.source) == (n >= lanes)
    x = RNG.standard_normal((3, n)).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    y = np.full((3, n), np.nan, np.float32)
    kern(x, b, y)
    np.testing.assert_allclose(y, x * 2 - b, rtol=1e-6)


def test_a_store_that_reads_another_element_of_its_buffer_stays_scalar() -> None:
    """``Y[j] = Y[j + 1] * 2`` read in vectors would see lanes the same vector writes later in
    the scalar loop's order; it is left to the SLP vectorizer."""
    from tuner.codegen.cpu.loops import _vectorizable
    from tuner.codegen.cpu.source import NumbaRenderer
    from tuner.kinds import Scope
    from tuner.lower.ir import Buffer, For, Load, Store
    from tuner.lower.lower import LoweredFunc
    from tuner.te.expr import Binary, Const, Var

    y = Buffer("Y", (64,), "float32", Scope.GLOBAL, is_arg=True)
    j = Var("j", "int64")
    later = Load("Y", (Binary("add", j, Const(1), "int64"),), "float32")
    store = Store("Y", (j,), Binary("mul", later, Const(2.0, "float32"), "float32"))
    r = NumbaRenderer(LoweredFunc("k", (y,), For("j", Const(32), "vectorize", store)), True, 16)
    assert not _vectorizable(store.value, "j", store, r)
    same = Store(
        "Y", (j,), Binary("mul", Load("Y", (j,), "float32"), Const(2.0, "float32"), "float32")
    )
    assert _vectorizable(same.value, "j", same, r)
    r.visit(For("j", Const(32), "vectorize", store))
    assert "vstore" not in "\n".join(r.lines)


@pytest.mark.parametrize(("M", "mr"), [(96, 6), (101, 6), (64, 8)])
def test_an_unrolled_tile_of_whole_vectors_stays_a_loop_in_the_source(M: int, mr: int) -> None:
    """The register tile's rows and its unrolled reduction steps are loops of vector
    statements, which LLVM unrolls, not ``mr x k_unroll`` copies for Numba to type and
    lower; its partial sums load and store in vectors. Rows past the last whole tile take
    an edge version as well; every shape matches NumPy."""
    if HOST.lanes("float32") < 16:
        pytest.skip("the statements below are written for vectors of 16 float32")
    o = get_operator("matmul")
    parsed = o.parse_args({"M": M, "N": 64, "K": 48})
    cfg = {**o.default_config(parsed, HOST), "mr": mr, "nr": 32, "nc_tiles": 2, "k_unroll": 4}
    cfg["kc"] = 48  # (NC is N: no column edge, whose copies of the tile stay scalar loops)
    s, tensors = o.schedule(cfg, parsed, HOST)
    kern = tuner.build(s, tensors, target=HOST)
    updates = [ln for ln in kern.source.splitlines() if re.search(r"vstore16\(C_local.*vmul16", ln)]
    assert len(updates) in (2, 4)  # one statement per vector of a row (per tile version)
    assert re.search(r"for k_i_i in range\(4\):\n\s+for i_i_i in range\(\d+\):", kern.source)
    assert "C_local[np.uint64" not in kern.source  # no scalar copies of the tile
    a = RNG.standard_normal((M, 48)).astype(np.float32)
    b = RNG.standard_normal((48, 64)).astype(np.float32)
    c = np.full((M, 64), np.nan, np.float32)
    kern(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


_MATH = [("vexp", "exp32"), ("verf", "erf32"), ("vtanh", "tanh32"), ("vsigmoid", "sigmoid32")]


@pytest.mark.parametrize("lanes", [4, 8, 16])
@pytest.mark.parametrize(("vector", "scalar"), _MATH)
def test_vector_math_is_the_scalar_helper_bit_for_bit(lanes: int, vector: str, scalar: str) -> None:
    """Each lane of ``vexp16``... computes what ``runtime.exp32``... computes, exactly, over
    a wide range (underflow, overflow, zeros of both signs, the clamps' edges)."""
    import numba

    from tuner.codegen.cpu import runtime, vectors

    if HOST.lanes("float32") < lanes:
        pytest.skip(f"this machine has no vectors of {lanes} float32")
    vfn, load, store = (getattr(vectors, f"{n}{lanes}") for n in (vector, "vload", "vstore"))
    sfn = getattr(runtime, scalar)

    @numba.njit(fastmath={"contract"}, error_model="numpy")
    def in_vectors(a, out):  # type: ignore[no-untyped-def]
        for i in range(0, a.size, lanes):
            store(out, i, vfn(load(a, i)))

    @numba.njit(fastmath={"contract"}, error_model="numpy")
    def in_scalars(a, out):  # type: ignore[no-untyped-def]
        for i in range(a.size):
            out[i] = sfn(a[i])

    a = (RNG.standard_normal(1024) * 4).astype(np.float32)
    a[:10] = [0.0, -0.0, 1e-30, -1e-30, 90.0, -90.0, 87.5, -88.0, 7.9988, -9.0]
    got, want = np.empty_like(a), np.empty_like(a)
    in_vectors(a, got)
    in_scalars(a, want)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("epilogue", ["sigmoid;mul@v0", "clip:0.0:6.0", "gelu", "tanh;relu"])
def test_an_activation_epilogue_is_written_in_vectors(epilogue: str) -> None:
    """A channels-last 1 x 1 convolution's SiLU, clip, GELU or tanh epilogue: vector calls
    in the source, one per vector of a row, and NumPy's values."""
    lanes = HOST.lanes("float32")
    args = {"N": 1, "C": 24, "H": 7, "W": 9, "K": 2 * lanes, "R": 1, "S": 1}
    args.update(layout="NHWC", weights="HWIO", bias=True, epilogue=epilogue)
    o, parsed, kern, out_shape = _build("conv2d", args, HOST)
    calls = ("vsigmoid", "vmin", "verf", "vtanh")
    assert any(f"{c}{lanes}(" in kern.source for c in calls), kern.source
    inputs = o.make_inputs(parsed, target=HOST)
    out = np.full(out_shape, np.nan, np.float32)
    kern(*inputs, out)
    np.testing.assert_allclose(out, o.reference(*inputs, **parsed), rtol=1e-4, atol=1e-4)
