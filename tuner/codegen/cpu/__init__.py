"""The CPU backend: Numba ``njit`` kernels (registered for targets of kind "cpu")."""

from .backend import CpuKernel, NumbaCpuBackend

__all__ = ["CpuKernel", "NumbaCpuBackend"]
