"""The CPU backend: a lowered function as a Numba kernel, cached on disk.

The generated source is written as a module ``k_<hash>.py`` into the cache
folder and imported, so Numba's own disk cache (``cache=True``) works: a
kernel compiled once is loaded, not recompiled, by the next process. The hash
covers the source, the compiler flags, Numba's version, the target and the
runtime helpers the kernel imports.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import linecache
import operator
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from ...kinds import Scope
from ...lower.access import updates_in_place
from ...lower.ir import Buffer, Seq, Store
from ...lower.lower import LoweredFunc
from ...lower.visitor import walk_stmts
from ...target import Target
from ..backend import (
    Backend,
    BuildOptions,
    Kernel,
    cache_dir,
    check_arrays,
    check_no_overlap,
    fits_static,
    register_backend,
    static_signature,
)
from ..numba_source import write_module
from . import direct
from .shipping import cached_files, install_files
from .source import render
from .threaded import has_parallel
from .threads import native_layer
from .vectorizer import header_vectorizer, vectorizer

__all__ = ["CpuKernel", "NumbaCpuBackend"]

_LOCK = threading.Lock()


#: Arrays of at most this many bytes in all are remembered between calls (``CpuKernel``):
#: where the checks cost as much as the kernel; holding larger ones would keep a caller's
#: memory alive for a saving it would not see.
MEMO_BYTES = 1 << 20
#: What must not have changed for the arrays of the last call to be taken as they were.
_LAYOUT = operator.attrgetter("shape", "dtype", "strides")


class CpuKernel(Kernel):
    """A Numba kernel: call it with NumPy arrays in argument order; it writes the outputs."""

    def __init__(
        self,
        func: LoweredFunc,
        source: str,
        module: ModuleType,
        target: Target,
        written: list[int] | None = None,
        relower: Callable[[], LoweredFunc] | None = None,
        parallel: bool | None = None,
        in_place: Sequence[int] | None = None,
    ):
        #: The arguments (what every call is checked against); with ``relower``, ``func``
        #: carries only these, and the loop nest is lowered again when first asked for.
        self._signature = func
        self._lowered = None if relower is not None else func
        self._relower = relower
        self.source = source
        self.target = target
        self.module_name = module.__name__
        self._fn = getattr(module, func.name)
        self._threads = int(target.get("threads", 0))
        #: Whether the kernel runs a parallel loop: a serial one needs no thread count set
        #: (0.7 of a 3.9 us call for a squeeze-and-excitation layer's 1 x 1 convolution).
        self._parallel = has_parallel(func.body) if parallel is None else parallel
        #: Each argument's shape and dtype where no extent is symbolic: a call whose arrays
        #: match them exactly skips the general check (its Python cost was half of a small
        #: kernel's call: 3.5 of 6.7 us for a 16 x 16 dense).
        self._static = static_signature(func)
        if written is None:
            stored = {s.buffer for s in walk_stmts(func.body) if isinstance(s, Store)}
            written = [k for k, b in enumerate(func.args) if b.name in stored]
        #: Positions of the arguments the kernel writes (compiled as not overlapping any other).
        self._written = written
        #: Positions of the inputs whose buffer the output may take (``overwrites``), where
        #: known without the loop nest (a restored kernel's index entry).
        self._in_place = None if in_place is None else frozenset(in_place)
        #: The last call's arrays, their shapes, dtypes and strides, and what the entry took
        #: for them, where they are small: a kernel timed or run in a loop on the same arrays
        #: skips the checks (2.3 of a 2.5 us call: 8 x 1 x 64 batched products).
        self._memo: tuple[tuple[Any, ...], list[Any], tuple[Any, ...]] | None = None
        stats = [d.stats for d in _dispatchers(module)]
        # A helper the kernel calls (its chunk body) is compiled only if the kernel is: loaded
        # with the kernel, it counts neither a hit nor a miss of its own.
        self.from_cache = any(sum(s.cache_hits.values()) for s in stats) and not any(
            sum(s.cache_misses.values()) for s in stats
        )
        self.wrote_cache = not self.from_cache  # (reset where the module was already imported)

    @property
    def lowered(self) -> LoweredFunc:
        """The loop nest the kernel was compiled from (lowered again for a restored kernel)."""
        if self._lowered is None:
            assert self._relower is not None
            self._lowered = self._relower()
        return self._lowered

    @lowered.setter
    def lowered(self, func: LoweredFunc) -> None:
        self._lowered = func

    def overwrites(self, position: int) -> bool:
        """Whether the kernel may compute its output (the last argument) into the buffer of
        its argument at ``position`` (``tuner.lower.access.updates_in_place``).

        A kernel restored from the cache answers from its index entry: proving it again
        needs the loop nest, and lowering ResNet-50's 8 residual kernels again took 0.76 s
        of a 2.1 s cached compile (AMD Zen 4)."""
        if self._in_place is None:
            self._in_place = frozenset(_in_place(self.lowered))
        return position in self._in_place

    @property
    def args(self) -> tuple[Any, ...]:
        return self._signature.args

    def __call__(self, *arrays: Any) -> None:
        memo = self._memo
        if (
            memo is not None
            and len(arrays) == len(memo[0])
            and all(map(operator.is_, arrays, memo[0]))
            and list(map(_LAYOUT, arrays)) == memo[1]
        ):
            flat = memo[2]  # the arrays of the last call again, as they were
        else:
            flat = self._checked(arrays)
        if self._threads and self._parallel:
            import numba

            numba_config: Any = numba.config
            numba.set_num_threads(min(self._threads, int(numba_config.NUMBA_NUM_THREADS)))
        self._fn(*flat)

    def _checked(self, arrays: tuple[Any, ...]) -> tuple[Any, ...]:
        """What the compiled entry takes for ``arrays``, once they are checked: each array
        flattened, then the values of the symbolic extents. Small arrays' are remembered for a
        call with the same arrays (``MEMO_BYTES``)."""
        static = self._static
        if static is not None and fits_static(static, arrays):
            values: dict[str, int] = {}
        else:
            values = check_arrays(self._signature, arrays)
        check_no_overlap(self._signature, arrays, self._written)
        flat = (
            *(a.reshape(-1) for a in arrays),
            *(values[v.name] for v in self._signature.symbols),
        )
        small = sum(a.nbytes for a in arrays) <= MEMO_BYTES
        self._memo = (arrays, list(map(_LAYOUT, arrays)), flat) if small else None
        return flat


def _dispatchers(module: ModuleType) -> list[Any]:
    """The module's own compiled functions (not the runtime helpers it imports)."""
    from numba.core.dispatcher import Dispatcher

    return [
        v
        for v in vars(module).values()
        if isinstance(v, Dispatcher) and v.py_func.__module__ == module.__name__
    ]


