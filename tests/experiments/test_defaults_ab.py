"""The in-process A/B of two sets of default configs over a whole model."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))

import defaults_ab  # noqa: E402

RESNET = ROOT / "tests" / "models" / "data" / "resnet18_small.onnx"


@pytest.mark.slow
def test_a_dump_with_other_configs_is_built_checked_and_timed(tmp_path: Path) -> None:
    dump = tmp_path / "defaults.json"
    assert defaults_ab.main(["dump", str(RESNET), "--out", str(dump)]) == 0
    configs = json.loads(dump.read_text())
    assert any(key.startswith("conv2d(") for key in configs)
    # another legal config for every convolution: the other side differs there only
    import tuner

    plan = tuner.compile_model(str(RESNET)).plans[0]
    rng = np.random.default_rng(0)
    changed = set()
    for spec in plan.specs:
        task = spec.task
        if task.op_name == "conv2d" and task.key not in changed:
            configs[task.key] = task.space.sample(rng).to_json()
            changed.add(task.key)
    dump.write_text(json.dumps(configs))
    out = tmp_path / "ab.csv"
    row = defaults_ab.compare(str(RESNET), configs, rounds=1, csv=str(out))
    assert row["kernels_differ"] >= len(changed) > 0 and row["tasks_missing"] == 0
    assert row["this_ms"] > 0 and row["other_ms"] > 0
    assert row["other_over_this"] == pytest.approx(row["other_ms"] / row["this_ms"], rel=0.01)
    (written,) = list(csv.DictReader(out.open()))
    assert written["model"] == RESNET.stem and int(written["kernels_differ"]) >= len(changed)
    assert defaults_ab.time_model(str(RESNET), runs=3) > 0


def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert defaults_ab.main(["dump", str(tmp_path / "none.onnx"), "--out", "x.json"]) == 2
    assert "no such model file" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert defaults_ab.main(["compare", str(RESNET), str(bad)]) == 2
    assert "cannot read the dump" in capsys.readouterr().err
    assert defaults_ab.main(["time", str(RESNET), "--runs", "0"]) == 2
    assert "--runs must be at least 1" in capsys.readouterr().err
    bad.write_text("[1, 2]")
    assert defaults_ab.main(["compare", str(RESNET), str(bad)]) == 2
    assert "is not a dump" in capsys.readouterr().err
