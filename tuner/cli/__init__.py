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
import sys

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    """Every command, each module adding its own by ``add_commands(subparsers)``."""
    from . import logs, merge, model, op, tune_model

    parser = argparse.ArgumentParser(
        prog="tuner", description="Schedule-search autotuner for deep-learning operators."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for commands in (op, logs, model, tune_model, merge):
        commands.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    ns = _parser().parse_args(argv)
    try:
        return int(ns.func(ns))
    except KeyboardInterrupt as exc:
        from ..measure import Terminated

        why = "stopped (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        print(f"tuner: {why}; the log keeps every measurement made so far", file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    except (ValueError, OSError, ImportError) as exc:  # a TypeError is a bug: its traceback
        print(f"tuner: error: {exc}", file=sys.stderr)
        return 1
