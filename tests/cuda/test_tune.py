"""Tuning on the cuda target (the simulator in CI): the command writes a log whose best record
``apply_best`` builds for cuda; measurement takes the device path (inputs copied once,
event-timed launches) and reports failed launches as their own runtime error."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("numba.cuda", reason="the cuda extra (numba-cuda) is not installed")

from records import ErrorKind, load
from search_spaces import get_operator
from tuner.cli import main
from tuner.codegen import LaunchError
from tuner.kernels import apply_best
from tuner.kernels.op import build_op
from tuner.measure import Candidate, MeasureOptions
from tuner.measure import _child as child
from tuner.target import Target

QUICK = MeasureOptions(samples=2, passes=1, min_sample_seconds=0.0)


def _candidate(gpu: Target, config: dict[str, Any] | None = None) -> Candidate:
    op = get_operator("softmax")
    args = op.parse_args({"M": 2, "N": 8})
    cfg = config or op.default_config(args, gpu)
    return Candidate("softmax", args, cfg, gpu.to_json())


def test_a_candidate_is_checked_and_timed_on_the_device(gpu) -> None:  # type: ignore[no-untyped-def]
    out = child.run_candidate(_candidate(gpu), QUICK, child.Workspace())
    assert out["kind"] == ErrorKind.OK.value, out
    assert len(out["samples"]) == 2 and all(t > 0 for t in out["samples"])


def test_a_failed_launch_is_reported_and_asks_for_a_fresh_runner(gpu, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    op, tensors, kern = child._kernel(_candidate(gpu))

    class Broken:
        def run(self) -> None:
            raise LaunchError("launch failure: an illegal memory access was encountered")

    monkeypatch.setattr(kern, "timer", lambda *arrays: Broken())
    monkeypatch.setattr(child, "_kernel", lambda c: (op, tensors, kern))
    out = child.run_candidate(_candidate(gpu), QUICK, child.Workspace())
    assert out["kind"] == ErrorKind.RUNTIME_ERROR.value
    assert out["msg"].startswith("LaunchError: launch failure") and out["fresh"] is True


@pytest.mark.slow
def test_tune_writes_a_log_whose_best_builds_for_cuda(gpu, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "cuda.jsonl"
    argv = ["tune", "matmul", "M=16", "N=16", "K=16", "--target", "cuda", "--trials", "4"]
    assert main([*argv, "--log", str(log), "--retime", "0", "--no-baseline"]) == 0, (
        capsys.readouterr().err
    )
    records = load(log)
    assert len(records) == 4 and all(r.target.kind == "cuda" for r in records)
    assert any(r.ok for r in records), [r.error_msg for r in records]
    with apply_best(log) as best:
        f = build_op("matmul", target=gpu, records=best, M=16, N=16, K=16)
    assert f.record is not None and f.kernel.target.kind == "cuda"
    assert "@cuda.jit" in f.source
    rng = np.random.default_rng(0)
    a, b = (rng.random((16, 16), dtype=np.float32) for _ in range(2))
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-4, atol=1e-5)
