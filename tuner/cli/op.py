"""``tuner tune``, ``tuner build`` and ``tuner ops``: one operator's schedules, searched or built."""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path
from typing import Any

from .options import add_search_flags, positive, unlimited
from .output import add_format_flags, console, emit, to_stdout
from .text import milliseconds, speed

__all__ = ["add_commands"]


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
    from search_spaces import get_operator

    from ..measure import Measurer
    from ..target import Target
    from ..tuning.shared_model import SharedCostModel
    from ..tuning.tune import tune
    from .options import check_search_flags, tune_options
    from .progress import TuneDisplay

    opts = tune_options(ns, transfer_from=tuple(ns.transfer_from), baseline=not ns.no_baseline)
    # Check what the user typed before drawing a progress bar.
    template = get_operator(ns.op)
    shapes = _shapes(template, ns.args)
    parsed = [template.parse_args(args) for args in shapes]
    check_search_flags(ns)
    for path in ns.transfer_from:
        if not path.exists():
            raise FileNotFoundError(f"transfer log {path} does not exist")
    out = console(stderr=True)
    if len(shapes) == 1:
        traffic = template.bytes_moved(parsed[0]) if template.bytes_moved is not None else None
        title = f"{ns.op} {' '.join(ns.args)}"
        with TuneDisplay(out, title, ns.trials, bytes_moved=traffic) as display:
            result = tune(ns.op, shapes[0], opts, progress=display.update)
        display.summary(result, ns.log)
        row = tune_row(result)
        emit(ns, {**row, "log": str(ns.log)}, [row], lambda: None)
        return 0
    # Several shapes: one measurer, and one cost model that every shape teaches.
    target = Target.from_name(ns.target, num_threads=ns.threads)
    shared = SharedCostModel(opts.strategy, seed=opts.seed) if opts.strategy == "xgb" else None
    each = f"{ns.time_limit:g} s" if unlimited(ns.trials) else f"{ns.trials} trials"
    out.print(f"{len(shapes)} shapes of {ns.op}, {each} each")
    rows: list[dict[str, Any]] = []
    with Measurer(opts.measure, threads=target.threads) as measurer:
        for i, (args, typed) in enumerate(zip(shapes, parsed, strict=True)):
            traffic = template.bytes_moved(typed) if template.bytes_moved is not None else None
            title = f"{ns.op} {' '.join(f'{k}={v}' for k, v in args.items())}"
            with TuneDisplay(out, title, ns.trials, bytes_moved=traffic) as display:
                result = tune(
                    ns.op,
                    args,
                    opts,
                    progress=display.update,
                    measurer=measurer,
                    shared=(shared, i) if shared is not None else None,
                )
            display.summary(result, ns.log)
            rows.append(tune_row(result))
    emit(ns, {"log": str(ns.log), "results": rows}, rows, lambda: None)
    return 0


def tune_row(r: Any) -> dict[str, Any]:
    """A tune's result as ``--json`` and ``--csv`` give it (the summary's figures)."""
    best = r.best
    return {
        "workload": r.workload.key,
        "target": str(r.target),
        "measured": r.measured,
        "resumed": r.resumed,
        "errors": r.errors,
        "elapsed_s": round(r.elapsed, 3),
        "stopped_because": r.stopped_because,
        "best_trial": best.trial if best is not None else None,
        "best_ms": best.median * 1e3 if best is not None else None,
        "best_iqr_ms": best.iqr * 1e3 if best is not None else None,
        "best_gflops": best.gflops if best is not None else None,
        "best_config": best.config if best is not None else None,
        "numpy_ms": r.numpy_seconds * 1e3 if r.numpy_seconds is not None else None,
    }


def cmd_ops(ns: argparse.Namespace) -> int:
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
    console().print(table)
    return 0


def cmd_build(ns: argparse.Namespace) -> int:
    import warnings

    import numpy as np

    from search_spaces import get_operator

    from ..kernels import BestRecords
    from ..kernels.op import build_op
    from ..lower.lower import lower
    from ..measure.interleave import interleaved, medians

    out = console(stderr=to_stdout(ns))
    template = get_operator(ns.op)
    args = template.parse_args(_kv(ns.args))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f = build_op(ns.op, target=ns.target, records=BestRecords(ns.log), **args)
    for w in caught:
        out.print(f"[yellow]warning:[/] {w.message}")
    if ns.source:
        sched, tensors = template.schedule(f.config, args, f.kernel.target)
        out.print(str(lower(sched, tensors)), highlight=False, markup=False)
    inputs = template.make_inputs(args, target=f.kernel.target)
    expected = template.reference(*inputs, **args)
    got = f(*inputs)
    if not np.allclose(got, expected, rtol=1e-3, atol=1e-3):
        raise ValueError(
            f"the built kernel disagrees with NumPy (max error {np.abs(got - expected).max():.3g})"
        )
    times = medians(
        interleaved(
            {"built": lambda: f(*inputs), "numpy": lambda: template.reference(*inputs, **args)},
            rounds=ns.repeat,
        )
    )
    a, b = times["built"], times["numpy"]
    rec = f.record
    row: dict[str, Any] = {
        "workload": f.workload.key,
        "record_trial": rec.trial if rec is not None else None,
        "record_ms": rec.median * 1e3 if rec is not None else None,
        "record_iqr_ms": rec.iqr * 1e3 if rec is not None else None,
        "built_ms": a * 1e3,
        "numpy_ms": b * 1e3,
        "rounds": ns.repeat,
        "config": dict(f.config),
    }
    if rec is not None:
        logged = milliseconds(rec.median, rec.iqr)
        source = f"record of trial {rec.trial} ({logged} ms in the log, {len(rec.samples)} samples)"
    else:
        source = "the default schedule"

    def show() -> None:
        out.print(f"{f.workload.key}: built from {source}; matches NumPy")
        out.print(
            f"median of {ns.repeat} rounds here: built {a * 1e3:.3f} ms, NumPy {b * 1e3:.3f} ms "
            f"({speed(a, b, 'NumPy')})"
        )

    emit(ns, row, [row], show)
    return 0


def add_commands(sub: Any) -> None:
    """Add ``tune``, ``build`` and ``ops`` to the ``tuner`` command's subparsers."""
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
    add_format_flags(p, "the summary")
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser(
        "build", help="build the best record of a log, check it against NumPy, time both"
    )
    p.add_argument("op")
    p.add_argument("args", nargs="*", metavar="NAME=VALUE")
    p.add_argument("--log", type=Path, required=True, help="tuning log or a folder of logs")
    p.add_argument("--target", default="cpu")
    p.add_argument("--repeat", type=positive(int), default=10)
    p.add_argument("--source", action="store_true", help="print the kernel's loop nest")
    add_format_flags(p, "the record and the timing")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("ops", help="list the operators and their arguments")
    p.set_defaults(func=cmd_ops)
