"""compute_at at a consumer's consumer: a softmax's max and exp at the output's row loop.

``out`` reads ``e`` and ``s`` but not ``mx``; ``mx`` may still be computed at
``out``'s row loop when ``e``, its reader, is computed there too (TVM's own x86
softmax schedule does this). Bounds inference sizes ``mx`` by ``e``'s region
there, which ``out``'s and ``s``'s reads of ``e`` give. An attachment where
some reader of the stage runs outside the loop is a ScheduleError.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import tuner
from tuner import Schedule, ScheduleError, te
from tuner.te import Tensor

from .test_primitives import run

SHAPES = [(1, 1), (1, 13), (13, 1), (7, 13), (16, 8)]


def softmax(m: int, n: int):  # type: ignore[no-untyped-def]
    """``mx[i] = max_k x``, ``e = exp(x - mx)``, ``s[i] = sum_k e``, ``out = e / s``."""
    x = te.placeholder((m, n), "float32", name="x")
    k = te.reduce_axis(n, name="k")
    mx = te.compute((m,), lambda i: te.max(x[i, k], axis=k), name="mx")
    e = te.compute((m, n), lambda i, j: te.exp(x[i, j] - mx[i]), name="e")
    r = te.reduce_axis(n, name="r")
    s = te.compute((m,), lambda i: te.sum(e[i, r], axis=r), name="s")
    out = te.compute((m, n), lambda i, j: e[i, j] / s[i], name="out")

    def ref(a: np.ndarray) -> np.ndarray:
        ex = np.exp(a - a.max(axis=1, keepdims=True))
        return ex / ex.sum(axis=1, keepdims=True)

    return [x], (mx, e, s), out, ref


Scheduler = Callable[[Schedule, tuple[Tensor, Tensor, Tensor], Tensor], None]


def _all_at_row(s: Schedule, stages: tuple[Tensor, Tensor, Tensor], out: Tensor) -> None:
    """TVM's x86 softmax: the max, the exp and the sum at the output's row loop."""
    row = s[out].op.axis[0]
    for T in stages:
        s[T].compute_at(s[out], row)


def _producer_first(s: Schedule, stages: tuple[Tensor, Tensor, Tensor], out: Tensor) -> None:
    """The same, traced in the other order: the max is attached before its reader is."""
    row = s[out].op.axis[0]
    for T in reversed(stages):
        s[T].compute_at(s[out], row)


def _inner_row(s: Schedule, stages: tuple[Tensor, Tensor, Tensor], out: Tensor) -> None:
    """Rows split by 3 (no shape here divides), all at the inner row, parallel tasks."""
    io, ii = s[out].split(s[out].op.axis[0], factor=3)
    s[out].parallel(io)
    for T in stages:
        s[T].compute_at(s[out], ii)


def _outer_row(s: Schedule, stages: tuple[Tensor, Tensor, Tensor], out: Tensor) -> None:
    """The max and the exp for a block of 4 rows at once, the sum per row inside the block."""
    mx, e, sm = stages
    io, ii = s[out].split(s[out].op.axis[0], factor=4)
    s[out].parallel(io)
    s[mx].compute_at(s[out], io)
    s[e].compute_at(s[out], io)
    s[sm].compute_at(s[out], ii)


def _max_at_exp(s: Schedule, stages: tuple[Tensor, Tensor, Tensor], out: Tensor) -> None:
    """The max at the exp's row loop, the exp at the output's (a nest inside a nest)."""
    mx, e, sm = stages
    row = s[out].op.axis[0]
    s[mx].compute_at(s[e], s[e].op.axis[0])
    s[e].compute_at(s[out], row)
    s[sm].compute_at(s[out], row)
    s[out].parallel(row)


def _split_everything(s: Schedule, stages: tuple[Tensor, Tensor, Tensor], out: Tensor) -> None:
    """Columns and both reductions split by factors that do not divide, the exp vectorized."""
    mx, e, sm = stages
    i, j = s[out].op.axis
    s[out].split(j, factor=4)
    for T in (mx, sm):
        s[T].split(s[T].op.reduce_axis[0], factor=3)
    _, ej = s[e].split(s[e].op.axis[1], factor=8)
    s[e].vectorize(ej)
    for T in stages:
        s[T].compute_at(s[out], i)


def _exp_inlined(s: Schedule, stages: tuple[Tensor, Tensor, Tensor], out: Tensor) -> None:
    """The exp inlined: the sum and the output read the max themselves."""
    mx, e, sm = stages
    s[e].compute_inline()
    row = s[out].op.axis[0]
    s[mx].compute_at(s[out], row)
    s[sm].compute_at(s[out], row)


SCHEDULES: list[Scheduler] = [
    _all_at_row,
    _producer_first,
    _inner_row,
    _outer_row,
    _max_at_exp,
    _split_everything,
    _exp_inlined,
]


@pytest.mark.usefixtures("two_threads")
@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda mn: f"{mn[0]}x{mn[1]}")
def test_softmax_chain_matches_numpy(shape: tuple[int, int], schedule: Scheduler) -> None:
    inputs, stages, out, ref = softmax(*shape)
    s = te.create_schedule(out)
    schedule(s, stages, out)
    run(inputs, out, ref, s, rtol=1e-5, atol=1e-6)


def test_the_chain_is_computed_per_row_with_each_reduction_initialised_there() -> None:
    inputs, stages, out, _ = softmax(7, 13)
    s = te.create_schedule(out)
    _inner_row(s, stages, out)
    text = str(tuner.lower(s, [*inputs, out]))
    for buf in (
        "mx = allocate(float32[1]",
        "e = allocate(float32[1, 13]",
        "s = allocate(float32[1]",
    ):
        assert buf in text
    row = text.index("for i_i in range(")
    assert row < text.index("mx[0] = -inf") < text.index("for k in range(13)")
    assert row < text.index("s[0] = 0.0") < text.index("for r in range(13)")


def test_a_block_of_rows_is_computed_once_per_block() -> None:
    """At the outer row loop the max and the exp cover the block's 4 rows (7 rows: 4 and 3)."""
    inputs, stages, out, _ = softmax(7, 13)
    s = te.create_schedule(out)
    _outer_row(s, stages, out)
    text = str(tuner.lower(s, [*inputs, out]))
    assert "mx = allocate(float32[4]" in text and "e = allocate(float32[4, 13]" in text
    assert text.index("mx = allocate") < text.index("for i_i in range(")


