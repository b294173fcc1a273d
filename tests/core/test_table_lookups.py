"""Byte table lookups in vectors (``LoopRewrites._lookups``, ``codegen.cpu.tables``).

``out[i] = table[x[i] + c]`` over bytes, written as ``vlookup64/32/16`` calls where the
machine has AVX-512 VBMI, else as the scalar loop; either way NumPy's indexing.
"""

from __future__ import annotations

import numpy as np
import pytest

import tuner
from tuner import te
from tuner.codegen.cpu.features import compiles_vbmi
from tuner.target import Target, table_lookup_bits

RNG = np.random.default_rng(23)
HOST = Target.from_name("cpu", num_threads=2)
VBMI = HOST.table_lookup_bits >= 512 and compiles_vbmi()


def _kernel(n: int, inner: int, key: str, parallel: bool = False):  # type: ignore[no-untyped-def]
    """The lookup of ``n`` keys, its loop split by ``inner`` (the outer one ``parallel``)."""
    lo = int(np.iinfo(key).min)
    x = te.placeholder((n,), key, name="x")
    t = te.placeholder((256,), "uint8", name="t")
    y = te.compute((n,), lambda i: t[(x[i].astype("int64") - lo,)], name="y", dtype="uint8")
    s = te.create_schedule(y)
    outer, _ = s[y].split(s[y].op.axis[0], factor=inner)
    if parallel:
        s[y].parallel(outer)
    return tuner.build(s, [x, t, y], target=HOST)


@pytest.mark.parametrize("key", ["uint8", "int8"])
@pytest.mark.parametrize(
    ("n", "inner"),
    [(1000, 16), (999, 37), (4096, 64), (1003, 200), (169, 169), (49, 7)],
)
def test_lookups_read_the_table_at_each_key(key: str, n: int, inner: int) -> None:
    """Every width, loops of whole vectors, vectors and a rest, and loops too short for one;
    extents no split divides (the edge tile's loop is not a constant: it stays scalar)."""
    info = np.iinfo(key)
    kern = _kernel(n, inner, key, parallel=n > 1000)
    x = RNG.integers(info.min, info.max + 1, n).astype(key)
    x[:2] = info.min, info.max
    table = RNG.integers(0, 256, 256).astype(np.uint8)
    y = np.zeros(n, np.uint8)
    kern(x, table, y)
    np.testing.assert_array_equal(y, table[x.astype(np.int64) - info.min])
    if VBMI and inner >= 16:
        assert "vlookup" in kern.source
    if not VBMI or inner < 16:
        assert "vlookup" not in kern.source.split("def ", 1)[1]


def test_a_loop_that_writes_anything_else_stays_scalar() -> None:
    """A lookup whose result is changed after the read is not a copy of table bytes."""
    x = te.placeholder((256,), "uint8", name="x")
    t = te.placeholder((256,), "uint8", name="t")
    y = te.compute((256,), lambda i: t[(x[i].astype("int64"),)] + x[i], name="y", dtype="uint8")
    s = te.create_schedule(y)
    s[y].split(s[y].op.axis[0], factor=64)
    kern = tuner.build(s, [x, t, y], target=HOST)
    assert "vlookup" not in kern.source.split("def ", 1)[1]
    xs = np.arange(256, dtype=np.uint8)
    table = RNG.integers(0, 256, 256).astype(np.uint8)
    out = np.zeros(256, np.uint8)
    kern(xs, table, out)
    np.testing.assert_array_equal(out, (table + xs).astype(np.uint8))


def test_the_target_says_where_tables_are_read_in_vectors() -> None:
    assert table_lookup_bits(frozenset({"avx512f", "avx512vbmi"}), 512) == 512
    assert table_lookup_bits(frozenset({"avx512f"}), 512) == 0  # Skylake-SP, Zen 2 and 3
    assert table_lookup_bits(frozenset({"avx512f", "avx512vbmi"}), 256) == 0
    assert Target.make("cpu", vector_lanes=16).table_lookup_bits == 0  # recorded before
