"""The backend contract: every schedule primitive, built by each backend, against NumPy.

Every test taking ``backend_target`` runs once per target kind that has a
backend (``tuner.codegen.backend_kinds``), skipped where this machine has no
such target; today that is the CPU's Numba backend.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import tuner
from tuner import te

from .ops import chain, conv2d, matmul, row_max

RNG = np.random.default_rng(7)


def run(inputs, out, ref, s, rtol: float = 1e-4, atol: float = 1e-5, target="cpu") -> tuner.Kernel:  # type: ignore[no-untyped-def]
    arrays = []
    for t in inputs:
        shape = t.shape_ints
        if t.dtype == "int8":
            arrays.append(RNG.integers(-128, 128, shape).astype(np.int8))
        else:
            arrays.append((RNG.random(shape, dtype=np.float64) * 2 - 1).astype(t.dtype))
    result = np.full(out.shape_ints, 12345, dtype=out.dtype)
    kern = tuner.build(s, [*inputs, out], target=target)
    kern(*arrays, result)
    np.testing.assert_allclose(result, ref(*arrays), rtol=rtol, atol=atol)
    return kern


def _mm_sched(fn: Callable[..., None], m: int = 37, n: int = 29, k: int = 23):  # type: ignore[no-untyped-def]
    inputs, C, ref = matmul(m, n, k)
    s = te.create_schedule(C)
    fn(s, C, *inputs)
    return inputs, C, ref, s


def _split(s, C, A, B) -> None:  # type: ignore[no-untyped-def]
    i, j = s[C].op.axis
    s[C].split(i, factor=5)
    s[C].split(j, nparts=3)


def _tile(s, C, A, B) -> None:  # type: ignore[no-untyped-def]
    i, j = s[C].op.axis
    s[C].tile(i, j, 8, 16)


def _fuse(s, C, A, B) -> None:  # type: ignore[no-untyped-def]
    i, j = s[C].op.axis
    f = s[C].fuse(i, j)
    s[C].split(f, factor=7)


def _reorder(s, C, A, B) -> None:  # type: ignore[no-untyped-def]
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(ko, j, ki, i)


def _vectorize(s, C, A, B) -> None:  # type: ignore[no-untyped-def]
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    jo, ji = s[C].split(j, factor=8)
    s[C].reorder(i, jo, k, ji)
    s[C].vectorize(ji)


def _unroll(s, C, A, B) -> None:  # type: ignore[no-untyped-def]
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    ko, ki = s[C].split(k, factor=4)
    s[C].unroll(ki)


def _parallel(s, C, A, B) -> None:  # type: ignore[no-untyped-def]
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=4)
    s[C].parallel(io)


def _register_block(s, C, A, B) -> None:  # type: ignore[no-untyped-def]
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    io, jo, ii, ji = s[C].tile(i, j, 4, 8)
    ko, ki = s[C].split(k, factor=8)
    s[C].reorder(io, jo, ko, ki, ii, ji)
    CL = s.cache_write(C, "local")
    s[CL].compute_at(s[C], jo)
    s[C].unroll(ii)
    s[C].vectorize(ji)


def _register_block_inside_k(s, C, A, B) -> None:  # type: ignore[no-untyped-def]
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    io, jo, ii, ji = s[C].tile(i, j, 4, 8)
    ko, ki = s[C].split(k, factor=8)
    s[C].reorder(ko, io, jo, ki, ii, ji)
    CL = s.cache_write(C, "local")
    s[CL].compute_at(s[C], jo)


def _pack(s, C, A, B) -> None:  # type: ignore[no-untyped-def]
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    jo, ji = s[C].split(j, factor=16)
    ko, ki = s[C].split(k, factor=8)
    s[C].reorder(jo, ko, i, ki, ji)
    BB = s.cache_read(B, "global", [C])
    s[BB].compute_at(s[C], ko)
    bk, bj = s[BB].op.axis
    bjo, bji = s[BB].split(bj, factor=4)
    s[BB].reorder(bjo, bk, bji)


def _pack_root(s, C, A, B) -> None:  # type: ignore[no-untyped-def]
    AA = s.cache_read(A, "global", [C])
    ai, ak = s[AA].op.axis
    s[AA].reorder(ak, ai)  # store A transposed


PRIMITIVES = [
    _split,
    _tile,
    _fuse,
    _reorder,
    _vectorize,
    _unroll,
    _parallel,
    _register_block,
    _register_block_inside_k,
    _pack,
    _pack_root,
]


@pytest.mark.parametrize("prim", PRIMITIVES, ids=lambda f: f.__name__.strip("_"))
def test_matmul_primitive(prim, backend_target) -> None:  # type: ignore[no-untyped-def]
    inputs, C, ref, s = _mm_sched(prim)
    run(inputs, C, ref, s, target=backend_target)


def test_int8_matmul_accumulates_in_int32(backend_target) -> None:  # type: ignore[no-untyped-def]
    inputs, C, ref = matmul(9, 11, 64, dtype="int8")
    s = te.create_schedule(C)
    run(inputs, C, ref, s, rtol=0, atol=0, target=backend_target)


def test_conv2d_with_padding_inline_and_compute_at(backend_target) -> None:  # type: ignore[no-untyped-def]
    inputs, O, ref = conv2d(1, 3, 7, 9, 4, 3, 2, 1)
    P = O.op.inputs[0]
    s = te.create_schedule(O)
    s[P].compute_inline()
    run(inputs, O, ref, s, target=backend_target)
    s = te.create_schedule(O)
    b, f, y, x = s[O].op.axis
    s[P].compute_at(s[O], y)
    run(inputs, O, ref, s, target=backend_target)


def test_row_max_and_elementwise_chain(backend_target) -> None:  # type: ignore[no-untyped-def]
    inputs, M, ref = row_max(13, 31)
    s = te.create_schedule(M)
    (k,) = s[M].op.reduce_axis
    s[M].split(k, factor=8)
    run(inputs, M, ref, s, rtol=0, atol=0, target=backend_target)
    inputs, U, ref = chain(7, 19)
    s = te.create_schedule(U)
    s[U.op.inputs[0]].compute_inline()
    run(inputs, U, ref, s, rtol=1e-5, atol=2e-6, target=backend_target)


def test_a_target_without_gpu_threads_rejects_bindings(backend_target) -> None:  # type: ignore[no-untyped-def]
    if backend_target.get("max_threads_per_block", 0):
        pytest.skip(f"{backend_target.kind} runs GPU threads")
    inputs, C, ref = matmul(4, 4, 4)
    s = te.create_schedule(C)
    s[C].bind(s[C].op.axis[0], "threadIdx.x")
    with pytest.raises(tuner.ScheduleError, match="has no GPU threads"):
        tuner.build(s, [*inputs, C], target=backend_target)


def test_kernel_checks_its_arguments(backend_target) -> None:  # type: ignore[no-untyped-def]
    inputs, C, ref = matmul(4, 4, 4)
    kern = tuner.build(te.create_schedule(C), [*inputs, C], target=backend_target)
    a = np.zeros((4, 4), np.float32)
    with pytest.raises(TypeError, match="must be float32"):
        kern(a, a.astype(np.float64), a)
    with pytest.raises(TypeError, match="C-contiguous"):
        kern(a, np.asfortranarray(np.ones((4, 4), np.float32)), a)
    assert "def kernel(A, B, C)" in kern.source


def test_fast_math_intrinsics_match_numpy() -> None:
    from math import erf

    from tuner.codegen.cpu.runtime import erf32, exp32, sigmoid32, tanh32

    x = np.concatenate([np.linspace(-87, 88, 2001), np.linspace(-1e-3, 1e-3, 101)]).astype(
        np.float32
    )
    exp = np.array([exp32(v) for v in x])
    np.testing.assert_allclose(exp, np.exp(x.astype(np.float64)), rtol=3e-7, atol=1e-37)
    np.testing.assert_allclose([tanh32(v) for v in x], np.tanh(x), rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(
        [sigmoid32(v) for v in x], 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-6, atol=1e-30
    )
    np.testing.assert_allclose([erf32(v) for v in x], [erf(v) for v in x], atol=3e-7)


def test_both_exp_scalings_match_numpy_in_vector_loops() -> None:
    """exp32 scales by 2**n from exponent bits or with AVX-512's vscalefps (``exp32`` is the
    host's); both, vectorized, agree with NumPy and keep the clamp's limits at the infinities."""

    from tuner.codegen.cpu import runtime

    x = np.concatenate(
        [np.linspace(-87, 88, 4001), [-np.inf, np.inf, -1e4, 1e4, -88.0, 0.0]]
    ).astype(np.float32)
    lo, hi = np.float32(-87.33654), np.float32(88.72283)  # the clamp, in float32
    want = np.exp(np.clip(x, lo, hi).astype(np.float64))
    hosts = [runtime.exp32_bits]
    if runtime.compiles_avx512():  # elsewhere vscalefps is a libm call per element
        hosts.append(runtime.exp32_scalef)
    for exp in hosts:
        loop = _vector_loop(exp)
        y = np.empty_like(x)
        loop(x, y)
        np.testing.assert_allclose(y, want, rtol=3e-7, atol=0)
        assert np.all(np.isfinite(y))


def _vector_loop(exp):  # type: ignore[no-untyped-def]
    """``y[i] = exp(x[i])`` over arrays, compiled with the backend's FMA contraction."""
    import numba

    @numba.njit(fastmath={"contract"})
    def loop(x, y):  # type: ignore[no-untyped-def]
        for i in range(x.size):
            y[i] = exp(x[i])

    return loop
