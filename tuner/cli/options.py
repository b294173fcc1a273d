"""Flags that ``tuner tune`` and ``tuner tune-model`` share, and the ``TuneOptions`` they make.

Both commands search with the same machinery (strategy, log, storage,
measurer), so they take the same flags with the same meaning; only the
budget's default and what "early stopping" drops (the search, or one task)
differ.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..tuning.tune import TuneOptions

__all__ = ["add_search_flags", "check_search_flags", "count", "positive", "tune_options"]


def count(text: str) -> int:
    """An argparse type: an int >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an int") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
    return value


def positive(kind: type) -> Any:
    """An argparse type: a ``kind`` (int or float) > 0."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind.__name__}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be positive")
        return value

    return parse


def add_shape_flag(p: argparse.ArgumentParser) -> None:
    """``--shape NAME=D1,D2,...`` (repeatable): the dimensions of an input with symbolic ones."""
    p.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=D1,D2,...",
        help="dimensions of an input with symbolic ones (repeatable)",
    )


def add_search_flags(
    p: argparse.ArgumentParser, *, trials: int, trials_help: str, early_stopping_help: str
) -> None:
    """The flags of a search: budget, strategy, log, storage, measurement."""
    p.add_argument("--target", default="cpu", help="target kind (default cpu)")
    p.add_argument(
        "--trials",
        type=positive(int),
        default=None,
        help=f"{trials_help} (default {trials}; with --time-limit and no --trials, no trial "
        "limit: the time decides)",
    )
    p.set_defaults(default_trials=trials)
    p.add_argument(
        "--time-limit", type=positive(float), default=None, help="stop after this many seconds"
    )
    p.add_argument("--strategy", default="xgb", help="search strategy (default xgb)")
    p.add_argument(
        "--log", type=Path, default=Path("tune.jsonl"), help="tuning log (default tune.jsonl)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=positive(int), default=2, help="parallel build processes")
    p.add_argument("--batch", type=positive(int), default=8, help="candidates per round")
    p.add_argument(
        "--threads",
        type=positive(int),
        default=None,
        help="threads per kernel (default: all cores)",
    )
    p.add_argument(
        "--early-stopping",
        type=positive(int),
        default=None,
        metavar="N",
        help=early_stopping_help,
    )
    p.add_argument(
        "--retime",
        type=count,
        default=3,
        metavar="N",
        help="at the end, measure the N fastest configs again and judge each on all its samples (0: off)",
    )
    p.add_argument(
        "--storage",
        default=None,
        help="Optuna storage that keeps the study of every trial, one per task and machine: "
        "postgresql+psycopg://USER@HOST/DB (many machines), journal:PATH (many processes on one), "
        "sqlite:///PATH; workers given the same one share the study, its trials and the budget",
    )
    p.add_argument(
        "--claim-timeout",
        type=positive(float),
        default=60.0,
        metavar="SECONDS",
        help="with --storage: a worker silent this long has its claimed configs measured by others (default 60)",
    )


#: The trial budget of a run given ``--time-limit`` and no ``--trials``: none, the time decides.
NO_TRIAL_LIMIT = 10**9


def unlimited(budget: int) -> bool:
    """Whether ``budget`` is :data:`NO_TRIAL_LIMIT` (a display then shows no trial total)."""
    return budget >= NO_TRIAL_LIMIT


def settle_trials(ns: argparse.Namespace) -> int:
    """The run's trial budget, kept in ``ns.trials``: ``--trials``, else the command's
    default, except that ``--time-limit`` alone sets none (a user who says "900 seconds"
    means them all; the default 200 trials took ResNet-50 two minutes)."""
    if ns.trials is None:
        ns.trials = ns.default_trials if ns.time_limit is None else NO_TRIAL_LIMIT
    return int(ns.trials)


def check_search_flags(ns: argparse.Namespace) -> None:
    """Raise the one-line error for a flag that names nothing: strategy, target, storage
    (and settle the trial budget, :func:`settle_trials`)."""
    from ..search import StrategyError, strategies
    from ..target import Target

    settle_trials(ns)

    if ns.strategy not in strategies():
        raise StrategyError(
            f"unknown strategy {ns.strategy!r}; known strategies: {', '.join(strategies())}"
        )
    Target.from_name(ns.target, num_threads=ns.threads)
    if ns.storage is not None:
        from ..search.storage import open_storage

        open_storage(ns.storage)  # a bad URL or a server that is not there: one line


def tune_options(ns: argparse.Namespace, **extra: Any) -> TuneOptions:
    """The ``TuneOptions`` the flags of :func:`add_search_flags` say, plus ``extra`` fields."""
    from ..measure import MeasureOptions
    from ..tuning.tune import TuneOptions

    return TuneOptions(
        trials=settle_trials(ns),
        time_limit=ns.time_limit,
        strategy=ns.strategy,
        log=ns.log,
        seed=ns.seed,
        batch=ns.batch,
        early_stopping=ns.early_stopping,
        target=ns.target,
        threads=ns.threads,
        storage=ns.storage,
        claim_timeout=ns.claim_timeout,
        measure=MeasureOptions(jobs=ns.jobs),
        retime=ns.retime,
        **extra,
    )
