from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tuner
from search_spaces import OperatorError, dense, get_operator
from search_spaces.matmul import default_k_unroll
from tuner.lower.ir import For, If, Stmt, Store
from tuner.lower.visitor import StmtVisitor, walk_stmts

from .targets import AVX2, AVX512


def check(cfg, m: int, k: int, n: int, bias: bool, activation: str) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(1)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    s, tensors = dense.schedule(cfg, m, k, n, bias, activation)
    out = np.full((m, n), 7, np.float32)
    inputs = [x, w, b] if bias else [x, w]
    tuner.build(s, tensors)(*inputs, out)
    expected = dense.reference(*inputs, activation=activation)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def default(m: int, k: int, n: int, bias: bool, activation: str):  # type: ignore[no-untyped-def]
    space = dense.config_space(m, k, n, bias, activation, target=AVX2)
    return space.validate(dense.default_config(m, k, n, bias, activation, target=AVX2))


@pytest.mark.parametrize(
    "bias, activation",
    [(True, "relu"), (True, "gelu"), (False, "sigmoid"), (True, "tanh"), (True, "none")],
)
def test_each_activation_matches_pytorch_semantics(bias: bool, activation: str) -> None:
    """Awkward extents: 7 rows, 33 inputs and 45 outputs divide no tile."""
    check(default(7, 33, 45, bias, activation), 7, 33, 45, bias, activation)


def test_without_epilogue_it_is_the_plain_product() -> None:
    cfg = default(5, 70, 40, False, "none")
    assert cfg["epilogue_at"] == "none"
    check(cfg, 5, 70, 40, False, "none")


def test_epilogue_on_the_cached_block() -> None:
    cfg = dense.config_space(13, 33, 45, True, "relu", target=AVX2).validate(
        {
            **dense.default_config(13, 33, 45, True, "relu", target=AVX2),
            "epilogue_at": "block",
            "kc": 32,
        }
    )
    check(cfg, 13, 33, 45, True, "relu")


def _along_batch(m: int, k: int, n: int, bias: bool, activation: str, **knobs: object):  # type: ignore[no-untyped-def]
    space = dense.config_space(m, k, n, bias, activation, target=AVX2)
    base = {
        **dense.default_config(m, k, n, bias, activation, target=AVX2),
        "nc_tiles": 1,
        "vectors": "batch",
    }
    if base["epilogue_at"] == "block":
        base["epilogue_at"] = "panel"
    cfg = {**base, **knobs}
    if "k_unroll" not in knobs:  # the default's unrolling fits the default KC
        cfg["k_unroll"] = default_k_unroll(int(cfg["kc"]), k)  # type: ignore[call-overload]
    return space.validate(cfg)


@pytest.mark.parametrize(
    "m, k, n, bias, activation, knobs",
    [
        (7, 33, 45, True, "relu", {"mr": 6, "nr": 8, "kc": 32, "mc_tiles": 2}),
        (13, 33, 45, True, "gelu", {"mr": 3, "nr": 16, "kc": 33, "mc_tiles": 4}),
        (13, 70, 40, False, "none", {"mr": 4, "nr": 8, "kc": 64, "mc_tiles": 1}),
        (1, 5, 3, True, "tanh", {"mr": 1, "nr": 8, "kc": 32, "mc_tiles": 2}),
        (16, 64, 96, False, "sigmoid", {"mr": 6, "nr": 16, "kc": 64, "mc_tiles": 16}),
    ],
)
def test_vectors_along_the_batch_match_numpy(  # type: ignore[no-untyped-def]
    m: int, k: int, n: int, bias: bool, activation: str, knobs
) -> None:
    """Awkward extents: neither NR nor MC nor KC divides the shape in most cases."""
    check(_along_batch(m, k, n, bias, activation, **knobs), m, k, n, bias, activation)


@pytest.mark.parametrize(
    "m, k, n, bias, activation, mr, nr",
    [
        (1, 1280, 1000, True, "none", 4, 8),  # MobileNetV2's classifier
        (1, 37, 5, True, "relu", 4, 8),  # K % lanes != 0, fewer features than MR
        (3, 64, 7, False, "gelu", 6, 16),  # a small batch, MR does not divide N
        (2, 8, 1, True, "tanh", 1, 8),  # one feature, K one vector
    ],
)
def test_vectors_along_k_match_numpy(  # type: ignore[no-untyped-def]
    m: int, k: int, n: int, bias: bool, activation: str, mr: int, nr: int
) -> None:
    space = dense.config_space(m, k, n, bias, activation, target=AVX2)
    along_k = dense.default_config(m, k, n, bias, activation, vectors="k", target=AVX2)
    cfg = space.validate({**along_k, "mr": mr, "nr": nr})
    check(cfg, m, k, n, bias, activation)


