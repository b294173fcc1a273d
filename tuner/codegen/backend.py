"""Backends: code generators found by target kind, each turning a lowered function into a kernel.

A backend registers itself for a target kind (``@register_backend("cpu")``);
``get_backend(target)`` finds it, importing the built-in one on first use so
that a backend's heavy dependencies (Numba, numba-cuda) load only when used.
The CPU Numba backend (``tuner.codegen.cpu``) and the CUDA one
(``tuner.codegen.cuda``, which needs numba-cuda) are built in.

>>> backend = get_backend(Target.from_name("cpu"))
>>> kernel = backend.compile(tuner.lower(s, [A, B, C], target=t), t)
>>> kernel(a, b, c)
"""

from __future__ import annotations

import abc
import importlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..lower.extent import evaluate
from ..lower.lower import LoweredFunc
from ..target import Target, TargetError
from ..te.expr import Var

__all__ = [
    "Backend",
    "BuildOptions",
    "Kernel",
    "LaunchError",
    "Timer",
    "backend_kinds",
    "bind_symbols",
    "cache_dir",
    "check_arrays",
    "check_output",
    "fits_static",
    "get_backend",
    "register_backend",
    "static_signature",
]


def cache_dir() -> Path:
    """Where kernels are cached: ``$TUNER_CACHE_DIR``, else the user's cache folder."""
    env = os.environ.get("TUNER_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tuner" / "kernels"


@dataclass(frozen=True)
class BuildOptions:
    """How a kernel is compiled; every field is part of the cache key.

    A backend reads the fields that mean something to it and ignores the rest.
    """

    vectorizer: str = "auto"  # "auto", "slp" (register blocks), "loop" or "both"
    fastmath_contract: bool = True  # allow fused multiply-add
    #: How top-level parallel loops run on a CPU: "threads" (nogil chunks on a
    #: thread pool, compiled as fast as serial code) or "prange" (Numba's parfors).
    parallel: str = "threads"
    #: How "threads" chunks start: "native" (Numba's threading layer, OpenMP or
    #: TBB), "pool" (Python threads) or "auto" (native where a thread-safe layer loads).
    launch: str = "auto"
    cache: bool = True
    #: Write a register tile's SIMD loops in explicit vectors of the target's width
    #: (a CPU kernel compiled with the SLP vectorizer, ``tuner.codegen.cpu.vectors``).
    simd: bool = True
    #: How a CPU kernel's functions become LLVM IR: "direct" (lowered from their syntax tree
    #: with Numba's typing and operations, ``tuner.codegen.cpu.direct``, where the function
    #: is in the generated language) or "numba" (Numba's own front end for every function).
    front_end: str = "direct"


class LaunchError(RuntimeError):
    """A kernel that compiled but could not run on its device (a failed GPU launch)."""


class Timer:
    """A kernel bound to fixed arguments, for timing: ``run`` once, ``seconds`` for many runs.

    This one runs a host kernel and reads the wall clock; a device backend
    keeps the arguments on its device between runs and times them there.
    ``fetch`` brings the outputs back into the arrays given (a no-op here).
    """

    def __init__(self, kernel: Kernel, arrays: tuple[Any, ...]):
        self.kernel, self.arrays = kernel, arrays

    def run(self) -> None:
        self.kernel(*self.arrays)

    def seconds(self, reps: int) -> float:
        """Seconds that ``reps`` runs in a row take."""
        t0 = time.perf_counter()
        for _ in range(reps):
            self.kernel(*self.arrays)
        return time.perf_counter() - t0

    def fetch(self) -> None:
        """The outputs of the last run, into the arrays the timer was made with."""


class Kernel(abc.ABC):
    """A compiled kernel: call it with arrays in argument order; it writes the outputs."""

    lowered: LoweredFunc
    source: str
    target: Target
    #: True when the machine code was loaded from a disk cache, not compiled.
    from_cache: bool
    #: True when this build compiled the kernel into the disk cache (neither this
    #: process nor the cache had it): another process can now load it from there.
    wrote_cache: bool

    @property
    def args(self) -> tuple[Any, ...]:
        return self.lowered.args

    @abc.abstractmethod
    def __call__(self, *arrays: Any) -> None: ...

    def timer(self, *arrays: Any) -> Timer:
        """A timer running this kernel on ``arrays`` (NumPy arrays, as a call takes)."""
        return Timer(self, arrays)


class Backend(abc.ABC):
    """Code generation for one kind of target.

    ``compile`` must give a kernel whose outputs equal the lowered function's
    meaning for every legal schedule (the backend contract tests check this
    for each registered backend); ``source`` is the generated text, readable
    and printable.
    """

    kind: ClassVar[str] = ""

    @abc.abstractmethod
    def source(self, func: LoweredFunc, target: Target, options: BuildOptions) -> str:
        """The generated source of ``func``."""

    @abc.abstractmethod
    def compile(self, func: LoweredFunc, target: Target, options: BuildOptions) -> Kernel:
        """A callable kernel for ``func`` (cached on disk where the backend can)."""

    def resolve(self, options: BuildOptions) -> BuildOptions:
        """``options`` with what this process decides for them filled in (the kernel index's key)."""
        return options

    def describe(self, kernel: Kernel) -> dict[str, Any] | None:
        """What ``restore`` needs to give ``kernel`` back in another process (None: nothing)."""
        return None

    def restore(
        self,
        entry: Mapping[str, Any],
        target: Target,
        relower: Callable[[], LoweredFunc] | None = None,
    ) -> Kernel | None:
        """The kernel ``describe`` wrote ``entry`` for, if its compiled code is still cached;
        ``relower`` gives its loop nest when someone asks for it."""
        return None

    def export_code(self, kernel: Kernel) -> tuple[dict[str, Any], dict[str, bytes]] | None:
        """``kernel``'s compiled code as files, with what ``install_code`` needs to place them
        in another process's cache; None where this backend ships none (the loader compiles)."""
        return None

    def install_code(self, shipped: Sequence[tuple[Mapping[str, Any], Mapping[str, bytes]]]) -> int:
        """Check the kernels' files ``export_code`` gave (entry, files) and write those this
        machine's cache lacks (how many); a ``ValueError`` for any file that is not what the
        backend writes, before anything is written. An installed file serves only a kernel
        whose source this process generates itself."""
        return 0


_REGISTRY: dict[str, type[Backend]] = {}
_INSTANCES: dict[str, Backend] = {}
#: Where the built-in backends live, by target kind: imported on first use.
_BUILTIN = {"cpu": "tuner.codegen.cpu", "cuda": "tuner.codegen.cuda"}


def register_backend(kind: str) -> Callable[[type[Backend]], type[Backend]]:
    """Register a backend class for targets of ``kind`` (a plugin point)."""

    def deco(cls: type[Backend]) -> type[Backend]:
        cls.kind = kind
        _REGISTRY[kind] = cls
        _INSTANCES.pop(kind, None)
        return cls

    return deco


def backend_kinds() -> list[str]:
    """Target kinds with a backend (the built-in ones, loaded or not, and registered ones)."""
    return sorted(set(_REGISTRY) | set(_BUILTIN))


def get_backend(target: Target | str) -> Backend:
    """The backend for ``target`` (a ``Target`` or its kind)."""
    kind = target.kind if isinstance(target, Target) else target
    if kind not in _REGISTRY and kind in _BUILTIN:
        importlib.import_module(_BUILTIN[kind])
    cls = _REGISTRY.get(kind)
    if cls is None:
        known = ", ".join(backend_kinds())
        raise TargetError(f"no code generator for target {kind!r}; backends exist for: {known}")
    if kind not in _INSTANCES:
        _INSTANCES[kind] = cls()
    return _INSTANCES[kind]


#: Each argument's shape and NumPy dtype, for a kernel none of whose extents is symbolic.
StaticSignature = tuple[tuple[tuple[int, ...], np.dtype], ...]


def static_signature(func: LoweredFunc) -> StaticSignature | None:
    """``func``'s arguments as (shape, dtype), or None where an extent is symbolic."""
    out = []
    for b in func.args:
        shape = tuple(d for d in b.shape if isinstance(d, int))
        if len(shape) != len(b.shape):
            return None
        out.append((shape, np.dtype(b.dtype)))
    return None if func.symbols else tuple(out)


def fits_static(signature: StaticSignature, arrays: tuple[Any, ...]) -> bool:
    """Whether ``arrays`` are exactly what ``signature`` says: C-contiguous NumPy arrays of
    its shapes and dtypes (where not, ``check_arrays`` says what is wrong)."""
    if len(arrays) != len(signature):
        return False
    for a, (shape, dtype) in zip(arrays, signature, strict=True):
        if type(a) is not np.ndarray or a.shape != shape or a.dtype != dtype:
            return False
        if not a.flags.c_contiguous:
            return False
    return True


def check_arrays(func: LoweredFunc, arrays: tuple[Any, ...]) -> dict[str, int]:
    """Refuse arguments a kernel of ``func`` cannot take: count, type, shape, dtype, layout.

    A ``TypeError`` names the argument and what it must be. Host (NumPy)
    arrays are checked here; a backend with device arrays checks its own.
    Returns the values of the kernel's symbolic extents, read from the shapes
    (see ``bind_symbols``).
    """
    if len(arrays) != len(func.args):
        raise TypeError(f"kernel takes {len(func.args)} arrays, got {len(arrays)}")
    for a, buf in zip(arrays, func.args, strict=True):
        if not isinstance(a, np.ndarray):
            raise TypeError(f"argument {buf.name} must be a NumPy array")
    values = bind_symbols(
        [(b.name, b.shape) for b in func.args], func.symbols, [a.shape for a in arrays]
    )
    for a, buf in zip(arrays, func.args, strict=True):
        shape = tuple(evaluate(d, values) for d in buf.shape)
        if a.shape != shape or a.dtype != np.dtype(buf.dtype):
            want = shape_text(buf.shape, values)
            raise TypeError(
                f"argument {buf.name} must be {buf.dtype}{want}, got {a.dtype}{list(a.shape)}"
            )
        if not a.flags.c_contiguous:
            raise TypeError(f"argument {buf.name} must be C-contiguous (use np.ascontiguousarray)")
    return values


def bind_symbols(
    params: Sequence[tuple[str, tuple[Any, ...]]],
    symbols: Sequence[Var],
    shapes: Sequence[tuple[int, ...]],
) -> dict[str, int]:
    """The values of ``symbols``, from the shapes of the first ``len(shapes)`` of ``params``.

    ``params`` are the arguments' names and declared shapes (ints and symbolic extents).

    Each symbol takes its value from the first dimension it names whole and
    must lie in its declared range and be a multiple of its declared divisor;
    a ``TypeError`` says which argument and dimension broke that. The other
    dimensions are checked by the caller against the values found here.
    """
    if not symbols:
        return {}
    values: dict[str, int] = {}
    for shape, (name, declared) in zip(shapes, params, strict=False):
        if len(shape) != len(declared):
            raise TypeError(
                f"argument {name} must have {len(declared)} dimension(s), got {len(shape)}"
            )
        for d, (got, want) in enumerate(zip(shape, declared, strict=True)):
            if isinstance(want, Var) and want.name not in values:
                if got < want.lo or (want.hi is not None and got > want.hi):
                    hi = "" if want.hi is None else f" and at most {want.hi}"
                    raise TypeError(
                        f"argument {name} dimension {d} is {want.name}={got}; "
                        f"{want.name} must be at least {want.lo}{hi}"
                    )
                if got % want.multiple:
                    raise TypeError(
                        f"argument {name} dimension {d} is {want.name}={got}; "
                        f"{want.name} must be a multiple of {want.multiple}"
                    )
                values[want.name] = int(got)
    missing = [v.name for v in symbols if v.name not in values]
    if missing:
        raise TypeError(f"no argument gives the value of symbolic extent {missing[0]}")
    return values


def shape_text(shape: Sequence[Any], values: Mapping[str, int]) -> str:
    """A shape for a message: symbols named with their values (``[n=7, 64]``)."""
    dims = (
        f"{d.name}={values[d.name]}" if isinstance(d, Var) and d.name in values else str(d)
        for d in shape
    )
    return f"[{', '.join(dims)}]"


def check_output(
    out: Any, shape: tuple[int, ...], dtype: str, what: str, inputs: Sequence[Any] = ()
) -> None:
    """Refuse a caller-given output array a kernel cannot write in place.

    It must be a writable, C-contiguous NumPy array of ``dtype`` and ``shape``
    that shares no memory with ``inputs``; ``what`` names it in the error.
    """
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{what} must be a NumPy array, got {type(out).__name__}")
    if out.shape != tuple(shape) or out.dtype != np.dtype(dtype):
        raise TypeError(f"{what} must be {dtype}{list(shape)}, got {out.dtype}{list(out.shape)}")
    if not out.flags.c_contiguous:
        raise TypeError(f"{what} must be C-contiguous")
    if not out.flags.writeable:
        raise ValueError(f"{what} is read-only")
    for k, a in enumerate(inputs):
        if np.may_share_memory(out, a):
            raise ValueError(f"{what} shares memory with input {k}; pass a separate array")


def check_no_overlap(func: LoweredFunc, arrays: tuple[Any, ...], written: list[int]) -> None:
    """Refuse an output that shares memory with another argument (kernels are compiled noalias)."""
    for k in written:
        for other, buf in enumerate(func.args):
            if other != k and np.may_share_memory(arrays[k], arrays[other]):
                name = func.args[k].name
                raise ValueError(
                    f"argument {name} shares memory with argument {buf.name}: the kernel"
                    f" writes {name}, so pass it a separate array"
                )
