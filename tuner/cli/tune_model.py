"""The ``tuner tune-model`` command: tune every task of an ONNX model under one trial budget.

    tuner tune-model resnet50.onnx --trials 2000 --log tune.jsonl   # Ctrl-C keeps the log; rerun to resume
    tuner tune-model model.onnx --trials 500 --storage postgresql+psycopg://tuner@db/tuning

The live display (``tuner.cli.progress.ModelTuneDisplay``) shows the whole run and
the task being tuned; the summary is a table per task.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

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
    with ModelTuneDisplay(out, title, ns.trials, min(resumed, ns.trials)) as display:
        result = tune_model(
            ns.model, opts, scheduler=ns.scheduler, shapes=shapes, progress=display.update
        )
    display.summary(result, ns.log)
    rows = [
        {
            "task": t.key,
            "ops": t.ops,
            "weight": t.weight,
            "trials": t.trials,
            "measured": t.measured,
            "default_ms": t.default_seconds * 1e3 if t.default_seconds is not None else None,
            "best_ms": t.best_seconds * 1e3 if t.best_seconds is not None else None,
            "share": result.share(t),
        }
        for t in result.tasks
    ]
    doc = {
        "model": str(ns.model),
        "log": str(ns.log),
        "budget": result.budget,
        "measured": result.measured,
        "resumed": result.resumed,
        "errors": result.errors,
        "elapsed_s": round(result.elapsed, 3),
        "stopped_because": result.stopped_because,
        "latency_ms": result.latency * 1e3 if result.latency is not None else None,
        "default_latency_ms": (
            result.default_latency * 1e3 if result.default_latency is not None else None
        ),
        "tasks": rows,
    }
    emit(ns, doc, rows, lambda: None)
    return 0


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
        trials_help="trials for the whole model, those already in the log included",
        early_stopping_help=f"a task that has not improved in N trials drops out (default {PATIENCE})",
    )
    p.add_argument("--scheduler", default="gradient", help="task scheduler (default gradient)")
    add_shape_flag(p)
    add_format_flags(p, "the summary")
    p.set_defaults(func=cmd_tune_model)
