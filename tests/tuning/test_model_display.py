"""``tuner tune-model``'s display on a recorded run: latency now against the start, an ETA
within the time limit, and a summary whose shares add up."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from tuner.cli.progress import ModelTuneDisplay, eta_seconds
from tuner.tuning.tune_model import ModelProgress, tune_model

from .test_tune_model import Simulated, mlp, opts  # noqa: F401 (mlp is a fixture)


def test_the_eta_is_the_pace_of_the_run_but_never_past_the_time_limit() -> None:
    assert eta_seconds(10.0, 10, 100) == pytest.approx(90.0)
    assert eta_seconds(10.0, 10, 100, time_limit=60.0) == pytest.approx(50.0)
    assert eta_seconds(0.5, 0, 100, time_limit=60.0) == pytest.approx(59.5)
    assert eta_seconds(0.5, 0, 100) is None
    assert eta_seconds(70.0, 10, 100, time_limit=60.0) == 0.0


def test_a_recorded_run_shows_latency_now_and_at_the_start_and_a_summary_that_adds_up(
    mlp: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    seen: list[ModelProgress] = []
    result = tune_model(
        mlp, opts(tmp_path / "t.jsonl", 12), measurer=Simulated(), progress=seen.append
    )
    assert [p.warmed for p in seen[:2]] == [1, 2], "each task's default first"
    out = io.StringIO()
    console = Console(file=out, width=240, force_terminal=False)
    display = ModelTuneDisplay(console, "mlp.onnx", 12, tasks=2, time_limit=900.0)
    frames = []
    for p in seen:
        display.update(p)
        console.print(display.progress.get_renderable(), display.line)
        frames.append(out.getvalue())
        out.seek(0)
        out.truncate()
    assert "warming up: 1/2 tasks timed" in frames[0] and "task 1/2:" in frames[0]
    last = frames[-1]
    assert re.search(r"latency \d+\.\d+ ms, at the start \d+\.\d+ ms \(", last), last
    eta = re.search(r"ETA (\d+):(\d\d):(\d\d)", last)
    assert eta is not None, last
    h, m, s = (int(x) for x in eta.groups())
    assert 3600 * h + 60 * m + s <= 900, "never past the time limit"
    display.summary(result, tmp_path / "t.jsonl", end_to_end=(2e-3, 1e-3))
    text = out.getvalue()
    assert "share before" in text and "share after" in text
    assert "measured end to end, this process: default schedules 2.000 ms, tuned 1.000 ms" in text
    assert "(2.0x faster)" in text
    before = [result.share_before(t) for t in result.tasks]
    after = [result.share(t) for t in result.tasks]
    assert sum(b or 0.0 for b in before) == pytest.approx(1.0)
    assert sum(a or 0.0 for a in after) == pytest.approx(1.0)
    shown = [float(x) for x in re.findall(r"(\d+\.\d)%", text)]
    assert len(shown) == 4 and sum(shown) == pytest.approx(200.0, abs=0.2)
