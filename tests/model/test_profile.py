"""Module.profile and tuner profile: a row per kernel, shares of the whole, onnxruntime joined."""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

import numpy as np
import pytest

import tuner
from tuner.cli import main
from tuner.model.profile import COLUMNS, join, onnxruntime_profile

from .conftest import onnx

MODEL = Path(__file__).resolve().parents[1] / "models" / "data" / "resnet18_small.onnx"


@pytest.fixture(scope="module")
def compiled() -> tuple[object, dict[str, np.ndarray]]:
    mod = tuner.compile_model(str(MODEL))
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    return mod, {"input": x}


def test_every_kernel_is_one_row_and_the_shares_make_the_whole(compiled) -> None:
    mod, feeds = compiled
    df = mod.profile(feeds, repeat=3)
    (plan,) = mod.plans
    assert list(df.columns) == list(COLUMNS)
    assert list(df["kernel"]) == list(range(len(plan.specs)))
    assert math.isclose(df["share"].sum(), 1.0, rel_tol=1e-9)
    assert (df["ms"] > 0).all() and set(df["schedule"]) == {"default"}
    convs = [n.name for n in onnx.load(str(MODEL)).graph.node if n.op_type == "Conv"]
    covered = " ".join(df["nodes"]).split()
    assert set(convs) <= set(covered)
    assert "share" in mod.summary() and "%" in mod.summary()


def test_onnxruntime_nodes_join_the_kernels_that_compute_them(compiled) -> None:
    mod, feeds = compiled
    ours = mod.profile(feeds, repeat=3)
    ort = onnxruntime_profile(MODEL, feeds, threads=mod.target.threads, repeat=3)
    df = join(ours, ort)
    kernels = df[df["kernel"].notna()]
    assert len(kernels) == len(ours)
    # Every onnxruntime node appears once: on a kernel of ours or as a row of its own.
    joined = " ".join(df["ort_nodes"].dropna()).split() + list(df[df["kernel"].isna()]["nodes"])
    assert sorted(joined) == sorted(ort.ms)
    assert math.isclose(df["ort_ms"].sum(), sum(ort.ms.values()), rel_tol=1e-9)
    # Each convolution's kernel (its product, not the copy of its windows) has onnxruntime's time.
    products = kernels[kernels["ops"].str.startswith("Conv")]
    assert len(products) > 0 and products["ort_ms"].notna().all()
    assert np.allclose(products["speed"], products["ort_ms"] / products["ms"])


def test_tuner_profile_prints_and_writes_the_rows(tmp_path, capsys) -> None:
    out = tmp_path / "layers.csv"
    args = ["profile", str(MODEL), "--repeat", "3", "--compare", "onnxruntime", "--top", "5"]
    assert main([*args, "--csv", str(out)]) == 0
    text = capsys.readouterr().out
    assert "ort ms" in text and "total:" in text and "onnxruntime" in text
    assert len([line for line in text.splitlines() if "default" in line]) == 5
    rows = list(csv.DictReader(out.open()))
    assert {"kernel", "nodes", "ms", "share", "ort_ms", "speed"} <= set(rows[0])
    (plan,) = tuner.compile_model(str(MODEL)).plans
    assert len([r for r in rows if r["kernel"]]) == len(plan.specs)


def test_tuner_profile_as_json(capsys) -> None:
    import json

    assert main(["profile", str(MODEL), "--repeat", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    kernels = doc["kernels"]
    assert math.isclose(sum(k["share"] for k in kernels), 1.0, rel_tol=1e-6)
    assert all(k["ms"] > 0 and k["schedule"] == "default" for k in kernels)


def test_without_onnxruntime_it_shows_ours_alone_with_one_line(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime fails
    assert main(["profile", str(MODEL), "--repeat", "2", "--compare", "onnxruntime"]) == 0
    text = capsys.readouterr().out
    assert "onnxruntime is not installed (pip install onnxruntime): ours alone" in text
    assert "ort ms" not in text and "total:" in text
