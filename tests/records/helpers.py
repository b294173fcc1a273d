"""Builders for the records tests: fixed workloads, targets and records."""

from __future__ import annotations

from typing import Any

from records import Record
from tuner.target import Target
from tuner.workload import Workload

MATMUL = Workload.make("matmul", M=64, N=64, K=64, dtype="float32")
CONV = Workload.make("conv2d", N=1, C=8, H=16, W=16, K=8, strides=(1, 1))
CPU_A = Target("cpu", (("cores", 4), ("vector_lanes", 8)), "fingerprint-a")
CPU_B = Target("cpu", (("cores", 16), ("vector_lanes", 16)), "fingerprint-b")
CUDA = Target("cuda", (("warp_size", 32),), "fingerprint-gpu")


def record(
    samples: tuple[float, ...] = (1e-3,),
    *,
    workload: Workload = MATMUL,
    target: Target = CPU_A,
    config: dict[str, Any] | None = None,
    trial: int = 0,
    **fields: Any,
) -> Record:
    """A record with sensible defaults; keyword ``fields`` go to ``Record.make``."""
    return Record.make(
        workload,
        target,
        {"tile": [8, 8], "trial": trial} if config is None else config,
        samples=samples,
        trial=trial,
        timestamp=1_700_000_000.0 + trial,
        flops=2 * 64**3,
        **{"strategy": "random", **fields},
    )
