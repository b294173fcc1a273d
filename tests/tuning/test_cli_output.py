"""What the commands write: one figure per config everywhere, JSON and CSV that parse, no wrapping."""

from __future__ import annotations

import csv
import io
import json
import statistics
from pathlib import Path

import pytest

from records import LogWriter, Record, load, to_dataframe
from records.log import RETIME
from tuner.cli import main
from tuner.cli.text import milliseconds
from tuner.target import Target
from tuner.workload import Workload

from . import faulty_ops  # noqa: F401  (registers t_double)

WORKLOAD = Workload.make("t_double", N=16)


def _retimed_log(path: Path) -> None:
    """split=4 fastest in the search (one lucky sample), slower when re-timed; split=2 the reverse."""
    target = Target.from_name("cpu")
    rows = [
        (0, {"split": 1}, (9e-6, 9.5e-6, 9.2e-6), "xgb"),
        (1, {"split": 4}, (1e-6, 5e-6, 6e-6), "xgb"),
        (2, {"split": 2}, (3e-6, 3.1e-6, 3.2e-6), "xgb"),
        (3, {"split": 4}, (6e-6, 6.5e-6, 7e-6, 6.1e-6), RETIME),
        (4, {"split": 2}, (2e-6, 2.2e-6, 2.1e-6, 4e-6), RETIME),
    ]
    with LogWriter(path) as log:
        for trial, config, samples, strategy in rows:
            log.write(
                Record.make(
                    WORKLOAD, target, config, samples=samples, trial=trial, strategy=strategy
                )
            )


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:  # type: ignore[type-arg]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_one_figure_per_config_in_show_best_build_and_the_frame(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "t.jsonl"
    _retimed_log(log)
    figure = statistics.median((2e-6, 2.2e-6, 2.1e-6, 4e-6)) * 1e3  # split=2, re-timed
    best = _json(["best", str(log), "--json"], capsys)["best"]
    assert [(r["config"], r["median_ms"]) for r in best] == [({"split": 2}, round(figure, 6))]
    top = _json(["show", str(log), "--json"], capsys)["top"]
    assert top[0]["config"] == {"split": 2} and top[0]["median_ms"] == best[0]["median_ms"]
    assert top[0]["iqr_ms"] == best[0]["iqr_ms"] > 0
    # each config once; a re-timed config on its re-timed samples alone
    assert sorted(r["trial"] for r in top) == [0, 3, 4]
    built = _json(
        ["build", "t_double", "N=16", "--log", str(log), "--repeat", "3", "--json"], capsys
    )
    assert built["record_trial"] == 4 and built["record_ms"] == pytest.approx(figure)
    df = to_dataframe(log)
    assert df[df.trial == 4].median_s.iloc[0] * 1e3 == pytest.approx(figure)
    assert "iqr_s" in df.columns


def test_csv_carries_the_numbers_of_the_table(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "t.jsonl"
    _retimed_log(log)
    assert main(["show", str(log), "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [json.loads(r["config"]) for r in rows] == [{"split": 2}, {"split": 4}, {"split": 1}]
    assert main(["show", str(log)]) == 0
    table = capsys.readouterr().out
    for r in rows:  # each figure as the table writes it: median, and ± half the IQR if wide
        assert milliseconds(float(r["median_ms"]) / 1e3, float(r["iqr_ms"]) / 1e3) in table
    assert "0.00215 ±0.00029" in table  # split=2's re-timing spreads widely


def test_json_to_a_file_keeps_the_table_on_stdout(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    log, out = tmp_path / "t.jsonl", tmp_path / "best.json"
    _retimed_log(log)
    assert main(["best", str(log), "--json", str(out)]) == 0
    assert "best records in" in capsys.readouterr().out
    assert json.loads(out.read_text())["best"][0]["trial"] == 4


def test_piped_tables_do_not_wrap(tmp_path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("COLUMNS", "40")  # a narrow terminal would wrap; a pipe is not one
    log = tmp_path / "t.jsonl"
    _retimed_log(log)
    assert main(["best", str(log)]) == 0
    lines = capsys.readouterr().out.splitlines()
    (row,) = [line for line in lines if WORKLOAD.key in line]
    assert "{'split': 2}" in row and "\x1b[" not in "".join(lines)
    title = next(line for line in lines if "best records in" in line)
    assert max(len(line) for line in lines) == max(len(row), len(title.strip()))


def test_the_loop_nest_only_with_source(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "t.jsonl"
    _retimed_log(log)
    argv = ["build", "t_double", "N=16", "--log", str(log), "--repeat", "2"]
    assert main(argv) == 0
    plain = capsys.readouterr().out
    assert "for " not in plain and "built from record of trial 4" in plain
    assert main([*argv, "--source"]) == 0
    assert "for " in capsys.readouterr().out


def test_json_and_csv_together_are_refused(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as info:
        main(["best", str(tmp_path / "t.jsonl"), "--json", "--csv"])
    assert info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_log_with_only_failures_shows_no_configs(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from records import ErrorKind

    log = tmp_path / "t.jsonl"
    with LogWriter(log) as w:
        w.write(
            Record.make(
                WORKLOAD, Target.from_name("cpu"), {"split": 1}, error_kind=ErrorKind.RUNTIME_ERROR
            )
        )
    assert load(log)
    doc = _json(["show", str(log), "--json"], capsys)
    assert doc["top"] == [] and doc["errors"] == {"runtime_error": 1}
