"""Legality before anything is built: each kind of GPU schedule a block cannot run, or would
run racily, is one ScheduleError that names the step at fault."""

from __future__ import annotations

import pytest

pytest.importorskip("numba.cuda", reason="the cuda extra (numba-cuda) is not installed")

import tuner
from tuner import te
from tuner.target import Target

from ..core.ops import matmul
from .helpers import tiled_matmul


def _lower(s, tensors, target: Target) -> None:  # type: ignore[no-untyped-def]
    tuner.lower(s, tensors, target=target)


def test_too_many_threads_per_block(gpu) -> None:  # type: ignore[no-untyped-def]
    inputs, C, _ = matmul(64, 64, 4)
    s = te.create_schedule(C)
    tiled_matmul(s, C, *inputs, ty=32, tx=64, shared=False, local=False)
    limit = gpu.cap("max_threads_per_block")
    with pytest.raises(
        tuner.ScheduleError,
        match=rf"^bind\(stage='C', axis='j_i_o', thread='threadIdx.x'\): the block would have "
        rf"2048 threads \(x 64 x y 32\), more than the {limit} per block",
    ):
        _lower(s, [*inputs, C], gpu)


def test_too_many_threads_along_z(gpu) -> None:  # type: ignore[no-untyped-def]
    X = te.placeholder((128, 2), "float32", name="X")
    Y = te.compute((128, 2), lambda i, j: X[i, j] + 1.0, name="Y")
    s = te.create_schedule(Y)
    s[Y].bind(s[Y].op.axis[0], "threadIdx.z")
    with pytest.raises(tuner.ScheduleError, match="128 threads along z, more than the 64"):
        _lower(s, [X, Y], gpu)


def test_too_many_blocks_along_y(gpu) -> None:  # type: ignore[no-untyped-def]
    X = te.placeholder((70000,), "float32", name="X")
    Y = te.compute((70000,), lambda i: X[i] + 1.0, name="Y")
    s = te.create_schedule(Y)
    s[Y].bind(s[Y].op.axis[0], "blockIdx.y")
    with pytest.raises(
        tuner.ScheduleError,
        match=r"^bind\(stage='Y', axis='i', thread='blockIdx.y'\): the grid would have 70000 "
        "blocks along y, more than the 65535",
    ):
        _lower(s, [X, Y], gpu)


def test_too_much_shared_memory_per_block(gpu) -> None:  # type: ignore[no-untyped-def]
    inputs, C, _ = matmul(128, 128, 128)
    s = te.create_schedule(C)
    tiled_matmul(s, C, *inputs, ty=16, tx=16, ry=8, rx=8, kc=64)
    limit = gpu.cap("max_shared_memory_per_block")
    with pytest.raises(
        tuner.ScheduleError,
        match=r"^cache_read\(tensor='\w', scope='shared', readers=\('C',\)\): the block's shared "
        rf"buffers take 65536 bytes \(\w_shared 32768, \w_shared 32768\), more than the {limit}",
    ):
        _lower(s, [*inputs, C], gpu)


def test_an_index_bound_twice_in_one_stage() -> None:
    inputs, C, _ = matmul(8, 8, 2)
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    s[C].bind(i, "threadIdx.x")
    with pytest.raises(tuner.ScheduleError, match=r"^bind\(.*axis='j'.*already bound to axis i"):
        s[C].bind(j, "threadIdx.x")


def _producer_inside(bind_producer: str, at_block: bool):  # type: ignore[no-untyped-def]
    X = te.placeholder((16,), "float32", name="X")
    P = te.compute((16,), lambda i: X[i] * 2.0, name="P")
    Y = te.compute((16,), lambda i: P[i] + 1.0, name="Y")
    s = te.create_schedule(Y)
    bo, bi = s[Y].split(s[Y].op.axis[0], factor=4)
    s[Y].bind(bo, "blockIdx.x")
    s[Y].bind(bi, "threadIdx.x")
    s[P].compute_at(s[Y], bo if at_block else bi)
    s[P].bind(s[P].op.axis[0], bind_producer)
    return s, [X, Y]


