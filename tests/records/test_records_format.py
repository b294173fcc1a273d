"""Record: construction, derived properties and the JSON round trip."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from records import FORMAT_VERSION, ErrorKind, Record, RecordError, config_key
from records.format import RecordVersionError
from tuner.target import Target
from tuner.workload import Workload

from .helpers import CPU_A, MATMUL, record

seconds = st.floats(min_value=0, max_value=1e4, allow_nan=False, allow_infinity=False)
knob_scalar = st.one_of(st.integers(-(2**40), 2**40), st.booleans(), st.text(max_size=8))
knob_value = st.one_of(knob_scalar, st.lists(st.integers(1, 4096), max_size=4))
json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)

records_strategy = st.builds(
    Record.make,
    st.builds(
        Workload.make,
        st.sampled_from(["matmul", "conv2d"]),
        M=st.integers(1, 4096),
        dtype=st.sampled_from(["float32", "float16"]),
        strides=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    ),
    st.builds(
        Target,
        st.sampled_from(["cpu", "cuda"]),
        st.just((("cores", 8), ("model", "x"))),
        st.text("0123456789abcdef", min_size=16, max_size=16),
    ),
    st.dictionaries(st.text(min_size=1, max_size=10), knob_value, max_size=5),
    samples=st.lists(seconds, max_size=5),
    error_kind=st.sampled_from(list(ErrorKind)),
    error_msg=st.text(max_size=40),
    build_seconds=seconds,
    run_seconds=seconds,
    timestamp=st.floats(0, 4e9),
    strategy=st.sampled_from(["random", "xgb", "tpe"]),
    trial=st.integers(0, 10**6),
    predicted=st.none() | st.floats(-1e6, 1e6),
    flops=st.none() | st.floats(0, 1e15),
    extra=st.dictionaries(st.sampled_from(["host", "note", "seed"]), json_value, max_size=2),
    trace=st.none()
    | st.lists(
        st.fixed_dictionaries(
            {"step": st.sampled_from(["split", "reorder"]), "stage": st.text(max_size=4)},
            optional={"factor": st.integers(1, 64), "axes": st.lists(st.text(max_size=3))},
        ),
        max_size=4,
    ),
    space_version=st.none() | st.text("0123456789abcdef", min_size=16, max_size=16),
)


@given(records_strategy)
@settings(suppress_health_check=[HealthCheck.too_slow])  # a loaded CI machine draws slowly
def test_json_round_trip_through_text(rec: Record) -> None:
    line = json.dumps(rec.to_json(), allow_nan=False)
    back = Record.from_json(json.loads(line))
    assert back == rec
    assert hash(back) == hash(rec)
    assert back.config == rec.config
    assert back.extra == rec.extra
    assert back.trace == rec.trace and back.space_version == rec.space_version


def test_line_layout_is_the_documented_contract() -> None:
    line = record((2e-3, 1e-3, 3e-3), predicted=0.5, extra={"host": "n1"}).to_json()
    assert line["v"] == FORMAT_VERSION == 2
    assert line["workload"] == {
        "op": "matmul",
        "args": {"K": 64, "M": 64, "N": 64, "dtype": "float32"},
    }
    assert line["workload_key"] == "matmul(K=64,M=64,N=64,dtype=float32)"
    assert line["target"] == CPU_A.to_json()
    assert line["config"] == {"tile": [8, 8], "trial": 0}
    assert line["result"] == {
        "samples": [2e-3, 1e-3, 3e-3],
        "error_kind": "ok",
        "error_msg": "",
        "build_s": 0.0,
        "run_s": 0.0,
    }
    assert line["provenance"] == {"strategy": "random", "trial": 0, "predicted": 0.5}
    assert line["time"] == 1_700_000_000.0
    assert line["flops"] == 2 * 64**3
    assert line["host"] == "n1"
    assert line["schedule"] is None  # no schedule recorded


def test_a_record_carries_its_schedule_trace_and_space_version() -> None:
    trace = [{"step": "split", "stage": "C", "axis": "i", "factor": 8, "nparts": None}]
    rec = record(trace=trace, space_version="0123456789abcdef")
    line = rec.to_json()
    assert line["schedule"] == {"trace": trace, "space": "0123456789abcdef"}
    back = Record.from_json(json.loads(json.dumps(line)))
    assert back.trace == trace and back.space_version == "0123456789abcdef"
    assert back.version == 2


@pytest.mark.parametrize(
    "schedule",
    [
        "not an object",
        {"trace": "split"},
        {"trace": [1, 2]},
        {"trace": [], "space": 7},
    ],
)
def test_a_bad_schedule_is_one_record_error(schedule: Any) -> None:
    line = record().to_json() | {"schedule": schedule}
    with pytest.raises(RecordError, match="schedule"):
        Record.from_json(line)


def test_median_ok_and_gflops() -> None:
    rec = record((3e-3, 1e-3, 2e-3))
    assert rec.ok
    assert rec.median == 2e-3
    assert rec.gflops == pytest.approx(2 * 64**3 / 2e-3 / 1e9)


@pytest.mark.parametrize("kind", [k for k in ErrorKind if k is not ErrorKind.OK])
def test_failed_records_have_infinite_median_and_no_gflops(kind: ErrorKind) -> None:
    rec = record((1e-6,), error_kind=kind, error_msg="boom")
    assert not rec.ok
    assert rec.median == math.inf
    assert rec.gflops is None


def test_ok_without_samples_or_flops() -> None:
    assert record(()).median == math.inf
    assert Record.make(MATMUL, CPU_A, {}, samples=[1.0]).gflops is None


def test_config_is_a_fresh_plain_dict_and_the_record_is_hashable() -> None:
    rec = record(config={"tile": [4, 16], "order": "ikj"})
    rec.config["tile"].append(99)
    assert rec.config == {"order": "ikj", "tile": [4, 16]}
    assert rec.config_items == (("order", "ikj"), ("tile", (4, 16)))
    assert len({rec, record(config={"order": "ikj", "tile": (4, 16)})}) == 1


def test_config_key_is_canonical() -> None:
    assert config_key({"b": (8, 16), "a": True}) == '{"a":true,"b":[8,16]}'
    assert config_key({"a": True, "b": [8, 16]}) == config_key({"b": (8, 16), "a": True})
    assert config_key({"a": 1}) != config_key({"a": 2})


def test_error_kind_is_a_string_enum() -> None:
    assert ErrorKind("wrong_answer") is ErrorKind.WRONG_ANSWER
    assert ErrorKind.RUN_TIMEOUT == "run_timeout"
    assert {k.value for k in ErrorKind} == {
        "ok",
        "schedule_error",
        "compile_error",
        "compile_timeout",
        "runtime_error",
        "run_timeout",
        "wrong_answer",
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("workload"), "missing field 'workload'"),
        (lambda d: d["result"].pop("samples"), "missing field 'samples'"),
        (lambda d: d["result"].update(samples="fast"), "samples"),
        (lambda d: d["result"].update(samples=[-1.0]), "non-negative"),
        (lambda d: d["result"].update(error_kind="melted"), "unknown error kind 'melted'"),
        (lambda d: d["provenance"].update(trial="7"), "trial must be an int"),
        (lambda d: d.update(config=[1, 2]), "'config' must be an object"),
        (lambda d: d["config"].update(tile={"x": 1}), "config['tile']"),
        (lambda d: d.update(workload={"args": {}}), "string 'op'"),
        (lambda d: d.update(target="cpu"), "string 'kind'"),
        (lambda d: d["target"]["capabilities"].update(threads="two"), "'threads' must be a count"),
        (lambda d: d.update(time=None), "time must be a number"),
        (lambda d: d.pop("v"), "no format version"),
    ],
)
def test_bad_data_raises_one_line_record_error(
    change: Callable[[dict[str, Any]], object], message: str
) -> None:
    data = record().to_json()
    change(data)
    with pytest.raises(RecordError) as info:
        Record.from_json(data)
    text = str(info.value)
    assert message in text
    assert "\n" not in text
    assert not isinstance(info.value, RecordVersionError)


@pytest.mark.parametrize("version", [FORMAT_VERSION + 1, 0, "1", None, 1.0, True])
def test_unknown_versions_are_told_apart(version: object) -> None:
    data = record().to_json()
    data["v"] = version
    with pytest.raises(RecordVersionError, match="unknown record format version"):
        Record.from_json(data)


def test_not_an_object() -> None:
    with pytest.raises(RecordError, match="must be a JSON object, got list"):
        Record.from_json([1, 2])


def test_make_rejects_bad_values() -> None:
    with pytest.raises(RecordError, match="finite"):
        record((math.nan,))
    with pytest.raises(RecordError, match="predicted"):
        record(predicted=math.inf)
    with pytest.raises(RecordError, match="clash"):
        record(extra={"v": 2})
    with pytest.raises(RecordError, match="plain JSON"):
        record(extra={"note": math.nan})
