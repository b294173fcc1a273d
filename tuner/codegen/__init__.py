"""Numba code generation: loop nests to compiled kernels."""

from .build import BuildOptions, Kernel, build, cache_dir

__all__ = ["BuildOptions", "Kernel", "build", "cache_dir"]