def test_a_batch_of_one_defaults_to_vectors_along_k_and_reads_w_in_place() -> None:
    cfg = default(1, 2048, 1000, True, "none")
    assert cfg["vectors"] == "k"
    s, tensors = dense.schedule(cfg, 1, 2048, 1000, True, "none")
    assert "W_global" not in str(tuner.lower(s, tensors))  # no packed copy of the weight
    assert default(9, 2048, 1000, True, "none")["vectors"] != "k"


def test_a_matrix_vector_product_sums_its_lanes_and_applies_the_epilogue_in_parallel() -> None:
    """Cheap (no compile): one parallel loop computes each block of features' lane partials,
    their sums (and the tail of ``k`` past the last vector) and the epilogue; a serial pass
    over the whole output after it took a quarter of the call (1 x 512 -> 1000: 22 us
    against 16 without, Zen 5, two threads)."""
    cfg = {**default(1, 1001, 500, True, "relu"), "parallel": True}
    s, tensors = dense.schedule(cfg, 1, 1001, 500, True, "relu")
    func = tuner.lower(s, tensors)
    (nest,) = _top_loops(func.body)
    assert nest.kind == "parallel"
    assert {"P_local", "P", "C", "T", "Y"} <= set(_stores(nest))


def test_vectors_along_the_batch_pack_x_not_w() -> None:
    """Cheap (no compile): X is packed once, before the parallel loop; W is read in place."""
    m, k, n = 128, 768, 3072
    cfg = _along_batch(m, k, n, True, "relu", mr=6, nr=16, kc=768, mc_tiles=16)
    s, tensors = dense.schedule(cfg, m, k, n, True, "relu")
    func = tuner.lower(s, tensors)
    pack, nest = _top_loops(func.body)
    assert pack.kind == nest.kind == "parallel"
    assert set(_stores(pack)) == {"X_global"}
    assert {"C", "C_local", "Y"} <= set(_stores(nest)) and "W_global" not in str(func)
    assert "X_global = allocate(float32[8, 768, 16]" in str(func)


def test_knobs_unused_along_the_batch_take_one_value() -> None:
    space = dense.config_space(128, 768, 3072, True, "relu", target=AVX2)
    with pytest.raises(tuner.space.ConfigError, match="unused"):
        space.validate({**_along_batch(128, 768, 3072, True, "relu"), "nc_tiles": 2})


def _stores(s: Stmt) -> list[str]:
    return [x.buffer for x in walk_stmts(s) if isinstance(x, Store)]


class _TopLoops(StmtVisitor):
    """The outermost loops, through sequences and allocations (not inside conditions)."""

    def __init__(self) -> None:
        self.found: list[For] = []

    def visit_For(self, s: For) -> None:
        self.found.append(s)

    def visit_If(self, s: If) -> None:
        return None


def _top_loops(s: Stmt) -> list[For]:
    walker = _TopLoops()
    walker.visit(s)
    return walker.found


@pytest.mark.parametrize("epilogue_at", ["panel", "block"])
def test_the_epilogue_is_fused_not_a_second_pass(epilogue_at: str) -> None:
    """Cheap (no compile): one parallel loop nest computes C and applies the epilogue.

    Each W panel is packed once per row block: the panel order packs only the
    KC x NR slice its register tiles read.
    """
    m, k, n = 128, 768, 3072
    cfg = {**default(m, k, n, True, "relu"), "epilogue_at": epilogue_at, "vectors": "features"}
    s, tensors = dense.schedule(cfg, m, k, n, True, "relu")
    func = tuner.lower(s, tensors)
    (nest,) = _top_loops(func.body)
    assert nest.kind == "parallel"
    assert {"C", "C_local", "W_global", "Y"} <= set(_stores(nest))
    text = str(func)
    nr, kc = cfg["nr"], cfg["kc"]
    width = nr if epilogue_at == "panel" else nr * cfg["nc_tiles"]
    assert f"W_global = allocate(float32[{width // nr}, {kc}, {nr}]" in text


@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (1, 5, 3), (7, 33, 45), (128, 768, 3072)])
@pytest.mark.parametrize("bias, activation", [(True, "relu"), (False, "none"), (False, "gelu")])
def test_default_config_is_valid_for_any_shape(
    m: int, k: int, n: int, bias: bool, activation: str
) -> None:
    default(m, k, n, bias, activation)