def test_a_chain_replays_from_json() -> None:
    inputs, stages, out, ref = softmax(5, 7)
    s = te.create_schedule(out)
    _producer_first(s, stages, out)
    again = Schedule.from_json(out, s.to_json())
    assert again.trace == s.trace
    run(inputs, out, ref, again, rtol=1e-5, atol=1e-6)


def test_a_stage_is_sized_by_all_its_readers_in_the_loop() -> None:
    """``e`` is read whole by the sum but one column by ``out``: ``d`` covers ``e``'s row."""
    x = te.placeholder((5, 6), "float32", name="x")
    d = te.compute((5, 6), lambda i, j: x[i, j] * 2.0, name="d")
    e = te.compute((5, 6), lambda i, j: d[i, j] + 1.0, name="e")
    k = te.reduce_axis(6, name="k")
    sm = te.compute((5,), lambda i: te.sum(e[i, k], axis=k), name="s")
    out = te.compute((5, 6), lambda i, j: e[i, 0] + sm[i] + x[i, j], name="out")
    s = te.create_schedule(out)
    for T in (d, e, sm):
        s[T].compute_at(s[out], s[out].op.axis[0])
    assert "d = allocate(float32[1, 6]" in str(tuner.lower(s, [x, out]))

    def ref(a: np.ndarray) -> np.ndarray:
        b = a * 2 + 1
        return b[:, :1] + b.sum(1, keepdims=True) + a

    run([x], out, ref, s, rtol=1e-5, atol=1e-6)


