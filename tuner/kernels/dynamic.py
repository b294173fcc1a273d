"""Operators over changing shapes: one callable, three ways to serve a shape it has not seen.

A dimension argument given as a symbol (``te.var``) is dynamic::

    f = tuner.build_op("matmul", M=te.var("M", max=4096), N=768, K=768, dynamic="generic")
    c = f(a, b)            # any number of rows up to 4096

``dynamic`` says how a new value is served (the seed's shape-transition
comparison, ``experiments/dynamic_shapes.py``, measures all three):

- ``"specialize"``: a kernel per concrete shape, compiled when the shape is
  first seen and cached (each with its own best record).
- ``"generic"``: one kernel whose extents are read from its arguments at each
  call, compiled once for every shape within the symbols' bounds. Its config
  is the best record of a representative shape (``at``, by default the
  geometric middle of each symbol's bounds), else its nearest tuned shape's,
  else the template's default there (operators in ``GENERIC``).
- ``"bucket"``: the dynamic dimensions are padded up to the next bucket (powers
  of two by default, or the sizes given), a kernel per bucket, the output
  sliced back. Padding uses the value each dimension declares neutral (zeros
  for a matmul's rows and its reduction, ``-inf`` for a softmax's columns);
  a dimension without one (layer norm's normalised columns) is served at its
  exact size.

Every build, with its shape and seconds, is listed in ``compiles``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from records import Record

from ..codegen.backend import bind_symbols, check_output
from ..lower.extent import evaluate, normal
from ..schedule import ScheduleError
from ..target import Target
from ..task import Task
from ..te import Tensor, Var
from .opkernel import OpKernel, build_task
from .resolve import BestRecords, resolve

__all__ = ["GENERIC", "MODES", "Compile", "DynamicOpKernel", "bucket_of", "buckets_for", "pad_to"]

#: How a module serves a shape (see the module's docstring).
MODES = ("specialize", "generic", "bucket")

#: The operators whose schedules take symbolic extents (tested at many shapes per kernel).
#: A config is chosen at one shape; at the others, lowering bounds every loop a tile does
#: not divide, so a tile larger than the extents stays correct.
GENERIC = frozenset(
    {"batch_matmul", "conv2d", "dense", "layer_norm", "log_softmax", "matmul", "softmax"}
)


@dataclass(frozen=True)
class Compile:
    """One kernel built while serving: the symbols' values it serves and the seconds it took."""

    values: tuple[tuple[str, int], ...]
    seconds: float


def buckets_for(var: Var, given: Sequence[int] | None = None) -> list[int]:
    """The bucket sizes of ``var``: ``given`` (sorted), else powers of two up to its bound.

    The last bucket is the symbol's ``max`` (a bound that is no power of two
    still gets a bucket of its own); an unbounded symbol needs given sizes.
    """
    if given is not None:
        sizes = sorted({int(b) for b in given})
        if not sizes or sizes[0] < 1:
            raise ValueError(f"buckets for {var.name} must be positive sizes, got {list(given)}")
        return sizes
    if var.hi is None:
        raise ValueError(f"bucketing {var.name} needs its max (te.var({var.name!r}, max=...))")
    sizes, b = [], 1
    while b < var.hi:
        if b >= var.lo:
            sizes.append(b)
        b *= 2
    return [*sizes, var.hi]


def bucket_of(
    values: Mapping[str, int], buckets: Mapping[str, Sequence[int] | None]
) -> dict[str, int]:
    """The bucket that serves each symbol's value: the smallest size not below it (a symbol
    whose buckets are None is served at its exact size). An operator's buckets and a
    model's both are chosen here."""
    out = {}
    for name, v in values.items():
        sizes = buckets.get(name)
        if sizes is None:
            out[name] = v
            continue
        up = next((b for b in sizes if b >= v), None)
        if up is None:
            raise ValueError(f"{name}={v} is above the largest bucket ({sizes[-1]})")
        out[name] = up
    return out


def _fill_of(fill: Mapping[str, float | None], d: Any) -> float:
    value = fill.get(d.name) if isinstance(d, Var) else None
    return 0.0 if value is None else value


