"""Kernels built from tuning logs: one operator, a dynamic one, and the record each is built with.

- :mod:`.resolve`: the one record resolver (``resolve``) and the logs in scope
  (``apply_best``, ``BestRecords``); every path below and ``tuner.model`` asks it;
- :mod:`.kernels`: ``build_task``, a task built with its chosen record, and ``OpKernel``;
- :mod:`.dynamic`: operators over symbolic shapes, served by specializing, one
  shape-generic kernel or padded buckets;
- :mod:`.op`: ``build_op``, the entry point above both.
"""

from .dynamic import DynamicOpKernel
from .op import build_op
from .opkernel import OpKernel, build_task
from .resolve import (
    BestRecords,
    Choice,
    RecordChoiceWarning,
    UntunedWorkloadWarning,
    apply_best,
    records_in_scope,
    resolve,
)

__all__ = [
    "BestRecords",
    "Choice",
    "DynamicOpKernel",
    "OpKernel",
    "RecordChoiceWarning",
    "UntunedWorkloadWarning",
    "apply_best",
    "build_op",
    "build_task",
    "records_in_scope",
    "resolve",
]
