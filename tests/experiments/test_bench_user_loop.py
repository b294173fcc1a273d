"""The user-loop benchmark times one record both ways and prints its row (a smoke test)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments"))


@pytest.mark.slow
def test_bench_user_loop_times_the_runner_and_a_users_loop(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import bench_user_loop

    args = ["--workloads", "matmul_small", "--rounds", "1", "--block", "0.01"]
    with pytest.raises(SystemExit, match="no tuning log"):
        bench_user_loop.main([*args, "--log", str(tmp_path / "none.jsonl")])
    assert bench_user_loop.main([*args, "--log", ""]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    label, source, *cells = (c.strip() for c in rows[-1].strip("|").split("|"))
    assert (label, source) == ("matmul_small", "default")  # no record: the default schedule
    runner, user, ratio, alloc = (float(c) for c in cells)
    assert runner > 0 and user > 0 and alloc > 0
    assert ratio == pytest.approx(user / runner, rel=0.01, abs=0.002)
