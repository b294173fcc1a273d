"""to_dataframe: one tidy row per measured candidate."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from records import ErrorKind, RecordError, append, to_dataframe
from records.frame import BASE_COLUMNS

from .helpers import CONV, CUDA, MATMUL, record

GOLDEN_V1 = Path(__file__).parent / "golden" / "v1.jsonl"


def test_columns_of_the_golden_log() -> None:
    df = to_dataframe(GOLDEN_V1)
    assert list(df.columns[: len(BASE_COLUMNS)]) == list(BASE_COLUMNS)
    assert sorted(df.columns[len(BASE_COLUMNS) :]) == list(df.columns[len(BASE_COLUMNS) :])
    assert {c for c in df.columns if c.startswith("arg.")} == {
        f"arg.{a}" for a in ["C", "H", "K", "M", "N", "R", "S", "W", "dtype", "strides"]
    }
    assert {c for c in df.columns if c.startswith("knob.")} == {
        f"knob.{k}" for k in ["block", "order", "shared", "tile_i", "tile_j", "unroll", "vectorize"]
    }
    assert len(df) == 6
    assert list(df["trial"]) == [0, 1, 2, 3, 4, 0]
    assert list(df["error_kind"]) == [
        "ok",
        "ok",
        "compile_error",
        "wrong_answer",
        "ok",
        "run_timeout",
    ]
    assert list(df["ok"]) == [True, True, False, False, True, False]
    assert list(df["n_samples"]) == [3, 3, 0, 2, 2, 0]
    assert str(df["timestamp"].dtype) == "datetime64[ns, UTC]"
    assert df["timestamp"][0] == pd.Timestamp(1717171717.5, unit="s", tz="UTC")


def test_knob_and_arg_values() -> None:
    df = to_dataframe(GOLDEN_V1)
    assert df["knob.tile_i"][0] == (8, 16)  # list knobs are tuples
    assert df["knob.tile_i"].value_counts()[(8, 16)] == 1
    assert df["knob.unroll"][1] == 8
    assert df["knob.block"].isna().sum() == 5  # knobs of another operator
    assert df["arg.strides"][5] == (1, 1)
    assert df["arg.M"][0] == 256


def test_timings_only_for_ok_rows() -> None:
    df = to_dataframe(GOLDEN_V1)
    first = df.iloc[0]
    assert first["median_s"] == 0.0041
    assert first["mean_s"] == pytest.approx(0.0041)
    assert first["min_s"] == 0.004
    assert first["gflops"] == pytest.approx(8.184007804878)
    wrong = df.iloc[3]  # it was timed, but its timings must not look usable
    assert math.isnan(wrong["median_s"]) and math.isnan(wrong["min_s"])
    assert math.isnan(wrong["gflops"])
    assert math.isnan(df["predicted"][0]) and df["predicted"][1] == 0.87


def test_best_so_far_per_workload_in_trial_order(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    append(
        path,
        [
            record((4e-3,), trial=2),
            record((5e-3,), trial=0),
            record((1e-9,), trial=1, error_kind=ErrorKind.WRONG_ANSWER),
            record((1e-3,), trial=3),
            record((2e-3,), trial=4),
            record((), trial=0, workload=CONV, error_kind=ErrorKind.COMPILE_ERROR),
            record((7e-3,), trial=1, workload=CONV),
            record((6e-3,), trial=0, target=CUDA),
        ],
    )
    df = to_dataframe(path)
    expected = [4e-3, 5e-3, 5e-3, 1e-3, 1e-3, math.nan, 7e-3, 6e-3]
    assert df["best_so_far_s"].tolist() == pytest.approx(expected, nan_ok=True)
    assert list(df["workload_key"]) == [MATMUL.key] * 5 + [CONV.key] * 2 + [MATMUL.key]
    assert list(df["target_kind"]) == ["cpu"] * 7 + ["cuda"]


def test_records_in_memory_and_lists_of_paths(tmp_path: Path) -> None:
    records = [record(trial=0), record(trial=1)]
    assert list(to_dataframe(records)["trial"]) == [0, 1]
    append(tmp_path / "a.jsonl", records[:1])
    append(tmp_path / "b.jsonl", records[1:])
    assert list(to_dataframe([tmp_path / "a.jsonl", tmp_path / "b.jsonl"])["trial"]) == [0, 1]
    assert list(to_dataframe(tmp_path)["trial"]) == [0, 1]
    with pytest.raises(RecordError, match="not a mix"):
        to_dataframe([records[0], tmp_path / "a.jsonl"])  # type: ignore[arg-type]


@pytest.mark.parametrize("source", ["empty_file", "empty_list"])
def test_empty_log_gives_an_empty_frame_with_every_column(tmp_path: Path, source: str) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    df = to_dataframe(path if source == "empty_file" else [])
    assert df.empty
    assert list(df.columns) == list(BASE_COLUMNS)
    assert str(df["timestamp"].dtype) == "datetime64[ns, UTC]"
