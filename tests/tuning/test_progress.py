"""The live display: rates in GFLOP/s, or GB/s for memory-bound operators."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from records import Record
from tuner.cli.progress import TuneDisplay
from tuner.measure.load import Load
from tuner.target import Target
from tuner.tuning.tune import TuneProgress, TuneResult
from tuner.workload import Workload


def _show(bytes_moved: float | None, numpy_iqr: float = 0.0, load: Load | None = None) -> str:
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False)
    w, t = Workload.make("softmax", M=4, N=8), Target.from_name("cpu", num_threads=2)
    rec = Record.make(w, t, {"a": 1}, samples=(2e-3,), flops=4e9, trial=0)
    with TuneDisplay(console, "softmax M=4 N=8", 1, bytes_moved=bytes_moved) as d:
        d.update(TuneProgress(1, 1, rec, rec, 0, 0.1))
    result = TuneResult(
        w, t, 1, 0, 0, rec, 0.1, "trial budget reached", 5e-3, numpy_iqr=numpy_iqr, load=load
    )
    d.summary(result, Path("t.jsonl"))
    return out.getvalue()


def test_a_busy_machine_is_said_in_one_line() -> None:
    busy = _show(None, load=Load(busy=1.9, cpus=2))
    line = "the machine was busy: other processes kept 1.9 of 2 CPUs busy around the NumPy timing"
    assert line in busy
    assert "the machine was busy" not in _show(None, load=Load(busy=0.2, cpus=2))
    assert "the machine was busy" not in _show(None, load=Load(busy=1.9, cpus=8))


def test_a_reference_that_disagrees_with_itself_gives_no_ratio() -> None:
    text = _show(None, numpy_iqr=4e-3)  # one slow round: the samples spread by 80%
    assert "spread by 80% of their median: no reliable comparison" in text
    assert "faster than NumPy" not in text


def test_the_load_of_other_processes_is_read_while_asleep() -> None:
    from tuner.measure.load import other_load

    load = other_load(0.05)
    if load is None:
        pytest.skip("no /proc/stat here")
    assert load.cpus >= 1 and 0.0 <= load.busy <= load.cpus + 1e-9


def test_compute_bound_rates_are_gflops() -> None:
    assert "best: 2000.0 GFLOP/s, 2.000 ms" in _show(None)


def test_the_summary_shows_the_best_beside_numpy() -> None:
    assert (
        "NumPy reference, timed in a fresh process: 5.000 ms; best is 2.5x faster than NumPy"
        in _show(None)
    )


def test_memory_bound_rates_are_gbytes_per_second() -> None:
    text = _show(bytes_moved=6e9)
    assert "best: 3000.0 GB/s, 2.000 ms" in text and "GFLOP/s" not in text


@pytest.mark.parametrize(
    ("ours", "peer", "text"),
    [
        (1.0, 360.0, "360x faster than NumPy"),
        (360.0, 1.0, "360x slower than NumPy"),
        (20.0, 1.0, "20x slower than NumPy"),
        (1.0, 3.2, "3.2x faster than NumPy"),
        (1.0, 1.04, "1.04x faster than NumPy"),
        (1.0, 1.002, "even with NumPy"),
    ],
)
def test_a_comparison_reads_faster_or_slower_never_a_small_fraction(
    ours: float, peer: float, text: str
) -> None:
    from tuner.cli.text import speed

    assert speed(ours, peer, "NumPy") == text
