"""The CPU features Numba compiles for: the host's, less a taste for gathers and scatters.

With AVX-512, LLVM counts vector gathers and scatters as legal and often
cheap, and its loop vectorizer uses them whenever an inner loop was unrolled
fully first and the loop around it became the innermost one: the columns of a
softmax split by 32 then run as stride-32 gathers of eight 64-bit indices per
vector (``vgatherqps`` / ``vscatterqps``). On the AVX-512 Zen machine this was
measured on, softmax 4096 x 1024 took 6.2 ms that way on 2 threads, and 3.0 ms
with ``+prefer-no-gather,+prefer-no-scatter`` (the tuning LLVM gives recent
Intel cores, whose gathers are slow since the Downfall microcode), where
the loop vectorizer vectorizes the contiguous inner loops instead. A depthwise
convolution's register tile went from 0.75 to 0.59 ms.

The preference is a target feature, and Numba creates its one LLVM target
machine with the features ``numba.config.CPU_FEATURES`` names (the host's when
unset) the first time anything is compiled or decorated in the process. So
``prefer_no_gather()`` runs when this package is imported, before the
runtime's own ``@njit`` functions exist. It changes nothing where the user set
``NUMBA_CPU_FEATURES``, or where Numba already made its target machine (the
process compiled something before importing the CPU backend): kernels are then
correct, only possibly slower, and ``gather_preference()`` says which case holds.
Numba keys its on-disk cache by the features, so kernels cached without the
preference are compiled again once.
"""

from __future__ import annotations

from typing import Any

__all__ = ["NO_GATHER", "gather_preference", "prefer_no_gather"]

#: The LLVM target features added to the host's.
NO_GATHER = ("+prefer-no-gather", "+prefer-no-scatter")


def _config() -> Any:
    """Numba's settings (module attributes that mypy does not see)."""
    from numba.core import config

    return config


def _numba_started() -> bool:
    """Whether Numba already created its CPU target machine (its features are fixed then)."""
    from numba.core import registry

    return "_toplevel_target_context" in vars(registry.cpu_target)


def prefer_no_gather() -> bool:
    """Add ``NO_GATHER`` to the features Numba compiles for; whether they are in effect."""
    config = _config()
    if config.CPU_FEATURES is None and not _numba_started():
        import llvmlite.binding as llvm

        config.CPU_FEATURES = ",".join([llvm.get_host_cpu_features().flatten(), *NO_GATHER])
    return gather_preference() == "no-gather"


def gather_preference() -> str:
    """``"no-gather"`` where Numba compiles with ``NO_GATHER``, else ``"host"``."""
    features = (_config().CPU_FEATURES or "").split(",")
    return "no-gather" if all(f in features for f in NO_GATHER) else "host"