_HEADER = """\
# Generated by tuner: {what}
# vectorizer={vec} fastmath_contract={fm} numba={numba}
import math

import numba
import numpy as np
from numba import prange

from tuner.codegen.cpu.runtime import (
    NoAliasCompiler, carray, dot_u8s8_i32x8, dot_u8s8_i32x16, erf32, exp32, flush_denormals,
    maxnum, minnum, prefetch, restore_fp, sigmoid32, sigmoid64, stack_empty, tanh32,
)
from tuner.codegen.cpu.direct import body as lowered_body
from tuner.codegen.cpu.launch import chunk_address, launch
from tuner.codegen.cpu.tables import {tables}
from tuner.codegen.cpu.threads import parallel_for
from tuner.codegen.cpu.vectors import ({vectors})

"""


def _module_source(func: LoweredFunc, vec: str, options: BuildOptions, target: Target) -> str:
    import numba

    from . import tables, vectors
    from .features import compiles_vbmi

    fm = "{'contract'}" if options.fastmath_contract else "False"
    flags = (
        f"cache={options.cache}, fastmath={fm}, error_model='numpy', boundscheck=False,"
        " pipeline_class=NoAliasCompiler"
    )
    header = _HEADER.format(
        what=func.name,
        vec=vec,
        fm=options.fastmath_contract,
        numba=numba.__version__,
        vectors=", ".join(vectors.names()),
        tables=", ".join(tables.names()),
    )
    lanes = target.lanes("float32") if options.simd else 0  # (used under SLP only: ``render``)
    body = render(
        func,
        njit_flags=flags,
        parallel=options.parallel,
        stage_vectors=vec == "slp",
        launch=_launch(options.launch),
        lanes=lanes if lanes in vectors.LANES else 0,
        tables=target.table_lookup_bits >= 512 and compiles_vbmi(),
    )
    if options.front_end == "direct":
        body = direct.rewrite(body)
    elif options.front_end != "numba":
        raise ValueError(f"front_end must be 'direct' or 'numba', not {options.front_end!r}")
    return header + body


