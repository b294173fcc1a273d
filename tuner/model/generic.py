"""Serving a model's symbolic dimensions with one build: shape-generic kernels, planned per shape.

With ``compile_model(..., dynamic="generic")`` every task of the model is
built once, as a kernel whose extents are arguments, before the first call.
A new shape then costs only its planning (import, passes, fusion and buffer
layout, a fraction of a second) and no compile.

Which extents of which task follow which symbol is found, as for buckets
(``tuner.model.bucket``), by lowering the model at two probe shapes per
symbol: an extent that changes is a product of the symbols (``batch * seq``
rows for a dense layer, ``seq`` columns for a softmax), fitted from the
probes and checked at every shape served. Each such product becomes one
symbolic extent of the kernel (``te.var`` with the bounds the symbols'
bounds give), so identical layers share one kernel.

The kernels come from the templates' symbolic schedules (``tuner.kernels.dynamic``:
dense, matmul, batch_matmul, softmax, layer norm...) and from the generic
``fused`` operator over the group with symbolic shapes (transposes,
elementwise chains). A task whose lowering needs constant extents (a reshape
that splits a symbolic axis inside a group, a concat along one) is refused in
one line naming it; ``dynamic="bucket"`` serves such a model.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..graph.canonical import decode
from ..graph.ir import Graph, GraphError, Value
from ..kernels import BestRecords, OpKernel, RecordChoiceWarning, resolve
from ..target import Target
from ..task import Task
from ..te import Var
from ..te.tensor import TensorError
from .bucket import probe_values
from .lowered import Lowered
from .tasks import KernelSpec

__all__ = ["GenericKernels", "Product"]


@dataclass(frozen=True)
class Product:
    """An extent that is ``coef * prod(symbol ** power)``, as a model's shapes make them."""

    coef: int
    powers: tuple[tuple[str, int], ...]

    def at(self, values: Mapping[str, int]) -> int:
        return self.coef * math.prod(values[s] ** p for s, p in self.powers)

    @property
    def name(self) -> str:
        """An identifier for the kernel's symbol: ``seq``, or ``batch_seq``, ``x4_seq``..."""
        parts = [s if p == 1 else f"{s}{p}" for s, p in self.powers]
        if self.coef != 1:
            parts.insert(0, f"x{self.coef}")
        text = "_".join(parts)
        text = re.sub(r"\W", "_", text)
        return text if text.isidentifier() else f"d_{text}"

    def var(self, symbols: Mapping[str, Var]) -> Var:
        lo = self.at({s: symbols[s].lo for s, _ in self.powers})
        his = {s: symbols[s].hi for s, _ in self.powers}
        hi = None if any(h is None for h in his.values()) else self.at(his)  # type: ignore[arg-type]
        return Var(self.name, "int64", lo, hi)


