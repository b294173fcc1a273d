"""Writing, reading and querying tuning logs."""

from __future__ import annotations

import json
import multiprocessing
import os
import warnings
from pathlib import Path

import pytest

from records import (
    FORMAT_VERSION,
    ErrorKind,
    LogWriter,
    Record,
    RecordError,
    RecordsWarning,
    append,
    best,
    best_by_workload,
    best_match,
    config_key,
    load,
    measured_configs,
    target_label,
)
from tuner.target import Target

from .helpers import CONV, CPU_A, CPU_B, CUDA, MATMUL, record

WRITES_PER_PROCESS = 200


def test_append_then_load_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "new" / "dir" / "tune.jsonl"
    written = [record((1e-3 * (i + 1),), trial=i) for i in range(5)]
    append(path, written[:2])
    with LogWriter(path) as log:  # a second writer appends, never truncates
        for rec in written[2:]:
            log.write(rec)
    assert load(path) == written
    assert path.read_text().count("\n") == 5


def test_write_after_close_is_an_error(tmp_path: Path) -> None:
    log = LogWriter(tmp_path / "t.jsonl")
    log.close()
    with pytest.raises(RecordError, match="already closed"):
        log.write(record())


def _good_lines(n: int) -> list[str]:
    return [json.dumps(record(trial=i).to_json()) for i in range(n)]


def test_damaged_lines_are_skipped_with_one_warning(tmp_path: Path) -> None:
    path = tmp_path / "tune.jsonl"
    future = record(trial=9).to_json() | {"v": FORMAT_VERSION + 1}
    lines = [
        *_good_lines(2),
        "",
        "garbage {",
        json.dumps(future),
        "   ",
        *_good_lines(3)[2:],
        json.dumps(record(trial=7).to_json())[:-25],  # Ctrl-C mid-line: no newline
    ]
    path.write_text("\n".join(lines))
    with pytest.warns(RecordsWarning) as caught:
        records = load(path)
    assert [r.trial for r in records] == [0, 1, 2]
    assert len(caught) == 1
    message = str(caught[0].message)
    assert message.startswith(f"skipped 2 damaged lines and 1 line of unknown version in {path} ")
    assert f"first at {path}:4" in message


