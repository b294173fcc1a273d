"""The GPU benchmark (experiments/bench_cuda.py): its peers compute what the operators compute,
it refuses to run without a GPU or --smoke, and --smoke runs end to end on the simulator."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from search_spaces import get_operator

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))

import bench_cuda  # noqa: E402
import cuda_peers  # noqa: E402

OPS = {"matmul", "conv2d", "softmax", "layer_norm"}
# Awkward shapes: nothing divides by a tile, a window that strides and dilates.
CASES = [
    ("matmul", {"M": 7, "N": 5, "K": 3}),
    ("softmax", {"M": 5, "N": 33}),
    ("layer_norm", {"M": 5, "N": 33}),
    ("conv2d", {"N": 2, "C": 6, "H": 9, "W": 7, "K": 4, "stride": 2, "pad": 1}),
    ("conv2d", {"N": 1, "C": 4, "H": 11, "W": 10, "K": 4, "pad": 2, "dilation": 2, "groups": 2}),
]


def _setup(op_name: str, raw: dict) -> tuple[dict, list[np.ndarray], np.ndarray]:
    op = get_operator(op_name)
    args = op.parse_args(raw)
    inputs = op.make_inputs(args, seed=5)
    return args, inputs, op.reference(*inputs, **args)


def test_the_workloads_are_the_issues_and_the_smoke_ones_the_same_ops() -> None:
    full = {w.op: w.args for w in bench_cuda.FULL}
    assert set(full) == OPS and [w.op for w in bench_cuda.SMOKE] == [w.op for w in bench_cuda.FULL]
    assert full["matmul"] == {"M": 4096, "N": 4096, "K": 4096}
    assert full["softmax"] == full["layer_norm"] == {"M": 8192, "N": 4096}
    conv = full["conv2d"]
    assert (conv["N"], conv["C"], conv["H"], conv["W"], conv["K"], conv["pad"]) == (
        8,
        256,
        28,
        28,
        256,
        1,
    )


@pytest.mark.parametrize(("op_name", "raw"), [c for c in CASES if c[0] != "conv2d"])
def test_cupy_formulation_matches_the_reference(op_name: str, raw: dict) -> None:
    """CuPy's calls, run by NumPy (the same names and out= buffers), twice into one buffer."""
    args, inputs, ref = _setup(op_name, raw)
    launch, y = cuda_peers.cupy_formulation(np, op_name, args, inputs)
    launch()
    launch()
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_cupy_has_no_conv2d_and_says_so() -> None:
    args, inputs, _ = _setup(*CASES[3])
    assert "no conv2d" in cuda_peers.cupy_formulation(np, "conv2d", args, inputs)


@pytest.mark.parametrize(("op_name", "raw"), CASES)
def test_torch_formulation_matches_the_reference(op_name: str, raw: dict) -> None:
    torch = pytest.importorskip("torch")
    args, inputs, ref = _setup(op_name, raw)
    dev = [torch.from_numpy(a) for a in inputs]
    got = cuda_peers.torch_formulation(torch, op_name, args, dev)
    assert not isinstance(got, str), got
    launch, y = got
    launch()
    np.testing.assert_allclose(y().numpy(), ref, rtol=1e-5, atol=1e-5)


def test_torch_is_kept_to_float32_on_the_gpu() -> None:
    torch = pytest.importorskip("torch")
    cuda_peers._float32_only(torch)
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        assert matmul.fp32_precision == "ieee"
        assert torch.backends.cudnn.conv.fp32_precision == "ieee"
    else:
        assert not matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    assert torch.backends.cudnn.benchmark


def test_the_check_says_by_how_much_an_output_is_off() -> None:
    ref = np.ones((3, 4))
    assert bench_cuda.check("ours", ref.astype(np.float32), ref) is None
    bad = ref.copy()
    bad[1, 2] = 1.5
    assert "0.5" in str(bench_cuda.check("ours", bad, ref))
    assert "shape" in str(bench_cuda.check("ours", ref[:2], ref))


def test_the_check_catches_a_wrong_softmax_of_small_elements() -> None:
    _, inputs, ref = _setup("softmax", {"M": 4, "N": 4096})
    assert float(ref.max()) < 1e-3  # a fixed absolute tolerance of 1e-3 would pass anything
    assert bench_cuda.check("ours", ref.astype(np.float32), ref) is None
    assert bench_cuda.check("ours", np.zeros_like(ref), ref) is not None
    assert bench_cuda.check("ours", np.full_like(ref, 1 / 4096), ref) is not None


