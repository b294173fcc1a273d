"""Index simplification: a flat loop's decomposed index recombines into the flat index."""

from __future__ import annotations

import itertools

import pytest

from tuner.lower.simplify import simplify
from tuner.te.expr import Binary, Const, Var, walk

ii, io, o = Var("ii"), Var("io"), Var("o")


def _divisions(e):
    return sum(isinstance(n, Binary) and n.op in ("floordiv", "mod") for n in walk(e))


_OPS = {"add": int.__add__, "sub": int.__sub__, "mul": int.__mul__,
        "floordiv": int.__floordiv__, "mod": int.__mod__}  # fmt: skip


def _value(e, env):
    if isinstance(e, Var):
        return env[e.name]
    if isinstance(e, Const):
        return int(e.value)
    return _OPS[e.op](_value(e.a, env), _value(e.b, env))


@pytest.mark.parametrize(("h", "w", "c"), [(112, 112, 32), (28, 28, 58), (7, 7, 1), (1, 13, 3)])
def test_a_decomposed_flat_index_recombines(h, w, c):
    """``f`` split as ``[N, H, W, C]`` and addressed again is ``f``: no division per element."""
    f = ii + io * 64 + o * 4096
    addr = (f // c // w // h) * (h * w * c) + (f // c // w % h) * (w * c) + (f // c % w) * c + f % c
    ranges = {"ii": (0, 63), "io": (0, 63), "o": (0, (h * w * c) // 4096)}
    got = simplify(addr, ranges)
    assert _divisions(got) == 0, got
    for a, b, d in itertools.product((0, 5, 63), (0, 17, 63), range(ranges["o"][1] + 1)):
        env = {"ii": a, "io": b, "o": d}
        flat = a + 64 * b + 4096 * d
        if flat < h * w * c:
            assert _value(got, env) == flat


def test_a_channel_slice_offset_keeps_one_division():
    """A slice of channels 58..115 of a ``[116, 28, 28]`` image read by a flat loop: the
    channel, row and column parts merge; one ``% 45472`` stays, as the loop's guard (not its
    variables' ranges) is what keeps ``f`` below it."""
    f = ii + io * 64 + o * 16384
    addr = ((f // 28) // 28 % 58) * 784 + 28 * ((f // 28) % 28) + f % 28 + 45472
    got = simplify(addr, {"ii": (0, 63), "io": (0, 255), "o": (0, 2)})
    assert _divisions(got) == 1, got


def test_parts_that_do_not_line_up_stay_divided():
    """``3 * (x // 4) + x % 4`` is not ``x``: nothing merges."""
    x = Var("x")
    got = simplify(3 * (x // 4) + x % 4, {"x": (0, 100)})
    for v in range(101):
        assert _value(got, {"x": v}) == 3 * (v // 4) + v % 4
    assert _divisions(got) == 2


def _evaluate(e, env):  # type: ignore[no-untyped-def]
    from tuner.te.expr import Compare

    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Var):
        return env[e.name]
    if isinstance(e, Binary):
        a, b = _evaluate(e.a, env), _evaluate(e.b, env)
        ops = {"add": int.__add__, "sub": int.__sub__, "mul": int.__mul__}
        return ops[e.op](a, b)
    assert isinstance(e, Compare), e
    a, b = _evaluate(e.a, env), _evaluate(e.b, env)
    return {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b}[e.op]


def test_a_tile_inside_one_concat_piece_compares_its_tile_index():
    from tuner.te.expr import compare

    c, t = Var("c", "int64"), Var("t", "int64")
    got = simplify(compare("lt", c + t * 32, Const(288)), {"c": (0, 31)})
    assert {v.name for v in walk(got) if isinstance(v, Var)} == {"t"}
    assert repr(got) == repr(compare("lt", t, Const(9)))
    # A lane range that crosses a multiple of 32 decides nothing about t alone.
    wide = simplify(compare("lt", c + t * 32, Const(288)), {"c": (0, 32)})
    assert "c" in {v.name for v in walk(wide) if isinstance(v, Var)}


@pytest.mark.parametrize("op", ["lt", "le", "gt", "ge"])
@pytest.mark.parametrize(("m", "lane", "offset", "k"), [(32, 32, 0, 288), (16, 8, 5, 77), (8, 8, -3, 0), (4, 3, 1, 10)])  # fmt: skip
def test_coarse_comparisons_agree_with_the_original_everywhere(op, m, lane, offset, k):
    from tuner.te.expr import compare

    c, t, u = Var("c", "int64"), Var("t", "int64"), Var("u", "int64")
    e = compare(op, c + t * m + u * (2 * m) + Const(offset), Const(k))
    got = simplify(e, {"c": (0, lane - 1)})
    for cv, tv, uv in itertools.product(range(lane), range(-12, 13), range(-3, 4)):
        env = {"c": cv, "t": tv, "u": uv}
        assert _evaluate(got, env) == _evaluate(e, env), (env, got)


def test_a_remembered_simplification_depends_on_the_ranges_of_its_variables():
    """Simplifications are remembered by expression and by the ranges of the variables it holds:
    the same index under another range of ``ii`` simplifies again, one of an unrelated
    variable does not change it."""
    e = (io * 16 + ii) // 16
    assert simplify(e, {"ii": (0, 15)}) == io
    assert simplify(e, {"ii": (0, 31)}) != io
    assert simplify(e, {}) != io
    assert simplify(e, {"ii": (0, 15), "o": (0, 3)}) == io
    assert simplify(e, {"ii": (0, 15), "o": (0, 7)}) == io


def test_a_remembered_simplification_keeps_a_symbolic_extents_own_bounds():
    """Two ``Var("n")`` are equal whatever their bounds, but a kernel's checks read the bounds
    from the simplified expression: each simplification returns the variable it was given."""
    for hi in (128, 256, None):
        n = Var("n", lo=1, hi=hi)
        got = simplify((n + 31) // 32 * 32 + ii * 0, {"ii": (0, 3)})
        (var,) = {v for v in walk(got) if isinstance(v, Var)}
        assert var.hi == hi