def fit(
    base_value: int,
    moved: Mapping[str, int],
    base: Mapping[str, int],
    other: Mapping[str, int],
) -> Product | None:
    """The product of symbols that is ``base_value`` at ``base`` and ``moved[s]`` with only ``s``
    moved to ``other[s]``; None when no such product (with powers up to 3) fits."""
    powers = []
    for s, value in moved.items():
        if value == base_value:
            continue
        p = next((p for p in (1, 2, 3) if value * base[s] ** p == base_value * other[s] ** p), None)
        if p is None:
            return None
        powers.append((s, p))
    denom = math.prod(base[s] ** p for s, p in powers)
    if not powers or base_value % denom:
        return None
    return Product(base_value // denom, tuple(sorted(powers)))


@dataclass
class _Family:
    """One distinct shape-generic kernel and, per symbolic extent, the product it is."""

    key: str
    kernel: OpKernel
    products: tuple[Product, ...]  # in the kernel's symbol order
    seconds: float


class GenericKernels:
    """Every task of a model built once with symbolic extents; ``plan_inputs`` per shape."""

    def __init__(
        self,
        source: Any,
        symbols: Mapping[str, Var],
        declared: Mapping[str, Sequence[Any]],
        target: Target,
        records: BestRecords | None,
        fuse: bool,
    ):
        from ..graph.onnx_import import from_onnx

        self.symbols, self.target, self.records, self.fuse = dict(symbols), target, records, fuse
        self._source, self._declared = source, dict(declared)
        base, other = probe_values(symbols)
        if any(v.hi is None for v in symbols.values()):
            unbounded = next(n for n, v in symbols.items() if v.hi is None)
            raise ValueError(
                f"dynamic='generic' needs a bound for {unbounded}: bounds={{{unbounded!r}: MAX}}"
            )
        self.base = base
        # channels-last would choose per shape (a one-pixel exit is a view, a larger one a
        # transpose; a tile divides one width and not another): these kernels are for all.
        lowered = Lowered.from_graph(
            from_onnx(source, self.shapes(base)), target, fuse, layout=False, inline=False
        )
        moved = {
            s: Lowered.from_graph(
                from_onnx(source, self.shapes({**base, s: other[s]})),
                target,
                fuse,
                layout=False,
                inline=False,
            )
            for s in symbols
            if other[s] != base[s]
        }
        for lw in moved.values():
            _check_aligned(lowered, lw, "a probe shape")
        self.reference = lowered
        self.families: dict[str, _Family] = {}
        #: Per spec of the model: its family's key.
        self.spec_family: list[str] = []
        self.notes: list[str] = []
        for k, spec in enumerate(lowered.specs):
            others = {s: lw.specs[k] for s, lw in moved.items()}
            self.spec_family.append(self._family(spec, others, base, other))

    def shapes(self, values: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
        """Each model input's shape with the symbols at ``values``."""
        return {
            name: tuple(values[d] if isinstance(d, str) else int(d) for d in shape)
            for name, shape in self._declared.items()
        }

    @property
    def compile_seconds(self) -> float:
        return sum(f.seconds for f in self.families.values())

    # -- building --------------------------------------------------------------------------

    def _family(
        self,
        spec: KernelSpec,
        others: Mapping[str, KernelSpec],
        base: Mapping[str, int],
        other: Mapping[str, int],
    ) -> str:
        task = spec.task
        fused = task.op_name == "fused"
        if fused:
            sym_graph, key, products = self._fused_graph(spec, others, base, other)
        else:
            args, key, products = self._symbolic_args(spec, others, base, other)
        if key in self.families:
            return key
        t0 = time.perf_counter()
        if fused:
            kernel = self._build_fused(task, sym_graph, spec)
        else:
            kernel = self._build_template(task, args, spec)
        seconds = time.perf_counter() - t0
        by_name = {p.name: p for p in products}
        order = tuple(by_name[v.name] for v in kernel.kernel.lowered.symbols)
        self.families[key] = _Family(key, kernel, order, seconds)
        return key

    def _symbolic_args(
        self,
        spec: KernelSpec,
        others: Mapping[str, KernelSpec],
        base: Mapping[str, int],
        other: Mapping[str, int],
    ) -> tuple[dict[str, Any], str, list[Product]]:
        """The task's arguments with each that follows the symbols as a ``te.var``."""
        args = spec.task.workload.as_dict()
        moved_args = {s: o.task.workload.as_dict() for s, o in others.items()}
        out: dict[str, Any] = {}
        products: list[Product] = []
        for name, value in args.items():
            if not isinstance(value, int) or isinstance(value, bool):
                out[name] = value
                continue
            moved = {s: int(m[name]) for s, m in moved_args.items()}  # type: ignore[arg-type]
            if all(v == value for v in moved.values()):
                out[name] = value
                continue
            prod = fit(value, moved, base, other)
            if prod is None:
                raise GraphError(
                    f"generic: {spec.ops} task argument {name} is no product of the symbols"
                    f" ({value} at {dict(base)}); use dynamic='bucket' or 'specialize'"
                )
            products.append(prod)
            out[name] = prod.var(self.symbols)
        key = spec.task.op_name + repr(sorted((k, _text(v)) for k, v in out.items()))
        return out, key, products

    def _fused_graph(
        self,
        spec: KernelSpec,
        others: Mapping[str, KernelSpec],
        base: Mapping[str, int],
        other: Mapping[str, int],
    ) -> tuple[Graph, str, list[Product]]:
        """The group with each extent that follows the symbols as a ``te.var``."""
        g = decode(str(spec.task.workload.arg("graph")))
        moved = {s: decode(str(o.task.workload.arg("graph"))) for s, o in others.items()}
        products: list[Product] = []
        values: dict[str, Value] = {}
        for name, v in g.values.items():
            if v.is_const:
                values[name] = v
                continue
            dims: list[Any] = []
            for axis, d in enumerate(v.shape):
                at = {s: int(m.value(name).shape[axis]) for s, m in moved.items()}
                if all(x == d for x in at.values()):
                    dims.append(d)
                    continue
                prod = fit(int(d), at, base, other)
                if prod is None:
                    raise GraphError(
                        f"generic: {spec.ops} group value {name} axis {axis} is no product of"
                        f" the symbols; use dynamic='bucket' or 'specialize'"
                    )
                products.append(prod)
                dims.append(prod.var(self.symbols))
            values[name] = Value(v.name, v.dtype, tuple(dims), v.data)
        sym = dataclasses.replace(g, values=values)
        shapes = [(n, tuple(_text(d) for d in v.shape)) for n, v in values.items()]
        key = f"fused:{spec.task.workload.key}:{shapes}"
        return sym, key, products

    def _build_template(self, task: Task, args: dict[str, Any], spec: KernelSpec) -> OpKernel:
        from ..kernels.dynamic import DynamicOpKernel

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                dyn = DynamicOpKernel(task.op_name, args, self.target, "generic", self.records)
                kernel = dyn.kernel_for({})
            except (TensorError, TypeError, ValueError) as exc:
                first = str(exc).splitlines()[0]
                raise GraphError(
                    f"generic: no shape-generic kernel for {spec.ops} ({task.op_name}: {first});"
                    " use dynamic='bucket' or 'specialize'"
                ) from None
        self.notes.extend(
            str(w.message) for w in caught if issubclass(w.category, RecordChoiceWarning)
        )
        return kernel

    def _build_fused(self, task: Task, graph: Graph, spec: KernelSpec) -> OpKernel:
        from search_spaces import fused

        from ..codegen import build

        text = str(task.workload.arg("graph"))
        config, record = _config_for(task, self.records)
        try:
            sched, tensors = fused.schedule(config, text, self.target, graph=graph)
            kernel = build(sched, tensors, target=self.target)
        except (TensorError, GraphError, TypeError) as exc:
            first = str(exc).splitlines()[0]
            raise GraphError(
                f"generic: no shape-generic kernel for {spec.ops} ({first});"
                " use dynamic='bucket' or 'specialize'"
            ) from None
        return OpKernel(task.workload, kernel, config, record)

    # -- serving ---------------------------------------------------------------------------

    def prebuilt(
        self, lowered: Lowered, values: Mapping[str, int]
    ) -> list[tuple[OpKernel, tuple[int, ...]]]:
        """For each spec of ``lowered`` (the model at ``values``): its kernel and extents."""
        _check_aligned(self.reference, lowered, f"{dict(values)}")
        out = []
        for key in self.spec_family:
            fam = self.families[key]
            out.append((fam.kernel, tuple(p.at(values) for p in fam.products)))
        return out


def _config_for(task: Task, records: BestRecords | None) -> tuple[dict[str, Any], Any]:
    """The config ``resolve`` chooses for ``task`` (knobs only: the kernel is shape-generic)."""
    choice = resolve(task, records, replay=False)
    choice.warn(stacklevel=5)
    return choice.config, choice.record


def _check_aligned(a: Lowered, b: Lowered, where: str) -> None:
    """Both lowerings must have the same kernels in the same order over the same values."""
    same = len(a.specs) == len(b.specs) and all(
        x.task.op_name == y.task.op_name and x.inputs == y.inputs and x.output == y.output
        for x, y in zip(a.specs, b.specs, strict=True)
    )
    if not same:
        raise GraphError(
            f"generic: the model lowers to other kernels at {where} than at the probe shapes;"
            " use dynamic='bucket' or 'specialize'"
        )


def _text(v: Any) -> str:
    return v.name if isinstance(v, Var) else repr(v)