def _launch(launch: str) -> str:
    if launch not in ("auto", "native", "pool"):
        raise ValueError(f"launch must be 'auto', 'native' or 'pool', not {launch!r}")
    if launch == "auto":
        return "native" if native_layer() else "pool"
    return launch


#: LLVM's own options while a kernel compiles, and their defaults, set back after it.
#: ``-dag-maps-huge-region``: the instruction scheduler's dependence graph tracks at most
#: this many memory operations before it chains them. Its default (1000) made scheduling
#: quadratic in an unrolled register tile: 0.80 of a 2.6 s build (LLVM's pass timings,
#: "Machine Instruction Scheduler") for a matmul 512 candidate with an 8 x 32 tile unrolled
#: 4 times, 0.17 with 64 (Xeon, AVX-512), its kernels as fast (13 kernels, matmul, conv2d,
#: dense, softmax, layer norm: within the run-to-run spread, +-3 %; ``experiments/`` has
#: none of this, it is the compiler's own cost).
LLVM_OPTIONS = ("-dag-maps-huge-region=64",)
_LLVM_DEFAULTS = ("-dag-maps-huge-region=1000",)


@contextlib.contextmanager
def _llvm_flags(vec: str) -> Iterator[None]:
    """Numba reads its vectorizer switches at each compile, LLVM its options at each code
    generation; set them for this one (``LLVM_OPTIONS``)."""
    import llvmlite.binding as llvm
    from numba.core import config as numba_config

    config: Any = numba_config  # Numba's settings are module attributes, set at import time
    saved = (config.SLP_VECTORIZE, config.LOOP_VECTORIZE)
    slp, loop = {"slp": (1, 0), "loop": (0, 1), "both": (1, 1)}[vec]
    config.SLP_VECTORIZE = slp
    config.LOOP_VECTORIZE = loop
    for option in LLVM_OPTIONS:
        llvm.set_option("tuner", option)
    try:
        yield
    finally:
        config.SLP_VECTORIZE = saved[0]
        config.LOOP_VECTORIZE = saved[1]
        for option in _LLVM_DEFAULTS:
            llvm.set_option("tuner", option)


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


def _in_place(func: LoweredFunc) -> list[int]:
    """Positions of ``func``'s inputs whose buffer its output (the last argument) may take."""
    *inputs, out = func.args
    return [k for k, b in enumerate(inputs) if updates_in_place(func, b.name, out.name)]


def _runtime_fingerprint() -> str:
    """A hash of the helpers generated kernels import (exp32, parallel_for, ...) and of the
    LLVM options they are compiled with.

    Numba's disk cache checks only the kernel's own module file, so a change
    to a helper it calls must change the kernel's name to be recompiled.
    """
    global _RUNTIME_FINGERPRINT
    if _RUNTIME_FINGERPRINT is None:
        here = Path(__file__).parent
        text = (
            b"".join(
                (here / name).read_bytes()
                for name in (
                    "runtime.py",
                    "threads.py",
                    "launch.py",
                    "vectors.py",
                    "direct.py",
                    "direct_lower.py",
                    "direct_types.py",
                    "direct_arrays.py",
                )
            )
            + " ".join(LLVM_OPTIONS).encode()
        )
        _RUNTIME_FINGERPRINT = hashlib.sha256(text).hexdigest()
    return _RUNTIME_FINGERPRINT


