"""The ``tuner`` command.

``tuner demo`` builds matmul schedules written by hand (the tuning loop that
searches for them comes with ``tuner tune``), checks each against NumPy,
times it beside NumPy and appends every measurement to a tuning log.
Errors a user can cause end in one line and a non-zero exit.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path


def _schedules(n: int):  # type: ignore[no-untyped-def]
    from search_spaces import matmul

    from .te import create_schedule

    def ikj():  # type: ignore[no-untyped-def]
        A, B, C = matmul.define(n, n, n)
        s = create_schedule(C)
        i, j = s[C].op.axis
        (k,) = s[C].op.reduce_axis
        s[C].reorder(i, k, j)
        return s, [A, B, C]

    def default():  # type: ignore[no-untyped-def]
        return matmul.schedule(matmul.default_config(n, n, n), n, n, n)

    return {"ikj": ikj, "template_default": default}


def demo(args: argparse.Namespace) -> int:
    import numpy as np
    from rich.console import Console
    from rich.table import Table

    from records import ErrorKind, LogWriter, Record

    from . import build
    from .target import Target
    from .workload import Workload

    n = args.size
    target = Target.from_name("cpu")
    workload = Workload.make("matmul", M=n, N=n, K=n, dtype="float32")
    rng = np.random.default_rng(0)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    ref = a @ b
    console = Console()
    table = Table(
        title=f"matmul {n}x{n}x{n} float32 on {target.cap('model')} ({target.cap('cores')} cores)"
    )
    for col in ("schedule", "GFLOP/s", "x NumPy", "build s"):
        table.add_column(col, justify="right" if col != "schedule" else "left")
    np_times: list[float] = []
    rows: list[tuple[str, float, float]] = []
    with LogWriter(args.log) as log:
        for trial, (name, make) in enumerate(_schedules(n).items()):
            s, tensors = make()
            t0 = time.perf_counter()
            kern = build(s, tensors, target=target)
            build_s = time.perf_counter() - t0
            c = np.empty_like(ref)
            kern(a, b, c)
            ok = bool(np.allclose(c, ref, rtol=1e-3, atol=1e-3))
            samples = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                np.matmul(a, b, out=ref)
                np_times.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                kern(a, b, c)
                samples.append(time.perf_counter() - t0)
            med = statistics.median(samples)
            log.write(
                Record.make(
                    workload,
                    target,
                    {"schedule": name},
                    samples=tuple(samples),
                    error_kind=ErrorKind.OK if ok else ErrorKind.WRONG_ANSWER,
                    build_seconds=build_s,
                    run_seconds=sum(samples),
                    strategy="hand-written",
                    trial=trial,
                    flops=2.0 * n**3,
                    extra={"trace": s.to_json()},
                )
            )
            rows.append((name, med, build_s))
    np_med = statistics.median(np_times)  # NumPy was timed between the kernels' runs
    for name, med, build_s in rows:
        table.add_row(name, f"{2 * n**3 / med / 1e9:.1f}", f"{np_med / med:.2f}", f"{build_s:.2f}")
    table.add_row("numpy", f"{2 * n**3 / np_med / 1e9:.1f}", "1.00", "-")
    console.print(table)
    console.print(f"appended {len(rows)} records to {args.log}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tuner", description="Schedule-search autotuner for deep-learning operators."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "demo", help="build hand-written matmul schedules, time them beside NumPy, log them"
    )
    p.add_argument("--size", type=int, default=512, help="matmul extent (M = N = K), default 512")
    p.add_argument("--repeat", type=int, default=5, help="timed runs per schedule")
    p.add_argument(
        "--log", type=Path, default=Path("tuner-demo.jsonl"), help="tuning log to append to"
    )
    p.set_defaults(func=demo)
    args = parser.parse_args(argv)
    if getattr(args, "size", 1) < 1 or getattr(args, "repeat", 1) < 1:
        print("tuner: error: --size and --repeat must be positive", file=sys.stderr)
        return 2
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("tuner: interrupted; the log keeps every measurement made so far", file=sys.stderr)
        return 130
    except (ValueError, TypeError, OSError) as exc:
        print(f"tuner: error: {exc}", file=sys.stderr)
        return 1
