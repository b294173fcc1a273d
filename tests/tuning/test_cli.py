"""User mistakes end in one clear line and a non-zero exit; the read-only commands work."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tuner.cli import main

GOLDEN = Path(__file__).resolve().parents[1] / "records" / "golden" / "v1.jsonl"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["tune", "convolution", "N=1"], "unknown operator 'convolution'"),
        (["tune", "matmul", "M=8", "N=8"], "matmul needs argument K"),
        (["tune", "matmul", "M=8", "N=8", "K=eight"], "K must be a positive integer"),
        (["tune", "matmul", "M=8", "N=8", "K=8", "Q=1"], "has no argument 'Q'"),
        (["tune", "matmul", "M8"], "expected NAME=VALUE"),
        (
            ["tune", "matmul", "M=8", "N=8", "K=8", "--strategy", "magic"],
            "unknown strategy 'magic'",
        ),
        (["tune", "matmul", "M=8", "N=8", "K=8", "--target", "tpu"], "unknown target 'tpu'"),
        (
            ["tune", "matmul", "M=8", "N=8", "K=8", "--transfer-from", "nope.jsonl"],
            "transfer log nope.jsonl does not exist",
        ),
        (["best", "no-such-log.jsonl"], "does not exist"),
        (["show", "no-such-log.jsonl"], "does not exist"),
    ],
)
def test_user_mistakes_are_one_line(argv, message, capsys, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("tuner: error: ") and message in err[-1], err
    assert "Traceback" not in "\n".join(err)
    assert not (tmp_path / "tune.jsonl").exists() or (tmp_path / "tune.jsonl").stat().st_size == 0


def test_bad_flag_values_exit_with_usage(capsys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as info:
        main(["tune", "matmul", "M=8", "N=8", "K=8", "--trials", "0"])
    assert info.value.code == 2
    assert "must be positive" in capsys.readouterr().err


def test_ops_best_and_show(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["ops"]) == 0
    assert "matmul" in capsys.readouterr().out
    assert main(["best", str(GOLDEN)]) == 0
    out = capsys.readouterr().out
    assert "matmul" in out
    assert main(["show", str(GOLDEN), "--top", "2"]) == 0
    assert "errors:" in capsys.readouterr().out


def test_build_checks_and_times_the_best_record(capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from . import faulty_ops  # noqa: F401  (registers t_double)
    from .test_compile import write_log

    log = tmp_path / "t.jsonl"
    write_log(log, [(4, 1e-6, "ok")])
    assert main(["build", "t_double", "N=16", "--log", str(log), "--repeat", "3"]) == 0
    out = capsys.readouterr().out
    assert "built from record of trial 0 (0.00100 ms in the log, 1 samples); matches NumPy" in out
    assert re.search(r"\((\d[\d.]*x (faster|slower) than|even with) NumPy\)", out)


def test_tune_runs_end_to_end_into_the_default_log_and_resumes(
    capsys, tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """The README's main job on a tiny workload: the log lands in the working directory."""
    from records import load

    monkeypatch.chdir(tmp_path)
    argv = ["tune", "softmax", "M=4", "N=8", "--retime", "0", "--threads", "1"]
    assert main([*argv, "--trials", "2"]) == 0
    err = " ".join(capsys.readouterr().err.split())  # rich wraps long lines
    assert "2 measured this run (0 from the log before), 0 errors" in err
    assert "NumPy reference, timed in a fresh process:" in err
    # an 8 microsecond NumPy call on a busy CI machine may spread too widely to compare (test_progress)
    assert re.search(
        r"best is (\d[\d.]*x (faster|slower) than|even with) NumPy|spread by \d+% of their median: no reliable",
        err,
    )
    assert len(load(tmp_path / "tune.jsonl")) == 2
    assert main([*argv, "--trials", "1", "--no-baseline"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "1 measured this run (2 from the log before)" in err
    assert "NumPy reference" not in err
    assert len({str(r.config) for r in load(tmp_path / "tune.jsonl")}) == 3, (
        "nothing measured twice"
    )


def test_best_and_show_tell_thread_counts_apart(capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("COLUMNS", "300")  # one line per table row
    golden_v2 = GOLDEN.parent / "v2.jsonl"
    assert main(["best", str(golden_v2)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "1 thread" in out and "2 threads" in out
    assert main(["show", str(golden_v2)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "2 threads" in out and "compile_timeout 1" in out


@pytest.mark.parametrize("command", [["tune", "matmul", "M=8"], ["tune-model", "m.onnx"]])
def test_tune_and_tune_model_take_the_same_search_flags(command: list[str]) -> None:
    from tuner.cli import _parser
    from tuner.cli.options import tune_options

    flags = ["--claim-timeout", "5", "--retime", "0", "--jobs", "1", "--batch", "4"]
    flags += ["--storage", "journal:x.log", "--early-stopping", "9", "--time-limit", "30"]
    opts = tune_options(_parser().parse_args([*command, *flags]))
    assert (opts.claim_timeout, opts.retime, opts.measure.jobs, opts.batch) == (5.0, 0, 1, 4)
    assert (opts.storage, opts.early_stopping, opts.time_limit) == ("journal:x.log", 9, 30.0)


def test_a_list_of_shapes_is_tuned_in_one_run(capsys, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from records import load

    monkeypatch.chdir(tmp_path)
    argv = ["tune", "softmax", "M=4,6", "N=8,16", "--trials", "2", "--retime", "0"]
    assert main([*argv, "--threads", "1", "--no-baseline", "--strategy", "random"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "4 shapes of softmax, 2 trials each" in err
    keys = [r.workload.key for r in load(tmp_path / "tune.jsonl")]
    shapes = [(M, N) for M in (4, 6) for N in (8, 16)]
    assert sorted(set(keys)) == sorted(f"softmax(M={M},N={N})" for M, N in shapes)
    assert all(keys.count(k) == 2 for k in set(keys))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["M=4,", "N=8"], "M=4,: a list of values takes no empty item"),
        (["M=4,x", "N=8"], "softmax argument M must be"),
    ],
)
def test_a_bad_list_of_shapes_is_one_line(args, message, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["tune", "softmax", *args]) != 0
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["best", "model.onnx"], "model.onnx is not a tuning log: none of its lines is a record"),
        (["show", "model.onnx"], "model.onnx is not a tuning log"),
        (["best", "empty.jsonl"], "empty.jsonl holds no tuning records"),
        (
            ["build", "matmul", "M=8", "N=8", "K=8", "--log", "empty.jsonl"],
            "holds no tuning records",
        ),
        (["build", "matmul", "M=8", "N=8", "K=8", "--log", "model.onnx"], "is not a tuning log"),
        (["tune", "matmul", "M=8", "N=8", "K=8", "--log", "model.onnx"], "is not a tuning log"),
    ],
)
def test_a_file_that_is_not_a_log_is_refused_at_the_door(
    argv, message, capsys, tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """A model (or any other file) where a log belongs, or a log with nothing to read: one line,
    exit 1, and the file is left as it was (tune does not append to it)."""
    monkeypatch.chdir(tmp_path)
    model = b"\x08\x07\x12\x07pytorch:\n\x00\x01\xff\xfe graph\n\x10"
    (tmp_path / "model.onnx").write_bytes(model)
    (tmp_path / "empty.jsonl").write_text("")
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("tuner: error: ") and message in err[-1], err
    assert "Traceback" not in "\n".join(err)
    assert (tmp_path / "model.onnx").read_bytes() == model


def test_apply_best_refuses_a_file_that_is_not_a_log(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import tuner
    from records import RecordError

    (tmp_path / "model.onnx").write_bytes(b"\x08\x07\x12\x07pytorch\n\x00\xff\n")
    with (
        pytest.raises(RecordError, match="is not a tuning log"),
        tuner.apply_best(tmp_path / "model.onnx"),
    ):
        pass
