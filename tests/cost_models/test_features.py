"""Loop features: fixed length, finite, deterministic, and telling schedules apart.

Only lowering happens here (cheap); no kernel is compiled.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tuner
from cost_models import LOOP_FEATURE_NAMES, loop_features
from search_spaces import matmul
from tuner import te
from tuner.lower.ir import For, Load, Seq, Store
from tuner.lower.lower import LoweredFunc
from tuner.te.expr import Var

SETTINGS = settings(
    max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)
AWKWARD = st.sampled_from([1, 2, 3, 7, 13, 17, 31, 64, 97])


def features(s: tuner.Schedule, tensors: list[te.Tensor]) -> dict[str, float]:
    x = loop_features(tuner.lower(s, tensors))
    return dict(zip(LOOP_FEATURE_NAMES, x.tolist(), strict=True))


def plain_matmul(m: int = 32, n: int = 48, k: int = 16):  # type: ignore[no-untyped-def]
    A = te.placeholder((m, k), "float32", name="A")
    B = te.placeholder((k, n), "float32", name="B")
    r = te.reduce_axis(k, name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = te.create_schedule(C)
    return s, [A, B, C]


def check(x: np.ndarray) -> None:
    assert x.shape == (len(LOOP_FEATURE_NAMES),)
    assert x.dtype == np.float64
    assert np.isfinite(x).all()


def test_names_are_unique_and_fixed() -> None:
    assert len(set(LOOP_FEATURE_NAMES)) == len(LOOP_FEATURE_NAMES)
    assert "log_parallel_extent" in LOOP_FEATURE_NAMES


def test_vector_has_one_finite_slot_per_name_and_is_deterministic() -> None:
    cfg = matmul.default_config(100, 67, 33)
    s, tensors = matmul.schedule(cfg, 100, 67, 33)
    x = loop_features(tuner.lower(s, tensors))
    check(x)
    s2, tensors2 = matmul.schedule(cfg, 100, 67, 33)
    np.testing.assert_array_equal(x, loop_features(tuner.lower(s2, tensors2)))


def test_loop_order_changes_the_access_pattern_of_b() -> None:
    s, tensors = plain_matmul()
    ijk = features(s, tensors)  # innermost k: B[k, j] jumps a row per iteration
    s, tensors = plain_matmul()
    C = tensors[2]
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    s[C].reorder(i, k, j)
    ikj = features(s, tensors)  # innermost j: B[k, j] is contiguous
    assert ijk["arg1_contiguous"] == 0.0 and ijk["arg1_strided"] == 1.0
    assert ijk["arg1_log_stride"] == np.log2(1 + 48)
    assert ikj["arg1_contiguous"] == 1.0
    assert ikj["arg0_invariant"] == 1.0  # A[i, k] does not move with j
    assert ikj["access_contiguous_fraction"] > ijk["access_contiguous_fraction"]
    # Same work either way: 32*48 inits + 32*48*16 updates, 2 flops per update.
    assert ijk["log_iterations"] == ikj["log_iterations"] == np.log2(1 + 32 * 48 * 17)
    assert ijk["log_flops"] == np.log2(1 + 2 * 32 * 48 * 16)
    assert ijk["hot_float_ops"] == 2.0 and ijk["hot_loads"] == 3.0


def test_parallel_and_vectorize_set_their_features() -> None:
    s, tensors = plain_matmul()
    base = features(s, tensors)
    C = tensors[2]
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    jo, ji = s[C].split(j, factor=8)
    s[C].reorder(i, jo, k, ji)
    s[C].parallel(i)
    s[C].vectorize(ji)
    f = features(s, tensors)
    assert base["log_parallel_extent"] == 0.0 and base["n_parallel_loops"] == 0
    assert f["log_parallel_extent"] == np.log2(1 + 32)
    assert f["n_parallel_loops"] == 1 and f["parallel_fraction"] == 1.0
    assert f["hot_inner_vectorize"] == 1.0 and f["log_vector_length"] == np.log2(1 + 8)
    assert f["hot_inner_const_extent"] == 1.0


def test_unroll_product_multiplies_unrolled_extents() -> None:
    s, tensors = plain_matmul()
    C = tensors[2]
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    io, ii = s[C].split(i, factor=4)
    jo, ji = s[C].split(j, factor=3)
    s[C].reorder(io, jo, k, ii, ji)
    s[C].unroll(ii)
    s[C].unroll(ji)
    f = features(s, tensors)
    assert f["n_unroll_loops"] == 4  # the init nest is unrolled too
    assert f["log_unroll_product"] == np.log2(1 + 12)
    assert f["hot_inner_unroll"] == 1.0


def test_register_cache_allocates_local_bytes() -> None:
    s, tensors = plain_matmul()
    assert features(s, tensors)["log_alloc_bytes_local"] == 0.0
    C = tensors[2]
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    io, ii = s[C].split(i, factor=4)
    jo, ji = s[C].split(j, factor=8)
    s[C].reorder(io, jo, k, ii, ji)
    CL = s.cache_write(C, "local")
    s[CL].compute_at(s[C], jo)
    f = features(s, tensors)
    assert f["n_alloc_local"] == 1
    assert f["log_alloc_bytes_local"] == np.log2(1 + 4 * 8 * 4)
    assert f["access_local_fraction"] > 0.0


def test_bounded_edge_loops_count_by_their_upper_bound() -> None:
    s, tensors = plain_matmul(m=30, n=8, k=4)
    C = tensors[2]
    i, _ = s[C].op.axis
    s[C].split(i, factor=8)  # 4 tiles of 8 rows; the last has 6: min(8, 30 - 8*i_o)
    f = features(s, tensors)
    assert f["n_bounded_loops"] >= 1
    assert f["log_iterations"] == np.log2(1 + 32 * 8 * 5)


def test_hand_built_ir_without_loops_or_known_buffers() -> None:
    body = Seq(
        (
            Store("out", (), Load("mystery", (Var("q") // 3,), "float64")),
            For("i", Var("n"), "threadIdx.x", Store("out", (Var("i"),), Load("x", (), "int8"))),
        )
    )
    x = loop_features(LoweredFunc("odd", (), body))
    check(x)
    f = dict(zip(LOOP_FEATURE_NAMES, x.tolist(), strict=True))
    assert f["n_thread_loops"] == 1 and f["n_stores"] == 2


@given(AWKWARD, AWKWARD, AWKWARD, st.integers(0, 2**32 - 1))
@SETTINGS
def test_random_matmul_configs_never_crash(m: int, n: int, k: int, seed: int) -> None:
    cfg = matmul.config_space(m, n, k).sample(np.random.default_rng(seed))
    s, tensors = matmul.schedule(cfg, m, n, k)
    f = features(s, tensors)
    assert np.isfinite(list(f.values())).all()
    assert f["hot_float_ops"] == 2.0 or f["log_iterations"] > 0
    packed = int(bool(cfg["pack_b"])) + int(bool(cfg["pack_a"]))
    assert f["n_alloc_local"] == 1 and f["n_alloc_global"] == packed
    once = bool(cfg["pack_a"]) and cfg["pack_a_at"] == "once"  # A's pack is a loop of its own
    # (C is not zeroed in a loop of its own: the register tile starts its sums)
    assert f["n_parallel_loops"] == int(bool(cfg["parallel"])) * (1 + once)


@st.composite
def conv_schedule(draw):  # type: ignore[no-untyped-def]
    """A padded convolution with a random split, order, fuse and annotation."""
    c, h, kk = draw(st.sampled_from([1, 3])), draw(st.sampled_from([5, 7])), 2
    X = te.placeholder((1, c, h, h), "float32", name="X")
    W = te.placeholder((kk, c, 3, 3), "float32", name="W")
    P = te.compute(
        (1, c, h + 2, h + 2),
        lambda b, ch, y, x: te.if_then_else(
            (y >= 1) & (y < h + 1) & (x >= 1) & (x < h + 1), X[b, ch, y - 1, x - 1], 0.0
        ),
        name="P",
    )
    rc, ry, rx = te.reduce_axis(c, "rc"), te.reduce_axis(3, "ry"), te.reduce_axis(3, "rx")
    O = te.compute(
        (1, kk, h, h),
        lambda b, f, y, x: te.sum(P[b, rc, y + ry, x + rx] * W[f, rc, ry, rx], axis=[rc, ry, rx]),
        name="O",
    )
    s = te.create_schedule(O)
    if draw(st.booleans()):
        s[P].compute_inline()
    _, f, y, x = s[O].op.axis
    xo, xi = s[O].split(x, factor=draw(st.integers(1, 4)))
    order = draw(st.permutations([f, y, xo, rc, ry, rx, xi]))
    s[O].reorder(*order)
    if draw(st.booleans()):
        fused = s[O].fuse(order[0], order[1]) if order[0] in (f, y) and order[1] in (f, y) else None
        if fused is not None and draw(st.booleans()):
            s[O].parallel(fused)
    if draw(st.booleans()):
        s[O].unroll(xi)
    return s, [X, W, O]


@given(conv_schedule())
@SETTINGS
def test_random_conv_schedules_never_crash(case) -> None:  # type: ignore[no-untyped-def]
    s, tensors = case
    x = loop_features(tuner.lower(s, tensors))
    check(x)


def test_traffic_reads_the_targets_cache_sizes() -> None:
    """A smaller L1 refetches more of the same loop nest; without a target, the defaults."""
    from tuner.target import Target

    s, tensors = plain_matmul(64, 64, 64)
    func = tuner.lower(s, tensors)
    names = list(LOOP_FEATURE_NAMES)
    tiny = Target.make("cpu", l1d_bytes=1024, l2_bytes=1 << 20)
    large = Target.make("cpu", l1d_bytes=1 << 20, l2_bytes=1 << 22)
    l1 = names.index("log_bytes_l1")
    assert loop_features(func, tiny)[l1] > loop_features(func, large)[l1]
    default = Target.make("cpu", l1d_bytes=32 * 1024, l2_bytes=1024 * 1024)
    np.testing.assert_array_equal(loop_features(func), loop_features(func, default))
