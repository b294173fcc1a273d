"""The live displays of the commands, rich progress bars and their summaries: ``tuner tune``'s
(``TuneDisplay``) and ``tuner tune-model``'s (``ModelTuneDisplay``: the whole run, trials done of
the budget, the model's estimated latency now and at the start, an ETA within the time limit,
and the task being tuned; its summary is a table per task, shares before and after, and the
module measured end to end)."""

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
from .options import unlimited
from .text import milliseconds, speed

if TYPE_CHECKING:
    from ..tuning.tune_model import ModelProgress, ModelTuneResult

__all__ = ["ModelTuneDisplay", "TuneDisplay", "eta_seconds"]


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
        shown = None if unlimited(total) else total  # (--time-limit alone: no trial total)
        self.task = self.progress.add_task(title, total=shown, now="-", best="-", errors=0)

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


def _clock(seconds: float) -> str:
    m, sec = divmod(round(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{sec:02d}"


def _budget(budget: int) -> str:
    return "no trial budget, --time-limit" if unlimited(budget) else f"budget {budget}"


def eta_seconds(
    elapsed: float, done: int, budget: int, time_limit: float | None = None
) -> float | None:
    """Seconds left: the trials left at this run's pace, but never past ``time_limit``.

    None before the first trial without a limit (no pace yet).
    """
    left = max(0.0, time_limit - elapsed) if time_limit is not None else None
    if done <= 0:
        return left
    pace = elapsed / done * max(0, budget - done)
    return pace if left is None else min(pace, left)


class ModelTuneDisplay:
    """A bar over this run's trials with the model's estimated latency now and at the start
    (each task's best, or its default schedule's time, times its weight), an ETA that
    respects the time limit, and a line on the task being tuned with its share."""

    def __init__(
        self,
        console: Console,
        title: str,
        budget: int,
        tasks: int,
        time_limit: float | None = None,
    ):
        self.console, self.tasks, self.time_limit = console, tasks, time_limit
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[latency]}"),
            TextColumn("errors {task.fields[errors]}"),
            TextColumn("ETA {task.fields[eta]}"),
            console=console,
        )
        limit = _clock(time_limit) if time_limit is not None else "-"
        self.bar = self.progress.add_task(
            title,
            total=None if unlimited(budget) else budget,
            latency=self._warming(0),
            errors=0,
            eta=limit,
        )
        self.line = Text("warming up: every task gets its default schedule timed first")
        self.live = Live(self, console=console, refresh_per_second=4, transient=False)

    def __rich__(self) -> Group:
        return Group(self.progress, self.line)

    def _warming(self, warmed: int) -> str:
        return f"warming up: {warmed}/{self.tasks} tasks timed"

    def update(self, p: ModelProgress) -> None:
        if p.latency is not None and p.start_latency is not None:
            gain = speed(p.latency, p.start_latency)
            latency = (
                f"latency {_ms(p.latency)} ms, at the start {_ms(p.start_latency)} ms ({gain})"
            )
        else:
            latency = self._warming(p.warmed)
        eta = eta_seconds(p.elapsed, p.trials, p.budget, self.time_limit)
        self.progress.update(
            self.bar,
            completed=p.trials,
            latency=latency,
            errors=p.errors,
            eta=_clock(eta) if eta is not None else "-",
        )
        share = f"{100 * p.task_share:.1f}%" if p.task_share is not None else "-"
        now = _ms(p.record.median) if p.record.ok else p.record.error_kind.value
        self.line = Text(
            f"task {p.task_index + 1}/{self.tasks}: {_label(p.task.task.key)}  weight "
            f"{p.task.weight}  now {now} ms  best {_ms(p.task_best)} ms  share {share}"
        )

    def summary(
        self, r: ModelTuneResult, log: Path, end_to_end: tuple[float, float] | str | None = None
    ) -> None:
        """The table per task, the run in one line, the estimated latency before and after,
        then ``end_to_end``: the module's measured seconds with the default schedules and
        tuned (or why it was not measured)."""
        table = Table(title=f"tasks ({r.scheduler} scheduler)")
        columns = (
            "task", "ops", "weight", "trials", "default ms", "best ms", "speed-up",
            "share before", "share after",
        )  # fmt: skip
        for col in columns:
            table.add_column(col, justify="left" if col in ("task", "ops") else "right")
        for t in sorted(r.tasks, key=lambda t: -(r.share_before(t) or r.share(t) or 0.0)):
            gain = (
                speed(t.best_seconds, t.default_seconds)
                if t.default_seconds and t.best_seconds
                else "-"
            )
            table.add_row(
                _label(t.key, 60),
                t.ops,
                str(t.weight),
                str(t.trials),
                _ms(t.default_seconds),
                _ms(t.best_seconds),
                gain,
                _percent(r.share_before(t)),
                _percent(r.share(t)),
            )
        c = self.console
        c.print(table)
        c.print(
            f"{r.measured} trials measured this run ({_budget(r.budget)}; {r.resumed} in the log "
            f"before), {r.errors} errors, {r.elapsed:.0f} s; {r.stopped_because}"
        )
        if r.latency is not None and r.default_latency is not None:
            c.print(
                f"estimated model latency (weighted sum of kernel times): default "
                f"{_ms(r.default_latency)} ms, tuned {_ms(r.latency)} ms "
                f"({speed(r.latency, r.default_latency)})"
            )
        if isinstance(end_to_end, tuple):
            default, tuned = end_to_end
            c.print(
                f"measured end to end, this process: default schedules {_ms(default)} ms, "
                f"tuned {_ms(tuned)} ms ({speed(tuned, default)})"
            )
        elif end_to_end:
            c.print(f"not measured end to end: {end_to_end}")
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
        if not self.console.is_terminal:  # the last frame ends without a newline there
            self.console.line()


def _percent(share: float | None) -> str:
    return f"{100 * share:.1f}%" if share is not None else "-"
