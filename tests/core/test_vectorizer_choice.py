"""Which LLVM vectorizer a CPU kernel gets, and where its stack buffers are declared."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import tuner
from search_spaces import reduce, softmax
from tuner.target import Target, cpu_flags

from .ops import machine_code

RNG = np.random.default_rng(5)
TARGET = Target.from_name("cpu", num_threads=2)


def _softmax(M: int, N: int, **knobs: object) -> tuner.OpKernel:
    cfg = {**softmax.default_config(M, N, target=TARGET), **knobs}
    s, args = softmax.schedule(cfg, M, N)
    return tuner.build(s, args, target=TARGET)


def test_long_local_lane_partials_keep_the_loop_vectorizer() -> None:
    """64 local lanes are a vector loop, not a register block: with the SLP vectorizer alone
    the exp loop beside them ran scalar. Declared once, at the top of the chunk function."""
    kern = _softmax(37, 200, lanes=64, local_partials=True, rows_per_task=1)
    assert "# vectorizer=loop " in kern.source
    chunk = kern.source.split("def kernel_p0(lo_, hi_,", 1)[1]
    first_loop = chunk.index("for i_o in range(lo_, hi_):")
    assert 0 < chunk.index("X_max_part_local = carray(stack_empty(64,") < first_loop
    assert chunk.count("X_max_part_local = carray(") == 1
    x = RNG.standard_normal((37, 200)).astype(np.float32)
    y = np.full_like(x, np.nan)
    kern(x, y)
    np.testing.assert_allclose(y, softmax.reference(x), rtol=1e-5, atol=1e-7)


def test_short_local_lanes_are_a_register_block() -> None:
    """8 local lanes: LLVM unrolls the loop before its loop vectorizer sees it, so SLP."""
    cfg = {**reduce.default_config("sum", 64, 96, 1, TARGET), "local": True, "lanes": 8}
    s, args = reduce.schedule(cfg, "sum", 64, 96, 1)
    kern = tuner.build(s, args, target=TARGET)
    assert "# vectorizer=slp " in kern.source
    x = RNG.standard_normal((64, 96)).astype(np.float32)
    y = np.empty(64, np.float32)
    kern(x, y)
    np.testing.assert_allclose(y, x.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_parallel_scratch_is_a_slot_per_chunk() -> None:
    """Each thread reuses the slot of its chunk's first iteration; any task count is right.
    (Rows of 4500 floats: smaller scratch lives on the chunk's stack instead.)"""
    for M in (1, 2, 7, 64):
        kern = _softmax(M, 4500, rows_per_task=1, exp_inline=False)
        assert "(1, 4500)" not in kern.source  # flattened
        assert "* lo_)" in kern.source
        x = RNG.standard_normal((M, 4500)).astype(np.float32) * 10
        y = np.full_like(x, np.nan)
        kern(x, y)
        np.testing.assert_allclose(y, softmax.reference(x), rtol=1e-5, atol=1e-7)


def _tile_matmul(M: int, N: int, mr: int, nr: int) -> tuple[tuner.Schedule, list[tuner.te.Tensor]]:
    """C = A @ B (M x N x 29) with an ``mr x nr`` register tile."""
    from tuner import te

    K = 29
    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((K, N), "float32", name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, mr, nr)
    s[C].reorder(io, jo, s[C].op.reduce_axis[0], ii, ji)
    CL = s.cache_write(C, "local")
    s[CL].compute_at(s[C], jo)
    s[C].vectorize(ji)
    return s, [A, B, C]


@pytest.mark.parametrize("nr", [48, 64, 40])
def test_a_tile_row_longer_than_llvm_unrolls_is_cut_into_short_simd_loops(
    nr: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A register tile's SIMD row of more than 32 lanes is rendered as loops of at most 32:
    left whole, LLVM unrolled it only after its vectorizers and the tile ran as scalar FMAs.
    (Written in explicit vectors, the default, the row needs no cut: ``test_simd_vectors``;
    this is the scalar source the SLP vectorizer packs, ``simd=False``.)"""
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path))  # compiled here, so its asm is known
    scalar_source = tuner.BuildOptions(simd=False)
    for M, N in ((37, 101), (8, 2 * nr)):  # no tile divides the first; the second has no edge
        s, args = _tile_matmul(M, N, 4, nr)
        kern = tuner.build(s, args, target=TARGET, options=scalar_source)
        assert "# vectorizer=slp " in kern.source
        update = kern.source.split("for k in range(29):")[1].split("for i in range(4):")[0]
        assert f"in range({nr}):" not in update
        assert "in range(32):" in update
        a = RNG.standard_normal((M, 29)).astype(np.float32)
        b = RNG.standard_normal((29, N)).astype(np.float32)
        c = np.full((M, N), np.nan, np.float32)
        kern(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    if "fma" not in cpu_flags():
        return
    # The full tiles' FMAs (an edge tile's bounded rows may stay scalar; here there is none).
    asm = machine_code(kern)
    packed = re.findall(r"\bvfmadd\d+ps\b", asm)
    scalar = re.findall(r"\bvfmadd\d+ss\b", asm)
    assert packed and not scalar, (len(packed), len(scalar))


def test_an_epilogue_that_selects_twice_is_cut_shorter_and_stays_vectorized(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """clip (max, then min) over 48 channels: LLVM unrolled a 32-lane loop of it by 8 only and
    the epilogue ran scalar; cut into loops of 16 it is packed, as relu's is (the scalar
    source; the default writes it in vectors)."""
    from search_spaces import conv2d as cv
    from search_spaces.conv2d import Conv2d

    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path))
    p = Conv2d(1, 16, 5, 7, 48, 1, 1, layout="NHWC", weights="blocked", block=48, bias=True,
               epilogue="clip:0.0:6.0")  # fmt: skip
    cfg = {**cv.default_config(p, TARGET), "kr": 48}
    s, args = cv.schedule(cfg, p, TARGET)
    lanes = TARGET.lanes("float32")
    if 48 % lanes == 0:  # the default source: the clip in explicit vectors
        assert f"vmin{lanes}(vmax{lanes}(" in tuner.build(s, args, target=TARGET).source
    kern = tuner.build(s, args, target=TARGET, options=tuner.BuildOptions(simd=False))
    assert "# vectorizer=slp " in kern.source
    before = [src.rsplit("in range(", 1)[1] for src in kern.source.split("min(max(")[:-1]]
    assert before and all(b.startswith("16):") for b in before)  # each clip in a 16-lane loop
    x = RNG.standard_normal((1, 5, 7, 16)).astype(np.float32) * 4
    w = RNG.standard_normal((48, 16, 1, 1)).astype(np.float32)
    b = RNG.standard_normal(48).astype(np.float32)
    y = np.full((1, 5, 7, 48), np.nan, np.float32)
    kern(x, p.pack_weights(w), b, y)
    want = np.clip(np.einsum("nhwc,kc->nhwk", x, w[:, :, 0, 0]) + b, 0, 6)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    if "avx" not in cpu_flags():
        return
    asm = machine_code(kern)
    assert re.findall(r"\bvminps\b", asm) and not re.findall(r"\bvminss\b", asm)


def test_a_residual_add_before_relu_stays_vectorized(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A residual add then relu (every ResNet block's last convolution) weighs more per lane
    than relu alone: in loops of 32 LLVM left it rolled and the epilogue ran scalar (1 x 1,
    64 -> 256 channels at 56 x 56: 0.37 ms against 0.21 without the add, Zen 5). Loops short
    enough for its weight are packed."""
    from search_spaces import conv2d as cv
    from search_spaces.conv2d import Conv2d

    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path))
    p = Conv2d(1, 64, 6, 5, 128, 1, 1, layout="NHWC", weights="blocked", block=64, bias=True,
               epilogue="add@f;relu")  # fmt: skip
    s, args = cv.schedule(cv.default_config(p, TARGET), p, TARGET)
    kern = tuner.build(s, args, target=TARGET)
    assert "# vectorizer=slp " in kern.source
    x = RNG.standard_normal((1, 6, 5, 64)).astype(np.float32)
    w = RNG.standard_normal((128, 64, 1, 1)).astype(np.float32)
    b = RNG.standard_normal(128).astype(np.float32)
    e = RNG.standard_normal((1, 6, 5, 128)).astype(np.float32)
    y = np.full((1, 6, 5, 128), np.nan, np.float32)
    kern(x, p.pack_weights(w), b, e, y)
    want = np.maximum(np.einsum("nhwc,kc->nhwk", x, w[:, :, 0, 0]) + b + e, 0)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    if "avx" not in cpu_flags():
        return
    asm = machine_code(kern)
    assert re.findall(r"\bvmaxps\b", asm) and not re.findall(r"\bv(max|add)ss\b", asm)


