"""Parallel loops: run on threads where they sit at the top, as ``prange`` elsewhere."""

from __future__ import annotations

import itertools

import numba
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tuner
from tuner import te
from tuner.codegen import BuildOptions
from tuner.codegen.cpu.threads import chunks

from .ops import launches, matmul


@given(st.integers(0, 1000), st.integers(1, 64))
def test_chunks_cover_the_range_evenly(n: int, parts: int) -> None:
    out = chunks(n, parts)
    assert len(out) == max(1, min(parts, n))
    assert out[0][0] == 0 and out[-1][1] == n
    assert all(a[1] == b[0] for a, b in itertools.pairwise(out))
    sizes = [hi - lo for lo, hi in out]
    assert max(sizes) - min(sizes) <= 1


def _run(s, tensors, ref, options=None):  # type: ignore[no-untyped-def]
    f = tuner.build(s, tensors, options=options or BuildOptions())
    rng = np.random.default_rng(0)
    ins = [rng.standard_normal(t.shape_ints).astype(t.dtype) for t in tensors[:-1]]
    out = np.full(tensors[-1].shape_ints, np.nan, tensors[-1].dtype)
    f(*ins, out)
    np.testing.assert_allclose(out, ref(*ins), rtol=1e-4, atol=1e-4)
    return f


@pytest.mark.parametrize(
    ("parallel", "launch"), [("threads", "native"), ("threads", "pool"), ("prange", "auto")]
)
@pytest.mark.usefixtures("two_threads")
def test_outer_parallel_loop_with_per_iteration_scratch(parallel: str, launch: str) -> None:
    """Each iteration of the parallel loop packs its own panel of B: no two threads share it."""
    (A, B), C, ref = matmul(13, 37, 11)
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    jo, ji = s[C].split(j, factor=8)  # 5 iterations: chunks of 3 and 2, the last one partial
    s[C].reorder(jo, i, k, ji)
    BB = s.cache_read(B, "global", [C])
    s[BB].compute_at(s[C], jo)
    s[C].parallel(jo)
    f = _run(s, [A, B, C], ref, BuildOptions(parallel=parallel, launch=launch))
    if launch == "native":
        assert "launch(kernel_p0_a, 5, A," in f.source and "parallel_for(" not in f.source
        assert "kernel_p0_a = chunk_address(kernel_p0)" in f.source
    elif launch == "pool":
        assert "parallel_for(kernel_p0, 5," in f.source and "prange(" not in f.source
    else:
        assert "prange(5)" in f.source and "parallel_for(" not in f.source


