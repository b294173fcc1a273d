"""Every kind of illegal schedule raises ScheduleError naming the step and the reason."""

from __future__ import annotations

import pytest

from tuner import ScheduleError, te

from .ops import chain, conv2d, matmul


def _mm():  # type: ignore[no-untyped-def]
    (A, B), C, _ = matmul(16, 16, 16)
    return A, B, C, te.create_schedule(C)


def test_reusing_a_split_away_axis() -> None:
    *_, C, s = _mm()
    i, _ = s[C].op.axis
    s[C].split(i, factor=4)
    with pytest.raises(ScheduleError, match=r"split\(.*already split or fused"):
        s[C].split(i, factor=2)


def test_factor_zero_and_both_amounts() -> None:
    *_, C, s = _mm()
    i, _ = s[C].op.axis
    with pytest.raises(ScheduleError, match="positive integer"):
        s[C].split(i, factor=0)
    with pytest.raises(ScheduleError, match="exactly one"):
        s[C].split(i, factor=2, nparts=2)


def test_reorder_with_another_stages_axes() -> None:
    [X], U, _ = chain(4, 4)
    s = te.create_schedule(U)
    T = U.op.inputs[0]
    ti, _ = s[T].op.axis
    ui, _ = s[U].op.axis
    with pytest.raises(ScheduleError, match="belongs to stage T"):
        s[U].reorder(ti, ui)


def test_reorder_naming_an_axis_twice() -> None:
    *_, C, s = _mm()
    i, j = s[C].op.axis
    with pytest.raises(ScheduleError, match="named twice"):
        s[C].reorder(i, i)


def test_fuse_non_adjacent_and_mixed_kinds() -> None:
    *_, C, s = _mm()
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    with pytest.raises(ScheduleError, match="adjacent"):
        s[C].fuse(i, k)
    s[C].reorder(i, k, j)
    with pytest.raises(ScheduleError, match="reduction axis with a spatial"):
        s[C].fuse(i, k)


def test_parallel_and_vectorize_on_a_reduction_axis() -> None:
    *_, C, s = _mm()
    (k,) = s[C].op.reduce_axis
    with pytest.raises(ScheduleError, match=r"annotate\(.*reduction axis; parallel"):
        s[C].parallel(k)
    with pytest.raises(ScheduleError, match="reorder the reduction"):
        s[C].vectorize(k)


def test_two_parallel_axes_and_nested_parallel_loops() -> None:
    *_, C, s = _mm()
    i, j = s[C].op.axis
    s[C].parallel(i)
    with pytest.raises(ScheduleError, match="already has parallel axis"):
        s[C].parallel(j)
    (X, W), O, _ = conv2d(1, 2, 6, 6, 2, 3, 1, 1)
    s2 = te.create_schedule(O)
    P = O.op.inputs[0]
    b, f, y, x = s2[O].op.axis
    s2[O].parallel(f)
    s2[P].compute_at(s2[O], y)
    s2[P].parallel(s2[P].op.axis[1])
    import tuner

    with pytest.raises(ScheduleError, match="nested inside parallel loop"):
        tuner.lower(s2, [X, W, O])


def test_unroll_too_long() -> None:
    (A, B), C, _ = matmul(4, 1000, 4)
    s = te.create_schedule(C)
    _, j = s[C].op.axis
    with pytest.raises(ScheduleError, match="unroll at most"):
        s[C].unroll(j)


def test_compute_at_to_a_non_consumer() -> None:
    X = te.placeholder((8,), "float32", name="X")
    T = te.compute((8,), lambda i: X[i] + 1.0, name="T")
    W = te.compute((8,), lambda i: X[i] * 3.0, name="W")
    V = te.compute((8,), lambda i: T[i] - W[i], name="V")
    s = te.create_schedule(V)
    with pytest.raises(ScheduleError, match="stage W does not read T, directly or through"):
        s[T].compute_at(s[W], s[W].op.axis[0])


