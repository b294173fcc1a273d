"""Build a schedule into a callable Numba CPU kernel, cached on disk.

The generated source is written as a module ``k_<hash>.py`` into the cache
folder and imported, so Numba's own disk cache (``cache=True``) works: a
kernel compiled once is loaded, not recompiled, by the next process. The hash
covers the source, the compiler flags, Numba's version, the target and the
runtime helpers the kernel imports.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import linecache
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from ..lower.ir import Alloc, For, If, Seq, Stmt, Store
from ..lower.lower import LoweredFunc, lower
from ..schedule.schedule import Schedule
from ..target import Target
from ..te.tensor import Tensor
from .source import render

__all__ = ["BuildOptions", "Kernel", "build", "cache_dir"]

_LOCK = threading.Lock()


def cache_dir() -> Path:
    """Where kernels are cached: ``$TUNER_CACHE_DIR``, else the user's cache folder."""
    env = os.environ.get("TUNER_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tuner" / "kernels"


@dataclass(frozen=True)
class BuildOptions:
    """How a kernel is compiled; every field is part of the cache key."""

    vectorizer: str = "auto"  # "auto", "slp" (register blocks) or "loop"
    fastmath_contract: bool = True  # allow fused multiply-add
    #: How top-level parallel loops run: "threads" (nogil chunks on a thread pool,
    #: compiled as fast as serial code) or "prange" (Numba's parfors).
    parallel: str = "threads"
    cache: bool = True


class Kernel:
    """A compiled kernel: call it with NumPy arrays in argument order; it writes the outputs."""

    def __init__(self, func: LoweredFunc, source: str, module: ModuleType, target: Target):
        self.lowered = func
        self.source = source
        self.target = target
        self._fn = getattr(module, func.name)
        self._threads = int(target.get("threads", 0))
        stored = {s.buffer for s in _walk(func.body) if isinstance(s, Store)}
        #: Positions of the arguments the kernel writes (compiled as not overlapping any other).
        self._written = [k for k, b in enumerate(func.args) if b.name in stored]
        stats = [d.stats for d in _dispatchers(module)]
        #: True when Numba loaded the machine code from its disk cache.
        self.from_cache = bool(stats) and all(
            sum(s.cache_hits.values()) and not sum(s.cache_misses.values()) for s in stats
        )

    @property
    def args(self) -> tuple[Any, ...]:
        return self.lowered.args

    def __call__(self, *arrays: np.ndarray) -> None:
        if len(arrays) != len(self.lowered.args):
            raise TypeError(f"kernel takes {len(self.lowered.args)} arrays, got {len(arrays)}")
        flat = []
        for a, buf in zip(arrays, self.lowered.args, strict=True):
            if not isinstance(a, np.ndarray):
                raise TypeError(f"argument {buf.name} must be a NumPy array")
            if a.shape != buf.shape or a.dtype != np.dtype(buf.dtype):
                raise TypeError(
                    f"argument {buf.name} must be {buf.dtype}{list(buf.shape)}, got {a.dtype}{list(a.shape)}"
                )
            if not a.flags.c_contiguous:
                raise TypeError(
                    f"argument {buf.name} must be C-contiguous (use np.ascontiguousarray)"
                )
            flat.append(a.reshape(-1))
        for k in self._written:
            for other, buf in enumerate(self.lowered.args):
                if other != k and np.may_share_memory(arrays[k], arrays[other]):
                    raise ValueError(
                        f"argument {self.lowered.args[k].name} shares memory with argument"
                        f" {buf.name}: the kernel writes {self.lowered.args[k].name}, so pass it"
                        " a separate array"
                    )
        if self._threads:
            import numba

            numba_config: Any = numba.config
            numba.set_num_threads(min(self._threads, int(numba_config.NUMBA_NUM_THREADS)))
        self._fn(*flat)


def _dispatchers(module: ModuleType) -> list[Any]:
    """The module's own compiled functions (not the runtime helpers it imports)."""
    from numba.core.dispatcher import Dispatcher

    return [
        v
        for v in vars(module).values()
        if isinstance(v, Dispatcher) and v.py_func.__module__ == module.__name__
    ]


def _walk(s: Stmt) -> Iterator[Stmt]:
    yield s
    if isinstance(s, Seq):
        for c in s.body:
            yield from _walk(c)
    elif isinstance(s, For | Alloc):
        yield from _walk(s.body)
    elif isinstance(s, If):
        yield from _walk(s.then)
        if s.orelse is not None:
            yield from _walk(s.orelse)


def _vectorizer(func: LoweredFunc, options: BuildOptions) -> str:
    """SLP for register blocks (short literal loops), LLVM's loop vectorizer otherwise."""
    if options.vectorizer != "auto":
        return options.vectorizer
    blocked = any(isinstance(s, Alloc) and s.buffer.scope == "local" for s in _walk(func.body))
    return "slp" if blocked else "loop"


_HEADER = """\
# Generated by tuner: {what}
# vectorizer={vec} fastmath_contract={fm} numba={numba}
import math

import numba
import numpy as np
from numba import prange

from tuner.codegen.runtime import (
    NoAliasCompiler, carray, erf32, exp32, sigmoid32, sigmoid64, stack_empty, tanh32,
)
from tuner.codegen.threads import parallel_for

"""


def _module_source(func: LoweredFunc, vec: str, options: BuildOptions) -> str:
    import numba

    fm = "{'contract'}" if options.fastmath_contract else "False"
    flags = (
        f"cache={options.cache}, fastmath={fm}, error_model='numpy', boundscheck=False,"
        " pipeline_class=NoAliasCompiler"
    )
    header = _HEADER.format(
        what=func.name, vec=vec, fm=options.fastmath_contract, numba=numba.__version__
    )
    return header + render(
        func, "numba", njit_flags=flags, parallel=options.parallel, stage_vectors=vec == "slp"
    )


@contextlib.contextmanager
def _llvm_flags(vec: str) -> Iterator[None]:
    """Numba reads its vectorizer switches at each compile; set them for this one."""
    from numba.core import config as numba_config

    config: Any = numba_config  # Numba's settings are module attributes, set at import time
    saved = (config.SLP_VECTORIZE, config.LOOP_VECTORIZE)
    slp, loop = (1, 0) if vec == "slp" else (0, 1)
    config.SLP_VECTORIZE = slp
    config.LOOP_VECTORIZE = loop
    try:
        yield
    finally:
        config.SLP_VECTORIZE = saved[0]
        config.LOOP_VECTORIZE = saved[1]


def _import(path: Path, name: str, source: str, vec: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    lines = source.splitlines(keepends=True)
    linecache.cache[str(path)] = (len(source), None, lines, str(path))
    # Numba records the defining module's name for its disk cache: register first.
    sys.modules[name] = module
    try:
        with _LOCK, _llvm_flags(vec):
            spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _runtime_fingerprint() -> str:
    """A hash of the helpers generated kernels import (exp32, parallel_for, ...).

    Numba's disk cache checks only the kernel's own module file, so a change
    to a helper it calls must change the kernel's name to be recompiled.
    """
    global _RUNTIME_FINGERPRINT
    if _RUNTIME_FINGERPRINT is None:
        here = Path(__file__).parent
        text = b"".join((here / name).read_bytes() for name in ("runtime.py", "threads.py"))
        _RUNTIME_FINGERPRINT = hashlib.sha256(text).hexdigest()
    return _RUNTIME_FINGERPRINT


_RUNTIME_FINGERPRINT: str | None = None


def compile_lowered(
    func: LoweredFunc, target: Target, options: BuildOptions = BuildOptions()
) -> Kernel:
    vec = _vectorizer(func, options)
    source = _module_source(func, vec, options)
    key = hashlib.sha256(
        (source + target.fingerprint + repr(options) + _runtime_fingerprint()).encode()
    ).hexdigest()[:20]
    name = f"k_{key}"
    if name in sys.modules:
        return Kernel(func, source, sys.modules[name], target)
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    if not path.exists() or path.read_text() != source:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, path)
    return Kernel(func, source, _import(path, name, source, vec), target)


def build(
    sched: Schedule,
    args: list[Tensor],
    target: str | Target = "cpu",
    name: str = "kernel",
    options: BuildOptions = BuildOptions(),
) -> Kernel:
    """Compile ``sched`` into a kernel taking ``args`` (inputs then outputs).

    >>> f = build(s, [A, B, C], target="cpu")
    >>> f(a, b, c)          # writes c (c may not share memory with a or b)
    >>> print(f.source)     # the generated Python
    """
    tgt = Target.from_name(target) if isinstance(target, str) else target
    if tgt.kind != "cpu":
        raise NotImplementedError(f"code generation for target {tgt.kind!r} is not available yet")
    return compile_lowered(lower(sched, args, name), tgt, options)
