"""Selects an innermost loop does not change, taken out of it; short lanes without a register
block get both LLVM vectorizers; a fused kernel's tasks share out evenly over the threads."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import tuner
from search_spaces import fused
from tuner.codegen.cpu.unswitch import branches, invariant_select
from tuner.lower.ir import For, Load, Store
from tuner.target import Target, cpu_flags
from tuner.te.expr import Binary, Const, Select, Var, compare

from .ops import machine_code

TARGET = Target.from_name("cpu", num_threads=2)
RNG = np.random.default_rng(11)


def _max_pool(C: int, H: int, pad: int, stride: int) -> str:
    out = (H + 2 * pad - 3) // stride + 1
    graph = {
        "consts": [],
        "format": 1,
        "inputs": [{"dtype": "float32", "shape": [1, H, H, C]}],
        "nodes": [
            {
                "attrs": {
                    "ceil_mode": 0,
                    "dilations": [1, 1],
                    "kernel_shape": [3, 3],
                    "pads": [pad] * 4,
                    "strides": [stride, stride],
                },
                "inputs": ["x0"],
                "op": "tuner.NhwcMaxPool",
                "outputs": [{"dtype": "float32", "name": "t0", "shape": [1, out, out, C]}],
            }
        ],
        "opset": 17,
        "outputs": ["t0"],
    }
    return json.dumps(graph, separators=(",", ":"))


def _window_max(x: np.ndarray, pad: int, stride: int) -> np.ndarray:
    n, h, w, c = x.shape
    xp = np.full((n, h + 2 * pad, w + 2 * pad, c), -np.inf, np.float32)
    xp[:, pad : pad + h, pad : pad + w] = x
    out = (h + 2 * pad - 3) // stride + 1
    y = np.full((n, out, out, c), -np.inf, np.float32)
    for r in range(3):
        for s in range(3):
            y = np.maximum(y, xp[:, r : r + stride * out : stride, s : s + stride * out : stride])
    return y


@pytest.mark.parametrize(
    ("C", "H", "pad", "stride"), [(24, 13, 1, 2), (16, 9, 1, 1), (7, 10, 0, 2)]
)
def test_a_padded_channels_last_max_pool_tests_bounds_outside_the_channel_loop(
    C: int, H: int, pad: int, stride: int
) -> None:
    """The bounds test of a padded window is asked once per window step, not once per
    channel: its loop over channels is a plain max, vectorized; a loop of 16 or 24 channels
    (which LLVM unrolls before its loop vectorizer runs) is compiled with both vectorizers."""
    kern = tuner.build_op("fused", target=TARGET, graph=_max_pool(C, H, pad, stride)).kernel
    if pad:
        assert re.search(r"\n\s+if \(.*>= 1\)", kern.source)
        assert not re.search(r"\bif\b[^:\n]*\belse\b", kern.source)  # no select left
    assert "# vectorizer=both " in kern.source
    x = RNG.standard_normal((1, H, H, C)).astype(np.float32)
    out = (H + 2 * pad - 3) // stride + 1
    y = np.full((1, out, out, C), np.nan, np.float32)
    kern(x, y)
    np.testing.assert_array_equal(y, _window_max(x, pad, stride))
    if C < 16 or "avx" not in cpu_flags():
        return
    asm = machine_code(kern)
    assert re.findall(r"\bvmaxps\b", asm)


def test_a_window_accumulator_is_folded_with_vmaxps_and_read_back_at_a_constant_index() -> None:
    """A parallel channels-last max pool of one image (192 channels, 28 x 28): each window
    step folds into its pixel's accumulator through ``maxnum``, which the x86 back end does
    not turn into a masked store, and the accumulator is read back without a division (its
    batch axis of one element at 0), so that LLVM keeps it in registers."""
    kern = tuner.build_op("fused", target=TARGET, graph=_max_pool(192, 28, 1, 1)).kernel
    assert "maxnum(" in kern.source
    assert not re.search(r"t0_b\[[^\]]*//", kern.source)
    x = RNG.standard_normal((1, 28, 28, 192)).astype(np.float32)
    y = np.full((1, 28, 28, 192), np.nan, np.float32)
    kern(x, y)
    np.testing.assert_array_equal(y, _window_max(x, 1, 1))
    if "avx512f" not in cpu_flags():
        return
    asm = machine_code(kern)
    assert re.findall(r"\bvmaxps\b", asm)
    assert not re.search(r"vmovups\s+%zmm\d+, [^\n]*\{%k", asm)  # no masked store


def test_stack_buffers_are_aligned_to_a_cache_line() -> None:
    """No vector access to a stack buffer's aligned elements splits a cache line."""
    from numba import njit

    from tuner.codegen.cpu.runtime import carray, stack_empty

    @njit
    def address() -> int:  # type: ignore[no-untyped-def]
        small = carray(stack_empty(3, np.float32), (3,))
        big = carray(stack_empty(192, np.float32), (192,))
        small[0] = 1.0
        big[0] = 1.0
        return (small.ctypes.data % 64) + (big.ctypes.data % 64)

    assert address() == 0


