"""The ``tuner`` command: tune operators, inspect tuning logs, build the best.

    tuner tune matmul M=512 N=512 K=512 --trials 64
    tuner ops
    tuner best tune.jsonl
    tuner show tune.jsonl --top 10
    tuner build matmul M=512 N=512 K=512 --log tune.jsonl
    tuner compile model.onnx --log tune.jsonl
    tuner run model.onnx --log tune.jsonl --compare onnxruntime
    tuner tune-model model.onnx --trials 2000 --log tune.jsonl
    tuner merge tune.jsonl worker-a.jsonl worker-b.jsonl

Errors a user can cause end in one line and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import Any

from .cli_options import add_search_flags, positive

__all__ = ["main"]


def _kv(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"expected NAME=VALUE, got {item!r}")
        out[name] = value
    return out


def _shapes(template: Any, items: list[str]) -> list[dict[str, str]]:
    """``NAME=VALUE`` arguments, an integer argument's ``V1,V2,...`` expanded: one dict per shape.

    Several lists give every combination, in the order they were typed.
    """
    kinds = {p.name: p.kind for p in template.params}
    choices = []
    for name, value in _kv(items).items():
        values = value.split(",") if kinds.get(name) is int and "," in value else [value]
        if any(not v for v in values):
            raise ValueError(f"{name}={value}: a list of values takes no empty item")
        choices.append([(name, v) for v in values])
    return [dict(combo) for combo in itertools.product(*choices)]


def cmd_tune(ns: argparse.Namespace) -> int:
    from rich.console import Console

    from search_spaces import get_operator

    from .cli_options import check_search_flags, tune_options
    from .measure import Measurer
    from .progress import TuneDisplay
    from .shared_model import SharedCostModel
    from .target import Target
    from .tune import tune

    opts = tune_options(ns, transfer_from=tuple(ns.transfer_from), baseline=not ns.no_baseline)
    # Check what the user typed before drawing a progress bar.
    template = get_operator(ns.op)
    shapes = _shapes(template, ns.args)
    parsed = [template.parse_args(args) for args in shapes]
    check_search_flags(ns)
    for path in ns.transfer_from:
        if not path.exists():
            raise FileNotFoundError(f"transfer log {path} does not exist")
    console = Console(stderr=True)
    if len(shapes) == 1:
        traffic = template.bytes_moved(parsed[0]) if template.bytes_moved is not None else None
        title = f"{ns.op} {' '.join(ns.args)}"
        with TuneDisplay(console, title, ns.trials, bytes_moved=traffic) as display:
            result = tune(ns.op, shapes[0], opts, progress=display.update)
        display.summary(result, ns.log)
        return 0
    # Several shapes: one measurer, and one cost model that every shape teaches.
    target = Target.from_name(ns.target, num_threads=ns.threads)
    shared = SharedCostModel(opts.strategy, seed=opts.seed) if opts.strategy == "xgb" else None
    console.print(f"{len(shapes)} shapes of {ns.op}, {ns.trials} trials each")
    with Measurer(opts.measure, threads=target.threads) as measurer:
        for i, (args, typed) in enumerate(zip(shapes, parsed, strict=True)):
            traffic = template.bytes_moved(typed) if template.bytes_moved is not None else None
            title = f"{ns.op} {' '.join(f'{k}={v}' for k, v in args.items())}"
            with TuneDisplay(console, title, ns.trials, bytes_moved=traffic) as display:
                result = tune(
                    ns.op,
                    args,
                    opts,
                    progress=display.update,
                    measurer=measurer,
                    shared=(shared, i) if shared is not None else None,
                )
            display.summary(result, ns.log)
    return 0


def cmd_ops(ns: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from search_spaces import operators

    table = Table(title="operators")
    table.add_column("operator")
    table.add_column("arguments (NAME=VALUE)")
    table.add_column("computes")
    for op in operators():
        params = []
        for p in op.params:
            text = p.name if p.default is None else f"{p.name}={p.default}"
            if p.choices:
                text += f" ({'|'.join(map(str, p.choices))})"
            params.append(text)
        table.add_row(op.name, " ".join(params), op.doc)
    Console().print(table)
    return 0


def cmd_best(ns: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from records import best_by_workload, load

    table = Table(title=f"best records in {ns.log}")
    for col in ("workload", "target", "GFLOP/s", "median ms", "trial", "config"):
        table.add_column(col)
    for (key, kind), rec in sorted(best_by_workload(load(ns.log)).items()):
        gf = f"{rec.gflops:.1f}" if rec.gflops else "-"
        table.add_row(key, kind, gf, f"{rec.median * 1e3:.3f}", str(rec.trial), str(rec.config))
    Console().print(table)
    return 0


def cmd_show(ns: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from records import load, target_label

    recs = load(ns.log)
    ok = sorted((r for r in recs if r.ok), key=lambda r: r.median)[: ns.top]
    errors: dict[str, int] = {}
    for r in recs:
        if not r.ok:
            errors[r.error_kind.value] = errors.get(r.error_kind.value, 0) + 1
    table = Table(title=f"{ns.log}: {len(recs)} records, top {len(ok)}")
    for col in ("trial", "workload", "target", "strategy", "GFLOP/s", "median ms", "config"):
        table.add_column(col)
    for r in ok:
        gf = f"{r.gflops:.1f}" if r.gflops else "-"
        table.add_row(
            str(r.trial),
            r.workload.key,
            target_label(r.target),
            r.strategy,
            gf,
            f"{r.median * 1e3:.3f}",
            str(r.config),
        )
    console = Console()
    console.print(table)
    if errors:
        console.print("errors: " + ", ".join(f"{k} {v}" for k, v in sorted(errors.items())))
    return 0


def cmd_build(ns: argparse.Namespace) -> int:
    import warnings

    import numpy as np
    from rich.console import Console

    from search_spaces import get_operator

    from .compile import BestRecords
    from .lower.lower import lower
    from .measure.interleave import interleaved, medians
    from .op import build_op

    console = Console()
    template = get_operator(ns.op)
    args = template.parse_args(_kv(ns.args))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f = build_op(ns.op, target=ns.target, records=BestRecords(ns.log), **args)
    for w in caught:
        console.print(f"[yellow]warning:[/] {w.message}")
    sched, tensors = template.schedule(f.config, args, f.kernel.target)
    console.print(str(lower(sched, tensors)), highlight=False, markup=False)
    inputs = template.make_inputs(args, target=f.kernel.target)
    expected = template.reference(*inputs, **args)
    out = f(*inputs)
    if not np.allclose(out, expected, rtol=1e-3, atol=1e-3):
        raise ValueError(
            f"the built kernel disagrees with NumPy (max error {np.abs(out - expected).max():.3g})"
        )
    times = medians(
        interleaved(
            {"tuned": lambda: f(*inputs), "numpy": lambda: template.reference(*inputs, **args)},
            rounds=ns.repeat,
        )
    )
    a, b = times["tuned"], times["numpy"]
    source = f"record of trial {f.record.trial}" if f.record else "the default schedule"
    console.print(f"{f.workload.key}: built from {source}; matches NumPy")
    console.print(
        f"median of {ns.repeat}: tuned {a * 1e3:.3f} ms, NumPy {b * 1e3:.3f} ms ({b / a:.2f}x NumPy)"
    )
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tuner", description="Schedule-search autotuner for deep-learning operators."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "tune", help="search an operator's schedules; append every measurement to a log"
    )
    p.add_argument("op", help="operator name (see 'tuner ops')")
    p.add_argument(
        "args",
        nargs="*",
        metavar="NAME=VALUE",
        help="operator arguments; an integer one may be a list (M=64,128,256): each shape is "
        "tuned in turn, sharing the measurer and the cost model",
    )
    add_search_flags(
        p,
        trials=64,
        trials_help="candidates to measure (per shape)",
        early_stopping_help="stop after N trials without improvement",
    )
    p.add_argument(
        "--no-baseline",
        action="store_true",
        help="do not time the NumPy reference at the end (it is shown beside the best)",
    )
    p.add_argument(
        "--transfer-from",
        type=Path,
        action="append",
        default=[],
        metavar="LOG",
        help="warm-start the cost model from other workloads' records in LOG (a file or folder; repeatable)",
    )
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser(
        "build", help="build the best record of a log, check it against NumPy, time both"
    )
    p.add_argument("op")
    p.add_argument("args", nargs="*", metavar="NAME=VALUE")
    p.add_argument("--log", type=Path, required=True, help="tuning log or a folder of logs")
    p.add_argument("--target", default="cpu")
    p.add_argument("--repeat", type=positive(int), default=10)
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("ops", help="list the operators and their arguments")
    p.set_defaults(func=cmd_ops)
    p = sub.add_parser("best", help="the best record per workload and target in a log")
    p.add_argument("log", type=Path)
    p.set_defaults(func=cmd_best)
    p = sub.add_parser("show", help="the fastest records of a log and its error counts")
    p.add_argument("log", type=Path)
    p.add_argument("--top", type=positive(int), default=10)
    p.set_defaults(func=cmd_show)

    from .cli_model import add_commands

    add_commands(sub, positive)
    from .cli_merge import add_command as add_merge

    add_merge(sub)
    from .cli_tune_model import add_command as add_tune_model

    add_tune_model(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    ns = _parser().parse_args(argv)
    try:
        return int(ns.func(ns))
    except KeyboardInterrupt as exc:
        from .measure import Terminated

        why = "stopped (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        print(f"tuner: {why}; the log keeps every measurement made so far", file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    except (ValueError, OSError, ImportError) as exc:  # a TypeError is a bug: its traceback
        print(f"tuner: error: {exc}", file=sys.stderr)
        return 1
