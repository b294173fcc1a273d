from __future__ import annotations

import pytest

from tuner import te


def test_matmul_definition_reads_like_tvm() -> None:
    A = te.placeholder((8, 4), "float32", name="A")
    B = te.placeholder((4, 2), "float32", name="B")
    k = te.reduce_axis(4, name="k")
    C = te.compute((8, 2), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    assert C.shape_ints == (8, 2)
    assert C.dtype == "float32"
    assert [t.name for t in C.op.inputs] == ["A", "B"]
    assert [a.name for a in C.op.reduce_axis] == ["k"]


def test_int8_inputs_accumulate_in_int32() -> None:
    A = te.placeholder((4, 4), "int8", name="A")
    k = te.reduce_axis(4, name="k")
    C = te.compute(
        (4,), lambda i: te.sum(A[i, k].astype("int32") * A[i, k].astype("int32"), axis=k)
    )
    assert C.dtype == "int32"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda A, k: te.compute((4,), lambda i: A[i]), "tensor A has 2 dimension"),
        (lambda A, k: te.compute((4,), lambda i: A[i, i * 0.5]), "indexed with a float32"),
        (
            lambda A, k: te.compute((4,), lambda i: te.sum(A[i, k], axis=k) + 1.0),
            "nests a reduction",
        ),
        (lambda A, k: te.compute((4,), lambda i: A[i, k]), "reduce axis k"),
        (lambda A, k: te.compute((4, 4), lambda i: A[i, 0]), "takes 1 argument"),
        (lambda A, k: te.compute((0,), lambda i: A[i, 0]), "must be positive"),
        (lambda A, k: te.placeholder((4,), "float16", name="H"), "unsupported dtype"),
        (lambda A, k: te.compute((4,), lambda i: A[i, 7]), "out of range"),
        (lambda A, k: te.compute((4,), lambda i: te.sum(A[i, k], axis=i)), "not a te.reduce_axis"),
    ],
)
def test_definition_mistakes_name_the_tensor(make, message) -> None:  # type: ignore[no-untyped-def]
    A = te.placeholder((4, 4), "float32", name="A")
    k = te.reduce_axis(4, name="k")
    with pytest.raises((ValueError, TypeError), match=message):
        make(A, k)


def test_expressions_have_no_truth_value() -> None:
    A = te.placeholder((4,), "float32", name="A")
    with pytest.raises(TypeError, match="if_then_else"):
        te.compute((4,), lambda i: A[i] if A[i] > 0 else 0.0)


def test_symbolic_extents_stay_symbolic_through_lowering() -> None:
    n = te.var("n")
    A = te.placeholder((n, 4), "float32", name="A")
    B = te.compute((n, 4), lambda i, j: A[i, j] * 2.0, name="B")
    assert repr(B.shape[0]) == "n"
    s = te.create_schedule(B)
    i, _ = s[B].op.axis
    s[B].split(i, factor=8)
    import tuner

    func = tuner.lower(s, [A, B])
    assert [v.name for v in func.symbols] == ["n"]
    assert "range(((n + 7) // 8))" in str(func)


def test_reduction_identities() -> None:
    from tuner.lower.context import identity

    assert identity("sum", "float32").value == 0.0
    assert identity("max", "float32").value == float("-inf")
    assert identity("min", "int32").value == 2**31 - 1
    assert identity("max", "int8").value == -128


def test_compute_of_any_rank_takes_star_indices():
    from tuner import te

    X = te.placeholder((2, 3, 4), "float32", name="X")
    Y = te.compute(X.shape, lambda *i: X[i] * 2.0, name="Y")
    assert [a.name for a in Y.op.axis] == ["i0", "i1", "i2"]
