"""The records that pass between the tuner and its worker processes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from records import ErrorKind


@dataclass(frozen=True)
class MeasureOptions:
    """How candidates are built and timed."""

    jobs: int = 2  # build worker processes
    build_timeout: float = 120.0  # seconds per build
    run_timeout: float = 60.0  # seconds per candidate run (check + all samples)
    samples: int = 5  # timing samples kept, ranked by their median
    # The samples are taken in this many passes over a batch, so that each
    # candidate's median spans the batch's time rather than one moment of it.
    passes: int = 3
    min_sample_seconds: float = 0.02  # repetitions per sample are scaled up to this
    warmup: int = 1
    # Untimed runs go on until the kernel is no faster from one block to the next, for
    # this long at most: a runner's threads sleep while it waits for the next candidate,
    # and a 2-thread kernel runs slower until they are awake (matmul 512 on 2 threads:
    # 2.7 ms timed straight away, 2.0 ms in a user's loop; see experiments/bench_user_loop.py
    # and ``_child._warm``).
    warm_seconds: float = 0.1
    # A candidate whose first sample takes this many times the fastest median this measurer
    # has timed for its workload gets no more samples (0: every candidate gets them all):
    # tinygrad's BEAM search stops timing such a kernel too. On the logs the project ships
    # (116 workloads, 7,904 records, replayed in their order), 2x cuts 36 % of the
    # candidates; the eventual best of a workload was cut only where the old runner took
    # its first sample cold, before the kernel's threads were warm (``warm_seconds``).
    cut_slower: float = 2.0
    rtol: float = 1e-3
    atol: float = 1e-3  # times the reference output's largest magnitude
    # Modules that register extra operators, imported by every worker (Python API only;
    # never filled from a log or a command line).
    plugins: tuple[str, ...] = ()


@dataclass(frozen=True)
class Candidate:
    """One point to measure: an operator workload, a config, a target (all plain data)."""

    op: str
    args: dict[str, Any]
    config: dict[str, Any]
    target: dict[str, Any]  # Target.to_json()


@dataclass(frozen=True)
class MeasureResult:
    error_kind: ErrorKind
    error_msg: str = ""
    samples: tuple[float, ...] = ()
    build_seconds: float = 0.0
    run_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error_kind == ErrorKind.OK


#: Told each candidate's final result as soon as it is known: ``on_result(index, result)``.
OnResult = Callable[[int, MeasureResult], None]
