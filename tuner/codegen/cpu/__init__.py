"""The CPU backend: Numba ``njit`` kernels (registered for targets of kind "cpu")."""

from .features import prefer_no_gather

prefer_no_gather()  # before any @njit below: Numba fixes its target machine's features once

from .backend import CpuKernel, NumbaCpuBackend  # noqa: E402

__all__ = ["CpuKernel", "NumbaCpuBackend"]
