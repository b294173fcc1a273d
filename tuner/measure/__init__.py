"""Measurement: build candidates in parallel worker processes, time them one at a time.

A candidate crosses process boundaries as data (operator name, arguments,
config, target), never as code. Builds run in a ``spawn`` pool with one
Numba thread each and a build timeout; the compiled kernel lands in the disk
cache. Runs happen in one isolated runner process, restarted when a
candidate crashes or hangs it, which loads the kernel from the cache, checks
its output against the NumPy reference once and times it.

>>> with Measurer(MeasureOptions(jobs=2)) as m:
...     results = m.measure([Candidate("matmul", args, cfg, target)])
"""

from ._signals import Terminated
from ._types import Candidate, MeasureOptions, MeasureResult, OnResult
from .measurer import Measurer
from .replay import ReplayMeasurer

__all__ = [
    "Candidate",
    "MeasureOptions",
    "MeasureResult",
    "Measurer",
    "OnResult",
    "ReplayMeasurer",
    "Terminated",
]
