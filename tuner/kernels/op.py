"""One operator built for its arguments: ``build_op``, the entry point above both ways.

Concrete arguments make a task built once with its best record
(``tuner.kernels.opkernel.build_task``); a dimension given as a symbol makes a kernel
that serves every value of it (``tuner.kernels.dynamic.DynamicOpKernel``).

>>> with tuner.apply_best("tune.jsonl"):
...     f = tuner.build_op("matmul", M=512, N=512, K=512)
>>> c = f(a, b)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..target import Target
from ..task import Task
from ..te import Var
from .dynamic import DynamicOpKernel
from .opkernel import build_task
from .resolve import BestRecords

__all__ = ["build_op"]


def build_op(
    op: str,
    target: str | Target = "cpu",
    records: BestRecords | None = None,
    dynamic: str | None = None,
    buckets: Sequence[int] | Mapping[str, Sequence[int]] | None = None,
    at: Mapping[str, int] | None = None,
    **args: Any,
) -> Any:
    """Build operator ``op`` for ``args`` with the best record in scope (or its default).

    A dimension given as a symbol (``M=te.var("M", max=4096)``) makes the
    result a ``tuner.kernels.dynamic.DynamicOpKernel`` that serves every value of it,
    by ``dynamic``: ``"specialize"`` (the default: a kernel per shape, on first
    sight), ``"generic"`` (one kernel for all; its config is the record of the
    shape ``at``) or ``"bucket"`` (a kernel per bucket of ``buckets``, inputs
    padded).

    The record is the one measured at the thread count ``target`` runs with
    on this machine, else the nearest (see ``records.best_match``), with a
    ``RecordChoiceWarning`` for a near miss. A record whose template space
    changed since it was measured is rebuilt from its schedule trace.

    >>> f = build_op("matmul", target=Target.from_name("cpu", num_threads=1), M=64, N=64, K=64)
    >>> f.record.target.threads
    1
    """
    tgt = Target.from_name(target) if isinstance(target, str) else target
    if any(isinstance(v, Var) for v in args.values()):
        return DynamicOpKernel(op, args, tgt, dynamic or "specialize", records, buckets, at)
    if dynamic is not None:
        raise ValueError(f"dynamic={dynamic!r} needs a dimension given as a symbol (te.var)")
    return build_task(Task.make(op, args, tgt), records)