@pytest.mark.usefixtures("two_threads")
def test_parallel_root_stages_between_serial_ones() -> None:
    """Two parallel stages and a serial one: a function each, called in order."""
    A = te.placeholder((9, 6), "float32", name="A")
    B = te.compute((9, 6), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((9, 6), lambda i, j: B[i, j] + B[8 - i, j], name="C")
    D = te.compute((9, 6), lambda i, j: te.exp(C[i, j]) - B[i, j], name="D")
    s = te.create_schedule(D)
    s[B].parallel(s[B].op.axis[0])
    s[D].parallel(s[D].op.axis[0])

    def ref(a: np.ndarray) -> np.ndarray:
        b = a * 2
        return np.exp(b + b[::-1]) - b

    f = _run(s, [A, D], ref)
    assert "def kernel_p0(" in f.source and "def kernel_s1(" in f.source
    assert "def kernel_p2(" in f.source


@pytest.mark.usefixtures("two_threads")
def test_a_short_serial_loop_around_a_parallel_one_runs_in_the_entry() -> None:
    """One runtime for the whole kernel: the serial loop is the Python entry's, its variable passed on."""
    (A, B), C, ref = matmul(7, 10, 5)
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    s[C].parallel(j)
    f = _run(s, [A, B, C], ref)
    assert "    for i in range(7):\n" in f.source and launches(
        f.source, "kernel_p0, 10, A, B, C, i"
    )


@pytest.mark.usefixtures("two_threads")
def test_a_serial_loop_of_one_around_a_parallel_one_disappears() -> None:
    (A, B), C, ref = matmul(1, 10, 5)
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    s[C].parallel(j)
    f = _run(s, [A, B, C], ref)
    assert launches(f.source, "kernel_p0, 10, A, B, C") and "for i in" not in f.source


@pytest.mark.usefixtures("two_threads")
def test_parallel_loop_inside_a_long_serial_one_keeps_prange() -> None:
    (A, B), C, ref = matmul(65, 10, 5)
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    s[C].parallel(j)
    f = _run(s, [A, B, C], ref)
    assert "prange(10)" in f.source and "parallel=True" in f.source


def test_unknown_parallel_mode_is_refused() -> None:
    (A, B), C, _ = matmul(4, 4, 4)
    s = te.create_schedule(C)
    with pytest.raises(ValueError, match="parallel must be"):
        tuner.build(s, [A, B, C], options=BuildOptions(parallel="openmp"))


@pytest.mark.usefixtures("two_threads")
def test_every_chunk_runs_once_call_after_call() -> None:
    """Back-to-back calls (workers still polling) and calls after they went to sleep."""
    import time

    from tuner.codegen.cpu import threads

    for n in [2, 3, 17, 100]:
        for pause in [0.0, 0.0, 0.01]:
            seen: list[tuple[int, int]] = []
            threads.parallel_for(lambda lo, hi, out=seen: out.append((lo, hi)), n)
            assert sorted(seen) == threads.chunks(n, 2)
            time.sleep(pause)


@pytest.mark.usefixtures("two_threads")
def test_an_error_in_a_worker_chunk_reaches_the_caller_and_the_pool_survives() -> None:
    from tuner.codegen.cpu import threads

    def body(lo: int, hi: int) -> None:
        if lo > 0:
            raise ValueError(f"chunk {lo}..{hi} failed")

    with pytest.raises(ValueError, match=r"chunk 5\.\.10 failed"):
        threads.parallel_for(body, 10)
    seen: list[int] = []
    threads.parallel_for(lambda lo, hi: seen.extend(range(lo, hi)), 10)
    assert sorted(seen) == list(range(10))


@pytest.mark.usefixtures("two_threads")
def test_parallel_for_from_two_threads_at_once() -> None:
    """Callers on different threads take turns on the pool; each gets all its chunks."""
    import threading

    from tuner.codegen.cpu import threads

    totals = {0: 0, 1: 0}
    lock = threading.Lock()

    def caller(c: int) -> None:
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))  # per thread
        for _ in range(50):

            def body(lo: int, hi: int) -> None:
                with lock:
                    totals[c] += hi - lo

            threads.parallel_for(body, 7)

    workers = [threading.Thread(target=caller, args=(c,)) for c in (0, 1)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert totals == {0: 350, 1: 350}


def test_the_caller_runs_the_chunks_no_worker_took() -> None:
    """A worker that does not wake in time costs a serial call, not a wait for it."""
    import threading

    from tuner.codegen.cpu import threads

    pool = threads._Pool(2, start=False)  # workers that never wake
    ran: list[tuple[int, int, int]] = []
    body = lambda lo, hi: ran.append((lo, hi, threading.get_ident()))  # noqa: E731
    for n in [3, 10]:
        ran.clear()
        pool.run(body, threads.chunks(n, 3), ())
        assert sorted(r[:2] for r in ran) == threads.chunks(n, 3)
        assert {r[2] for r in ran} == {threading.get_ident()}
    with pytest.raises(ValueError, match=r"chunk [36]"):  # chunks at 3 and 6 fail
        pool.run(lambda lo, hi: _fail_from(lo, 2), threads.chunks(9, 3), ())


def _fail_from(lo: int, first: int) -> None:
    if lo >= first:
        raise ValueError(f"chunk {lo}")


@pytest.mark.usefixtures("two_threads")
def test_native_launches_from_two_threads_at_once() -> None:
    """Kernels on Numba's threading layer, called from two Python threads at once, stay exact."""
    from tuner.codegen.cpu.threads import native_layer

    if not native_layer():
        pytest.skip("no thread-safe Numba threading layer here")
    (A, B), C, ref = matmul(37, 29, 13)
    s = te.create_schedule(C)
    i, _ = s[C].op.axis
    s[C].parallel(i)
    f = tuner.build(s, [A, B, C], options=BuildOptions(launch="native"))
    assert "launch(kernel_p0_a, 37," in f.source
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal(t.shape_ints).astype(np.float32) for t in (A, B))
    assert _from_two_threads(f, lambda c: ([a, b], ref(a, b), np.empty((37, 29), np.float32))) == []


