"""The live displays of the commands, rich progress bars and their summaries: ``tuner tune``'s
(``TuneDisplay``) and ``tuner tune-model``'s (``ModelTuneDisplay``: the whole run, trials done of
the budget, the model's estimated latency now and with the default schedules, ETA, and the
task being tuned; its summary is a table per task)."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from records import Record

from ..tuning.tune import TuneProgress, TuneResult
from .text import milliseconds, speed

if TYPE_CHECKING:
    from ..tuning.tune_model import ModelProgress, ModelTuneResult

__all__ = ["ModelTuneDisplay", "TuneDisplay"]


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
            c.print(
                f"best: {gf}{milliseconds(r.best.median, r.best.iqr)} ms ({timed}) {r.best.config}"
            )
            if r.numpy_seconds is not None:
                c.print(baseline_line(r))
                if r.load is not None and r.load.crowds(r.target.threads):
                    c.print(
                        f"the machine was busy: {r.load.describe()} around the NumPy timing, "
                        f"fewer free than the {r.target.threads} threads timed; rerun when it is idle"
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


#: NumPy's samples spreading wider than this (IQR over median) make the comparison unreliable.
UNRELIABLE = 0.5


def baseline_line(r: TuneResult) -> str:
    """The NumPy reference beside the best: a ratio, or why no ratio can be trusted."""
    assert r.numpy_seconds is not None and r.best is not None
    figure = f"NumPy reference, timed in a fresh process: {milliseconds(r.numpy_seconds, r.numpy_iqr or 0.0)} ms"
    spread = (r.numpy_iqr or 0.0) / r.numpy_seconds
    if spread > UNRELIABLE:
        return f"{figure}; its samples spread by {100 * spread:.0f}% of their median: no reliable comparison"
    return f"{figure}; best is {speed(r.best.median, r.numpy_seconds, 'NumPy')}"


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1e3:.3f}" if seconds is not None else "-"


def _label(key: str, width: int = 72) -> str:
    """A task key as a table shows it: a generic fused group by its digest, not its whole text."""
    if key.startswith("fused(graph="):
        from ..graph.canonical import digest

        text, _, where = key[len("fused(graph=") :].rpartition(")@")
        return f"fused[{digest(text)}]@{where}"
    return key if len(key) <= width else key[: width - 3] + "..."


class ModelTuneDisplay:
    """A progress bar over the whole budget and a line on the task being tuned."""

    def __init__(self, console: Console, title: str, budget: int, resumed: int = 0):
        self.console = console
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("latency {task.fields[latency]} ms (default {task.fields[default]} ms)"),
            TextColumn("errors {task.fields[errors]}"),
            TimeRemainingColumn(),
            console=console,
        )
        self.bar = self.progress.add_task(
            title, total=budget, completed=resumed, latency="-", default="-", errors=0
        )
        self.line = Text("warming up: every task gets one round first")
        self.live = Live(self, console=console, refresh_per_second=4, transient=False)

    def __rich__(self) -> Group:
        return Group(self.progress, self.line)

    def update(self, p: ModelProgress) -> None:
        self.progress.update(
            self.bar,
            completed=p.trials,
            latency=_ms(p.latency),
            default=_ms(p.start_latency),
            errors=p.errors,
        )
        share = f"{100 * p.task_share:.1f}%" if p.task_share is not None else "-"
        now = _ms(p.record.median) if p.record.ok else p.record.error_kind.value
        self.line = Text(
            f"task {p.task_index + 1}: {_label(p.task.task.key)}  weight {p.task.weight}  "
            f"now {now} ms  best {_ms(p.task_best)} ms  share {share}"
        )

    def summary(self, r: ModelTuneResult, log: Path) -> None:
        table = Table(title=f"tasks ({r.scheduler} scheduler)")
        for col in (
            "task",
            "ops",
            "weight",
            "trials",
            "default ms",
            "best ms",
            "speed-up",
            "share",
        ):
            table.add_column(col, justify="left" if col in ("task", "ops") else "right")
        for t in sorted(r.tasks, key=lambda t: -(r.share(t) or 0.0)):
            gain = (
                speed(t.best_seconds, t.default_seconds)
                if t.default_seconds and t.best_seconds
                else "-"
            )
            share = r.share(t)
            table.add_row(
                _label(t.key, 60),
                t.ops,
                str(t.weight),
                str(t.trials),
                _ms(t.default_seconds),
                _ms(t.best_seconds),
                gain,
                f"{100 * share:.1f}%" if share is not None else "-",
            )
        c = self.console
        c.print(table)
        c.print(
            f"{r.measured} trials measured this run ({r.resumed} in the log before, "
            f"budget {r.budget}), {r.errors} errors, {r.elapsed:.0f} s; {r.stopped_because}"
        )
        if r.latency is not None and r.default_latency is not None:
            c.print(
                f"estimated model latency (weighted sum of kernel times): default "
                f"{_ms(r.default_latency)} ms, tuned {_ms(r.latency)} ms "
                f"({speed(r.latency, r.default_latency)})"
            )
        c.print(f"log: {log}")

    def __enter__(self) -> ModelTuneDisplay:
        self.live.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.live.stop()
