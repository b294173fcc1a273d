"""The shape-transition experiment runs end to end on a short trace (each mode in its process)."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments"))

import dynamic_shapes


def test_the_trace_is_fixed_and_skewed_short() -> None:
    lengths = dynamic_shapes.trace(300)
    assert lengths == dynamic_shapes.trace(300)
    assert min(lengths) >= 8 and max(lengths) <= 512
    assert sorted(lengths)[150] < 128  # most requests are short


@pytest.mark.slow
def test_three_requests_in_every_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "dyn.csv"
    assert dynamic_shapes.main(["--requests", "3", "--peers", "none", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for mode in dynamic_shapes.MODES:
        assert mode in printed
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 3
    assert all(float(r["generic"]) > 0 for r in rows)


@pytest.mark.slow
def test_two_requests_through_the_small_encoder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = Path(__file__).resolve().parents[1] / "models" / "data" / "encoder_small_dynamic.onnx"
    out = tmp_path / "enc.csv"
    argv = ["--workload", "encoder", "--model", str(model), "--requests", "2"]
    assert dynamic_shapes.main([*argv, "--peers", "none", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for name in (*dynamic_shapes.MODEL_MODES, "onnxruntime"):
        assert name in printed
    rows = list(csv.DictReader(out.open()))
    assert [int(r["length"]) for r in rows] == dynamic_shapes.trace(2)
    assert all(float(r["bucket"]) > 0 and float(r["specialize"]) > 0 for r in rows)
    summary = {r["name"]: r for r in csv.DictReader(out.with_name("enc_summary.csv").open())}
    assert float(summary["specialize"]["transition_s"]) > 0  # both lengths were new
    assert int(summary["bucket"]["kernels"]) > 0