def test_a_block_index_bound_again_inside_a_block(gpu) -> None:  # type: ignore[no-untyped-def]
    s, tensors = _producer_inside("blockIdx.x", at_block=True)
    with pytest.raises(
        tuner.ScheduleError,
        match=r"^bind\(stage='P', axis='i', thread='blockIdx.x'\): its iterations run on "
        "different blocks, but buffer P that they write is a block's own",
    ):
        _lower(s, tensors, gpu)


def test_a_block_index_inside_a_thread_index(gpu) -> None:  # type: ignore[no-untyped-def]
    s, tensors = _producer_inside("blockIdx.y", at_block=False)
    with pytest.raises(
        tuner.ScheduleError,
        match=r"^bind\(stage='P', axis='i', thread='blockIdx.y'\): a loop bound to a block index"
        " must enclose every thread-bound loop",
    ):
        _lower(s, tensors, gpu)


def test_a_thread_index_reused_by_a_cooperative_stage_is_legal(gpu) -> None:  # type: ignore[no-untyped-def]
    s, tensors = _producer_inside("threadIdx.x", at_block=False)
    func = tuner.lower(s, tensors, target=gpu)
    assert "P = allocate(float32[4], scope='shared')" in str(func)


def test_threads_writing_a_private_buffer(gpu) -> None:  # type: ignore[no-untyped-def]
    inputs, C, _ = matmul(8, 8, 4)
    A, B = inputs
    s = te.create_schedule(C)
    tiled_matmul(s, C, A, B, ty=2, tx=2, shared=False, local=False)
    AL = s.cache_read(A, "local", [C])
    s[AL].compute_at(s[C], s[C].leaf_axes[1])  # at the block's column loop, outside the threads
    s[AL].bind(s[AL].op.axis[1], "threadIdx.x")
    with pytest.raises(
        tuner.ScheduleError,
        match=r"^bind\(stage='A_local', axis='ax1', thread='threadIdx.x'\): its iterations run on "
        "different threads, but buffer A_local that they write is private to each thread",
    ):
        _lower(s, [A, B, C], gpu)


def test_a_shared_buffer_at_the_root_has_no_barrier_to_wait_at(gpu) -> None:  # type: ignore[no-untyped-def]
    inputs, C, _ = matmul(8, 8, 4)
    A, B = inputs
    s = te.create_schedule(C)
    tiled_matmul(s, C, A, B, ty=2, tx=2, shared=False, local=False)
    s.cache_read(A, "shared", [C])
    with pytest.raises(
        tuner.ScheduleError,
        match=r"^cache_read\(tensor='A', scope='shared', readers=\('C',\)\): shared buffer "
        "A_shared is computed at the root, in a kernel of its own",
    ):
        _lower(s, [A, B, C], gpu)


def test_a_barrier_only_some_threads_reach(gpu) -> None:  # type: ignore[no-untyped-def]
    """The copies use 8 threads along x, the product 4: a product thread loop guarded to 4 of
    the block's 8 threads holds the copies' barriers, which the other 4 would never reach."""
    inputs, C, _ = matmul(8, 8, 4)
    A, B = inputs
    s = te.create_schedule(C)
    tiled_matmul(s, C, A, B, ty=2, tx=4, kc=2, copy_threads=(2, 8))
    with pytest.raises(
        tuner.ScheduleError,
        match=r"^cache_read\(tensor='\w', scope='shared', readers=\('C',\)\): the barrier of this "
        r"shared buffer sits where only some of the block's threads go \(loop j_i_o is bound to 4 "
        "of the block's 8 threads along x\\)",
    ):
        _lower(s, [A, B, C], gpu)


def test_a_cpu_target_still_refuses_bindings() -> None:
    inputs, C, _ = matmul(4, 4, 4)
    s = te.create_schedule(C)
    s[C].bind(s[C].op.axis[0], "threadIdx.x")
    with pytest.raises(tuner.ScheduleError, match="has no GPU threads"):
        _lower(s, [*inputs, C], Target.from_name("cpu"))
