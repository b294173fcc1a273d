"""Kernels built from tuning logs: ``build_task`` and the ``OpKernel`` it returns.

>>> with tuner.apply_best("tune.jsonl"):
...     f = tuner.build_op("matmul", M=512, N=512, K=512)
>>> c = f(a, b)

Which record a task is built with is :mod:`tuner.kernels.resolve`'s answer; this
module schedules it and builds the kernel, from the on-disk kernel index when
this very schedule was built before. ``build_op`` (``tuner.kernels.op``) is the
entry point above this module and ``tuner.kernels.dynamic``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from records import Record

from ..codegen import Kernel, build
from ..codegen.backend import check_output
from ..codegen.index import indexed
from ..lower.lower import LoweredFunc, lower
from ..schedule import Schedule
from ..task import Task
from ..te import Tensor
from ..workload import Workload
from .resolve import BestRecords, resolve

__all__ = ["OpKernel", "build_task"]


class OpKernel:
    """An operator built for one workload: ``f(*inputs)`` returns the output array.

    ``record`` is the record it was built from (None: the default schedule);
    ``record.target`` says which machine and thread count it was timed on.
    ``replayed`` is True when the schedule was rebuilt from the record's trace.
    """

    def __init__(
        self,
        workload: Workload,
        kernel: Kernel,
        config: dict[str, Any],
        record: Record | None,
        replayed: bool = False,
    ):
        self.workload, self.kernel, self.config, self.record = workload, kernel, config, record
        self.replayed = replayed

    @property
    def source(self) -> str:
        return self.kernel.source

    def __call__(self, *inputs: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """The output for ``inputs``: written into ``out`` when given, else a new array.

        A loop that reuses ``out`` pays no allocation per call (fresh pages
        fault in on first touch, which a small kernel notices).
        """
        buf = self.kernel.args[-1]
        arrays = [np.ascontiguousarray(a) for a in inputs]
        if out is None:
            out = np.empty(buf.shape, buf.dtype)
        else:
            check_output(out, buf.shape, buf.dtype, "out", arrays)
        self.kernel(*arrays, out)
        return out


def build_task(task: Task, records: BestRecords | None = None, out_pitch: int = 0) -> OpKernel:
    """Build ``task`` with the record :func:`tuner.kernels.resolve.resolve` chooses in ``records``
    (or those in scope), else its default; the choice's warnings point at ``build_op``'s caller.

    What ``tuner.kernels.op.build_op`` does once the task is made; a model's kernels are built
    here, one per task. ``out_pitch``: the output's rows lie that many elements apart (a slice
    of a concatenation written in place, ``tuner.model.inplace``).
    """
    choice = resolve(task, records)
    choice.warn(stacklevel=3)
    sched, tensors = choice.replayed or task.schedule(choice.config)
    kernel = _build(task, sched, tensors, out_pitch)
    return OpKernel(
        task.workload, kernel, choice.config, choice.record, choice.replayed is not None
    )


def _build(task: Task, sched: Schedule, tensors: list[Tensor], out_pitch: int = 0) -> Kernel:
    """The schedule's kernel, from the kernel index when this very schedule was built before.

    The schedule's identity is its task and its trace (the steps it is made
    of), so a config and a replayed trace that make the same schedule share it.
    """
    identity = f"{task.key}\n{sched.dumps()}" + (f"\npitch={out_pitch}" if out_pitch else "")

    def relower() -> LoweredFunc:
        func = lower(sched, tensors, "kernel", target=task.target)
        return func.with_output_pitch(out_pitch) if out_pitch else func

    return indexed(
        identity,
        lambda: build(sched, tensors, target=task.target, out_pitch=out_pitch),
        task.target,
        relower=relower,
    )
