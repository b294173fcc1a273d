"""tuner: a schedule-search autotuner for deep-learning operators.

>>> from tuner import te
>>> import tuner
>>> A = te.placeholder((64, 32), "float32", name="A")
>>> B = te.placeholder((32, 16), "float32", name="B")
>>> k = te.reduce_axis(32, name="k")
>>> C = te.compute((64, 16), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
>>> s = te.create_schedule(C)
>>> print(tuner.lower(s, [A, B, C]))        # the loop nest
>>> f = tuner.build(s, [A, B, C])           # a Numba kernel; f(a, b, c) writes c
>>> mod = tuner.compile_model("model.onnx", log="tune.jsonl")   # a whole model
>>> outs = mod.run({"input": x})
"""

from . import te
from .codegen import BuildOptions, Kernel, build
from .lower.lower import LoweredFunc, lower
from .schedule import Schedule, ScheduleError, create_schedule
from .target import Target, TargetError
from .workload import Workload

__all__ = [
    "BuildOptions",
    "Kernel",
    "LoweredFunc",
    "OpKernel",
    "RecordChoiceWarning",
    "Schedule",
    "ScheduleError",
    "Target",
    "TargetError",
    "UntunedWorkloadWarning",
    "Workload",
    "apply_best",
    "build",
    "build_op",
    "compile_model",
    "create_schedule",
    "load",
    "lower",
    "te",
]
__version__ = "0.1.0"

# The compile-time entry points sit on top of records/ and search_spaces/, which
# build on this package's core; loading them lazily keeps imports one-way.
_BUILD = {"OpKernel", "RecordChoiceWarning", "UntunedWorkloadWarning", "apply_best", "build_op"}


def __getattr__(name: str) -> object:
    if name in _BUILD:
        from . import kernels as _kernels

        return getattr(_kernels, name)
    if name == "compile_model":
        from .model import compile_model

        return compile_model
    if name == "load":
        from .model.artifact import load

        return load
    raise AttributeError(f"module 'tuner' has no attribute {name!r}")
