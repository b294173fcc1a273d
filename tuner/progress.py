"""The live display of ``tuner tune``: a rich progress bar and a final summary."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from records import Record

from .tune import TuneProgress, TuneResult


class TuneDisplay:
    """trial i/n, this candidate's and the best GFLOP/s (GB/s), errors so far, ETA.

    With ``bytes_moved`` (a memory-bound operator's compulsory traffic) the
    rates are GB/s, which say how close a kernel comes to the memory system.
    """

    def __init__(self, console: Console, title: str, total: int, bytes_moved: float | None = None):
        self.console = console
        self.bytes_moved = bytes_moved
        self.unit = "GB/s" if bytes_moved else "GFLOP/s"
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(
                "now {task.fields[now]:>8}  best {task.fields[best]:>8} "
                + self.unit
                + "  errors {task.fields[errors]}"
            ),
            TimeRemainingColumn(),
            console=console,
        )
        self.task = self.progress.add_task(title, total=total, now="-", best="-", errors=0)

    def rate(self, record: Record) -> float | None:
        """GB/s or GFLOP/s of a successful record; None when there is no figure."""
        if not record.ok:
            return None
        if self.bytes_moved:
            return self.bytes_moved / record.median / 1e9
        return record.gflops or None

    def update(self, p: TuneProgress) -> None:
        rate = self.rate(p.record)
        now = f"{rate:.1f}" if rate is not None else p.record.error_kind.value
        best_rate = self.rate(p.best) if p.best is not None else None
        best = f"{best_rate:.1f}" if best_rate is not None else "-"
        self.progress.update(self.task, completed=p.trial, now=now, best=best, errors=p.errors)

    def summary(self, r: TuneResult, log: Path) -> None:
        c = self.console
        c.print(
            f"{r.workload.key} on {r.target}: {r.measured} measured this run ({r.resumed} from the log before), {r.errors} errors, {r.elapsed:.0f} s; {r.stopped_because}"
        )
        if r.best is None:
            c.print("no candidate ran correctly yet")
        else:
            rate = self.rate(r.best)
            gf = f"{rate:.1f} {self.unit}, " if rate is not None else ""
            timed = f"trial {r.best.trial}, {len(r.best.samples)} samples"
            c.print(f"best: {gf}{r.best.median * 1e3:.3f} ms ({timed}) {r.best.config}")
            if r.numpy_seconds is not None:
                c.print(
                    f"NumPy reference, timed in the same runner: {r.numpy_seconds * 1e3:.3f} ms; "
                    f"best is {r.numpy_seconds / r.best.median:.2f}x NumPy"
                )
        c.print(f"log: {log}")

    def __enter__(self) -> TuneDisplay:
        self.progress.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.progress.stop()