def test_small_scratch_lives_on_the_stack_of_the_function_that_uses_it() -> None:
    """A max pool's window accumulator (one pixel's channels) declared on the chunk's stack:
    LLVM keeps it in registers across the window; passed in from the entry it went through
    memory at every step (24 channels at 112 x 112: 0.124 against 0.019 ms, Zen 5). Scratch
    larger than ``_STACK_SCRATCH`` (a depthwise convolution's padded rows) stays on the heap."""
    from search_spaces import depthwise_conv2d  # noqa: F401 (registers the template)
    from tests.core.test_unswitch import _max_pool

    pool = tuner.build_op("fused", target=TARGET, graph=_max_pool(24, 13, 1, 2)).kernel
    assert "t0_b = carray(stack_empty(24, np.float32)" in pool.source
    assert "np.empty" not in pool.source
    from search_spaces import conv2d as cv
    from search_spaces.conv2d import Conv2d

    p = Conv2d(1, 96, 112, 112, 96, 3, 3, pad=1, stride=2, groups=96, layout="NHWC",
               weights="blocked", block=48, bias=True, epilogue="relu")  # fmt: skip
    cfg = {**cv.default_config(p, TARGET), "pad_at": "rows"}  # the padded rows of all channels
    conv = tuner.build(*cv.schedule(cfg, p, TARGET), target=TARGET)
    entry = conv.source.split("\ndef kernel(", 1)[1]
    assert re.search(r"np.empty\(\d+, np.float32\)", entry) and "Xp" in entry  # the heap


