"""The backend contract on cuda, under the simulator: bind combinations, shared and local
scopes, barriers, unrolling, guards for extents no tile divides, several kernels, timing.

The simulator runs every GPU thread as a Python thread: shapes and blocks stay tiny.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba.cuda", reason="the cuda extra (numba-cuda) is not installed")

import tuner
from tuner import te
from tuner.codegen import Timer
from tuner.lower.gpu import gpu_program

from ..core.ops import chain, conv2d, matmul, row_max
from .helpers import random_inputs, run_gpu, tiled_matmul


def test_blocks_and_threads_become_the_launch_grid(gpu) -> None:  # type: ignore[no-untyped-def]
    inputs, C, ref = matmul(13, 11, 5)
    s = te.create_schedule(C)
    tiled_matmul(s, C, *inputs, ty=4, tx=4, shared=False, local=False)
    kern = run_gpu(inputs, C, ref, s, gpu)
    (k,) = gpu_program(kern.lowered.body).kernels
    assert k.grid == (3, 4, 1) and k.block == (4, 4, 1)
    assert "i_o = cuda.blockIdx.y" in kern.source
    assert "[(3, 4, 1), (4, 4, 1)]" in kern.source


def test_shared_tiles_and_register_tiles_with_awkward_extents(gpu) -> None:  # type: ignore[no-untyped-def]
    inputs, C, ref = matmul(13, 11, 7)
    s = te.create_schedule(C)
    tiled_matmul(s, C, *inputs, ty=2, tx=4, ry=3, rx=2, kc=3)
    kern = run_gpu(inputs, C, ref, s, gpu)
    src = kern.source
    # Sized for the block (6 rows x 3 of k; 3 of k x 8 columns), in the layout of the copy's
    # loops: 3 rounds of the 8 threads.
    assert "A_shared = cuda.shared.array(24, numba.float32)" in src
    assert "B_shared = cuda.shared.array(24, numba.float32)" in src
    assert "C_local = cuda.local.array(6, numba.float32)" in src
    assert src.count("cuda.syncthreads()") == 3  # before the copies, between them, after
    printed = str(kern.lowered)
    assert "barrier('shared')" in printed and "scope='shared'" in printed


def test_unrolled_register_tile_inside_threads(gpu) -> None:  # type: ignore[no-untyped-def]
    inputs, C, ref = matmul(8, 8, 6)
    s = te.create_schedule(C)
    tiled_matmul(s, C, *inputs, ty=2, tx=2, ry=2, rx=2, kc=2)
    i_i_i, j_i_i = s[C].leaf_axes[-2:]
    s[C].unroll(i_i_i)
    s[C].unroll(j_i_i)
    kern = run_gpu(inputs, C, ref, s, gpu)
    assert "for i_i_i in" not in kern.source.split("def kernel_k0")[1]


def test_fused_index_and_unbound_loops_inside_threads(gpu) -> None:  # type: ignore[no-untyped-def]
    inputs, C, ref = matmul(9, 7, 5)
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    f = s[C].fuse(i, j)
    fo, fi = s[C].split(f, factor=16)
    s[C].bind(fo, "blockIdx.x")
    s[C].bind(fi, "threadIdx.x")
    (k,) = s[C].op.reduce_axis
    ko, ki = s[C].split(k, factor=2)
    s[C].unroll(ki)
    run_gpu(inputs, C, ref, s, gpu)


def test_three_dimensional_blocks_on_a_convolution(gpu) -> None:  # type: ignore[no-untyped-def]
    inputs, O, ref = conv2d(1, 2, 5, 6, 3, 3, 1, 1)
    P = O.op.inputs[0]
    s = te.create_schedule(O)
    s[P].compute_inline()
    b, f, y, x = s[O].op.axis
    s[O].reorder(f, b, y, x)  # the block index outside the thread indices
    s[O].bind(f, "blockIdx.x")
    s[O].bind(b, "threadIdx.z")
    s[O].bind(y, "threadIdx.y")
    s[O].bind(x, "threadIdx.x")
    kern = run_gpu(inputs, O, ref, s, gpu)
    assert gpu_program(kern.lowered.body).kernels[0].block == (6, 5, 1)


def test_root_stages_are_kernels_with_device_temporaries(gpu) -> None:  # type: ignore[no-untyped-def]
    inputs, O, ref = conv2d(1, 2, 4, 5, 2, 3, 2, 1)
    P = O.op.inputs[0]
    s = te.create_schedule(O)  # the padding is its own stage at the root
    b, f, y, x = s[O].op.axis
    s[O].bind(f, "blockIdx.x")
    s[O].bind(x, "threadIdx.x")
    pb, pc, py, px = s[P].op.axis
    s[P].bind(pc, "blockIdx.x")
    s[P].bind(px, "threadIdx.x")
    kern = run_gpu(inputs, O, ref, s, gpu)
    program = gpu_program(kern.lowered.body)
    assert [t.name for t in program.temps] == ["P"] and len(program.kernels) == 2


def test_unbound_schedules_run_on_one_thread(gpu) -> None:  # type: ignore[no-untyped-def]
    inputs, U, ref = chain(3, 5)
    s = te.create_schedule(U)
    run_gpu(inputs, U, ref, s, gpu, rtol=1e-5, atol=2e-6)
    inputs, M, ref = row_max(3, 7)
    run_gpu(inputs, M, ref, te.create_schedule(M), gpu, rtol=0, atol=0)


def test_a_block_reduction_through_shared_partials(gpu) -> None:  # type: ignore[no-untyped-def]
    """Partial maxima, one per thread, in shared memory; every thread combines them."""
    m, n, lanes = 3, 13, 4
    A = te.placeholder((m, n), "float32", name="A")
    k = te.reduce_axis(-(-n // lanes), name="k")
    part = te.compute(
        (m, lanes),
        lambda i, lane: te.max(A[i, te.minimum(k * lanes, n - lanes) + lane], axis=k),
        name="part",
    )
    t = te.reduce_axis(lanes, name="t")
    total = te.compute((m,), lambda i: te.max(part[i, t], axis=t), name="total")
    Y = te.compute((m, n), lambda i, j: A[i, j] - total[i], name="Y")
    s = te.create_schedule(Y)
    i, j = s[Y].op.axis
    s[Y].bind(i, "blockIdx.x")
    _, ji = s[Y].split(j, factor=lanes)
    s[Y].bind(ji, "threadIdx.x")
    s[total].compute_at(s[Y], i)
    s[part].compute_at(s[total], s[total].op.axis[0])
    s[part].bind(s[part].op.axis[1], "threadIdx.x")
    kern = run_gpu([A], Y, lambda a: a - a.max(axis=1, keepdims=True), s, gpu, rtol=0, atol=0)
    assert "part = cuda.shared.array(4, numba.float32)" in kern.source
    assert "total = cuda.local.array(1, numba.float32)" in kern.source


def test_kernel_checks_arguments_and_times_on_the_device(gpu) -> None:  # type: ignore[no-untyped-def]
    inputs, C, ref = matmul(4, 4, 4)
    s = te.create_schedule(C)
    tiled_matmul(s, C, *inputs, ty=2, tx=2, kc=2)
    kern = tuner.build(s, [*inputs, C], target=gpu)
    a = np.zeros((4, 4), np.float32)
    with pytest.raises(TypeError, match="must be float32"):
        kern(a, a.astype(np.float64), a)
    arrays = random_inputs(inputs)
    out = np.zeros((4, 4), np.float32)
    timer = kern.timer(*arrays, out)
    assert isinstance(timer, Timer)
    timer.run()
    assert not out.any()  # still on the device
    timer.fetch()
    np.testing.assert_allclose(out, ref(*arrays), rtol=1e-5)
    assert timer.seconds(2) > 0


def test_a_tuple_reduction_per_thread(gpu) -> None:  # type: ignore[no-untyped-def]
    """Each thread combines a row's (value, index) pairs in its own registers (an argmax)."""
    M, N = 11, 13
    X = te.placeholder((M, N), name="X")
    k = te.reduce_axis(N, name="k")
    argmax = te.comm_reducer(
        lambda a, b: (
            te.if_then_else(b[0] > a[0], b[0], a[0]),
            te.if_then_else(b[0] > a[0], b[1], a[1]),
        ),
        lambda t: (float("-inf"), -1.0),
        "argmax",
    )
    A = te.compute((M,), lambda i: argmax((X[i, k], k.astype("float32")), axis=k), name="A")
    s = te.create_schedule(A)
    bx, tx = s[A].split(s[A].op.axis[0], factor=4)
    s[A].bind(bx, "blockIdx.x")
    s[A].bind(tx, "threadIdx.x")

    def ref(x: np.ndarray) -> np.ndarray:
        return np.stack([x.max(1), x.argmax(1).astype(np.float32)], axis=1)

    kern = run_gpu([X], A, ref, s, gpu)
    assert "A__next = cuda.local.array" in kern.source