_RUNTIME_FINGERPRINT: str | None = None


@register_backend("cpu")
class NumbaCpuBackend(Backend):
    """``numba.njit`` kernels: thread-pool or ``prange`` parallel loops, SIMD through LLVM."""

    def resolve(self, options: BuildOptions) -> BuildOptions:
        return dataclasses.replace(options, launch=_launch(options.launch))

    def source(self, func: LoweredFunc, target: Target, options: BuildOptions) -> str:
        return _module_source(func, vectorizer(func, options), options, target)

    def compile(self, func: LoweredFunc, target: Target, options: BuildOptions) -> Kernel:
        vec = vectorizer(func, options)
        source = _module_source(func, vec, options, target)
        key = hashlib.sha256(
            (source + target.fingerprint + repr(options) + _runtime_fingerprint()).encode()
        ).hexdigest()[:20]
        name = f"k_{key}"
        if name in sys.modules:
            kernel = CpuKernel(func, source, sys.modules[name], target)
            kernel.wrote_cache = False
            return kernel
        path = write_module(name, source)
        return CpuKernel(func, source, _import(path, name, source, vec), target)

    def describe(self, kernel: Kernel) -> dict[str, Any] | None:
        assert isinstance(kernel, CpuKernel)
        func = kernel._signature
        if func.symbols:  # built once per process; the index keeps constant shapes only
            return None
        entry = {
            "module": kernel.module_name,
            "func": func.name,
            "args": [[b.name, list(b.shape), b.dtype, str(b.scope)] for b in func.args],
            "written": kernel._written,
            "parallel": kernel._parallel,
        }
        if kernel._lowered is not None:  # (the nest at hand: a restored kernel has none)
            entry["in_place"] = sorted(_in_place(kernel._lowered))
        return entry

    def restore(
        self,
        entry: Mapping[str, Any],
        target: Target,
        relower: Callable[[], LoweredFunc] | None = None,
    ) -> Kernel | None:
        """The kernel of ``entry`` from its module file, without lowering again.

        Its arguments and source come from the entry; its loop nest
        (``lowered``) only when asked for, from ``relower``.
        """
        name, func_name = str(entry["module"]), str(entry["func"])
        if not (name.startswith("k_") and name[2:].isalnum() and func_name.isidentifier()):
            return None
        path = cache_dir() / f"{name}.py"
        if name not in sys.modules and not path.exists():
            return None
        source = path.read_text() if path.exists() else ""
        vec = header_vectorizer(source)
        imported = sys.modules.get(name)
        module = imported or _import(path, name, source, vec)
        args = tuple(
            Buffer(str(n), tuple(int(d) for d in shape), str(dtype), Scope(scope), is_arg=True)
            for n, shape, dtype, scope in entry["args"]
        )
        signature = LoweredFunc(func_name, args, Seq(()))
        written = [int(k) for k in entry["written"]]
        parallel = bool(entry.get("parallel", True))  # (an entry written before it was kept)
        in_place = entry.get("in_place")  # (None: an entry written before; proved on demand)
        if in_place is not None:
            in_place = [int(k) for k in in_place]
        kernel = CpuKernel(signature, source, module, target, written, relower, parallel, in_place)
        kernel.wrote_cache = kernel.wrote_cache and imported is None
        return kernel

    def export_code(self, kernel: Kernel) -> tuple[dict[str, Any], dict[str, bytes]] | None:
        assert isinstance(kernel, CpuKernel)
        files = cached_files(kernel.module_name)
        return ({"module": kernel.module_name}, files) if files else None

    def install_code(self, shipped: Sequence[tuple[Mapping[str, Any], Mapping[str, bytes]]]) -> int:
        return install_files([(str(entry["module"]), files) for entry, files in shipped])