def test_the_identity_branch_of_a_window_update_is_dropped() -> None:
    inside = compare("ge", Var("h", "int64"), Const(1))
    acc = Load("R", (Var("c", "int64"),), "float32")
    read = Load("X", (Var("h", "int64"), Var("c", "int64")), "float32")
    body = Store("R", (Var("c", "int64"),), Binary("max", acc, Select(inside, read, Const(-np.inf, "float32"), "float32"), "float32"))  # fmt: skip
    found = invariant_select(body, "c", Const(8))
    assert found is not None and found[1] == inside
    then, orelse = branches(body, found[0])
    assert then == Store("R", (Var("c", "int64"),), Binary("max", acc, read, "float32"))
    assert orelse is None
    # A condition that reads the loop's own variable stays where it is.
    per_lane = Select(compare("ge", Var("c", "int64"), Const(1)), read, Const(0.0, "float32"), "float32")  # fmt: skip
    assert invariant_select(Store("R", (Var("c", "int64"),), per_lane), "c", Const(8)) is None
    # So does one around a body that holds a loop.
    assert invariant_select(For("c", Const(4), "serial", body), "h", Const(8)) is None


@pytest.mark.parametrize("C", [64, 24, 96])
def test_a_parallel_fused_default_shares_its_tasks_evenly(C: int) -> None:
    """Each thread runs one contiguous run of tasks: four of 1024 pixels over 3136 gave one
    thread nearly twice the other's."""
    text = _max_pool(C, 112, 1, 2)
    cfg = fused.default_config(text, TARGET)
    if not cfg["parallel"]:
        return
    rows = 56 * 56
    per = max(1, cfg["task"] // C)
    tasks = -(-rows // per)
    busiest = -(-tasks // 2) * per
    assert busiest <= 1.12 * rows / 2, (cfg, per, tasks)


def _concat_bn_relu(pieces: list[int], hw: int) -> str:
    c = sum(pieces)
    n = len(pieces)
    ins = [{"dtype": "float32", "shape": [1, hw, hw, k]} for k in pieces]
    ins += [{"dtype": "float32", "shape": [1, 1, 1, c]}] * 2

    def out(name: str) -> list[dict[str, object]]:
        return [{"dtype": "float32", "name": name, "shape": [1, hw, hw, c]}]

    nodes = [
        {"attrs": {"axis": 3}, "inputs": [f"x{i}" for i in range(n)], "op": "Concat",
         "outputs": out("t0")},
        {"attrs": {}, "inputs": ["t0", f"x{n}"], "op": "Mul", "outputs": out("t1")},
        {"attrs": {}, "inputs": ["t1", f"x{n + 1}"], "op": "Add", "outputs": out("t2")},
        {"attrs": {}, "inputs": ["t2"], "op": "Relu", "outputs": out("t3")},
    ]  # fmt: skip
    graph = {"consts": [], "format": 1, "inputs": ins, "nodes": nodes, "opset": 17}
    return json.dumps({**graph, "outputs": ["t3"]}, separators=(",", ":"))


@pytest.mark.parametrize(
    ("pieces", "aligned"), [([64, 32, 32, 32, 32], True), ([24, 40, 8], False), ([16] * 9, True)]
)
def test_a_concat_read_by_tiles_inside_its_pieces_picks_the_piece_once_per_tile(
    pieces: list[int], aligned: bool
) -> None:
    """A DenseNet layer's batch norm and relu over a channels-last concat: with column tiles
    that divide every piece, which piece a tile reads is one ``if``/``elif`` chain per tile
    (24 boundaries tested at every channel took 0.31 ms for 14 x 14 x 1024, 0.036 so)."""
    text = _concat_bn_relu(pieces, 5)
    kern = tuner.build_op("fused", target=TARGET, graph=text).kernel
    lanes = TARGET.lanes("float32")
    if aligned and all(k % lanes == 0 for k in pieces):
        assert "elif " in kern.source
        assert not re.search(r"\bif\b[^:\n]*\belse\b", kern.source)
    xs = [RNG.standard_normal((1, 5, 5, k)).astype(np.float32) for k in pieces]
    c = sum(pieces)
    s, b = (RNG.standard_normal((1, 1, 1, c)).astype(np.float32) for _ in range(2))
    y = np.full((1, 5, 5, c), np.nan, np.float32)
    kern(*xs, s, b, y)
    want = np.maximum(np.concatenate(xs, axis=3) * s + b, 0)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)
