"""apply_best / build_op: the best record per workload, defaults with one warning."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import tuner
from records import ErrorKind, LogWriter, Record
from tuner.target import Target
from tuner.workload import Workload

from . import faulty_ops  # noqa: F401  (registers t_double)


def write_log(path: Path, splits_and_seconds: list[tuple[int, float, str]]) -> None:
    target = Target.from_name("cpu")
    with LogWriter(path) as log:
        for trial, (split, seconds, kind) in enumerate(splits_and_seconds):
            log.write(
                Record.make(
                    Workload.make("t_double", N=16),
                    target,
                    {"split": split},
                    samples=(seconds,) if kind == "ok" else (),
                    error_kind=ErrorKind(kind),
                    trial=trial,
                )
            )


def test_build_op_uses_the_best_record_and_computes_the_reference(tmp_path: Path) -> None:
    log = tmp_path / "a.jsonl"
    write_log(log, [(1, 3e-6, "ok"), (4, 1e-6, "ok"), (2, 1e-9, "wrong_answer")])
    x = np.arange(16, dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with tuner.apply_best(log):
            f = tuner.build_op("t_double", N=16)
    assert f.config == {"split": 4} and f.record is not None and f.record.trial == 1
    np.testing.assert_array_equal(f(x), x * 2)


def test_logs_as_a_list_or_a_folder(tmp_path: Path) -> None:
    write_log(tmp_path / "a.jsonl", [(1, 3e-6, "ok")])
    write_log(tmp_path / "b.jsonl", [(4, 2e-6, "ok")])
    for source in (tmp_path, [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]):
        with tuner.apply_best(source):
            assert tuner.build_op("t_double", N=16).config == {"split": 4}


def test_an_untuned_workload_gets_its_default_and_one_warning(tmp_path: Path) -> None:
    write_log(tmp_path / "a.jsonl", [(1, 3e-6, "ok")])
    with (
        tuner.apply_best(tmp_path / "a.jsonl"),
        pytest.warns(tuner.UntunedWorkloadWarning) as caught,
    ):
        f = tuner.build_op("t_double", N=32)
    assert len(caught) == 1 and "t_double(N=32)" in str(caught[0].message)
    assert f.config == {"split": 2} and f.record is None


def test_outside_apply_best_the_default_is_used_quietly() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f = tuner.build_op("t_double", N=8)
    assert f.config == {"split": 2}


def test_records_from_before_an_argument_existed_still_match(tmp_path: Path) -> None:
    """matmul gained trans_a/trans_b; a log naming matmul(K,M,N,dtype) is still its record."""
    from search_spaces import get_operator

    op = get_operator("matmul")
    args = op.parse_args({"M": 8, "N": 8, "K": 8})
    cfg = op.default_config(args)
    old = Workload.make("matmul", M=8, N=8, K=8, dtype="float32")
    assert "trans_b" not in old.key
    log = tmp_path / "old.jsonl"
    with LogWriter(log) as out:
        out.write(Record.make(old, Target.from_name("cpu"), cfg, samples=(1e-6,)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no UntunedWorkloadWarning
        with tuner.apply_best(log):
            f = tuner.build_op("matmul", M=8, N=8, K=8)
    assert f.record is not None and f.record.samples == (1e-6,)
