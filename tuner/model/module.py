"""A compiled model: kernels in order over planned buffers, and ``compile_model``.

>>> mod = tuner.compile_model("resnet50.onnx", log="tune.jsonl")
>>> outs = mod.run({"data": x})          # the graph's outputs, in order
>>> print(mod.summary())

``compile_model`` imports the model (``tuner.graph.onnx_import``), optimizes
it (``tuner.graph.passes``), fuses it (``tuner.graph.fusion``), turns each
group into a task (``tuner.model.tasks``) and builds every distinct task once
with its best record for the target and thread count (defaults, with one
warning listing them, for tasks the logs do not cover).

A model whose inputs have symbolic dimensions (``input: float32[batch, seq,
768]``) takes any value of them within ``bounds`` (``{"seq": 512}`` or
``{"seq": (8, 512)}``); a value outside is one clear error. ``dynamic`` says
how a new value is served:

- ``"specialize"`` (the default): the model is compiled for each shape on
  first sight (at once for ``shapes=``) and kept.
- ``"bucket"``: each symbol is padded up to its next bucket (powers of two
  up to its bound, or ``buckets=``), the model compiled per bucket, softmaxes
  over a padded axis masked and the outputs sliced back
  (``tuner.model.bucket`` checks first that padding cannot change results).
- ``"generic"``: every task is built once, before the first call, as a
  kernel whose extents are arguments (``tuner.model.generic``); a new shape
  only plans its buffers.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..codegen.backend import check_output
from ..compile import BestRecords, RecordChoiceWarning, UntunedWorkloadWarning, build_task
from ..dynamic import MODES, buckets_for
from ..graph.ir import Graph, GraphError, Value
from ..lower.extent import evaluate
from ..target import Target
from ..te import Var
from .bucket import MaskInput, Padding, analyse, masked
from .generic import GenericKernels
from .lowered import Lowered, cache_key, external_files
from .plan import Interval, assign_offsets, lifetimes
from .prebuild import prebuild
from .tasks import KernelSpec

__all__ = ["ModelInputError", "Module", "compile_model"]


class ModelInputError(ValueError):
    """Arrays given to ``Module.run`` that the model does not take (one line)."""


def compile_model(
    model: str | os.PathLike[str] | Any,
    log: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
    *,
    shapes: Mapping[str, Sequence[int] | int] | None = None,
    target: str | Target = "cpu",
    fuse: bool = True,
    dynamic: str = "specialize",
    bounds: Mapping[str, int | tuple[int, int]] | None = None,
    buckets: Sequence[int] | Mapping[str, Sequence[int]] | None = None,
) -> Module:
    """Compile an ONNX model (a path or an ``onnx.ModelProto``) into a runnable module.

    ``log``: tuning logs (a file, a list, or a folder) whose best records the
    kernels use. ``shapes`` gives symbolic input dimensions their values: an
    input's name with its whole shape (``{"input": (8, 3, 224, 224)}``) or a
    symbol's name with its value (``{"batch": 8}``).
    ``fuse=False`` builds one kernel per operator (the unfused baseline).
    ``dynamic``, ``bounds`` and ``buckets``: how symbolic dimensions are
    served (the module's docstring).
    """
    if dynamic not in MODES:
        raise ValueError(f"dynamic must be one of {', '.join(MODES)}, not {dynamic!r}")
    tgt = Target.from_name(target) if isinstance(target, str) else target
    records = BestRecords(log) if log is not None else None  # type: ignore[arg-type]
    key = cache_key(model, shapes, tgt, fuse)
    lowered = Lowered.load(key, model, tgt) if key is not None else None
    if lowered is not None:  # compiled before: no import, no passes
        return Module(
            model, lowered.values, lowered.inputs, lowered.outputs, tgt, records, fuse, lowered
        )
    from ..graph.onnx_import import from_onnx  # onnx itself takes a second to import

    graph = from_onnx(model, shapes)
    static = all(graph.values[i].static for i in graph.inputs)
    if not static:
        return _dynamic_module(model, graph, tgt, records, fuse, dynamic, bounds, buckets)
    if bounds:
        raise ValueError(f"bounds for {', '.join(bounds)}: the model has no symbolic dimension")
    first = Lowered.from_graph(graph, tgt, fuse)
    mod = Module(model, graph.values, graph.inputs, graph.outputs, tgt, records, fuse, first)
    if key is not None:
        first.save(key, external_files(model))
    return mod


def _dynamic_module(
    model: Any,
    graph: Graph,
    target: Target,
    records: BestRecords | None,
    fuse: bool,
    dynamic: str,
    bounds: Mapping[str, int | tuple[int, int]] | None,
    buckets: Sequence[int] | Mapping[str, Sequence[int]] | None,
) -> Module:
    names = list(
        dict.fromkeys(d for i in graph.inputs for d in graph.values[i].shape if isinstance(d, str))
    )
    symbols = {n: _bounded(n, (bounds or {}).get(n)) for n in names}
    unknown = sorted(set(bounds or {}) - set(names))
    if unknown:
        raise ValueError(
            f"bounds for {unknown[0]!r}: the model's symbolic dimensions are {', '.join(names)}"
        )
    mod = Module(model, graph.values, graph.inputs, graph.outputs, target, records, fuse)
    mod.symbols = symbols
    declared = {i: graph.values[i].shape for i in graph.inputs}
    if dynamic == "generic":
        mod.generic = GenericKernels(model, symbols, declared, target, records, fuse)
        for note in mod.generic.notes:
            warnings.warn(note, RecordChoiceWarning, stacklevel=3)
    if dynamic == "bucket":
        sizes = {}
        for n, v in symbols.items():
            given = buckets.get(n) if isinstance(buckets, Mapping) else buckets
            if v.hi is None and given is None:
                raise ValueError(f"dynamic='bucket' needs a bound for {n}: bounds={{{n!r}: MAX}}")
            sizes[n] = buckets_for(v, given)
            if v.hi is not None and sizes[n][-1] < v.hi:
                raise ValueError(
                    f"the largest bucket of {n} ({sizes[n][-1]}) is below its bound {v.hi}"
                )
        mod.padding = analyse(model, symbols, declared, graph.outputs)
        mod.buckets = sizes
    mod.dynamic = dynamic
    return mod


def _bounded(name: str, bound: int | tuple[int, int] | None) -> Var:
    """The symbol ``name`` with its bounds: ``MAX``, ``(MIN, MAX)`` or none."""
    if bound is None:
        lo, hi = 1, None
    elif isinstance(bound, int) and not isinstance(bound, bool):
        lo, hi = 1, bound
    elif isinstance(bound, Sequence) and len(bound) == 2 and all(isinstance(b, int) for b in bound):
        lo, hi = int(bound[0]), int(bound[1])
    else:
        raise ValueError(f"bounds for {name!r} must be MAX or (MIN, MAX), got {bound!r}")
    if lo < 1 or (hi is not None and hi < lo):
        raise ValueError(f"bounds for {name!r} must have 1 <= MIN <= MAX, got ({lo}, {hi})")
    return Var(name, "int64", lo, hi)


@dataclass(frozen=True)
class TaskUse:
    """A distinct task of the module: how often it runs and what it was built from."""

    key: str
    ops: str
    weight: int
    tuned: bool
    #: The record's median time in seconds, when built from one.
    record_time: float | None


class Module:
    """A model compiled for one target; ``run`` takes a dict of arrays like onnxruntime's."""

    def __init__(
        self,
        source: Any,
        values: Mapping[str, Value],
        inputs: Sequence[str],
        outputs: Sequence[str],
        target: Target,
        records: BestRecords | None,
        fuse: bool = True,
        lowered: Lowered | None = None,
    ):
        self.target, self.records, self.fuse = target, records, fuse
        self._source = source
        self._types = {name: values[name] for name in inputs}
        self._plans: dict[tuple[tuple[int, ...], ...], _Plan] = {}
        self._lock = threading.Lock()
        #: How symbolic dimensions are served, their bounds, and (bucket) their buckets.
        self.dynamic = "specialize"
        self.symbols: dict[str, Var] = {}
        self.buckets: dict[str, list[int]] = {}
        self.padding: Padding | None = None
        self.generic: GenericKernels | None = None
        self.input_names = list(inputs)
        self.output_names = list(outputs)
        if lowered is not None:
            plan = _Plan(lowered, target, records)
            self._plans[plan.signature] = plan

    # -- running ---------------------------------------------------------------------

    def run(
        self, feeds: Mapping[str, np.ndarray], out: Sequence[np.ndarray] | None = None
    ) -> list[np.ndarray]:
        """The model's outputs for ``feeds`` (every input by name), in the graph's order.

        ``out``: one array per output, in that order, written in place and
        returned (a serving loop then allocates nothing per call).
        """
        arrays = self._check(feeds)
        values = self._bind(arrays)
        if self.padding is not None:
            return self._run_padded(arrays, values, out)
        plan = self._plan_for(arrays)
        if out is not None:
            out = list(out)
            if len(out) != len(self.output_names):
                raise ModelInputError(
                    f"out has {len(out)} arrays; the model has {len(self.output_names)} outputs"
                )
            for name, arr, (_, v) in zip(self.output_names, out, plan.outputs, strict=True):
                try:
                    check_output(arr, _dims(v), v.dtype, f"out for {name!r}", arrays)
                except (TypeError, ValueError) as exc:
                    raise ModelInputError(str(exc)) from None
            for k, arr in enumerate(out):
                if any(np.may_share_memory(arr, other) for other in out[:k]):
                    raise ModelInputError(f"out for {self.output_names[k]!r} shares memory")
        with self._lock:  # the planned buffers are shared by calls
            return plan.run(arrays, out)

    __call__ = run

    def _check(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        unknown = sorted(set(feeds) - set(self.input_names))
        if unknown:
            raise ModelInputError(
                f"the model has no input {unknown[0]!r}; its inputs are {', '.join(self.input_names)}"
            )
        arrays = []
        for name in self.input_names:
            if name not in feeds:
                raise ModelInputError(f"input {name!r} is missing")
            value = self._types[name]
            arr = np.asarray(feeds[name])
            if arr.dtype.name != value.dtype:
                raise ModelInputError(f"input {name!r} must be {value.dtype}, got {arr.dtype.name}")
            if arr.ndim != len(value.shape) or any(
                isinstance(d, int) and d != n for d, n in zip(value.shape, arr.shape, strict=True)
            ):
                want = "x".join(str(d) for d in value.shape)
                got = "x".join(str(d) for d in arr.shape) or "a scalar"
                raise ModelInputError(f"input {name!r} must have shape {want}, got {got}")
            arr = np.asarray(arr, order="C")  # (ascontiguousarray would make a scalar 1-d)
            # Kernels take writable arrays (Numba types read-only ones apart): copy a frozen input.
            arrays.append(arr if arr.flags.writeable else arr.copy())
        return arrays

    def _bind(self, arrays: Sequence[np.ndarray]) -> dict[str, int]:
        """Each symbol's value in ``arrays`` (the same in every input, within its bounds)."""
        values: dict[str, int] = {}
        for name, arr in zip(self.input_names, arrays, strict=True):
            for axis, d in enumerate(self._types[name].shape):
                if not isinstance(d, str):
                    continue
                n = int(arr.shape[axis])
                seen = values.setdefault(d, n)
                if seen != n:
                    raise ModelInputError(
                        f"input {name!r} has {d}={n} on axis {axis}, another input has {d}={seen}"
                    )
                v = self.symbols.get(d)
                if v is not None and (n < v.lo or (v.hi is not None and n > v.hi)):
                    hi = "" if v.hi is None else str(v.hi)
                    raise ModelInputError(
                        f"input {name!r} has {d}={n} on axis {axis}, outside its bounds {v.lo}..{hi}"
                    )
        return values

    def _run_padded(
        self, arrays: list[np.ndarray], values: dict[str, int], out: Sequence[np.ndarray] | None
    ) -> list[np.ndarray]:
        """Run the bucket that holds ``values``: inputs padded with zeros, outputs sliced back."""
        assert self.padding is not None
        served = {s: next(b for b in self.buckets[s] if b >= n) for s, n in values.items()}
        padded = []
        for name, arr in zip(self.input_names, arrays, strict=True):
            shape = tuple(
                served[d] if isinstance(d, str) else int(d) for d in self._types[name].shape
            )
            if shape != arr.shape:
                big = np.zeros(shape, arr.dtype)
                big[tuple(slice(0, n) for n in arr.shape)] = arr
                arr = big
            padded.append(arr)
        sig = tuple(a.shape for a in padded)
        plan = self._plans.get(sig)
        if plan is None:
            from ..graph.onnx_import import from_onnx

            shapes = dict(zip(self.input_names, sig, strict=True))
            graph, masks = masked(from_onnx(self._source, shapes), self.padding)
            plan = _Plan(
                Lowered.from_graph(graph, self.target, self.fuse), self.target, self.records
            )
            plan.masks = masks
            self._plans[sig] = plan
        feeds = padded + [m.array(values[m.symbol], served[m.symbol]) for m in plan.masks]
        cuts = []
        for cut, (_, v) in zip(self.padding.slices, plan.outputs, strict=True):
            by_axis = dict(cut)
            cuts.append(
                tuple(
                    slice(0, values[by_axis[k]]) if k in by_axis else slice(None)
                    for k in range(len(v.shape))
                )
            )
        with self._lock:
            full = plan.run(feeds)
        parts = [y[c] for y, c in zip(full, cuts, strict=True)]
        if out is None:
            return [np.ascontiguousarray(p) for p in parts]
        out = list(out)
        if len(out) != len(parts):
            raise ModelInputError(
                f"out has {len(out)} arrays; the model has {len(self.output_names)} outputs"
            )
        for name, arr, part in zip(self.output_names, out, parts, strict=True):
            try:
                check_output(arr, part.shape, part.dtype.name, f"out for {name!r}", arrays)
            except (TypeError, ValueError) as exc:
                raise ModelInputError(str(exc)) from None
            np.copyto(arr, part)
        return out

    def _plan_for(self, arrays: list[np.ndarray]) -> _Plan:
        sig = tuple(tuple(a.shape) for a in arrays)
        plan = self._plans.get(sig)
        if plan is None:
            from ..graph.onnx_import import from_onnx

            shapes = dict(zip(self.input_names, sig, strict=True))
            graph = from_onnx(self._source, shapes)
            generic = self.generic is not None
            lowered = Lowered.from_graph(
                graph, self.target, self.fuse, layout=not generic, inline=not generic
            )
            prebuilt = None
            if self.generic is not None:  # the kernels are built: only plan this shape
                try:
                    prebuilt = self.generic.prebuilt(lowered, self._bind(arrays))
                except GraphError:
                    # A shape where an extent is 1 can lower to other kernels (a transpose
                    # of a unit axis is a view): this one shape gets kernels of its own.
                    warnings.warn(
                        f"generic: inputs of shapes {list(sig)} lower to other kernels than the"
                        " probe shapes; compiling kernels for this shape on its own",
                        stacklevel=3,
                    )
            plan = _Plan(lowered, self.target, self.records, prebuilt)
            self._plans[sig] = plan
        return plan

    # -- reporting -------------------------------------------------------------------

    def profile(self, feeds: Mapping[str, np.ndarray], repeat: int = 10) -> Any:
        """One row per kernel, in the order they run, as a pandas DataFrame: the ONNX nodes
        it computes, its operators, task and output shape, its median milliseconds over
        ``repeat`` runs on ``feeds``, its share of the model's time, and whether a tuning
        record or the default scheduled it (``tuner.model.profile``; ``summary`` then
        shows the shares too).

        >>> mod.profile({"input": x}).sort_values("ms", ascending=False).head()
        """
        import pandas as pd

        from .profile import COLUMNS, rows

        if self.padding is not None:
            raise ModelInputError("profile runs a model compiled for exact shapes, not buckets")
        arrays = self._check(feeds)
        self._bind(arrays)
        plan = self._plan_for(arrays)
        with self._lock:
            seconds = plan.profile(arrays, repeat)
        return pd.DataFrame(rows(plan, seconds), columns=list(COLUMNS))

    @property
    def plans(self) -> list[_Plan]:
        """One compiled plan per input shape seen (or given)."""
        return list(self._plans.values())

    def summary(self) -> str:
        """Fused groups and their tasks: weight, tuned or default, and each one's time share."""
        if not self._plans:
            return "not compiled yet: the model has symbolic input dimensions (run it once)"
        return "\n\n".join(p.summary() for p in self._plans.values())


_Slot = int  # an index into a call's list of flat arrays


class _Plan:
    """The model compiled for one set of input shapes."""

    def __init__(
        self,
        lowered: Lowered,
        target: Target,
        records: BestRecords | None,
        prebuilt: Sequence[tuple[Any, tuple[int, ...]]] | None = None,
    ):
        """``prebuilt``: a kernel for each spec and the values of its symbolic extents (the
        shape-generic kernels of ``tuner.model.generic``), instead of building them."""
        started = time.perf_counter()
        self.target, self.lowered = target, lowered
        self.name = lowered.name
        self.signature = tuple(
            tuple(int(d) for d in lowered.values[i].shape) for i in lowered.inputs
        )
        self.specs = list(lowered.specs)
        self.values: dict[str, Value] = dict(lowered.values)
        if prebuilt is None:
            self.kernels, self.untuned, self.notes = _build_all(self.specs, records)
            self._extents: list[tuple[int, ...]] = [() for _ in self.specs]
        else:
            self.kernels = [k for k, _ in prebuilt]
            self._extents = [e for _, e in prebuilt]
            self.untuned, self.notes = [], []
        self._layout()
        self.compile_seconds = time.perf_counter() - started
        self.step_seconds: list[float] | None = None
        #: The masks a padded plan takes after the model's inputs (``tuner.model.bucket``).
        self.masks: list[MaskInput] = []
        self._warn()

    # -- building --------------------------------------------------------------------

    def _layout(self) -> None:
        """Storage for every value: inputs, constants, planned buffers and per-call outputs."""
        lw = self.lowered
        roots: dict[str, str] = {}
        for out, src in lw.views:
            roots[out] = roots.get(src, src)

        def root_of(v: str) -> str:
            return roots.get(v, v)

        out_roots = {root_of(o) for o in lw.outputs}
        writes = {s.output: k for k, s in enumerate(self.specs)}
        reads: dict[str, list[int]] = {}
        for k, s in enumerate(self.specs):
            for i in s.inputs:
                reads.setdefault(i, []).append(k)
        planned = [
            r for r in dict.fromkeys(root_of(s.output) for s in self.specs) if r not in out_roots
        ]
        spans = lifetimes(writes, reads, roots)
        needs = [Interval(r, self._nbytes(r), *spans[r]) for r in planned if r in spans]
        offsets, total = assign_offsets(needs)
        self.arena = np.empty(max(total, 1), np.uint8)
        self.arena_bytes = total

        slots: dict[str, _Slot] = {}
        base: list[Any] = []

        def slot(root: str, array: Any) -> _Slot:
            if root not in slots:
                slots[root] = len(base)
                base.append(array)
            return slots[root]

        self._input_slots = [slot(i, None) for i in lw.inputs]
        for r in planned:
            v = self.values[r]
            start = offsets[r]
            view = self.arena[start : start + self._nbytes(r)].view(v.dtype)
            slot(r, view)
        self._out_roots = [
            (slot(r, None), self.values[r].dtype, self.values[r].size)
            for r in dict.fromkeys(root_of(o) for o in lw.outputs)
            if r not in lw.inputs and not self.values[r].is_const
        ]
        for r in dict.fromkeys(root_of(o) for o in lw.outputs):
            if r not in writes and r not in lw.inputs and not self.values[r].is_const:
                raise GraphError(f"output value {r!r} is computed by no kernel")
        for name, v in self.values.items():
            if v.data is not None:
                data = np.array(v.data, order="C")  # an owned, writable copy
                slot(name, data.reshape(-1))
        self._steps: list[tuple[Any, tuple[_Slot, ...], tuple[int, ...]]] = []
        for spec, kernel, ext in zip(self.specs, self.kernels, self._extents, strict=True):
            args = (*spec.inputs, spec.output)
            _check_args(spec, kernel, [self.values[a] for a in args], ext)
            fn = kernel.kernel._fn  # type: ignore[attr-defined]
            self._steps.append((fn, tuple(slots[root_of(a)] for a in args), ext))
        self._base = base
        self._outputs = [(slots[root_of(o)], self.values[o]) for o in lw.outputs]
        #: Slots allocated per call: returned as they are; any other output is copied.
        self._fresh = {k for k, _, _ in self._out_roots}

    def _nbytes(self, name: str) -> int:
        v = self.values[name]
        return v.size * np.dtype(v.dtype).itemsize

    # -- running ---------------------------------------------------------------------

    @property
    def outputs(self) -> list[tuple[_Slot, Value]]:
        """Each graph output's slot and value, in the graph's order."""
        return list(self._outputs)

    def _env(self, arrays: Sequence[np.ndarray], bound: Mapping[_Slot, np.ndarray]) -> list[Any]:
        """A call's flat arrays by slot: the planned ones, the inputs, the outputs.

        An output slot in ``bound`` is the caller's array; the others are fresh.
        """
        env = list(self._base)
        for k, arr in zip(self._input_slots, arrays, strict=True):
            env[k] = arr.reshape(-1)
        for k, dtype, size in self._out_roots:
            env[k] = bound[k].reshape(-1) if k in bound else np.empty(size, dtype)
        _set_threads(self.target)
        return env

    def run(
        self, arrays: Sequence[np.ndarray], out: Sequence[np.ndarray] | None = None
    ) -> list[np.ndarray]:
        # A caller's array is written by the kernels themselves where it is a
        # whole output root (the usual case); else it is filled by a copy.
        bound: dict[_Slot, np.ndarray] = {}
        if out is not None:
            for (k, _), arr in zip(self._outputs, out, strict=True):
                if k in self._fresh and k not in bound:
                    bound[k] = arr
        env = self._env(arrays, bound)
        for fn, idx, ext in self._steps:
            fn(*[env[i] for i in idx], *ext)
        if out is None:
            fresh = self._fresh
            return [
                (env[k] if k in fresh else np.array(env[k])).reshape(_dims(v))
                for k, v in self._outputs
            ]
        for (k, v), arr in zip(self._outputs, out, strict=True):
            if bound.get(k) is not arr:
                np.copyto(arr, env[k].reshape(_dims(v)))
        return list(out)

    def profile(self, arrays: Sequence[np.ndarray], repeat: int = 10) -> list[float]:
        """Median seconds of each kernel over ``repeat`` runs (kept for ``summary``)."""
        env = self._env(arrays, {})
        samples: list[list[float]] = [[] for _ in self._steps]
        for _ in range(repeat):
            for j, (fn, idx, ext) in enumerate(self._steps):
                args = [*(env[i] for i in idx), *ext]
                t0 = time.perf_counter()
                fn(*args)
                samples[j].append(time.perf_counter() - t0)
        self.step_seconds = [float(np.median(s)) for s in samples]
        return self.step_seconds

    # -- reporting -------------------------------------------------------------------

    def tasks(self) -> list[TaskUse]:
        uses: dict[str, TaskUse] = {}
        for spec, kernel in zip(self.specs, self.kernels, strict=True):
            key = spec.task.key
            if key in uses:
                u = uses[key]
                uses[key] = TaskUse(key, u.ops, u.weight + 1, u.tuned, u.record_time)
            else:
                rec = kernel.record
                uses[key] = TaskUse(
                    key, spec.ops, 1, rec is not None, rec.median if rec is not None else None
                )
        return list(uses.values())

    def summary(self) -> str:
        shape = ", ".join("x".join(map(str, s)) for s in self.signature)
        uses = self.tasks()
        tuned = sum(u.tuned for u in uses)
        lines = [
            f"model {self.name} for inputs {shape} on {self.target.kind} "
            f"({self.target.threads} threads): {len(self.specs)} kernels, {len(uses)} tasks "
            f"({tuned} tuned, {len(uses) - tuned} default), compiled in {self.compile_seconds:.1f} s, "
            f"{self.arena_bytes / 2**20:.1f} MiB of planned buffers"
        ]
        share: dict[str, float] = {}
        if self.step_seconds is not None:
            total = sum(self.step_seconds) or 1.0
            for spec, t in zip(self.specs, self.step_seconds, strict=True):
                share[spec.task.key] = share.get(spec.task.key, 0.0) + t / total
        lines.append(f"{'ops':<34} {'weight':>6}  {'schedule':<8} {'share':>6}  task")
        order = sorted(uses, key=lambda u: -share.get(u.key, 0.0)) if share else uses
        for u in order:
            pct = f"{100 * share[u.key]:5.1f}%" if u.key in share else "     -"
            ops = u.ops if len(u.ops) <= 34 else u.ops[:31] + "..."
            key = _short_key(u.key)
            lines.append(
                f"{ops:<34} {u.weight:>6}  {'tuned' if u.tuned else 'default':<8} {pct}  {key}"
            )
        return "\n".join(lines)

    def _warn(self) -> None:
        if self.untuned:
            shown = ", ".join(self.untuned[:5]) + (" ..." if len(self.untuned) > 5 else "")
            warnings.warn(
                f"{len(self.untuned)} of {len(self.tasks())} tasks have no tuning record on "
                f"{self.target.kind} and use default schedules: {shown}",
                UntunedWorkloadWarning,
                stacklevel=5,
            )
        for note in self.notes:
            warnings.warn(note, RecordChoiceWarning, stacklevel=5)


def _short_key(key: str) -> str:
    """A task key as the summary shows it: a generic group by its digest, not its whole text."""
    if key.startswith("fused(graph="):
        from ..graph.canonical import digest

        text, _, where = key[len("fused(graph=") :].rpartition(")@")
        return f"fused[{digest(text)}]@{where}"
    return key if len(key) <= 110 else key[:107] + "..."


def _dims(v: Value) -> tuple[int, ...]:
    return tuple(int(d) for d in v.shape)


def _build_all(
    specs: Sequence[KernelSpec], records: BestRecords | None
) -> tuple[list[Any], list[str], list[str]]:
    """One kernel per distinct task; the untuned task keys and the record notes, collected."""
    built: dict[str, Any] = {}
    untuned: list[str] = []
    notes: list[str] = []
    distinct = list({s.task.key: s.task for s in specs}.values())
    for spec in specs:
        key = spec.task.key
        if key in built:
            continue
        if len(built) == 1 and _cold(next(iter(built.values()))):
            prebuild(distinct[1:], records)  # the rest into the kernel cache, one process per core
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            built[key] = build_task(spec.task, records)
        if records is not None and built[key].record is None:
            untuned.append(spec.ops)
        notes.extend(str(w.message) for w in caught if issubclass(w.category, RecordChoiceWarning))
    return [built[s.task.key] for s in specs], untuned, notes


def _cold(kernel: Any) -> bool:
    """Whether ``kernel`` was compiled into the disk cache (which workers can fill too)."""
    return bool(getattr(kernel.kernel, "wrote_cache", False))


def _check_args(
    spec: KernelSpec, kernel: Any, values: Sequence[Value], extents: tuple[int, ...] = ()
) -> None:
    """The kernel's buffers must take the values' element counts and dtypes (flat, row-major);
    a shape-generic kernel's at ``extents`` (its symbols' values, in order)."""
    bufs = kernel.kernel.args
    symbols = kernel.kernel.lowered.symbols if extents else ()
    at = {v.name: e for v, e in zip(symbols, extents, strict=True)}
    if len(bufs) != len(values):
        raise GraphError(
            f"kernel for {spec.ops} takes {len(bufs)} arrays, the model gives {len(values)}"
        )
    for buf, v in zip(bufs, values, strict=True):
        size = int(np.prod([evaluate(d, at) for d in buf.shape]))
        if size != v.size or buf.dtype != v.dtype:
            raise GraphError(
                f"kernel for {spec.ops}: argument {buf.name} is {buf.dtype}[{size}], "
                f"value {v.name} is {v.type_text()}"
            )


def _set_threads(target: Target) -> None:
    threads = int(target.get("threads", 0))
    if threads:
        import numba

        numba.set_num_threads(min(threads, int(numba.config.NUMBA_NUM_THREADS)))  # type: ignore[attr-defined]
