"""The launch benchmark runs end to end and prints one row per work size (a smoke test)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments"))


def test_bench_launch_prints_a_row_per_work_size(capsys: pytest.CaptureFixture[str]) -> None:
    import bench_launch

    assert bench_launch.main(["--threads", "2", "--work-us", "0,5", "--rounds", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert [r.split(" | ")[0] for r in rows[1:]] == ["| 0", "| 5"]
    for r in rows[1:]:
        cells = [float(c) for c in r.strip("| ").split(" | ")]
        assert all(c > 0 for c in cells[1:4])  # every side was timed (serial, launch, pool)
        assert all(c >= 0 for c in cells[4:])  # ratios, 0.00 when rounded on a loaded machine
