"""The operator benchmark: its peers compute what the operators compute, and it runs end to end."""

from __future__ import annotations

import csv
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from search_spaces import get_operator

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))

import bench_ops  # noqa: E402
import bench_report  # noqa: E402

# Awkward arguments: primes, transposes, strides, paddings, dilation, groups, K past float32's
# exact range for int8, every activation, both reduction axes.
CASES = [
    "matmul M=7 N=5 K=3",
    "matmul M=7 N=5 K=3 trans_a=true trans_b=true",
    "matmul M=9 N=11 K=13 dtype=int8",
    "matmul M=3 N=2 K=1500 dtype=int8",
    "batch_matmul B=3 M=5 N=7 K=4 trans_b=true",
    "dense batch=5 in_features=7 out_features=9 bias=true activation=relu",
    "dense batch=5 in_features=7 out_features=9 bias=true activation=gelu",
    "dense batch=5 in_features=7 out_features=9 bias=false activation=sigmoid",
    "dense batch=5 in_features=7 out_features=9 activation=tanh",
    "conv2d N=2 C=6 H=9 W=7 K=4 R=3 S=3 stride=2 pad=1",
    "conv2d N=1 C=6 H=9 W=7 K=4 R=1 S=1 stride=1 pad=0 bias=true activation=relu",
    "conv2d N=2 C=6 H=11 W=10 K=4 R=3 S=2 stride=1 pad=2 dilation=2 groups=2 bias=true",
    "depthwise_conv2d N=2 C=5 H=9 W=8 R=3 S=3 stride=2 pad=1",
    "depthwise_conv2d N=1 C=5 H=9 W=8 R=3 S=3 stride=1 pad=0",
    "max_pool2d N=1 C=3 H=11 W=9 kernel=3 stride=2 pad=1",
    "max_pool2d N=2 C=3 H=11 W=9 kernel=2",
    "softmax M=5 N=33",
    "layer_norm M=5 N=33",
    "elementwise_chain n=1001",
    "reduce_sum M=7 N=13",
    "reduce_sum M=7 N=13 axis=0",
]


def _setup(spec: str) -> tuple[str, dict, list[np.ndarray], np.ndarray]:
    op_name, raw = bench_ops.parse_spec(spec)
    op = get_operator(op_name)
    args = op.parse_args(raw)
    inputs = op.make_inputs(args, seed=3)
    return op_name, args, inputs, bench_ops._reference(op, inputs, args)


@pytest.mark.parametrize("spec", CASES)
def test_numpy_peer_matches_the_reference(spec: str) -> None:
    op_name, args, inputs, ref = _setup(spec)
    run = bench_ops.NUMPY_PEERS[op_name](args, *inputs)
    assert bench_ops.verify(run(), ref) == ""
    assert bench_ops.verify(run(), ref) == ""  # the buffers are reused: a second call agrees


def test_every_suite_operator_has_peers() -> None:
    pytest.importorskip("torch")
    for spec in bench_ops.SUITES["full"].values():
        op_name, raw = bench_ops.parse_spec(spec)
        get_operator(op_name).parse_args(raw)  # the suite names each operator's own arguments
        assert op_name in bench_ops.NUMPY_PEERS
        bench_ops.torch_fn(op_name, get_operator(op_name).parse_args(raw))


@pytest.mark.parametrize("spec", CASES[::2] + CASES[9:12])
def test_torch_peer_matches_the_reference(spec: str) -> None:
    pytest.importorskip("torch")
    op_name, args, inputs, ref = _setup(spec)
    peers, _ = bench_ops._torch_peers(op_name, args, inputs, 1, ["torch"])
    assert bench_ops.verify(peers["torch"](), ref) == ""


def test_verify_catches_small_errors() -> None:
    ref = np.linspace(-2, 2, 50).astype(np.float32)
    assert bench_ops.verify(ref.copy(), ref) == ""
    bad = ref.copy()
    bad[7] += 0.01
    assert "max error" in bench_ops.verify(bad, ref)
    assert "shape" in bench_ops.verify(ref[:-1], ref)
    ints = np.arange(6, dtype=np.int32)
    assert bench_ops.verify(ints + (ints == 5), ints) == "wrong integers"


def test_an_unknown_operator_is_skipped_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    kept = bench_ops.runnable([("gone", "no_such_op M=3"), ("sm", "softmax M=2 N=3")])
    assert kept == [("sm", "softmax M=2 N=3")]
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("skipping gone: unknown operator 'no_such_op'")


def _bench(tmp_path: Path, *extra: str) -> list[dict[str, str]]:
    cmd = [
        sys.executable,
        str(ROOT / "experiments" / "bench_ops.py"),
        "--suite=small",
        "--workloads=matmul_small",
        "--trials=2",
        "--rounds=1",
        "--threads=1",
        "--peers=numpy",
        "--min-sample=0.002",
        f"--log-dir={tmp_path / 'logs'}",
        f"--out-dir={tmp_path / 'out'}",
        *extra,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    with (tmp_path / "out" / "bench_ops_2.csv").open() as f:
        return list(csv.DictReader(f))


def test_bench_tunes_times_and_retimes_from_its_log(tmp_path: Path) -> None:
    rows = _bench(tmp_path)
    assert len(rows) == 1
    row = rows[0]
    assert list(row) == bench_report.COLUMNS
    assert (row["workload"], row["threads"], row["unit"], row["trials"]) == (
        "matmul_small",
        "1",
        "GFLOP/s",
        "2",
    )
    for col in ("tuned_rate", "tuned_s", "default_s", "numpy_s", "tuned_x_numpy", "tune_s"):
        assert math.isfinite(float(row[col])) and float(row[col]) > 0, col
    assert row["torch_s"] == ""  # not asked for
    md = (tmp_path / "out" / "bench_ops_2.md").read_text()
    assert "| workload | thr | tuned |" in md and "| matmul_small | 1 |" in md
    log = tmp_path / "logs" / "bench_ops_2.jsonl"
    lines = log.read_text().splitlines()
    assert len(lines) == 4, "2 trials, then the 2 leaders re-timed"

    again = _bench(tmp_path, "--from-logs")
    assert log.read_text().splitlines() == lines  # nothing tuned again
    assert float(again[0]["tuned_s"]) > 0
    assert again[0]["tune_s"] == row["tune_s"]  # the tuning time is kept beside the log
