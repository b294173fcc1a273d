"""Compile-time use of tuning logs: build each operator with its best record.

>>> with tuner.apply_best("tune.jsonl"):
...     f = tuner.build_op("matmul", M=512, N=512, K=512)
>>> c = f(a, b)

``apply_best`` takes one log, a list of logs or a folder of them. A workload
with no record on this target gets its template's default schedule and one
warning that names it. Kernels come from the on-disk cache when built before.
"""

from __future__ import annotations

import contextlib
import contextvars
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from records import Record, best, load

from .codegen import Kernel, build
from .target import Target
from .workload import Workload

__all__ = ["BestRecords", "OpKernel", "UntunedWorkloadWarning", "apply_best", "build_op"]


class UntunedWorkloadWarning(UserWarning):
    """A workload was built with its default schedule: no record matched it."""


class BestRecords:
    """The records of some logs, queried for the best one per workload and target."""

    def __init__(self, source: str | Path | Sequence[str | Path]):
        from search_spaces import canonical_records

        self.records = canonical_records(load(source))  # type: ignore[arg-type]

    def lookup(self, workload: Workload, target: Target) -> Record | None:
        return best(self.records, workload, target)


_ACTIVE: contextvars.ContextVar[BestRecords | None] = contextvars.ContextVar(
    "tuner_best", default=None
)


@contextlib.contextmanager
def apply_best(source: str | Path | Sequence[str | Path]) -> Iterator[BestRecords]:
    """Within the block, ``build_op`` uses the best records of ``source``."""
    chosen = BestRecords(source)
    token = _ACTIVE.set(chosen)
    try:
        yield chosen
    finally:
        _ACTIVE.reset(token)


class OpKernel:
    """An operator built for one workload: ``f(*inputs)`` returns the output array."""

    def __init__(
        self, workload: Workload, kernel: Kernel, config: dict[str, Any], record: Record | None
    ):
        self.workload, self.kernel, self.config, self.record = workload, kernel, config, record

    @property
    def source(self) -> str:
        return self.kernel.source

    def __call__(self, *inputs: np.ndarray) -> np.ndarray:
        out_buf = self.kernel.args[-1]
        out = np.empty(out_buf.shape, out_buf.dtype)
        self.kernel(*(np.ascontiguousarray(a) for a in inputs), out)
        return out


def build_op(
    op: str, target: str | Target = "cpu", records: BestRecords | None = None, **args: Any
) -> OpKernel:
    """Build operator ``op`` for ``args`` with the best record in scope (or its default)."""
    from search_spaces import get_operator

    from .space import ConfigError

    template = get_operator(op)
    parsed = template.parse_args(args)
    workload = Workload.make(op, **parsed)
    tgt = Target.from_name(target) if isinstance(target, str) else target
    chosen = records or _ACTIVE.get()
    record = chosen.lookup(workload, tgt) if chosen is not None else None
    space = template.space(parsed, tgt)
    config: dict[str, Any] | None = None
    if record is not None:
        try:
            config = space.validate(record.config).to_json()
        except ConfigError as exc:
            warnings.warn(
                f"record for {workload.key} no longer fits its space ({exc}); using the default schedule",
                UntunedWorkloadWarning,
                stacklevel=2,
            )
            record = None
    if config is None:
        if record is None and chosen is not None:
            warnings.warn(
                f"no tuning record for {workload.key} on {tgt.kind}; using the default schedule",
                UntunedWorkloadWarning,
                stacklevel=2,
            )
        config = space.validate(template.default_config(parsed, tgt)).to_json()
    sched, tensors = template.schedule(config, parsed, tgt)
    return OpKernel(workload, build(sched, tensors, target=tgt), config, record)
