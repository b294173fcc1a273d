"""The ``tuner tune-model`` command: tune every task of an ONNX model under one trial budget.

    tuner tune-model resnet50.onnx --time-limit 900 --log tune.jsonl   # Ctrl-C keeps the log
    tuner tune-model resnet50.onnx --trials 500 --log tune.jsonl       # 500 more, resumed
    tuner tune-model model.onnx --trials 500 --storage postgresql+psycopg://tuner@db/tuning

``--trials`` counts this run's trials, as ``tuner tune``'s does. The live display
(``tuner.cli.progress.ModelTuneDisplay``) shows the whole run and the task being
tuned; the summary is a table per task with its share of the model before and
after, then the module itself, compiled with the default schedules and with the
log, measured end to end in this process (``--no-end-to-end`` skips that).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .options import unlimited
from .output import add_format_flags, console, emit

__all__ = ["add_commands"]


def cmd_tune_model(ns: argparse.Namespace) -> int:
    from ..target import Target
    from ..tuning.scheduler import SchedulerError, schedulers
    from ..tuning.tune_model import model_tasks, trials_in_log, tune_model
    from .model import _shapes
    from .options import check_search_flags, tune_options
    from .progress import ModelTuneDisplay

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
    out = console(stderr=True)
    kernels = sum(t.weight for t in tasks)
    out.print(
        f"{ns.model}: {len(tasks)} tasks over {kernels} kernels on {target}; "
        f"{resumed} trials in {ns.log} already"
    )
    title = f"{ns.model.name} ({ns.scheduler})"
    with ModelTuneDisplay(out, title, ns.trials, len(tasks), ns.time_limit) as display:
        result = tune_model(
            ns.model, opts, scheduler=ns.scheduler, shapes=shapes, progress=display.update
        )
    end_to_end = _end_to_end(ns, shapes, target, out) if ns.end_to_end else None
    display.summary(result, ns.log, end_to_end)
    rows = [
        {
            "task": t.key,
            "ops": t.ops,
            "weight": t.weight,
            "trials": t.trials,
            "measured": t.measured,
            "default_ms": t.default_seconds * 1e3 if t.default_seconds is not None else None,
            "best_ms": t.best_seconds * 1e3 if t.best_seconds is not None else None,
            "share_before": result.share_before(t),
            "share": result.share(t),
        }
        for t in result.tasks
    ]
    doc = {
        "model": str(ns.model),
        "log": str(ns.log),
        "budget": None if unlimited(result.budget) else result.budget,
        "measured": result.measured,
        "resumed": result.resumed,
        "errors": result.errors,
        "elapsed_s": round(result.elapsed, 3),
        "stopped_because": result.stopped_because,
        "latency_ms": result.latency * 1e3 if result.latency is not None else None,
        "default_latency_ms": (
            result.default_latency * 1e3 if result.default_latency is not None else None
        ),
        "default_measured_ms": (end_to_end[0] * 1e3 if isinstance(end_to_end, tuple) else None),
        "tuned_measured_ms": end_to_end[1] * 1e3 if isinstance(end_to_end, tuple) else None,
        "tasks": rows,
    }
    emit(ns, doc, rows, lambda: None)
    return 0


def _end_to_end(
    ns: argparse.Namespace, shapes: Any, target: Any, out: Any
) -> tuple[float, float] | str:
    """The module compiled with the default schedules and with the log, timed in interleaved
    rounds in this process: seconds per run of each, or why they were not timed."""
    from ..measure.interleave import interleaved, medians
    from ..model import compile_model
    from .model import _inputs

    if not ns.log.exists():
        return "the log holds no measurement"
    out.print("timing the module end to end, default schedules against tuned ...")
    default = compile_model(ns.model, None, shapes=shapes, target=target)
    tuned = compile_model(ns.model, ns.log, shapes=shapes, target=target)
    feeds = _inputs(default, seed=0)
    times = medians(
        interleaved({"default": lambda: default.run(feeds), "tuned": lambda: tuned.run(feeds)}, 5)
    )
    return times["default"], times["tuned"]


def add_commands(sub: Any) -> None:
    """Add ``tune-model`` to the ``tuner`` command's subparsers."""
    from ..tuning.tune_model import PATIENCE
    from .options import add_search_flags, add_shape_flag

    p = sub.add_parser(
        "tune-model",
        help="tune every task of an ONNX model under one trial budget (resumable)",
    )
    p.add_argument("model", type=Path, help="an .onnx file")
    add_search_flags(
        p,
        trials=200,
        trials_help="trials this run, over the whole model (a resumed run measures this many "
        "more; --time-limit may stop it first)",
        early_stopping_help=f"a task that has not improved in N trials drops out (default {PATIENCE})",
    )
    p.add_argument("--scheduler", default="gradient", help="task scheduler (default gradient)")
    p.add_argument(
        "--end-to-end",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="after tuning, time the module with the default schedules and tuned, "
        "in this process (default on)",
    )
    add_shape_flag(p)
    add_format_flags(p, "the summary")
    p.set_defaults(func=cmd_tune_model)
