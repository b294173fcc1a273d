"""The ``prefetch`` step: each iteration of a loop prefetches the lines its next one reads."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pytest

import tuner
from search_spaces import conv2d as cv
from search_spaces.conv2d import Conv2d
from tuner import te
from tuner.lower.ir import Alloc, For, If, Load, Prefetch, Seq, Stmt, Store
from tuner.lower.lower import lower
from tuner.lower.prefetch import MOST_AT_ONCE, MOST_LINES
from tuner.lower.printer import render
from tuner.lower.visitor import walk_stmts
from tuner.schedule import Schedule, ScheduleError
from tuner.target import Target
from tuner.te.expr import Binary, Cast, Compare, Const, Expr, IterVar, Logical, Select, Var, walk

LINE = 16  # float32 elements in a 64-byte line


def _value(e: Expr, at: Mapping[str, int]) -> int:
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Var | IterVar):
        return at.get(e.name, 0)
    if isinstance(e, Cast):
        return _value(e.value, at)
    if isinstance(e, Compare):
        a, b = _value(e.a, at), _value(e.b, at)
        return int({"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b}[e.op])
    if isinstance(e, Logical):
        values = [_value(x, at) for x in e.args]
        return int(all(values) if e.op == "and" else any(values) if e.op == "or" else not values[0])
    if isinstance(e, Select):
        return _value(e.true_value if _value(e.cond, at) else e.false_value, at)
    assert isinstance(e, Binary), e
    a, b = _value(e.a, at), _value(e.b, at)
    ops = {"add": a + b, "sub": a - b, "mul": a * b, "min": min(a, b), "max": max(a, b)}
    if e.op in ("floordiv", "mod"):
        return a // b if e.op == "floordiv" else a % b
    return ops[e.op]


def _run(s: Stmt, at: dict[str, int], buffer: str, strides: list[int]) -> Iterator[tuple[str, int]]:
    """Interpret ``s``: ("read", line) for each read of ``buffer``, ("fetch", line) for each
    prefetch of it."""

    def line(indices: tuple[Expr, ...]) -> int:
        return sum(_value(i, at) * st for i, st in zip(indices, strides, strict=True)) // LINE

    if isinstance(s, Seq):
        for c in s.body:
            yield from _run(c, at, buffer, strides)
    elif isinstance(s, Alloc):
        yield from _run(s.body, at, buffer, strides)
    elif isinstance(s, For):
        for v in range(_value(s.extent, at)):
            yield from _run(s.body, {**at, s.var: v}, buffer, strides)
    elif isinstance(s, If):
        if _value(s.cond, at):
            yield from _run(s.then, at, buffer, strides)
        elif s.orelse is not None:
            yield from _run(s.orelse, at, buffer, strides)
    elif isinstance(s, Prefetch) and s.buffer == buffer:
        yield "fetch", line(s.indices)
    elif isinstance(s, Store):
        for e in walk(s.value):
            if isinstance(e, Load) and e.buffer == buffer:
                yield "read", line(e.indices)


def _check_lines(func: Any, buffer: str, shape: tuple[int, ...]) -> int:
    """Each iteration of the prefetching loop fetches exactly the lines the next one reads
    (the last one's past the buffer); returns the lines an iteration fetches."""
    strides = [int(np.prod(shape[k + 1 :])) for k in range(len(shape))]
    loops = [s for s in walk_stmts(func.body) if isinstance(s, For)]
    names = {s.var for s in loops}
    (loop,) = [s for s in loops if f"{s.var}_pf" in names]
    n = _value(loop.extent, {})
    seen = []
    for i in range(n):
        events = list(_run(loop.body, {loop.var: i}, buffer, strides))
        seen.append(
            ({x for kind, x in events if kind == "read"}, [x for k, x in events if k == "fetch"])
        )
    for (_, fetched), (read_next, _) in itertools.pairwise(seen):
        assert len(fetched) == len(set(fetched)), "a line fetched twice"
        assert set(fetched) == read_next
    return len(seen[0][1])


def _matmul(n: int, k: int, chunk: int) -> tuple[Any, list[Any]]:
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    ro, ri = s[C].split(r, factor=chunk)
    s[C].reorder(ro, i, ri, j)
    s[C].prefetch(B, ro)
    return s, [A, B, C]


@pytest.mark.parametrize(("n", "k", "chunk"), [(32, 64, 8), (48, 96, 16), (16, 40, 5)])
def test_each_iteration_prefetches_the_lines_the_next_one_reads(n: int, k: int, chunk: int) -> None:
    """Rows of B chunk by chunk: a run of whole rows (48 columns: three lines each), spread
    over the rows of C; 40 rows in chunks of 5 (n = 16: one line a row)."""
    s, args = _matmul(n, k, chunk)
    func = lower(s, args)
    assert _check_lines(func, "B", (k, n)) == chunk * n // LINE


def test_a_window_of_weights_prefetches_one_run_per_tap() -> None:
    """A chunked convolution's blocked weights (taps x channels x 32 outputs): runs of the
    chunk's channels repeated over the window's taps."""
    p = Conv2d(1, 32, 3, 3, 32, 3, 3, pad=1, layout="NHWC", weights="blocked", block=32)
    target = Target.make("cpu", fingerprint="t", vector_bits=512, vector_lanes=16,
                         vector_registers=32, threads=2)  # fmt: skip
    cfg = {
        **cv.default_config(p, target),
        "chunk": 8,
        "outer": "channels",
        "pack_w": False,
        "prefetch": True,
        "ohr": 1,
    }  # fmt: skip  (3 row blocks: 48 lines at each)
    s, args = cv.schedule(cfg, p, target)
    func = lower(s, args)
    w = next(b for b in func.args if b.name == "W")
    lines = _check_lines(func, "W", tuple(int(d) for d in w.shape))
    assert lines == 9 * 8 * 32 // LINE


def test_a_parallel_loop_of_channel_blocks_prefetches_the_next_blocks_weights() -> None:
    """1 x 1, channel blocks outermost and in parallel: each thread's next block is most
    often the next one; spread over the input channels, two lines (32 outputs) each."""
    p = Conv2d(1, 64, 3, 3, 64, 1, 1, layout="NHWC", weights="blocked", block=32)
    target = Target.make("cpu", fingerprint="t", vector_bits=512, vector_lanes=16,
                         vector_registers=32, threads=2)  # fmt: skip
    cfg = {**cv.default_config(p, target), "outer": "channels", "pack_w": False, "chunk": 0,
           "prefetch": True, "owr": 3, "ohr": 3, "parallel": True}  # fmt: skip
    func = lower(*cv.schedule(cfg, p, target))
    w = next(b for b in func.args if b.name == "W")
    assert _check_lines(func, "W", tuple(int(d) for d in w.shape)) == 64 * 32 // LINE
    (loop,) = [s for s in walk_stmts(func.body) if isinstance(s, For) and s.kind == "parallel"]
    assert any(isinstance(x, Prefetch) for x in walk_stmts(loop.body))


def test_a_prefetching_kernel_computes_what_it_did_and_says_so_in_its_source() -> None:
    s, args = _matmul(48, 96, 16)
    kernel = tuner.build(s, args)
    a = np.random.default_rng(0).random((48, 96), dtype=np.float32)
    b = np.random.default_rng(1).random((96, 48), dtype=np.float32)
    c = np.zeros((48, 48), np.float32)
    kernel(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    assert "prefetch(B, " in kernel.source
    assert "prefetch(B[" in render(lower(s, args))


def test_a_prefetch_survives_the_schedules_json() -> None:
    s, args = _matmul(32, 64, 8)
    again = Schedule.from_json(args[-1], s.to_json())
    assert {"step": "prefetch", "stage": "C", "axis": "r_o", "tensor": "B", "spread": ""} in (
        s.to_json()
    )
    assert render(lower(again, args)) == render(lower(s, args))


def test_nothing_is_prefetched_where_the_next_iteration_is_not_an_affine_step() -> None:
    """A read whose index is not affine in the loops (a square) is left as it was, as is one
    whose region passes ``MOST_LINES``."""
    A = te.placeholder((64 * 64,), name="A")
    r = te.reduce_axis((0, 64), name="r")
    C = te.compute((8,), lambda i: te.sum(A[r * r + i], axis=r), name="C")
    s = te.create_schedule(C)
    ro, ri = s[C].split(r, factor=8)
    (i,) = s[C].op.axis
    s[C].reorder(ro, i, ri)
    s[C].prefetch(A, ro)
    assert not any(isinstance(x, Prefetch) for x in walk_stmts(lower(s, [A, C]).body))

    n = 4 * MOST_LINES  # a chunk of 4 rows of 4 * 1024 floats: 1024 lines
    s, args = _matmul(n, 16, 8)
    assert not any(isinstance(x, Prefetch) for x in walk_stmts(lower(s, args).body))


def test_a_prefetch_needs_a_serial_loop_of_a_stage_that_reads_the_tensor() -> None:
    A = te.placeholder((64, 64), name="A")
    B = te.placeholder((64,), name="B")
    r = te.reduce_axis((0, 64), name="r")
    C = te.compute((64,), lambda i: te.sum(A[i, r], axis=r), name="C")
    s = te.create_schedule(C)
    (i,) = s[C].op.axis
    with pytest.raises(ScheduleError, match="does not read B"):
        s[C].prefetch(B, i)
    s[C].vectorize(i)
    with pytest.raises(ScheduleError, match="only a serial loop"):
        s[C].prefetch(A, i)


def test_a_prefetch_spreads_over_the_loop_it_names_and_never_bursts() -> None:
    """With a one-iteration loop first inside the chunk loop, the default spread would fetch
    a chunk's 128 lines at once (more than ``MOST_AT_ONCE``: nothing is fetched); spread
    over the rows of C, 4 at each."""

    def schedule(spread: bool) -> tuple[Any, list[Any]]:
        A = te.placeholder((32, 64), name="A")
        B = te.placeholder((64, 64), name="B")
        r = te.reduce_axis((0, 64), name="r")
        C = te.compute((32, 64), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
        s = te.create_schedule(C)
        i, j = s[C].op.axis
        jo, ji = s[C].split(j, factor=64)
        ro, ri = s[C].split(r, factor=32)
        s[C].reorder(ro, jo, i, ri, ji)
        s[C].prefetch(B, ro, i if spread else None)
        return s, [A, B, C]

    assert MOST_AT_ONCE < 32 * 64 // LINE
    assert not any(isinstance(x, Prefetch) for x in walk_stmts(lower(*schedule(False)).body))
    assert _check_lines(lower(*schedule(True)), "B", (64, 64)) == 32 * 64 // LINE


def test_a_prefetch_spreads_over_a_loop_inside_its_own() -> None:
    s, args = _matmul(32, 64, 8)
    C = args[-1]
    ro, i, _, j = s[C].leaf_axes
    with pytest.raises(ScheduleError, match="is not inside"):
        s[C].prefetch(args[0], i, ro)
    s[C].prefetch(args[0], i, j)