def test_default_runs_vectors_along_a_large_batch() -> None:
    """At the suite's shape: vectors along the batch, no edge tiles; a batch of 9 to 63 too
    when the reduction is long (W is not packed on every call), but it keeps features over
    96 input features (one of at most 8 runs its vectors along k)."""
    cfg = dense.default_config(128, 768, 3072, True, "relu", target=AVX2)
    assert cfg["vectors"] == "batch" and cfg["epilogue_at"] == "panel"
    assert 128 % cfg["nr"] == 0 and 3072 % (cfg["mr"] * cfg["mc_tiles"]) == 0
    assert dense.default_config(9, 768, 3072, True, "relu", target=AVX2)["vectors"] == "batch"
    small = dense.default_config(9, 96, 3072, True, "relu", target=AVX2)
    assert small["vectors"] == "features"
    asked = dense.default_config(128, 768, 3072, True, "relu", vectors="features", target=AVX2)
    assert asked["vectors"] == "features" and asked["mr"] * asked["mc_tiles"] >= 128
    assert small["mr"] * small["mc_tiles"] >= 9, "one row block holds the whole batch"


def test_random_legal_configs_lower() -> None:
    """Cheap (no compile): the constraints admit only schedules that lower."""
    rng = np.random.default_rng(0)
    for m, k, n, bias, act in [
        (1, 1, 1, True, "relu"),
        (7, 33, 45, False, "tanh"),
        (9, 300, 64, False, "none"),
    ]:
        space = dense.config_space(m, k, n, bias, act, target=AVX2)
        for cfg in space.sample_many(rng, 15):
            s, tensors = dense.schedule(cfg, m, k, n, bias, act)
            tuner.lower(s, tensors)


@given(
    st.sampled_from([1, 6, 13]),
    st.sampled_from([1, 33, 64]),
    st.sampled_from([1, 17, 48]),
    st.integers(0, 2**32 - 1),
)
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_random_configs_match_numpy_on_awkward_shapes(m: int, k: int, n: int, seed: int) -> None:
    space = dense.config_space(m, k, n, True, "relu", target=AVX2)
    check(space.sample(np.random.default_rng(seed)), m, k, n, True, "relu")


def test_registered_operator_validates_its_arguments() -> None:
    op = get_operator("dense")
    args = op.parse_args(
        {"batch": "4", "in_features": "6", "out_features": "5", "activation": "gelu"}
    )
    assert args["bias"] is True
    x, w, b = op.make_inputs(args)
    assert (x.shape, w.shape, b.shape) == ((4, 6), (5, 6), (5,))
    np.testing.assert_allclose(
        op.reference(x, w, b, **args), dense.reference(x, w, b, "gelu"), rtol=1e-6
    )
    with pytest.raises(TypeError, match="arguments as keywords"):
        op.reference(x, w, b)
    with pytest.raises(OperatorError, match="activation must be one of none, relu, gelu"):
        op.parse_args({"batch": 4, "in_features": 6, "out_features": 5, "activation": "swish"})
    with pytest.raises(OperatorError, match="in_features must be a positive integer"):
        op.parse_args({"batch": 4, "in_features": 0, "out_features": 5})


def test_reference_gelu_is_the_erf_form() -> None:
    x = np.array([[-3.0, -1.0, 0.0, 0.5, 2.0]], np.float32)
    eye = np.eye(5, dtype=np.float32)
    expected = [-0.00404969, -0.15865525, 0.0, 0.34573123, 1.95449974]
    np.testing.assert_allclose(dense.reference(x, eye, None, "gelu")[0], expected, rtol=1e-5)


@pytest.mark.parametrize("vectors", ["features", "batch"])
def test_a_tile_only_avx512_registers_hold_builds_and_matches_numpy(vectors: str) -> None:
    """6 x 48 along the 37 features (18 registers of 16 lanes), 10 x 32 along the 17 rows (20)."""
    m, k, n = 17, 13, 37
    tile = {"mr": 6, "nr": 48} if vectors == "features" else {"mr": 10, "nr": 32}
    base = dense.default_config(m, k, n, True, "relu", vectors, target=AVX512)
    cfg = {**base, **tile}
    assert not dense.config_space(m, k, n, True, "relu", target=AVX2).is_valid(cfg)
    check(
        dense.config_space(m, k, n, True, "relu", target=AVX512).validate(cfg),
        m,
        k,
        n,
        True,
        "relu",
    )
