"""experiments/int8_models.py: a quantized model's row (agreement, times) and bad input in one line."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))

import int8_models  # noqa: E402

from tests.models import builders  # noqa: E402


def test_a_missing_model_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert int8_models.main(["--only", "resnet50", "--cache", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "resnet50.onnx is not in" in err[0]


@pytest.mark.slow
def test_a_small_cnn_gets_a_row_with_its_agreement_and_times(tmp_path: Path) -> None:
    onnx.save(builders.conv_bn_relu(), tmp_path / "resnet18.onnx")  # named as a CNN of the zoo
    out = tmp_path / "rows.csv"
    argv = ["--only", "resnet18", "--cache", str(tmp_path), "--out", str(tmp_path / "q")]
    assert int8_models.main([*argv, "--inputs", "4", "--rounds", "1", "--csv", str(out)]) == 0
    (row,) = csv.DictReader(out.open())
    assert not row["error"], row["error"]
    assert row["agreement"].startswith("top-1 ") and row["agreement"].endswith("/4")
    assert row["onnxruntime_self"].startswith("top-1 ") and row["onnxruntime_self"].endswith("/4")
    same, decided = map(int, row["decided_agreement"].removeprefix("top-1 ").split("/"))
    assert 0 <= same <= decided <= 4
    assert float(row["tuner_int8_ms"]) > 0 and float(row["x_onnxruntime"]) > 0
