"""apply_best picks the record of the thread count and machine it builds for, and replays traces."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import tuner
from records import LogWriter, Record
from tuner.lower.ir import For
from tuner.lower.visitor import walk_stmts
from tuner.target import Target
from tuner.te.expr import Const
from tuner.workload import Workload

from . import faulty_ops  # noqa: F401  (registers t_double)

WORKLOAD = Workload.make("t_double", N=16)
X = np.arange(16, dtype=np.float32)


def _record(target: Target, split: int, seconds: float, trial: int, **fields) -> Record:  # type: ignore[no-untyped-def]
    return Record.make(
        WORKLOAD, target, {"split": split}, samples=(seconds,), trial=trial, **fields
    )


def _write(path: Path, records: list[Record]) -> Path:
    with LogWriter(path) as log:
        for r in records:
            log.write(r)
    return path


def _inner_extents(f: tuner.OpKernel) -> list[int]:
    """The constant extents of the kernel's loops."""
    loops = [s for s in walk_stmts(f.kernel.lowered.body) if isinstance(s, For)]
    return [int(s.extent.value) for s in loops if isinstance(s.extent, Const)]


def test_each_thread_count_takes_its_own_record(tmp_path: Path) -> None:
    one = Target.from_name("cpu", num_threads=1)
    two = Target.from_name("cpu", num_threads=2)
    log = _write(
        tmp_path / "t.jsonl",
        [_record(one, 4, 2e-6, 0), _record(two, 2, 1e-6, 1), _record(one, 2, 3e-6, 2)],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with tuner.apply_best(log):
            f1 = tuner.build_op("t_double", target=one, N=16)
            f2 = tuner.build_op("t_double", target=two, N=16)
    assert f1.config == {"split": 4} and f1.record is not None and f1.record.target.threads == 1
    assert f2.config == {"split": 2} and f2.record is not None and f2.record.target.threads == 2
    np.testing.assert_array_equal(f1(X), X * 2)


def test_another_thread_count_or_machine_is_taken_with_a_warning(tmp_path: Path) -> None:
    two = Target.from_name("cpu", num_threads=2)
    log = _write(tmp_path / "t.jsonl", [_record(two, 4, 1e-6, 0)])
    with (
        tuner.apply_best(log),
        pytest.warns(tuner.RecordChoiceWarning, match="no record at 1 threads"),
    ):
        f = tuner.build_op("t_double", target=two.with_threads(1), N=16)
    assert f.record is not None and f.record.target.threads == 2
    elsewhere = Target("cpu", two.capabilities, "another-machine")
    log = _write(tmp_path / "other.jsonl", [_record(elsewhere, 4, 1e-6, 0)])
    with (
        tuner.apply_best(log),
        pytest.warns(tuner.RecordChoiceWarning, match="another machine .*another-machine"),
    ):
        f = tuner.build_op("t_double", target=two, N=16)
    assert f.config == {"split": 4}


def test_a_record_of_a_changed_space_is_rebuilt_from_its_trace(tmp_path: Path) -> None:
    """The knobs say split 1, the trace that was measured splits by 4: the trace wins."""
    target = Target.from_name("cpu", num_threads=1)
    trace = [{"step": "split", "stage": "Y", "axis": "i", "factor": 4, "nparts": None}]
    stale = _record(target, 1, 1e-6, 0, trace=trace, space_version="an-older-space")
    log = _write(tmp_path / "t.jsonl", [stale])
    with (
        tuner.apply_best(log),
        pytest.warns(
            tuner.RecordChoiceWarning, match="space changed; rebuilt from its schedule trace"
        ),
    ):
        f = tuner.build_op("t_double", target=target, N=16)
    assert f.replayed and f.record is not None
    assert 4 in _inner_extents(f), "the loop nest of the trace, not of the knobs"
    np.testing.assert_array_equal(f(X), X * 2)


def test_a_trace_that_no_longer_replays_falls_back_to_the_knobs(tmp_path: Path) -> None:
    target = Target.from_name("cpu", num_threads=1)
    broken = [{"step": "split", "stage": "Gone", "axis": "i", "factor": 4, "nparts": None}]
    rec = _record(target, 2, 1e-6, 0, trace=broken, space_version="an-older-space")
    log = _write(tmp_path / "t.jsonl", [rec])
    with tuner.apply_best(log), pytest.warns(tuner.RecordChoiceWarning, match="no longer applies"):
        f = tuner.build_op("t_double", target=target, N=16)
    assert not f.replayed and f.config == {"split": 2}
    np.testing.assert_array_equal(f(X), X * 2)
