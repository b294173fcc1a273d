"""Schedules are traces: JSON round trip and replay give the identical loop nest."""

from __future__ import annotations

import json

import pytest

import tuner
from tuner import Schedule, ScheduleError, te

from .ops import matmul


def _blocked():  # type: ignore[no-untyped-def]
    (A, B), C, _ = matmul(40, 48, 24)
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    io, jo, ii, ji = s[C].tile(i, j, 8, 16)
    ko, ki = s[C].split(k, factor=8)
    s[C].reorder(io, jo, ko, ki, ii, ji)
    CL = s.cache_write(C, "local")
    s[CL].compute_at(s[C], jo)
    BB = s.cache_read(B, "global", [C])
    s[BB].compute_at(s[C], ko)
    s[C].vectorize(ji)
    s[C].parallel(io)
    return A, B, C, s


def test_trace_round_trips_through_json() -> None:
    A, B, C, s = _blocked()
    text = json.dumps(s.to_json())
    replayed = Schedule.from_json(C, json.loads(text))
    assert replayed.trace == s.trace
    assert str(tuner.lower(replayed, [A, B, C])) == str(tuner.lower(s, [A, B, C]))


@pytest.mark.parametrize(
    "bad",
    [
        {"step": "exec", "code": "__import__('os').system('true')"},
        {"step": "split", "stage": "C", "axis": "i", "factor": "__import__('os')"},
        {"step": "split", "stage": "C", "axis": "i", "factor": True},
        {"step": "split", "stage": "C", "axis": "i", "factor": 2, "extra": 1},
        {"step": "reorder", "stage": "C", "axes": [1, 2]},
        {"step": "split", "axis": "i", "factor": 2},
        "split",
    ],
)
def test_replay_rejects_anything_outside_the_vocabulary(bad) -> None:  # type: ignore[no-untyped-def]
    (A, B), C, _ = matmul(4, 4, 4)
    with pytest.raises(ScheduleError):
        Schedule.from_json(C, [bad])


def test_replay_reports_an_illegal_step() -> None:
    (A, B), C, _ = matmul(4, 4, 4)
    with pytest.raises(ScheduleError, match="positive integer"):
        Schedule.from_json(C, [{"step": "split", "stage": "C", "axis": "i", "factor": -3}])


def test_loop_nest_shows_the_schedule() -> None:
    A, B, C, s = _blocked()
    text = str(tuner.lower(s, [A, B, C]))
    assert "for io" not in text  # names come from the split: i_o, j_o
    assert "for i_o in range(5):  # parallel" in text
    assert "C_local = allocate(float32[8, 16], scope='local')" in text
    assert "B_global = allocate(float32[8, 16], scope='global')" in text