def test_a_squeeze_excitation_convolution_in_blocks_of_40_is_packed_and_serial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 1 x 1 convolution of a pooled image in channel blocks of 40 (2.5 AVX-512 vectors):
    LLVM unrolls its multiply-add loop whole before the loop vectorizer would see it, so
    with that vectorizer alone it ran scalar (400 -> 440 channels 29 us against 7.5, Zen 5).
    Its few multiply-adds run on one thread: waking the other cost more than the work."""
    from search_spaces import conv2d as cv
    from search_spaces.conv2d import Conv2d

    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path))
    p = Conv2d(1, 110, 1, 1, 440, 1, 1, layout="NHWC", weights="blocked", block=40, bias=True,
               epilogue="sigmoid")  # fmt: skip
    cfg = cv.default_config(p, TARGET)
    assert cfg["kr"] == 40 and not cfg["parallel"]
    s, args = cv.schedule(cfg, p, TARGET)
    kern = tuner.build(s, args, target=TARGET)
    assert "# vectorizer=both " in kern.source
    x = RNG.standard_normal((1, 1, 1, 110)).astype(np.float32)
    w = RNG.standard_normal((440, 110, 1, 1)).astype(np.float32)
    b = RNG.standard_normal(440).astype(np.float32)
    y = np.full((1, 1, 1, 440), np.nan, np.float32)
    kern(x, p.pack_weights(w), b, y)
    want = 1 / (1 + np.exp(-(np.einsum("nhwc,kc->nhwk", x, w[:, :, 0, 0]) + b)))
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    if "avx" not in cpu_flags():
        return
    asm = machine_code(kern)
    assert re.findall(r"\bvfmadd\w*ps\b", asm) and not re.findall(r"\bvfmadd\w*ss\b", asm)


def test_math_helpers_are_inlined_by_llvm_and_stay_vectorized(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dense layer's GELU calls ``erf32`` (and the ``exp32`` inside it) once per lane in its
    source; Numba compiles each helper once and LLVM inlines every call
    (``runtime._always_inlined``): no call is left in the machine code, and the epilogue's
    polynomial is packed."""
    from search_spaces import dense

    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path))  # compiled here, not loaded
    shape = {"batch": 7, "in_features": 29, "out_features": 67, "activation": "gelu"}
    cfg = dense.default_config(**shape, target=TARGET)
    s, tensors = dense.schedule(cfg, **shape)
    kern = tuner.build(s, tensors, target=TARGET)
    assert kern.source.count("erf32(") > 1  # a call per lane of the unrolled epilogue
    x = RNG.standard_normal((7, 29)).astype(np.float32)
    w = RNG.standard_normal((67, 29)).astype(np.float32)
    b = RNG.standard_normal(67).astype(np.float32)
    y = np.full((7, 67), np.nan, np.float32)
    kern(x, w, b, y)
    np.testing.assert_allclose(y, dense.reference(x, w, b, "gelu"), rtol=1e-5, atol=1e-5)
    asm = machine_code(kern)
    calls = [line for line in asm.splitlines() if "call" in line and re.search("erf32|exp32", line)]
    assert not calls, calls[:3]
    if "avx2" in cpu_flags():
        assert re.search(r"\bv(fmadd\d+|mul)ps\b", asm)
