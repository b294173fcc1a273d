"""Merging workers' logs: every measurement once, trial numbers unique, folders accepted."""

from __future__ import annotations

from pathlib import Path

import pytest

from records import Record, append, best, load, merge
from tuner.cli import main

from .helpers import CPU_A, MATMUL


def _worker_log(path: Path, first_time: float, configs: list[int], seconds: float) -> None:
    """A worker's log: trials numbered 0, 1, ... from its own start, as each worker numbers them."""
    records = [
        Record.make(
            MATMUL,
            CPU_A,
            {"tile": [c, 8]},
            samples=(seconds * (1 + i),),
            trial=i,
            timestamp=first_time + i,
            strategy="random",
        )
        for i, c in enumerate(configs)
    ]
    append(path, records)


def test_merge_keeps_every_measurement_once_with_unique_trials(tmp_path: Path) -> None:
    a, b, out = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "all.jsonl"
    _worker_log(a, 100.0, [1, 2, 4], 2e-3)
    _worker_log(b, 100.5, [8, 16], 1e-3)
    result = merge(out, [a, b])
    merged = load(out)
    assert (result.read, result.written, result.duplicates) == (5, 5, 0)
    assert [r.trial for r in merged] == [0, 1, 2, 3, 4]
    assert [r.config["tile"][0] for r in merged] == [1, 8, 2, 16, 4], "ordered by time"
    assert {(r.config["tile"][0], r.samples) for r in merged} == {
        (r.config["tile"][0], r.samples) for r in load([a, b])
    }

    again = merge(out, [a, b])  # OUT's records are kept, the sources' are there already
    assert (again.written, again.duplicates) == (5, 5)
    assert [r.trial for r in load(out)] == [0, 1, 2, 3, 4]


def test_merge_reads_folders_of_logs(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    _worker_log(logs / "a.jsonl", 100.0, [1, 2], 2e-3)
    _worker_log(logs / "b.jsonl", 101.0, [4], 1e-4)
    out = tmp_path / "merged.jsonl"
    assert merge(out, logs).written == 3
    from_folder, from_merged = best(load(logs), MATMUL, CPU_A), best(load(out), MATMUL, CPU_A)
    assert from_folder is not None and from_merged is not None
    assert from_folder.config == from_merged.config == {"tile": [4, 8]}


def test_tuner_merge_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _worker_log(a, 100.0, [1, 2], 2e-3)
    _worker_log(b, 100.0, [1, 2], 2e-3)  # the same measurements under another name
    out = tmp_path / "out.jsonl"
    assert main(["merge", str(out), str(a), str(b)]) == 0
    assert "2 records from 4 read, 2 duplicates dropped" in capsys.readouterr().out
    assert main(["merge", str(out), str(tmp_path / "missing.jsonl")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"tuner: error: log {tmp_path / 'missing.jsonl'} does not exist"]
