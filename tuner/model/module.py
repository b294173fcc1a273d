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
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..codegen.backend import check_output
from ..graph.ir import Graph, GraphError, Value
from ..kernels import BestRecords, RecordChoiceWarning
from ..kernels.dynamic import MODES, bucket_of, buckets_for, pad_to
from ..target import Target
from ..te import Var
from .bucket import Padding, analyse, masked
from .generic import GenericKernels
from .lowered import Lowered, cache_key, external_files
from .runner import Plan, dims

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
    declared = {i: graph.values[i].shape for i in graph.inputs}
    generic = None
    if dynamic == "generic":
        generic = GenericKernels(model, symbols, declared, target, records, fuse)
        for note in generic.notes:
            warnings.warn(note, RecordChoiceWarning, stacklevel=3)
    sizes: dict[str, list[int]] = {}
    padding = None
    if dynamic == "bucket":
        for n, v in symbols.items():
            given = buckets.get(n) if isinstance(buckets, Mapping) else buckets
            if v.hi is None and given is None:
                raise ValueError(f"dynamic='bucket' needs a bound for {n}: bounds={{{n!r}: MAX}}")
            sizes[n] = buckets_for(v, given)
            if v.hi is not None and sizes[n][-1] < v.hi:
                raise ValueError(
                    f"the largest bucket of {n} ({sizes[n][-1]}) is below its bound {v.hi}"
                )
        padding = analyse(model, symbols, declared, graph.outputs)
    return Module(
        model,
        graph.values,
        graph.inputs,
        graph.outputs,
        target,
        records,
        fuse,
        dynamic=dynamic,
        symbols=symbols,
        buckets=sizes,
        padding=padding,
        generic=generic,
    )


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
        *,
        dynamic: str = "specialize",
        symbols: Mapping[str, Var] | None = None,
        buckets: Mapping[str, list[int]] | None = None,
        padding: Padding | None = None,
        generic: GenericKernels | None = None,
    ):
        """``dynamic`` and the rest: how symbolic dimensions are served (the module's
        docstring), their bounds, (bucket) their buckets and padding, (generic) the
        shape-generic kernels."""
        self.target, self.records, self.fuse = target, records, fuse
        self._source = source
        self._types = {name: values[name] for name in inputs}
        self._plans: dict[tuple[tuple[int, ...], ...], Plan] = {}
        #: Constants shared by the plans (one copy of the weights for all shapes).
        self._consts: dict[Any, list[np.ndarray]] = {}
        self._lock = threading.Lock()
        self.dynamic = dynamic
        self.symbols: dict[str, Var] = dict(symbols or {})
        self.buckets: dict[str, list[int]] = dict(buckets or {})
        self.padding = padding
        self.generic = generic
        self.input_names = list(inputs)
        self.output_names = list(outputs)
        #: The ONNX file a module loaded from a saved one was compiled from (path, SHA-256).
        self.source_model: dict[str, str] | None = None
        if lowered is not None:
            plan = Plan(lowered, target, records, consts=self._consts)
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
                    check_output(arr, dims(v), v.dtype, f"out for {name!r}", arrays)
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
        served = bucket_of(values, self.buckets)
        padded = []
        for name, arr in zip(self.input_names, arrays, strict=True):
            shape = tuple(
                served[d] if isinstance(d, str) else int(d) for d in self._types[name].shape
            )
            padded.append(pad_to(arr, shape, [0.0] * arr.ndim))
        sig = tuple(a.shape for a in padded)
        plan = self._plans.get(sig)
        if plan is None:
            from ..graph.onnx_import import from_onnx

            shapes = dict(zip(self.input_names, sig, strict=True))
            graph, masks = masked(from_onnx(self._source, shapes), self.padding)
            lowered = Lowered.from_graph(graph, self.target, self.fuse)
            plan = Plan(lowered, self.target, self.records, masks=masks, consts=self._consts)
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

    def _plan_for(self, arrays: list[np.ndarray]) -> Plan:
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
            plan = Plan(lowered, self.target, self.records, prebuilt, consts=self._consts)
            self._plans[sig] = plan
        return plan

    def save(self, path: str | os.PathLike[str]) -> Any:
        """Write the module as one file ``tuner.load`` reads back, on this machine or one of
        the same kind, without compiling (``tuner.model.artifact``); returns its path."""
        from .artifact import save

        return save(self, path)

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
    def plans(self) -> list[Plan]:
        """One compiled plan per input shape seen (or given)."""
        return list(self._plans.values())

    def report(self) -> list[dict[str, Any]]:
        """``summary`` as data: each compiled plan's ``Plan.report()`` (one per input shape)."""
        return [p.report() for p in self._plans.values()]

    def summary(self) -> str:
        """Fused groups and their tasks: weight, tuned or default, and each one's time share."""
        if not self._plans:
            return "not compiled yet: the model has symbolic input dimensions (run it once)"
        return "\n\n".join(p.summary() for p in self._plans.values())