def test_clean_log_loads_without_warnings(tmp_path: Path) -> None:
    path = tmp_path / "tune.jsonl"
    path.write_text("\n".join(_good_lines(3)) + "\n\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(load(path)) == 3


def test_bad_bytes_and_json_constants_count_as_damaged(tmp_path: Path) -> None:
    path = tmp_path / "tune.jsonl"
    nan_line = _good_lines(1)[0].replace('"flops":', '"flops":NaN,"x":', 1)
    good = _good_lines(1)[0].encode()
    path.write_bytes(b"\xff\xfe\n" + nan_line.encode() + b"\n[1]\n" + good + b"\n")
    with pytest.warns(RecordsWarning, match=r"^skipped 3 damaged lines in "):
        assert len(load(path)) == 1


def test_writer_starts_a_fresh_line_after_a_truncated_one(tmp_path: Path) -> None:
    path = tmp_path / "tune.jsonl"
    path.write_text(_good_lines(1)[0] + "\n" + '{"v":1,"workl')
    append(path, [record(trial=5)])
    with pytest.warns(RecordsWarning, match="skipped 1 damaged line in"):
        assert [r.trial for r in load(path)] == [0, 5]


def _append_when_ready(path: str, records: list[Record], start: object) -> None:
    start.wait()  # type: ignore[attr-defined]  # a multiprocessing Event
    append(path, records)


def test_two_processes_append_without_losing_or_mixing_lines(tmp_path: Path) -> None:
    path = tmp_path / "shared.jsonl"
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    padding = "x" * 4000  # long lines make a torn write visible
    workers = [
        ctx.Process(
            target=_append_when_ready,
            args=(
                str(path),
                [_tagged(w, i, padding) for i in range(WRITES_PER_PROCESS)],
                start,
            ),
        )
        for w in range(2)
    ]
    for worker in workers:
        worker.start()
    start.set()
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    parsed = [Record.from_json(json.loads(line)) for line in lines[:-1]]
    seen = sorted((r.error_msg[:2], r.trial) for r in parsed)
    assert seen == sorted((f"w{w}", i) for w in range(2) for i in range(WRITES_PER_PROCESS))


def _tagged(writer: int, trial: int, padding: str) -> Record:
    return record(
        (1e-3,),
        trial=trial,
        error_kind=ErrorKind.RUNTIME_ERROR,
        error_msg=f"w{writer} {padding}",
    )


def test_load_a_directory_in_name_order(tmp_path: Path) -> None:
    append(tmp_path / "b.jsonl", [record(trial=2)])
    append(tmp_path / "a.jsonl", [record(trial=1)])
    (tmp_path / "notes.txt").write_text("not a log")
    append(tmp_path / "sub" / "c.jsonl", [record(trial=3)])  # not recursive
    assert [r.trial for r in load(tmp_path)] == [1, 2]
    assert [r.trial for r in load([tmp_path / "b.jsonl", tmp_path / "sub"])] == [2, 3]


def test_a_file_that_is_not_a_log_is_one_record_error(tmp_path: Path) -> None:
    """An ONNX model or a text file where a log belongs: refused, not read as an empty log."""
    model = tmp_path / "model.onnx"
    model.write_bytes(b"\x08\x07\x12\x07pytorch\n\x00\x01binary\n\xff")
    with pytest.raises(
        RecordError,
        match=rf"{model} is not a tuning log: none of its lines is a record \(line 1: not a JSON line",
    ):
        load(model)
    notes = tmp_path / "notes.jsonl"
    notes.write_text("first\nsecond\n")
    append(tmp_path / "ok.jsonl", [record()])
    with pytest.raises(RecordError, match=f"{notes} is not a tuning log"):  # beside a good log too
        load([tmp_path / "ok.jsonl", notes])
    cut = tmp_path / "cut.jsonl"  # the writer died in the middle of the first record
    cut.write_text(_good_lines(1)[0][:-20])
    with pytest.warns(RecordsWarning, match="skipped 1 damaged line"):
        assert load(cut) == []


def test_reading_records_from_no_records_is_one_record_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert load(empty) == []  # a log to append to may be empty
    with pytest.raises(RecordError, match=f"^{empty} holds no tuning records$"):
        load(empty, require=True)
    (tmp_path / "folder").mkdir()
    with pytest.raises(RecordError, match=r"no tuning logs \(\*\.jsonl\) in the folder .*folder$"):
        load(tmp_path / "folder")


def test_missing_file_is_a_record_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(RecordError, match=f"tuning log {missing} does not exist") as info:
        load(missing)
    assert not isinstance(info.value, FileNotFoundError)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_load_filters(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    append(path, [record(trial=0), record(workload=CONV, trial=1), record(target=CUDA, trial=2)])
    assert [r.trial for r in load(path, workload=MATMUL)] == [0, 2]
    assert [r.trial for r in load(path, workload=CONV.key)] == [1]
    assert [r.trial for r in load(path, target_kind="cuda")] == [2]
    assert [r.trial for r in load(path, workload=MATMUL, target_kind="cpu")] == [0]


def test_best_never_picks_errors_or_wrong_answers() -> None:
    records = [
        record((5e-3,), trial=0),
        record((1e-6,), trial=1, error_kind=ErrorKind.WRONG_ANSWER),
        record((1e-6,), trial=2, error_kind=ErrorKind.RUN_TIMEOUT),
        record((), trial=3, error_kind=ErrorKind.COMPILE_ERROR),
        record((3e-3, 2e-3, 4e-3), trial=4),
        record((), trial=5),  # ok but never timed
    ]
    top = best(records)
    assert top is not None and top.trial == 4
    assert best(records[1:4]) is None
    assert best([]) is None


def test_best_judges_a_config_on_all_its_samples() -> None:
    lucky, steady = {"tile": [4, 4]}, {"tile": [8, 8]}
    records = [
        record((1e-3,), config=lucky, trial=0),  # a lucky first timing...
        record((2e-3, 2e-3), config=steady, trial=1),
        record((3e-3, 3e-3, 3e-3), config=lucky, trial=2),  # ...not confirmed when re-timed
    ]
    top = best(records)
    assert top is not None and top.config == steady
    alone = best(records[::2])
    assert alone is not None and alone.trial == 2, "the config's latest record"
    assert sorted(alone.samples) == [1e-3, 3e-3, 3e-3, 3e-3]
    wrong_once = [*records, record((1e-6,), config=steady, trial=3, error_kind="wrong_answer")]
    top = best(wrong_once)
    assert top is not None and top.config == lucky, "a config that was ever wrong never wins"
    retimed = [
        record((1e-3,), config=lucky, trial=0),
        record((2e-3,), config=steady, trial=1),
        record((9e-4,), config={"tile": [2, 2]}, trial=2),  # never re-timed
        record((3e-3, 3e-3), config=lucky, trial=3, strategy="retime"),
        record((2.5e-3,), config=steady, trial=4, strategy="retime"),
    ]
    top = best(retimed)
    assert top is not None and top.config == steady, "only re-timed configs, once there are any"
    loaded_search = [  # a search under load: the default's timing then was 8x off
        record((1.7e-3,) * 5, config=lucky, trial=0),
        record((5.5e-4,) * 5, config=steady, trial=1),
        record((5.5e-4,) * 5, config=steady, trial=2, strategy="retime"),
        record((2.2e-4,) * 5, config=lucky, trial=3, strategy="retime"),
    ]
    top = best(loaded_search)
    assert top is not None and top.config == lucky, "judged on the side-by-side re-timing"
    assert top.samples == (2.2e-4,) * 5
    other_machine = record((1e-4,), config=lucky, target=CPU_B, trial=4)
    assert best([*records, other_machine], MATMUL, CPU_A).config == steady  # type: ignore[union-attr]


def test_best_prefers_same_machine_then_same_kind() -> None:
    records = [
        record((1e-3,), target=CPU_B, trial=0),
        record((4e-3,), target=CPU_A, trial=1),
        record((1e-4,), target=CUDA, trial=2),
        record((1e-5,), target=CPU_A, workload=CONV, trial=3),
    ]
    assert _trial(best(records, MATMUL, CPU_A)) == 1
    assert _trial(best(records, MATMUL, CPU_B)) == 0
    other_cpu = CPU_A.__class__("cpu", (), "fingerprint-unknown")
    assert _trial(best(records, MATMUL, other_cpu)) == 0  # fastest of the same kind
    assert _trial(best(records, MATMUL.key, "cpu")) == 0
    assert _trial(best(records, target="cuda")) == 2
    assert _trial(best(records, CONV)) == 3
    assert best(records, CONV, CUDA) is None


def _trial(rec: Record | None) -> int:
    assert rec is not None
    return rec.trial


def test_best_by_workload() -> None:
    records = [
        record((3e-3,), trial=0),
        record((2e-3,), trial=1),
        record((1e-9,), trial=2, error_kind=ErrorKind.WRONG_ANSWER),
        record((1e-3,), target=CUDA, trial=3),
        record((1e-3,), workload=CONV, trial=4, error_kind=ErrorKind.RUNTIME_ERROR),
    ]
    table = best_by_workload(records)
    assert {key: r.trial for key, r in table.items()} == {
        (MATMUL.key, "cpu"): 1,
        (MATMUL.key, "cuda"): 3,
    }


def test_measured_configs_for_resume() -> None:
    records = [
        record(config={"tile": [8, 8]}, trial=0),
        record(config={"tile": [4, 8]}, trial=1, error_kind=ErrorKind.COMPILE_ERROR),
        record(config={"tile": [2, 8]}, target=CUDA, trial=2),
        record(config={"tile": [1, 8]}, workload=CONV, trial=3),
    ]
    done = measured_configs(records, MATMUL.key, "cpu")
    assert done == {config_key({"tile": [8, 8]}), config_key({"tile": (4, 8)})}
    assert measured_configs(records, MATMUL, "cuda") == {config_key({"tile": [2, 8]})}


def test_log_files_are_plain_ascii_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    append(path, [record(error_msg="naïve — ünïcode")])
    raw = path.read_bytes()
    assert raw.isascii() and raw.endswith(b"\n") and raw.count(b"\n") == 1
    assert load(path)[0].error_msg == "naïve — ünïcode"
    assert os.stat(path).st_size == len(raw)


def _cpu(fingerprint: str, threads: int, model: str = "EPYC") -> Target:
    return Target("cpu", (("model", model), ("threads", threads)), fingerprint)


def test_best_match_takes_the_thread_count_it_builds_for() -> None:
    one, two, four = _cpu("fp-here", 1), _cpu("fp-here", 2), _cpu("fp-here", 4)
    records = [
        record((2e-3,), target=one, config={"tile": [1]}, trial=0),
        record((1e-3,), target=two, config={"tile": [2]}, trial=1),
        record((1e-3,), target=two, config={"tile": [1]}, trial=2),  # same config, 2 threads
    ]
    exact = best_match(records, MATMUL, one)
    assert exact.record is not None and exact.record.config == {"tile": [1]}
    assert exact.record.samples == (2e-3,), "1- and 2-thread timings are never pooled"
    assert exact.note == ""
    assert best_match(records, MATMUL, two).record.trial == 1  # type: ignore[union-attr]
    near = best_match(records, MATMUL, four)
    assert near.record is not None and near.record.target.threads == 2
    assert "no record at 4 threads" in near.note and "2 threads" in near.note


def test_best_match_uses_other_machines_only_when_this_one_has_nothing() -> None:
    here, there = _cpu("fp-here", 2), _cpu("fp-there", 2, model="Xeon")
    faster_elsewhere = record((1e-5,), target=there, trial=0)
    mine = record((1e-3,), target=_cpu("fp-here", 1), trial=1)
    m = best_match([faster_elsewhere, mine], MATMUL, here)
    assert m.record is not None and m.record.trial == 1  # this machine, even at 1 thread
    assert "1 threads" in m.note and "another machine" not in m.note
    m = best_match([faster_elsewhere], MATMUL, here)
    assert m.record is not None and m.record.trial == 0
    assert "another machine (Xeon fingerprint fp-there)" in m.note
    assert best_match([faster_elsewhere], CONV, here).record is None


def test_target_labels_tell_thread_counts_apart() -> None:
    assert target_label(_cpu("f", 1)) == "cpu, 1 thread"
    assert target_label(_cpu("f", 2)) == "cpu, 2 threads"
    assert target_label(CPU_A) == "cpu"  # a log that did not record its threads
