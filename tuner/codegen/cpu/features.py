"""The CPU features Numba compiles for: the host's, less a taste for gathers and scatters,
and with AVX-512 at its full width.

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

LLVM tunes the Intel cores with AVX-512 it knows (Skylake-SP to Sapphire
Rapids; this machine's reads as "rocketlake") to prefer 256-bit vectors, so
its vectorizers emit ``ymm`` code on them: the register tiles of matmul then
run at half width. ``-prefer-256-bit`` (``FULL_WIDTH``) lifts that where the
host has AVX-512 (Zen 4 and 5 never had it): on a 2-core Xeon with AVX-512,
the default matmul 1024^3 went from 11.1 to 7.5 ms on 2 threads (NumPy 7.4).

The preferences are target features, and Numba creates its one LLVM target
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

__all__ = [
    "FULL_WIDTH",
    "NO_GATHER",
    "compiles_avx512",
    "compiles_vbmi",
    "gather_preference",
    "prefer_no_gather",
]

#: The LLVM target features added to the host's.
NO_GATHER = ("+prefer-no-gather", "+prefer-no-scatter")
#: Added where the host has AVX-512: vectorize at 512 bits even where LLVM's tuning says 256.
FULL_WIDTH = "-prefer-256-bit"


def _config() -> Any:
    """Numba's settings (module attributes that mypy does not see)."""
    from numba.core import config

    return config


def _numba_started() -> bool:
    """Whether Numba already created its CPU target machine (its features are fixed then)."""
    from numba.core import registry

    return "_toplevel_target_context" in vars(registry.cpu_target)


def prefer_no_gather() -> bool:
    """Add ``NO_GATHER`` (and ``FULL_WIDTH`` with AVX-512) to the features Numba compiles for;
    whether they are in effect."""
    config = _config()
    if config.CPU_FEATURES is None and not _numba_started():
        import llvmlite.binding as llvm

        host = llvm.get_host_cpu_features().flatten()
        wide = [FULL_WIDTH] if "+avx512f" in host.split(",") else []
        config.CPU_FEATURES = ",".join([host, *NO_GATHER, *wide])
    return gather_preference() == "no-gather"


def gather_preference() -> str:
    """``"no-gather"`` where Numba compiles with ``NO_GATHER``, else ``"host"``."""
    features = (_config().CPU_FEATURES or "").split(",")
    return "no-gather" if all(f in features for f in NO_GATHER) else "host"


def _compiles(feature: str) -> bool:
    """Whether Numba compiles for a CPU with ``feature`` (its set features, else the host's)."""
    features = _config().CPU_FEATURES
    if features is None:
        import llvmlite.binding as llvm

        features = llvm.get_host_cpu_features().flatten()
    return f"+{feature}" in features.split(",")


def compiles_avx512() -> bool:
    """Whether Numba compiles for a CPU with AVX-512."""
    return _compiles("avx512f")


def compiles_vbmi() -> bool:
    """Whether Numba compiles for a CPU with AVX-512 VBMI (``vpermi2b``: ``tables``)."""
    return _compiles("avx512f") and _compiles("avx512vbmi")