class FakeTimer:
    """A side whose launches each take ``cost`` seconds; it notes when it is timed."""

    def __init__(self, name: str, cost: float, calls: list[str]):
        self.name, self.cost, self.calls = name, cost, calls

    def run(self) -> None:
        pass

    def seconds(self, reps: int) -> float:
        self.calls.append(self.name)
        return reps * self.cost


def test_samples_fill_min_sample_and_rounds_rotate_the_order() -> None:
    calls: list[str] = []
    assert 20 <= cuda_peers.reps_for(FakeTimer("a", 1e-3, calls), 0.02) <= 40
    assert cuda_peers.reps_for(FakeTimer("a", 1.0, calls), 0.02) == 1
    calls.clear()
    timers = {
        k: FakeTimer(k, c, calls) for k, c in (("ours", 2e-3), ("cupy", 1e-4), ("torch", 5e-5))
    }
    got = cuda_peers.interleaved(timers, rounds=3, samples=2, min_sample=0.01, rest=0.0)
    for name, (samples, reps) in got.items():
        assert len(samples) == 6 and samples == pytest.approx([timers[name].cost] * 6)
        assert reps * timers[name].cost >= 0.01
    # each side's block (a warm-up and its samples) in the order they ran, the last 9 the rounds
    firsts = [c for i, c in enumerate(calls) if i == 0 or c != calls[i - 1]]
    rounds = [["ours", "cupy", "torch"], ["cupy", "torch", "ours"], ["torch", "ours", "cupy"]]
    assert firsts[-9:] == [side for r in rounds for side in r]


def _row(op: str, **ms: float) -> bench_cuda.Row:
    w = next(w for w in bench_cuda.FULL if w.op == op)
    return bench_cuda.Row(w, ms=dict(ms))


def test_the_bars_are_judged_on_peer_time_over_ours() -> None:
    rows = [_row("matmul", ours=2.0, cupy=1.0), _row("softmax", ours=1.0, torch=0.7)]
    said = bench_cuda.bars(rows, simulated=False)
    assert said[0].startswith("bar tuned matmul >= 0.5x cuBLAS (CuPy): MET (0.50x)")
    assert said[1].startswith("bar softmax >= 0.8x PyTorch: NOT MET (0.70x)")
    said = bench_cuda.bars([_row("matmul", ours=2.0)], simulated=False)
    assert "not measured" in said[0] and "not measured" in said[1]
    assert all("not judged" in s for s in bench_cuda.bars(rows, simulated=True))
    text = bench_cuda.table(rows)
    assert "0.50x" in text and "0.70x" in text


def _script(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "bench_cuda.py"), *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )


def test_without_a_gpu_or_smoke_one_line_and_a_nonzero_exit() -> None:
    if bench_cuda.gpu_count() > 0:
        pytest.skip("this machine has a GPU")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = _script(env=env)
    assert done.returncode != 0 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and "--smoke" in done.stderr
    done = _script(env={**env, "NUMBA_ENABLE_CUDASIM": "1"})
    assert done.returncode != 0 and "real GPU" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_smoke_tunes_builds_checks_and_times_every_workload(tmp_path: Path) -> None:
    pytest.importorskip("numba.cuda", reason="the cuda extra (numba-cuda) is not installed")
    from records import load

    out, log = tmp_path / "bench.csv", tmp_path / "bench.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TUNER_CACHE_DIR": str(tmp_path / "cache")}
    done = _script("--smoke", "--jobs", "2", "--out", str(out), "--log", str(log), env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stdout + done.stderr
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    assert {r["op"] for r in rows} == OPS and len(rows) == 4
    for r in rows:
        assert float(r["ours_ms"]) > 0 and r["tuned"] == "True", r
        assert r["ours_note"] == "", r
        assert int(r["trials"]) == 2
    records = load(log)
    assert {r.workload.op for r in records} == OPS
    assert all(r.target.kind == "cuda" for r in records)
    assert {r.workload.op for r in records if r.ok} == OPS
    simulated = rows[0]["simulated"] == "True"
    assert ("meaningless" in done.stdout) == simulated
    assert "bar tuned matmul >= 0.5x cuBLAS" in done.stdout
