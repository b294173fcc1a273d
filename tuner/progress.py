"""The live display of ``tuner tune``: a rich progress bar and a final summary."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from .tune import TuneProgress, TuneResult


class TuneDisplay:
    """trial i/n, this candidate's and the best GFLOP/s, errors so far, ETA."""

    def __init__(self, console: Console, title: str, total: int):
        self.console = console
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(
                "now {task.fields[now]:>8}  best {task.fields[best]:>8} GFLOP/s  errors {task.fields[errors]}"
            ),
            TimeRemainingColumn(),
            console=console,
        )
        self.task = self.progress.add_task(title, total=total, now="-", best="-", errors=0)

    def update(self, p: TuneProgress) -> None:
        now = (
            f"{p.record.gflops:.1f}"
            if p.record.ok and p.record.gflops
            else p.record.error_kind.value
        )
        best = f"{p.best.gflops:.1f}" if p.best is not None and p.best.gflops else "-"
        self.progress.update(self.task, completed=p.trial, now=now, best=best, errors=p.errors)

    def summary(self, r: TuneResult, log: Path) -> None:
        c = self.console
        c.print(
            f"{r.workload.key} on {r.target}: {r.measured} measured this run ({r.resumed} from the log before), {r.errors} errors, {r.elapsed:.0f} s; {r.stopped_because}"
        )
        if r.best is None:
            c.print("no candidate ran correctly yet")
        else:
            gf = f"{r.best.gflops:.1f} GFLOP/s, " if r.best.gflops else ""
            c.print(
                f"best: {gf}{r.best.median * 1e3:.3f} ms (trial {r.best.trial}) {r.best.config}"
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
