"""How busy the machine is with other work: what a comparison taken now can be trusted for.

A timing taken while other processes hold the CPUs it runs on says little
about the kernel: a 2-thread BLAS on a 2-core machine running another
2-thread job was measured 10x to 300x slower than plain NumPy. Before and
after a comparison, the caller sleeps a moment and reads the kernel's CPU
counters (``/proc/stat``): whatever ran meanwhile was someone else's work.

>>> load = other_load()            # sleeps 0.2 s
>>> load.busy, load.cpus           # e.g. 1.9 of 2 CPUs busy with other processes
>>> load.crowds(threads=2)         # fewer CPUs free than the timing's threads
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Load", "other_load"]

#: CPUs counted as free only when less than this much of them is in use.
_SLACK = 0.5


@dataclass(frozen=True)
class Load:
    """CPUs kept busy by other processes while this one slept, of the CPUs it may run on."""

    busy: float
    cpus: int

    @property
    def free(self) -> float:
        return max(0.0, self.cpus - self.busy)

    def crowds(self, threads: int) -> bool:
        """Whether fewer CPUs were free than ``threads`` (with half a CPU of slack)."""
        return self.free + _SLACK < threads

    def describe(self) -> str:
        return f"other processes kept {self.busy:.1f} of {self.cpus} CPUs busy"


def _counters() -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs since boot, or None without ``/proc/stat``."""
    try:  # the first line sums every CPU: "cpu  user nice system idle iowait irq softirq steal"
        ticks = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, IndexError, ValueError):
        return None
    if len(ticks) < 4:
        return None
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle and iowait
    return sum(ticks[:8]) - idle, sum(ticks[:8])


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def other_load(seconds: float = 0.2) -> Load | None:
    """The load of other processes over ``seconds`` of sleep (None where it cannot be read).

    The machine's counters cover every CPU, this process's too; it sleeps
    meanwhile (and so must its children), so what ran was other work. Its
    share of all the machine's CPUs is counted on the CPUs this process may use.
    """
    before = _counters()
    if before is None:
        return None
    time.sleep(seconds)
    after = _counters()
    if after is None or after[1] <= before[1]:
        return None
    share = (after[0] - before[0]) / (after[1] - before[1])
    cpus = _cpus()
    return Load(busy=share * cpus, cpus=cpus)