def test_a_deeper_chain_through_lane_partials() -> None:
    """Partial maxima at the max's row, the max at the output's: three stages down to a reader."""
    x = te.placeholder((7, 10), "float32", name="x")
    k = te.reduce_axis(3, name="k")
    part = te.compute(
        (7, 4),
        lambda i, lane: te.max(x[i, te.minimum(k * 4, 6) + lane], axis=k),
        name="part",
    )
    q = te.reduce_axis(4, name="q")
    mx = te.compute((7,), lambda i: te.max(part[i, q], axis=q), name="mx")
    e = te.compute((7, 10), lambda i, j: x[i, j] - mx[i], name="e")
    out = te.compute((7, 10), lambda i, j: e[i, j] * 2.0, name="out")
    s = te.create_schedule(out)
    io, ii = s[out].split(s[out].op.axis[0], factor=2)
    s[part].compute_at(s[out], ii)  # read by mx only, two attachments away from out
    s[mx].compute_at(s[out], ii)
    s[e].compute_at(s[out], ii)
    run([x], out, lambda a: (a - a.max(1, keepdims=True)) * 2, s, rtol=1e-6, atol=1e-6)


# -- illegal chains ---------------------------------------------------------


def test_a_stage_the_parent_does_not_depend_on_is_refused_at_the_step() -> None:
    x = te.placeholder((8,), "float32", name="x")
    t = te.compute((8,), lambda i: x[i] + 1.0, name="t")
    w = te.compute((8,), lambda i: x[i] * 2.0, name="w")
    v = te.compute((8,), lambda i: t[i] + w[i], name="v")
    s = te.create_schedule(v)
    with pytest.raises(ScheduleError) as info:
        s[t].compute_at(s[w], s[w].op.axis[0])
    assert str(info.value).startswith("compute_at(stage='t', parent='w'")
    assert "stage w does not read t, directly or through other stages" in str(info.value)


def test_a_chain_whose_middle_stage_stays_at_the_root_is_refused() -> None:
    """The max at the output's row, but the exp (its only reader) is a pass at the root."""
    inputs, (mx, e, sm), out, _ = softmax(4, 6)
    s = te.create_schedule(out)
    s[mx].compute_at(s[out], s[out].op.axis[0])
    msg = "compute_at.mx, out.: mx is read by e, which is not computed inside out's loop i"
    with pytest.raises(ScheduleError, match=msg):
        tuner.lower(s, [*inputs, out])
    with pytest.raises(ScheduleError, match=msg):
        tuner.build(s, [*inputs, out])


def test_a_reader_at_an_outer_loop_than_its_producer_is_refused() -> None:
    inputs, (mx, e, sm), out, _ = softmax(6, 4)
    s = te.create_schedule(out)
    io, ii = s[out].split(s[out].op.axis[0], factor=2)
    s[mx].compute_at(s[out], ii)
    s[e].compute_at(s[out], io)
    s[sm].compute_at(s[out], io)
    with pytest.raises(ScheduleError, match="e reads mx at loop i_o, outside the loop mx is"):
        tuner.lower(s, [*inputs, out])


def test_a_chain_that_a_root_stage_also_reads_is_refused() -> None:
    """``out2`` reads the max at the root, so the max cannot live at ``out``'s row."""
    x = te.placeholder((4, 6), "float32", name="x")
    k = te.reduce_axis(6, name="k")
    mx = te.compute((4,), lambda i: te.max(x[i, k], axis=k), name="mx")
    e = te.compute((4, 6), lambda i, j: x[i, j] - mx[i], name="e")
    out = te.compute((4, 6), lambda i, j: e[i, j] * 2.0, name="out")
    out2 = te.compute((4,), lambda i: mx[i] + 1.0, name="out2")
    s = te.create_schedule([out, out2])
    row = s[out].op.axis[0]
    s[e].compute_at(s[out], row)
    s[mx].compute_at(s[out], row)
    with pytest.raises(ScheduleError, match=r"mx is read by out2, .*compute mx at the root$"):
        tuner.lower(s, [x, out, out2])
