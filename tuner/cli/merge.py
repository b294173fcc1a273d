"""``tuner merge OUT.jsonl LOGS...``: the logs of many workers as one, trial numbers unique.

tuner merge tune.jsonl worker-a.jsonl worker-b.jsonl
tuner merge tune.jsonl logs/          # every *.jsonl of a folder
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["add_commands"]


def cmd_merge(ns: argparse.Namespace) -> int:
    from records import merge

    for path in ns.logs:
        if not path.exists():
            raise FileNotFoundError(f"log {path} does not exist")
    result = merge(ns.out, ns.logs)
    dropped = f", {result.duplicates} duplicates dropped" if result.duplicates else ""
    print(f"{ns.out}: {result.written} records from {result.read} read{dropped}")
    return 0


def add_commands(sub: Any) -> None:
    p = sub.add_parser(
        "merge",
        help="merge tuning logs (files or folders) into OUT; each measurement once, trials renumbered",
    )
    p.add_argument("out", type=Path, metavar="OUT", help="the merged log (its records are kept)")
    p.add_argument("logs", type=Path, nargs="+", metavar="LOG", help="a log or a folder of logs")
    p.set_defaults(func=cmd_merge)
