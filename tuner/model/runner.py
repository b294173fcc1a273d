"""One compiled plan of a model: its kernels for one set of input shapes, run in order.

A :class:`Plan` builds every distinct task once (``tuner.kernels.opkernel.build_task``,
the rest of a cold build in worker processes, ``tuner.model.prebuild``), lays
the values out (inputs and constants as given, intermediate values in one
arena placed by ``tuner.model.plan``, graph outputs allocated per call), runs
the kernels over those flat arrays and reports where the time went.
``tuner.model.module.Module`` holds one plan per input shape and picks the
plan for each call (padding to a bucket, or handing shape-generic kernels in).
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..graph.ir import GraphError, Value
from ..kernels import BestRecords, RecordChoiceWarning, UntunedWorkloadWarning, build_task
from ..lower.extent import evaluate
from ..target import Target
from .bucket import MaskInput
from .inplace import InPlace, in_place_concats
from .lowered import Lowered
from .overwrite import overwritten_inputs
from .plan import Interval, aligned_array, aligned_empty, assign_offsets, lifetimes
from .prebuild import prebuild
from .tasks import KernelSpec

__all__ = ["Plan", "TaskUse", "build_progress", "dims", "key_label", "short_key"]


@dataclass(frozen=True)
class TaskUse:
    """A distinct task of the module: how often it runs and what it was built from."""

    key: str
    ops: str
    weight: int
    tuned: bool
    #: The record's median time in seconds, when built from one.
    record_time: float | None


_Slot = int  # an index into a call's list of flat arrays


class Plan:
    """The model compiled for one set of input shapes."""

    def __init__(
        self,
        lowered: Lowered,
        target: Target,
        records: BestRecords | None,
        prebuilt: Sequence[tuple[Any, tuple[int, ...]]] | None = None,
        masks: Sequence[MaskInput] = (),
        consts: dict[Any, list[np.ndarray]] | None = None,
    ):
        """``prebuilt``: a kernel for each spec and the values of its symbolic extents (the
        shape-generic kernels of ``tuner.model.generic``), instead of building them.
        ``masks``: those a padded plan takes after the model's inputs (``tuner.model.bucket``).
        ``consts``: constants shared with the module's other plans (``Lowered.interned``)."""
        started = time.perf_counter()
        lowered = lowered.interned({} if consts is None else consts)
        self.target, self.lowered = target, lowered
        self.name = lowered.name
        self.signature = tuple(
            tuple(int(d) for d in lowered.values[i].shape) for i in lowered.inputs
        )
        self.specs = list(lowered.specs)
        self.values: dict[str, Value] = dict(lowered.values)
        #: Concatenations their producers write in place (``tuner.model.inplace``).
        self.in_place: list[InPlace] = []
        #: Outputs computed into an input's buffer, ``{output: input}`` (``tuner.model.overwrite``).
        self.overwrites: dict[str, str] = {}
        if prebuilt is None:
            self.in_place = in_place_concats(
                self.specs, self.values, lowered.outputs, lowered.views, target
            )
            dropped = {p.concat for p in self.in_place}
            self.specs = [s for k, s in enumerate(self.specs) if k not in dropped]
            pitch = {v: p.pitch for p in self.in_place for v in p.parts}
            pitches = [pitch.get(s.output, 0) for s in self.specs]
            self.kernels, self.untuned, self.notes = _build_all(self.specs, records, pitches)
            self._extents: list[tuple[int, ...]] = [() for _ in self.specs]
            kept = {n for pair in lowered.views for n in pair} | set(pitch)
            kept |= {p.value for p in self.in_place}
            self.overwrites = overwritten_inputs(
                self.specs, self.kernels, self.values, lowered.outputs, kept, target
            )
        else:
            self.kernels = [k for k, _ in prebuilt]
            self._extents = [e for _, e in prebuilt]
            self.untuned, self.notes = [], []
        self._layout()
        self.compile_seconds = time.perf_counter() - started
        self.step_seconds: list[float] | None = None
        self.masks = list(masks)
        self._warn()

    def distinct(self) -> list[tuple[KernelSpec, Any]]:
        """(spec, kernel) of each distinct task, in the order they first run."""
        seen: dict[str, tuple[KernelSpec, Any]] = {}
        for spec, k in zip(self.specs, self.kernels, strict=True):
            seen.setdefault(spec.task.key, (spec, k))
        return list(seen.values())

    @property
    def compiled(self) -> int:
        """Distinct kernels this plan compiled (in this process), not loaded from a cache."""
        return sum(bool(getattr(k.kernel, "wrote_cache", False)) for _, k in self.distinct())

    # -- building --------------------------------------------------------------------

    def _layout(self) -> None:
        """Storage for every value: inputs, constants, planned buffers and per-call outputs."""
        lw = self.lowered
        roots: dict[str, str] = {}
        for out, src in lw.views:
            roots[out] = roots.get(src, src)
        offsets_in: dict[str, tuple[str, int]] = {}  # a slice written in place: root, offset
        for place in self.in_place:
            for part, at in place.parts.items():
                roots[part] = place.value
                offsets_in[part] = (place.value, at)
        for out, src in self.overwrites.items():  # in the order they run: src's root is known
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
        self.arena = aligned_empty(max(total, 1))
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
            if v.data is not None:  # interned: owned, writable, C-contiguous
                slot(name, np.asarray(v.data).reshape(-1))
        for part, (root, at) in offsets_in.items():  # from the slice's first element on
            slots[part] = len(base)
            base.append(base[slots[root]][at:])

        def arg_slot(a: str) -> _Slot:
            return slots[a] if a in offsets_in else slots[root_of(a)]

        self._steps: list[tuple[Any, tuple[_Slot, ...], tuple[int, ...]]] = []
        for spec, kernel, ext in zip(self.specs, self.kernels, self._extents, strict=True):
            args = (*spec.inputs, spec.output)
            pitched = spec.output in offsets_in
            _check_args(spec, kernel, [self.values[a] for a in args], ext, pitched)
            fn = kernel.kernel._fn  # type: ignore[attr-defined]
            self._steps.append((fn, tuple(arg_slot(a) for a in args), ext))
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
            env[k] = bound[k].reshape(-1) if k in bound else aligned_array((size,), dtype)
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
                (env[k] if k in fresh else np.array(env[k])).reshape(dims(v))
                for k, v in self._outputs
            ]
        for (k, v), arr in zip(self._outputs, out, strict=True):
            if bound.get(k) is not arr:
                np.copyto(arr, env[k].reshape(dims(v)))
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

    def report(self) -> dict[str, Any]:
        """What ``summary`` says, as data: the plan, then one row per distinct task.

        Each task's ``share`` is of the last profiled run's time (None before one).
        """
        uses = self.tasks()
        share: dict[str, float] = {}
        if self.step_seconds is not None:
            total = sum(self.step_seconds) or 1.0
            for spec, t in zip(self.specs, self.step_seconds, strict=True):
                share[spec.task.key] = share.get(spec.task.key, 0.0) + t / total
        order = sorted(uses, key=lambda u: -share.get(u.key, 0.0)) if share else uses
        rows = [
            {
                "ops": u.ops,
                "weight": u.weight,
                "schedule": "tuned" if u.tuned else "default",
                "share": share.get(u.key),
                "record_ms": None if u.record_time is None else u.record_time * 1e3,
                "task": u.key,
            }
            for u in order
        ]
        return {
            "model": self.name,
            "inputs": [list(s) for s in self.signature],
            "target": self.target.kind,
            "threads": self.target.threads,
            "kernels": len(self.specs),
            "tuned": sum(u.tuned for u in uses),
            "compile_s": round(self.compile_seconds, 3),
            "buffers_mib": round(self.arena_bytes / 2**20, 3),
            "tasks": rows,
        }

    def summary(self) -> str:
        r = self.report()
        shape = ", ".join("x".join(map(str, s)) for s in r["inputs"])
        n = len(r["tasks"])
        lines = [
            f"model {r['model']} for inputs {shape} on {r['target']} "
            f"({r['threads']} threads): {r['kernels']} kernels, {n} tasks "
            f"({r['tuned']} tuned, {n - r['tuned']} default), compiled in {r['compile_s']:.1f} s, "
            f"{r['buffers_mib']:.1f} MiB of planned buffers",
            f"{'ops':<34} {'weight':>6}  {'schedule':<8} {'share':>6}  task",
        ]
        for row in r["tasks"]:
            pct = "     -" if row["share"] is None else f"{100 * row['share']:5.1f}%"
            ops = row["ops"] if len(row["ops"]) <= 34 else row["ops"][:31] + "..."
            lines.append(
                f"{ops:<34} {row['weight']:>6}  {row['schedule']:<8} {pct}  {short_key(row['task'])}"
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


def key_label(key: str) -> str:
    """A task key as tables and files name it: a generic group by its digest (its whole
    graph as text is the key), any other task by its whole key."""
    if key.startswith("fused(graph="):
        from ..graph.canonical import digest

        text, _, where = key[len("fused(graph=") :].rpartition(")@")
        return f"fused[{digest(text)}]@{where}"
    return key


def short_key(key: str) -> str:
    """A task key as the summary's last column shows it: :func:`key_label`, cut at 110
    characters."""
    label = key_label(key)
    return label if len(label) <= 110 else label[:107] + "..."


def dims(v: Value) -> tuple[int, ...]:
    return tuple(int(d) for d in v.shape)


#: Told (kernels built, kernels in all) as plans build; set with ``build_progress``.
_ON_KERNEL: ContextVar[Callable[[int, int], None] | None] = ContextVar("on_kernel", default=None)


@contextlib.contextmanager
def build_progress(callback: Callable[[int, int], None]) -> Iterator[None]:
    """Within the block, ``callback(built, total)`` after each distinct kernel a plan builds.

    >>> with build_progress(lambda done, total: print(f"{done}/{total}")):
    ...     module.run(feeds)
    """
    token = _ON_KERNEL.set(callback)
    try:
        yield
    finally:
        _ON_KERNEL.reset(token)


def _build_all(
    specs: Sequence[KernelSpec], records: BestRecords | None, pitches: Sequence[int]
) -> tuple[list[Any], list[str], list[str]]:
    """One kernel per distinct task and output pitch (``build_task``'s ``out_pitch``, 0 for
    none); the untuned task keys and the record notes, collected."""
    built: dict[tuple[str, int], Any] = {}
    untuned: list[str] = []
    notes: list[str] = []
    keys = [(s.task.key, p) for s, p in zip(specs, pitches, strict=True)]
    distinct = list({k: (s.task, k[1]) for k, s in zip(keys, specs, strict=True)}.values())
    told = _ON_KERNEL.get()
    if told is not None:
        told(0, len(distinct))
    for spec, key in zip(specs, keys, strict=True):
        if key in built:
            continue
        if len(built) == 1 and _cold(next(iter(built.values()))):
            prebuild(distinct[1:], records)  # the rest into the kernel cache, one process per core
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            built[key] = build_task(spec.task, records, out_pitch=key[1])
        if told is not None:
            told(len(built), len(distinct))
        if records is not None and built[key].record is None:
            untuned.append(spec.ops)
        notes.extend(str(w.message) for w in caught if issubclass(w.category, RecordChoiceWarning))
    return [built[k] for k in keys], untuned, notes


def _cold(kernel: Any) -> bool:
    """Whether ``kernel`` was compiled into the disk cache (which workers can fill too)."""
    return bool(getattr(kernel.kernel, "wrote_cache", False))


def _check_args(
    spec: KernelSpec,
    kernel: Any,
    values: Sequence[Value],
    extents: tuple[int, ...] = (),
    pitched: bool = False,
) -> None:
    """The kernel's buffers must take the values' element counts and dtypes (flat, row-major);
    a shape-generic kernel's at ``extents`` (its symbols' values, in order). A ``pitched``
    output (a slice written in place) is checked by its rows instead."""
    bufs = kernel.kernel.args
    symbols = kernel.kernel.lowered.symbols if extents else ()
    at = {v.name: e for v, e in zip(symbols, extents, strict=True)}
    if len(bufs) != len(values):
        raise GraphError(
            f"kernel for {spec.ops} takes {len(bufs)} arrays, the model gives {len(values)}"
        )
    for buf, v in zip(bufs, values, strict=True):
        shape = [evaluate(d, at) for d in buf.shape]
        if pitched and buf is bufs[-1]:
            shape[-1] = int(v.shape[-1])
        size = int(np.prod(shape))
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
