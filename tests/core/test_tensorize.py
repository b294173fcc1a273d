"""The tensorize step: matching a two-loop nest to a tensor intrinsic, and its refusals.

Lowering and rendering need no VNNI hardware; the tests that run a kernel skip
where the host has none (``int8_dot_bits``).
"""

from __future__ import annotations

import numpy as np
import pytest

import tuner
from tuner import te
from tuner.codegen.backend import BuildOptions
from tuner.codegen.cpu.backend import NumbaCpuBackend
from tuner.lower.intrin import dot_intrinsic, require
from tuner.lower.ir import Tensorized
from tuner.lower.lower import lower
from tuner.lower.visitor import walk_stmts
from tuner.schedule import Schedule
from tuner.schedule.intrin import INTRINSICS
from tuner.schedule.state import ScheduleError
from tuner.target import Target, int8_dot_bits

VNNI = Target.make("cpu", vector_lanes=16, vector_registers=32, int8_dot_bits=512, threads=1)
PLAIN = Target.make("cpu", vector_lanes=16, vector_registers=32, threads=1)
HOST = Target.from_name("cpu", num_threads=1)
needs_vnni = pytest.mark.skipif(
    dot_intrinsic(HOST) is None, reason="the host has no int8 dot product (AVX-512 VNNI)"
)


def dot_nest(rows: int, cols: int, groups: int, lanes: int = 16, b_stride: int = 4):
    """``out[i, j] = sum_k int32(a[i, k]) * int32(b[j // lanes... ])`` with B in groups of 4.

    ``b_stride`` 4 lays B out as the intrinsic reads it (``[cols][groups][4]`` with
    the columns ``lanes`` at a time, ``4`` apart); 1 puts the 4 bytes of a group
    ``cols`` apart, which the intrinsic cannot read.
    """
    a = te.placeholder((rows, groups * 4), "uint8", name="a")
    if b_stride == 4:
        b = te.placeholder((groups, cols, 4), "int8", name="b")
    else:
        b = te.placeholder((groups, 4, cols), "int8", name="b")
    k = te.reduce_axis(groups * 4, name="k")

    def b_at(j, k):  # type: ignore[no-untyped-def]
        return b[k // 4, j, k % 4] if b_stride == 4 else b[k // 4, k % 4, j]

    out = te.compute(
        (rows, cols),
        lambda i, j: te.sum(a[i, k].astype("int32") * b_at(j, k).astype("int32"), axis=k),
        name="out",
    )
    s = te.create_schedule(out)
    i, j = s[out].op.axis
    (kk,) = s[out].op.reduce_axis
    jo, ji = s[out].split(j, factor=lanes)
    ko, q = s[out].split(kk, factor=4)
    s[out].reorder(i, jo, ko, ji, q)
    local = s.cache_write(out, "local")
    s[local].compute_at(s[out], jo)
    s[out].tensorize(ji, f"dot_u8s8_i32x{lanes}")
    return s, [a, b, out]


def source(s, args, target: Target) -> str:  # type: ignore[no-untyped-def]
    return NumbaCpuBackend().source(lower(s, args, target=target), target, BuildOptions())


def test_the_loops_become_one_intrinsic_call_per_vector() -> None:
    s, args = dot_nest(3, 32, 5)
    func = lower(s, args, target=VNNI)
    assert any(isinstance(x, Tensorized) for x in walk_stmts(func.body))
    src = source(s, args, VNNI)
    assert src.count("dot_u8s8_i32x16(") == 1, src
    assert "for q" not in src.split("dot_u8s8_i32x16(")[0].splitlines()[-1]


def test_a_target_without_the_instruction_is_refused_by_name() -> None:
    s, args = dot_nest(3, 32, 5)
    with pytest.raises(ScheduleError, match="dot_u8s8_i32x16 needs int8_dot_bits >= 512"):
        lower(s, args, target=PLAIN)
    with pytest.raises(ScheduleError, match="int8_dot_bits"):
        require("dot_u8s8_i32x16", Target.make("cpu", vector_lanes=16, int8_dot_bits=256))
    require("dot_u8s8_i32x8", Target.make("cpu", vector_lanes=8, int8_dot_bits=256))


def test_a_layout_the_instruction_cannot_read_is_an_error_not_wrong_code() -> None:
    s, args = dot_nest(3, 32, 5, b_stride=1)
    with pytest.raises(ScheduleError, match="stride"):
        source(s, args, VNNI)


def test_the_step_checks_extent_kind_and_name() -> None:
    a = te.placeholder((4, 8), "uint8", name="a")
    b = te.placeholder((2, 16, 4), "int8", name="b")
    k = te.reduce_axis(8, name="k")
    out = te.compute(
        (4, 16),
        lambda i, j: te.sum(a[i, k].astype("int32") * b[k // 4, j, k % 4].astype("int32"), axis=k),
        name="out",
    )
    s = te.create_schedule(out)
    i, j = s[out].op.axis
    (kk,) = s[out].op.reduce_axis
    with pytest.raises(ScheduleError, match="covers 16 lanes"):
        s[out].tensorize(i, "dot_u8s8_i32x16")
    with pytest.raises(ScheduleError, match="reduction axis"):
        s[out].tensorize(kk, "dot_u8s8_i32x16")
    with pytest.raises(ScheduleError, match="unknown tensor intrinsic"):
        s[out].tensorize(j, "vpdpbusd")
    s[out].tensorize(j, "dot_u8s8_i32x16")  # j is innermost but k is outside it
    with pytest.raises(ScheduleError, match="one reduction loop of 4 iterations inside it"):
        lower(s, [a, b, out], target=VNNI)


def test_the_trace_round_trips_through_json() -> None:
    s, args = dot_nest(2, 16, 3)
    again = Schedule.from_json(args[-1], s.to_json())
    assert source(again, args, VNNI) == source(s, args, VNNI)


def test_capability_read_from_the_cpu_flags() -> None:
    assert int8_dot_bits(frozenset({"avx512f", "avx512_vnni"}), 512) == 512
    assert int8_dot_bits(frozenset({"avx2", "avx_vnni"}), 256) == 256
    assert int8_dot_bits(frozenset({"avx512f", "avx512_vnni"}), 256) == 256
    assert int8_dot_bits(frozenset({"avx2"}), 256) == 0
    assert Target.make("cpu", vector_lanes=8).int8_dot_bits == 0  # a target from an old log
    assert dot_intrinsic(VNNI) == "dot_u8s8_i32x16"
    assert dot_intrinsic(PLAIN) is None
    assert set(INTRINSICS) == {"dot_u8s8_i32x16", "dot_u8s8_i32x8"}


@needs_vnni
@pytest.mark.parametrize(("rows", "cols", "groups"), [(1, 16, 1), (3, 32, 5), (5, 48, 33)])
def test_the_instruction_computes_what_the_loops_say(rows: int, cols: int, groups: int) -> None:
    s, args = dot_nest(rows, cols, groups)
    f = tuner.build(s, args, target=HOST)
    assert "dot_u8s8_i32x16(" in f.source
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (rows, groups * 4)).astype(np.uint8)
    b = rng.integers(-128, 128, (groups, cols, 4)).astype(np.int8)
    a[0, :] = 255  # the extremes: 255 * -128 summed, within int32
    b[:, 0, :] = -128
    out = np.full((rows, cols), 7, np.int32)
    f(a, b, out)
    bk = b.transpose(0, 2, 1).reshape(groups * 4, cols)
    np.testing.assert_array_equal(out, a.astype(np.int32) @ bk.astype(np.int32))
