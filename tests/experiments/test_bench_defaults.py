"""The defaults sweep: a model's task shapes, each default checked, timed beside its peer."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))

import bench_defaults  # noqa: E402

from tuner.target import Target  # noqa: E402

RESNET = ROOT / "tests" / "models" / "data" / "resnet18_small.onnx"
ENCODER = ROOT / "tests" / "models" / "data" / "encoder_small.onnx"


def test_a_models_tasks_are_its_templates_distinct_shapes() -> None:
    target = Target.from_name("cpu", num_threads=2)
    tasks = bench_defaults.model_tasks([RESNET, ENCODER], target, ["matmul", "dense"])
    assert tasks, "the small ResNet-18 ends in a dense layer; the encoder is dense layers"
    ops = {task.op_name for task, _, _ in tasks.values()}
    assert ops <= {"matmul", "dense"}
    for key, (task, count, where) in tasks.items():
        assert task.key == key and count >= 1 and where <= {RESNET.stem, ENCODER.stem}
    # a symbolic dimension takes its value from --dim (else 1): another batch, other shapes
    wider = bench_defaults.model_tasks([ENCODER], target, ["dense"], {"batch": 3})
    assert set(wider).isdisjoint(bench_defaults.model_tasks([ENCODER], target, ["dense"]))


@pytest.mark.slow
def test_the_sweep_checks_times_and_writes_each_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "d.csv"
    args = ["--onnx", str(RESNET), "--ops", "matmul,conv2d", "--limit", "2", "--rounds", "1"]
    assert bench_defaults.main([*args, "--min-sample", "0.002", "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 2
    for row in rows:
        assert row["peer"] in ("numpy", "torch") and not row["note"], row
        ours, peer, speed = float(row["default_ms"]), float(row["peer_ms"]), float(row["speed"])
        assert ours > 0 and peer > 0
        assert speed == pytest.approx(peer / ours, rel=0.01)
        assert row["models"] == RESNET.stem and int(row["occurrences"]) >= 1
    text = capsys.readouterr().out
    assert "the ten worst" in text and "conv2d" in text


def test_bad_arguments_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_defaults.main(["--ops", "matmul,nonsense"]) == 2
    assert "unknown operator(s) nonsense" in capsys.readouterr().err
    assert bench_defaults.main(["--onnx", "/no/such/model.onnx"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert bench_defaults.main(["--onnx", str(RESNET), "--dim", "batch=two"]) == 2
    assert "NAME=INTEGER" in capsys.readouterr().err


def test_the_machine_name_is_a_file_name_with_the_fingerprint() -> None:
    target = Target.from_name("cpu")
    name = bench_defaults.machine_name(target)
    assert name.endswith(target.fingerprint)
    assert all(c.isalnum() or c == "-" for c in name)
