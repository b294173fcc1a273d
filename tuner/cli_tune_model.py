"""The ``tuner tune-model`` command: tune every task of an ONNX model under one trial budget.

    tuner tune-model resnet50.onnx --trials 2000 --log tune.jsonl   # Ctrl-C keeps the log; rerun to resume
    tuner tune-model model.onnx --trials 500 --storage postgresql+psycopg://tuner@db/tuning

The live display shows the whole run (trials done of the budget, the
model's estimated latency now and with the default schedules, ETA) and the
task being tuned (its key, weight, best time and share of the latency); the
summary is a table per task.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from .tune_model import ModelProgress, ModelTuneResult

__all__ = ["ModelTuneDisplay", "add_command"]


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1e3:.3f}" if seconds is not None else "-"


def _label(key: str, width: int = 72) -> str:
    """A task key as a table shows it: a generic fused group by its digest, not its whole text."""
    if key.startswith("fused(graph="):
        from .graph.canonical import digest

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
                f"{t.default_seconds / t.best_seconds:.2f}x"
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
                f"({r.default_latency / r.latency:.2f}x)"
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


def cmd_tune_model(ns: argparse.Namespace) -> int:
    from .cli_model import _shapes
    from .cli_options import check_search_flags, tune_options
    from .scheduler import SchedulerError, schedulers
    from .target import Target
    from .tune_model import model_tasks, trials_in_log, tune_model

    # Check what the user typed before drawing a progress bar.
    if not ns.model.exists():
        raise FileNotFoundError(f"model {ns.model} does not exist")
    check_search_flags(ns)
    if ns.scheduler not in schedulers():
        raise SchedulerError(
            f"unknown scheduler {ns.scheduler!r}; known schedulers: {', '.join(schedulers())}"
        )
    opts = tune_options(ns)
    shapes = _shapes(ns.shape)
    target = Target.from_name(ns.target, num_threads=ns.threads)
    tasks = model_tasks(ns.model, target, shapes)
    resumed = trials_in_log(tasks, opts.log)
    console = Console(stderr=True)
    kernels = sum(t.weight for t in tasks)
    console.print(
        f"{ns.model}: {len(tasks)} tasks over {kernels} kernels on {target}; "
        f"{resumed} trials in {ns.log} already"
    )
    title = f"{ns.model.name} ({ns.scheduler})"
    with ModelTuneDisplay(console, title, ns.trials, min(resumed, ns.trials)) as display:
        result = tune_model(
            ns.model, opts, scheduler=ns.scheduler, shapes=shapes, progress=display.update
        )
    display.summary(result, ns.log)
    return 0


def add_command(sub: Any) -> None:
    """Add ``tune-model`` to the ``tuner`` command's subparsers."""
    from .cli_options import add_search_flags
    from .tune_model import PATIENCE

    p = sub.add_parser(
        "tune-model",
        help="tune every task of an ONNX model under one trial budget (resumable)",
    )
    p.add_argument("model", type=Path, help="an .onnx file")
    add_search_flags(
        p,
        trials=200,
        trials_help="trials for the whole model, those already in the log included",
        early_stopping_help=f"a task that has not improved in N trials drops out (default {PATIENCE})",
    )
    p.add_argument("--scheduler", default="gradient", help="task scheduler (default gradient)")
    p.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=D1,D2,...",
        help="dimensions of an input with symbolic ones (repeatable)",
    )
    p.set_defaults(func=cmd_tune_model)