def pad_to(a: np.ndarray, shape: tuple[int, ...], fills: Sequence[float]) -> np.ndarray:
    """``a`` in the corner of an array of ``shape``; along each axis, what lies past ``a`` is
    that axis's neutral value ``fills[axis]`` (zeros for a reduction, ``-inf`` for a
    softmax's columns). ``a`` itself when it has the shape already."""
    if a.shape == shape:
        return a
    big = np.empty(shape, a.dtype)
    big[tuple(slice(0, n) for n in a.shape)] = a
    for axis, m in enumerate(a.shape):
        if m < shape[axis]:
            big[(slice(None),) * axis + (slice(m, None),)] = fills[axis]
    return big


class DynamicOpKernel:
    """Operator ``op`` over symbolic dimension arguments: ``f(*inputs, out=None)``."""

    def __init__(
        self,
        op: str,
        args: Mapping[str, Any],
        target: Target,
        mode: str = "generic",
        records: BestRecords | None = None,
        buckets: Sequence[int] | Mapping[str, Sequence[int]] | None = None,
        at: Mapping[str, int] | None = None,
    ):
        from search_spaces import get_operator

        if mode not in MODES:
            raise ValueError(f"dynamic must be one of {', '.join(MODES)}, not {mode!r}")
        if mode == "generic" and op not in GENERIC:
            raise ValueError(
                f"{op} has no generic kernel (its schedule reads concrete extents); "
                f"use dynamic='specialize' or 'bucket' (generic: {', '.join(sorted(GENERIC))})"
            )
        self.op, self.target, self.mode, self.records = op, target, mode, records
        self.operator = get_operator(op)
        self.symbols = {v.name: v for v in args.values() if isinstance(v, Var)}
        self.params = {k: v.name for k, v in args.items() if isinstance(v, Var)}
        if not self.symbols:
            raise ValueError(f"{op}: no argument is a symbol (te.var); nothing is dynamic")
        self._args = dict(args)
        self.at = self._representative(at or {})
        #: The record a generic kernel's config came from (None: the default schedule).
        self.record: Record | None = None
        # The symbolic definition: where each input's dimensions come from.
        self.config = self._generic_config() if mode == "generic" else None
        cfg = self.config or self._task(self.at).default_config()
        sched, tensors = self.operator.schedule(cfg, self._parsed(self.at, symbolic=True), target)
        self._sched, self.tensors = sched, tensors
        # Read on every call: each argument's declared shape, each symbol's padding value.
        self._shapes = [(t.name, tuple(normal(d) for d in t.shape)) for t in tensors]
        pads = {p.name: p.pad for p in self.operator.params}
        self._fill = {name: pads[param] for param, name in self.params.items()}
        self.compiles: list[Compile] = []
        self._kernels: dict[tuple[int, ...], Any] = {}
        self._buckets = self._bucket_sizes(buckets) if mode == "bucket" else {}

    # -- arguments ---------------------------------------------------------
    def _representative(self, at: Mapping[str, int]) -> dict[str, int]:
        out = {}
        for param, name in self.params.items():
            v = self.symbols[name]
            if param in at:
                out[name] = int(at[param])
            else:
                hi = v.hi if v.hi is not None else max(v.lo, 64)
                out[name] = max(v.lo, round(math.sqrt(v.lo * hi)))
        return out

    def _concrete(self, values: Mapping[str, int]) -> dict[str, Any]:
        """The arguments with each symbol at its value in ``values``."""
        return {k: (values[v.name] if isinstance(v, Var) else v) for k, v in self._args.items()}

    def _parsed(self, values: Mapping[str, int], symbolic: bool = False) -> dict[str, Any]:
        """The operator's arguments at ``values`` (or with the symbols left in)."""
        parsed = self.operator.parse_args(self._concrete(values))
        if symbolic:
            parsed.update({k: self.symbols[name] for k, name in self.params.items()})
        return parsed

    def _task(self, values: Mapping[str, int]) -> Task:
        return Task.make(self.op, self._concrete(values), self.target)

    # -- generic ------------------------------------------------------------
    def _generic_config(self) -> dict[str, Any]:
        """The representative shape's record as ``resolve`` chooses it (its best record, else its
        nearest tuned shape's that fits, else the default), its knobs alone: a generic kernel
        is scheduled at symbolic extents, where no replayed trace of one shape applies."""
        choice = resolve(self._task(self.at), self.records, replay=False)
        choice.warn(stacklevel=4)
        self.record = choice.record
        return choice.config

    # -- buckets ----------------------------------------------------------
    def _bucket_sizes(
        self, buckets: Sequence[int] | Mapping[str, Sequence[int]] | None
    ) -> dict[str, list[int] | None]:
        out: dict[str, list[int] | None] = {}
        pads = {p.name: p.pad for p in self.operator.params}
        for param, name in self.params.items():
            given = buckets.get(param) if isinstance(buckets, Mapping) else buckets
            out[name] = None if pads.get(param) is None else buckets_for(self.symbols[name], given)
        return out

    def _pad(self, arrays: list[np.ndarray], served: dict[str, int]) -> list[np.ndarray]:
        """The inputs padded to the served shape with each dimension's neutral value."""
        out = []
        for a, (_, declared) in zip(arrays, self._shapes, strict=False):
            shape = tuple(evaluate(d, served) for d in declared)
            # a dimension without a neutral value (None) is served exactly: never padded
            fills = [_fill_of(self._fill, d) for d in declared]
            out.append(pad_to(a, shape, fills))
        return out

    # -- serving ----------------------------------------------------------
    def values(self, inputs: Sequence[np.ndarray]) -> dict[str, int]:
        """The symbols' values that ``inputs`` give (checked against their bounds)."""
        return bind_symbols(
            self._shapes, list(self.symbols.values()), [np.shape(a) for a in inputs]
        )

    def kernel_for(self, values: Mapping[str, int]) -> OpKernel:
        """The kernel that serves ``values`` (built, and timed into ``compiles``, when new)."""
        return self._serve(values)[1]

    def _serve(self, values: Mapping[str, int]) -> tuple[dict[str, int], OpKernel]:
        """The shape that serves ``values`` (the bucket, the shape itself, or none for generic)
        and its kernel."""
        if self.mode == "generic":
            served: dict[str, int] = {}
        elif self.mode == "bucket":
            served = bucket_of(values, self._buckets)
        else:
            served = dict(values)
        key = tuple(served[n] for n in sorted(served))
        kernel = self._kernels.get(key)
        if kernel is None:
            t0 = time.perf_counter()
            kernel = self._build(served)
            self.compiles.append(Compile(tuple(sorted(served.items())), time.perf_counter() - t0))
            self._kernels[key] = kernel
        return served, kernel

    def _build(self, served: Mapping[str, int]) -> OpKernel:
        if self.mode != "generic":
            return build_task(self._task(served), self.records)
        assert self.config is not None
        task = self._task(self.at)
        kernel = _build_symbolic(task, self._sched, self.tensors)
        return OpKernel(task.workload, kernel, self.config, self.record)

    def __call__(self, *inputs: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        arrays = [np.ascontiguousarray(a) for a in inputs]
        values = self.values(arrays)
        served, kernel = self._serve(values)
        if self.mode == "specialize":  # a constant-shape kernel, which checks ``out`` itself
            return kernel(*arrays, out=out)
        result = self.tensors[-1]
        shape = tuple(evaluate(d, values) for d in self._shapes[-1][1])
        if out is not None:
            check_output(out, shape, result.dtype, "out", arrays)
        if self.mode == "generic":
            out = out if out is not None else np.empty(shape, result.dtype)
            kernel.kernel(*arrays, out)
            return out
        full = kernel(*self._pad(arrays, served))
        part = full[tuple(slice(0, n) for n in shape)]
        if out is None:
            return np.ascontiguousarray(part)
        np.copyto(out, part)
        return out


def _build_symbolic(task: Task, sched: Any, tensors: list[Tensor]) -> Any:
    from ..codegen import build

    try:
        return build(sched, tensors, target=task.target)
    except ScheduleError as exc:
        raise ScheduleError(f"{task.op_name}: no generic kernel for this config ({exc})") from None