def test_compute_at_a_consumers_consumer_needs_the_consumer_inside_too() -> None:
    """V reads T only through U: legal as a step, refused by lowering while U is outside."""
    X = te.placeholder((8,), "float32", name="X")
    T = te.compute((8,), lambda i: X[i] + 1.0, name="T")
    U = te.compute((8,), lambda i: T[i] * 2.0, name="U")
    V = te.compute((8,), lambda i: U[i] - 1.0, name="V")
    s = te.create_schedule(V)
    s[T].compute_at(s[V], s[V].op.axis[0])
    import tuner

    with pytest.raises(
        ScheduleError,
        match=r"compute_at\(T, V\): T is read by U, which is not computed inside V's loop i; "
        "compute T at the root, or U inside that loop",
    ):
        tuner.lower(s, [X, V])
    s[U].compute_at(s[V], s[V].op.axis[0])
    assert "T = allocate(float32[1]" in str(tuner.lower(s, [X, V]))


def test_compute_at_of_an_output_and_inline_of_a_reduction() -> None:
    *_, C, s = _mm()
    with pytest.raises(ScheduleError, match="is an output"):
        s[C].compute_inline()
    (X, W), O, _ = conv2d(1, 2, 6, 6, 2, 3, 1, 1)
    s2 = te.create_schedule(O)
    with pytest.raises(ScheduleError, match="an output; outputs are computed at the root"):
        s2[O].compute_at(s2[O], s2[O].op.axis[0])


def test_steps_on_an_inlined_stage() -> None:
    [X], U, _ = chain(4, 4)
    s = te.create_schedule(U)
    T = U.op.inputs[0]
    s[T].compute_inline()
    with pytest.raises(ScheduleError, match="was inlined"):
        s[T].split(s[T].op.axis[0], factor=2)


def test_bind_checks_tags_and_reductions() -> None:
    *_, C, s = _mm()
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    with pytest.raises(ScheduleError, match="unknown thread tag"):
        s[C].bind(i, "warp.x")
    with pytest.raises(ScheduleError, match="reduction axis; binding"):
        s[C].bind(k, "threadIdx.x")
    s[C].bind(i, "blockIdx.x")
    with pytest.raises(ScheduleError, match="already bound"):
        s[C].bind(j, "blockIdx.x")


def test_cache_checks() -> None:
    A, B, C, s = _mm()
    with pytest.raises(ScheduleError, match="unknown scope"):
        s.cache_write(C, "texture")
    s.cache_write(C, "local")
    with pytest.raises(ScheduleError, match="already has a local cache"):
        s.cache_write(C, "local")
    [X], U, _ = chain(4, 4)
    s2 = te.create_schedule(U)
    T = U.op.inputs[0]
    with pytest.raises(ScheduleError, match="stage T does not read U"):
        s2.cache_read(U, "global", [T])


def test_cache_write_must_be_computed_inside_its_stage() -> None:
    A, B, C, s = _mm()
    CL = s.cache_write(C, "local")
    import tuner

    with pytest.raises(ScheduleError, match="must be computed at a loop of C"):
        tuner.lower(s, [A, B, C])
    [X], U, _ = chain(4, 4)
    s2 = te.create_schedule(U)
    T = U.op.inputs[0]
    TL = s2.cache_write(T, "local")
    with pytest.raises(ScheduleError, match="can only be computed inside T"):
        s2[TL].compute_at(s2[U], s2[U].op.axis[0])
    assert CL.name == "C_local"


def test_compute_at_when_another_stage_also_reads() -> None:
    X = te.placeholder((8,), "float32", name="X")
    T = te.compute((8,), lambda i: X[i] + 1.0, name="T")
    U = te.compute((8,), lambda i: T[i] * 2.0, name="U")
    V = te.compute((8,), lambda i: T[i] + U[i], name="V")
    s = te.create_schedule(V)
    s[T].compute_at(s[U], s[U].op.axis[0])
    import tuner

    with pytest.raises(ScheduleError, match="also read by V"):
        tuner.lower(s, [X, V])


def test_error_message_names_the_step() -> None:
    *_, C, s = _mm()
    with pytest.raises(ScheduleError) as info:
        s[C].split("nope", factor=2)
    assert str(info.value).startswith("split(stage='C', axis='nope'")