def _from_two_threads(f, case, calls: int = 100) -> list[int]:  # type: ignore[no-untyped-def]
    """Call kernel ``f`` from two Python threads at once, each ``calls`` times on its own
    ``case(thread)`` (inputs, expected output, output buffer); the threads that got a
    wrong result, once per wrong call."""
    import threading

    bad: list[int] = []

    def caller(c: int) -> None:
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))  # per thread
        ins, want, out = case(c)
        for _ in range(calls):
            out.fill(np.nan)
            f(*ins, out)
            if not np.allclose(out, want, rtol=1e-4, atol=1e-3):
                bad.append(c)

    workers = [threading.Thread(target=caller, args=(c,)) for c in (0, 1)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return bad


def test_the_launch_follows_the_threading_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    """A user who asks Numba for workqueue (not thread-safe) gets the Python pool."""
    from numba.core import config as numba_config

    from tuner.codegen.cpu import threads

    threads.native_layer.cache_clear()
    monkeypatch.setattr(numba_config, "THREADING_LAYER", "workqueue")
    try:
        assert threads.native_layer() is False
        (A, B), C, ref = matmul(9, 10, 5)
        s = te.create_schedule(C)
        s[C].parallel(s[C].op.axis[0])
        f = _run(s, [A, B, C], ref)
        assert "parallel_for(kernel_p0, 9, A, B, C)" in f.source
    finally:
        threads.native_layer.cache_clear()
    with pytest.raises(ValueError, match="launch must be"):
        tuner.build(s, [A, B, C], options=BuildOptions(launch="openmp"))


@numba.njit(numba.void(numba.int64, numba.int64, numba.int64[::1]), nogil=True)
def _count_chunk(lo: int, hi: int, seen: np.ndarray) -> None:  # pragma: no cover - jitted
    for i in range(lo, hi):
        seen[i] += 1


@pytest.mark.usefixtures("two_threads")
@pytest.mark.parametrize("n", [0, 1, 2, 5, 37])
def test_each_launcher_runs_every_iteration_once(n: int) -> None:
    """The OpenMP team started by the launcher itself (where Numba's layer is GNU OpenMP,
    as on Linux with its wheels) and the ``prange`` launcher: every iteration of ``[0, n)``
    exactly once, whatever the split."""
    from tuner.codegen.cpu import launch as L

    if numba.threading_layer() == "omp" and L._gomp_library() is not None:
        assert L.gomp_loaded and L.launch is L._launch_gomp
    address = L.chunk_address(_count_chunk)
    launchers = [L._launch_prange, *([L._launch_gomp] if L.gomp_loaded else [])]
    for launcher in launchers:
        seen = np.zeros(max(n, 1), np.int64)
        for _ in range(3):
            launcher(address, n, seen)
        assert (seen[:n] == 3).all() and (seen[n:] == 0).all(), launcher


@pytest.mark.usefixtures("two_threads")
def test_scratch_is_kept_between_calls_and_never_shared_by_two() -> None:
    """The entry's large scratch (a packed panel of B per chunk, 192 KiB) comes from the
    kernel's pool: the second call reuses the first call's buffers, and two Python threads
    calling at once, with different inputs, each get a set of their own (every result
    exact). Smaller scratch is allocated per call, from the heap's recently freed memory."""
    import sys

    small, _ = _panel_kernel(600)  # 5 slots of 600 x 8 floats: 96 KiB
    assert "    B_global = np.empty(24000, np.float32)" in small.source
    assert "_scratch" not in small.source
    f, ref = _panel_kernel(1200)
    assert "_set = _kernel_scratch.pop() if _kernel_scratch else (np.empty(" in f.source
    pool = sys.modules[f.module_name]._kernel_scratch
    assert len(pool) == 1
    first = pool[0]
    _panel_kernel(1200)  # the same kernel, called again
    assert len(pool) == 1 and pool[0] is first
    rng = np.random.default_rng(4)

    def case(c: int) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
        a = rng.standard_normal((13, 1200)).astype(np.float32) + c
        b = rng.standard_normal((1200, 37)).astype(np.float32) - c
        return [a, b], ref(a, b), np.empty((13, 37), np.float32)

    assert _from_two_threads(f, case, calls=50) == [] and 1 <= len(pool) <= 2


def _panel_kernel(k: int):  # type: ignore[no-untyped-def]
    """A 13 x 37 x ``k`` matmul whose parallel loop packs a panel of B per chunk (heap
    scratch of 5 slots of ``k`` x 8 floats), built and checked; with its reference."""
    (A, B), C, ref = matmul(13, 37, k)
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    (kk,) = s[C].op.reduce_axis
    jo, ji = s[C].split(j, factor=8)
    s[C].reorder(jo, i, kk, ji)
    BB = s.cache_read(B, "global", [C])
    s[BB].compute_at(s[C], jo)
    s[C].parallel(jo)
    return _run(s, [A, B, C], ref, BuildOptions(launch="native")), ref
