"""tuner compile / tuner run: a model's tasks printed, outputs checked, mistakes in one line."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tuner.cli import main

from .conftest import helper, make_model, onnx, residual_block


@pytest.fixture
def block(tmp_path, rng):
    path = tmp_path / "block.onnx"
    onnx.save(residual_block(rng, batch="batch"), str(path))
    return path


def _bad_models(tmp_path):
    unknown = tmp_path / "unknown.onnx"
    onnx.save(
        make_model(
            [helper.make_node("Unique", ["x"], ["y"])],
            {"x": ("float32", (4,))},
            {"y": ("float32", None)},
        ),
        str(unknown),
    )
    ints = tmp_path / "ints.onnx"
    onnx.save(
        make_model(
            [helper.make_node("Exp", ["x"], ["y"])], {"x": ("int64", (4,))}, {"y": ("int64", (4,))}
        ),
        str(ints),
    )
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not a model")
    return unknown, ints, garbage


def test_model_mistakes_are_one_line(block, tmp_path, capsys):
    unknown, ints, garbage = _bad_models(tmp_path)
    cases = [
        (["compile", str(tmp_path / "none.onnx")], "none.onnx"),
        (["compile", str(garbage)], ""),
        (["compile", str(unknown)], "unsupported operator Unique (node 'Unique_0', opset 17)"),
        (["compile", str(block), "--shape", "x=2,3"], "input 'x' has rank 4"),
        (
            ["compile", str(block), "--shape", "y=2,3,7,7"],
            "neither a graph input nor a symbol of one",
        ),
        (["compile", str(block), "--shape", "x=2,three"], "--shape takes NAME=D1,D2,..."),
        (["run", str(block)], "symbolic input dimensions"),
        (
            ["compile", str(ints)],
            "has unsupported type: tensor(int64)",
        ),  # Exp of an int64: a float is needed
        (
            ["compile", str(block), "--shape", "x=1,3,7,7", "--log", str(tmp_path / "no.jsonl")],
            "does not exist",
        ),
    ]
    for argv, message in cases:
        assert main(argv) == 1, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("tuner: error: ") and message in err[0], (
            argv,
            err,
        )


def test_compile_prints_the_task_table(block, capsys):
    assert main(["compile", str(block), "--shape", "x=1,3,7,7", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "for inputs 1x3x7x7 on cpu (1 threads)" in out
    assert "Conv+Relu" in out and "Conv+Add+Relu" in out and "default" in out


def test_run_checks_against_onnxruntime_and_times_both(block, capsys):
    argv = ["run", str(block), "--shape", "x=2,3,7,7", "--repeat", "2", "--compare", "onnxruntime"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "output 'y' matches onnxruntime" in out
    assert re.search(r"\(([\d.]+x (faster|slower) than|even with) onnxruntime\)", out)
    assert "share" in out
    assert np.isfinite(float(out.split("tuner ")[-1].split(" ms")[0]))


def test_compile_and_run_as_json_carry_the_table_figures(block, capsys):
    import json

    argv = ["compile", str(block), "--shape", "x=1,3,7,7", "--threads", "1", "--json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    (plan,) = json.loads(captured.out)["plans"]  # standard output is the JSON alone
    assert plan["inputs"] == [[1, 3, 7, 7]] and plan["threads"] == 1
    assert {t["ops"] for t in plan["tasks"]} >= {"Conv+Relu", "Conv+Add+Relu"}
    assert all(t["schedule"] == "default" for t in plan["tasks"])
    argv = ["run", str(block), "--shape", "x=2,3,7,7", "--repeat", "2", "--compare", "onnxruntime"]
    assert main([*argv, "--json"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert "matches onnxruntime" in captured.err  # what people read goes to standard error
    assert doc["rounds"] == 2 and doc["tuner_ms"] > 0 and doc["onnxruntime_ms"] > 0
    assert doc["outputs"][0]["output"] == "y" and doc["outputs"][0]["max_error"] < 1e-3
    shares = [t["share"] for t in doc["plans"][0]["tasks"]]
    assert abs(sum(shares) - 1.0) < 1e-6
