"""Golden logs: files written in each past format must load to the same values forever.

Never regenerate a golden file from code. A new format version gets a new
hand-checked file and a new test; the old ones stay as they are.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from records import ErrorKind, Record, best, best_by_workload, load, measured_configs

GOLDEN = Path(__file__).parent / "golden"
MATMUL_KEY = "matmul(K=256,M=256,N=256,dtype=float32)"
CONV_KEY = "conv2d(C=64,H=56,K=64,N=1,R=3,S=3,W=56,dtype=float32,strides=[1,1])"


@pytest.fixture
def v1() -> list[Record]:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a golden log must load without any skipped line
        return load(GOLDEN / "v1.jsonl")


def test_v1_loads_every_line(v1: list[Record]) -> None:
    assert [(r.workload.key, r.trial) for r in v1] == [
        (MATMUL_KEY, 0),
        (MATMUL_KEY, 1),
        (MATMUL_KEY, 2),
        (MATMUL_KEY, 3),
        (MATMUL_KEY, 4),
        (CONV_KEY, 0),
    ]
    assert all(r.version == 1 for r in v1)


def test_v1_records_write_back_the_same_lines(v1: list[Record]) -> None:
    lines = [json.loads(line) for line in (GOLDEN / "v1.jsonl").read_text().splitlines() if line]
    assert [r.to_json() for r in v1] == lines


def test_v1_first_record_exactly(v1: list[Record]) -> None:
    r = v1[0]
    assert r.workload.op == "matmul"
    assert r.workload.as_dict() == {"M": 256, "N": 256, "K": 256, "dtype": "float32"}
    assert r.target.kind == "cpu"
    assert r.target.fingerprint == "a1b2c3d4e5f60718"
    assert r.target.cap("vector_lanes") == 8
    assert r.config == {
        "tile_i": [8, 16],
        "tile_j": [4, 32],
        "order": "ikj",
        "vectorize": True,
        "unroll": 4,
    }
    assert r.samples == (0.0042, 0.004, 0.0041)
    assert r.error_kind is ErrorKind.OK
    assert r.error_msg == ""
    assert (r.build_seconds, r.run_seconds) == (1.25, 0.05)
    assert r.timestamp == 1717171717.5
    assert (r.strategy, r.trial, r.predicted) == ("random", 0, None)
    assert r.flops == 33554432
    assert r.median == 0.0041
    assert r.gflops == pytest.approx(8.184007804878)
    assert r.extra == {}


def test_v1_failures(v1: list[Record]) -> None:
    compile_error, wrong = v1[2], v1[3]
    assert compile_error.error_kind is ErrorKind.COMPILE_ERROR
    assert compile_error.error_msg == "TypingError: cannot unify int64 and float32"
    assert compile_error.samples == ()
    assert (compile_error.build_seconds, compile_error.run_seconds) == (0.4, 0.0)
    assert wrong.error_kind is ErrorKind.WRONG_ANSWER
    assert wrong.error_msg == "max abs error 3.5 > tolerance 1e-05"
    assert wrong.samples == (0.0001, 0.0001)
    assert wrong.predicted == 0.95
    assert not wrong.ok and wrong.gflops is None


def test_v1_extra_fields_and_key_order(v1: list[Record]) -> None:
    assert v1[4].extra == {"host": "node-7"}
    assert v1[4].to_json()["host"] == "node-7"
    conv = v1[5]  # written with its keys in reverse order
    assert conv.workload.arg("strides") == (1, 1)
    assert conv.target.kind == "cuda"
    assert conv.target.cap("warp_size") == 32
    assert conv.config == {"block": [16, 16], "shared": True}
    assert conv.error_kind is ErrorKind.RUN_TIMEOUT
    assert (conv.flops, conv.predicted, conv.timestamp) == (None, None, 1717180000.0)


def test_v1_best_and_resume(v1: list[Record]) -> None:
    top = best(v1, MATMUL_KEY, "cpu")
    assert top is not None and top.trial == 1
    assert top.gflops == pytest.approx(15.978300952)
    assert best(v1, CONV_KEY) is None  # its only record timed out
    assert {key: r.trial for key, r in best_by_workload(v1).items()} == {(MATMUL_KEY, "cpu"): 1}
    assert len(measured_configs(v1, MATMUL_KEY, "cpu")) == 5


# -- version 2: the schedule trace and the space version; thread counts kept apart --------------

MATMUL_V2 = "matmul(K=32,M=64,N=48,dtype=float32,trans_a=false,trans_b=false)"


@pytest.fixture
def v2() -> list[Record]:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return load(GOLDEN / "v2.jsonl")


def test_v2_loads_and_writes_back_the_same_lines(v2: list[Record]) -> None:
    lines = [json.loads(line) for line in (GOLDEN / "v2.jsonl").read_text().splitlines() if line]
    assert [r.version for r in v2] == [2, 2, 2, 2]
    assert [r.to_json() for r in v2] == lines


def test_v2_schedule_fields(v2: list[Record]) -> None:
    first = v2[0]
    assert first.space_version == "5d41402abc4b2a76"
    assert first.trace is not None and [s["step"] for s in first.trace] == [
        "split",
        "split",
        "reorder",
        "annotate",
    ]
    assert first.trace[0] == {
        "step": "split",
        "stage": "C",
        "axis": "i",
        "factor": 4,
        "nparts": None,
    }
    assert v2[2].trace == [] and v2[2].space_version == "5d41402abc4b2a76"
    assert v2[3].trace is None and v2[3].space_version is None
    assert v2[3].error_kind is ErrorKind.COMPILE_TIMEOUT


def test_v2_thread_counts_are_never_pooled(v2: list[Record]) -> None:
    one, two = v2[0].target, v2[1].target
    assert one.fingerprint == two.fingerprint
    assert best(v2, MATMUL_V2, one).trial == 0  # type: ignore[union-attr]
    assert best(v2, MATMUL_V2, one).samples == v2[0].samples  # type: ignore[union-attr]
    assert best(v2, MATMUL_V2, two).config == {"mr": 8, "nr": 32, "kc": 32}  # type: ignore[union-attr]
    table = best_by_workload(v2)
    assert {key: r.config["mr"] for key, r in table.items()} == {
        (MATMUL_V2, "cpu, 1 thread"): 4,
        (MATMUL_V2, "cpu, 2 threads"): 8,
    }
