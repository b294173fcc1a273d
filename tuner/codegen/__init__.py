"""Code generation: backends by target kind, turning loop nests into compiled kernels.

>>> f = tuner.build(s, [A, B, C], target="cpu")    # lower, then the cpu backend compiles
>>> get_backend("cpu").source(tuner.lower(s, [A, B, C]), target, BuildOptions())
"""

from .backend import (
    Backend,
    BuildOptions,
    Kernel,
    LaunchError,
    Timer,
    backend_kinds,
    cache_dir,
    get_backend,
    register_backend,
)
from .build import build

__all__ = [
    "Backend",
    "BuildOptions",
    "Kernel",
    "LaunchError",
    "Timer",
    "backend_kinds",
    "build",
    "cache_dir",
    "get_backend",
    "register_backend",
]
