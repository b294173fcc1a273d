"""Tensors and the operations that define them: placeholders and computes.

A compute says *what* each output element is, never *how* the loops run::

    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((K, N), "float32", name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")

Mistakes (wrong index count, float indices, a reduction nested inside
arithmetic, an axis used outside its reduction) are reported here, when the
expression is defined, in one sentence that names the tensor.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .dtypes import check_dtype, is_int
from .expr import (
    Const,
    Expr,
    ExprLike,
    IterVar,
    Reduce,
    Select,
    TensorRead,
    TupleReduce,
    Var,
    as_expr,
    equal,
    walk,
)

__all__ = [
    "ComputeOp",
    "PlaceholderOp",
    "Tensor",
    "TensorError",
    "compute",
    "placeholder",
    "reduce_axis",
    "var",
]


class TensorError(ValueError):
    """A tensor expression that is malformed (shape, dtype or index mistakes)."""


_names = itertools.count()


@dataclass(frozen=True, eq=False)
class PlaceholderOp:
    """An input of the computation."""

    name: str


@dataclass(frozen=True, eq=False)
class ComputeOp:
    """``output[axis] = body``; ``body`` may be a single top-level reduction."""

    name: str
    axis: tuple[IterVar, ...]
    body: Expr

    @property
    def reduce_axis(self) -> tuple[IterVar, ...]:
        return self.body.axes if isinstance(self.body, Reduce) else ()

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        """Tensors read by the body, in order of first use, without repeats."""
        seen: dict[int, Tensor] = {}
        for node in walk(self.body):
            if isinstance(node, TensorRead):
                seen.setdefault(id(node.tensor), node.tensor)
        return tuple(seen.values())


@dataclass(frozen=True, eq=False)
class Tensor:
    """A multi-dimensional value: an input (placeholder) or the result of a compute."""

    name: str
    shape: tuple[Expr, ...]
    dtype: str
    op: PlaceholderOp | ComputeOp

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices: ExprLike | tuple[ExprLike, ...]) -> TensorRead:
        idx = indices if isinstance(indices, tuple) else (indices,)
        if len(idx) != self.ndim:
            raise TensorError(
                f"tensor {self.name} has {self.ndim} dimension(s) "
                f"but was indexed with {len(idx)} index(es)"
            )
        exprs = tuple(as_expr(i) for i in idx)
        for pos, (e, extent) in enumerate(zip(exprs, self.shape, strict=True)):
            if not is_int(e.dtype):
                raise TensorError(
                    f"tensor {self.name} is indexed with a {e.dtype} expression "
                    f"in dimension {pos}; indices must be integers"
                )
            if (
                isinstance(e, Const)
                and isinstance(extent, Const)
                and not 0 <= int(e.value) < int(extent.value)
            ):
                raise TensorError(
                    f"tensor {self.name} index {e.value} is out of range "
                    f"for dimension {pos} of extent {extent.value}"
                )
        return TensorRead(self, exprs, self.dtype)

    @property
    def extents(self) -> tuple[Any, ...]:
        """The shape with constant extents as ints and symbolic ones as their expressions."""
        return tuple(int(e.value) if isinstance(e, Const) else e for e in self.shape)

    @property
    def shape_ints(self) -> tuple[int, ...]:
        """The shape as integers; raises if an extent is still symbolic."""
        out = []
        for e in self.shape:
            if not isinstance(e, Const):
                raise TensorError(
                    f"tensor {self.name} has symbolic extent {e!r}; building needs concrete extents"
                )
            out.append(int(e.value))
        return tuple(out)

    def __repr__(self) -> str:
        return f"Tensor({self.name}, shape={list(self.shape)}, {self.dtype})"


def _extent(value: ExprLike, what: str) -> Expr:
    if isinstance(value, bool):
        raise TensorError(f"{what} must be an integer, not {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise TensorError(f"{what} must be positive, got {value}")
        return Const(value, "int64")
    if isinstance(value, Var):
        return value
    if isinstance(value, Expr) and is_int(value.dtype):
        return value
    raise TensorError(f"{what} must be a positive integer or a te.var, got {value!r}")


def _shape(shape: Sequence[ExprLike] | ExprLike, name: str) -> tuple[Expr, ...]:
    dims = tuple(shape) if isinstance(shape, list | tuple) else (shape,)
    if not dims:
        raise TensorError(f"tensor {name} needs at least one dimension")
    return tuple(_extent(d, f"extent {i} of tensor {name}") for i, d in enumerate(dims))


def var(name: str, min: int = 1, max: int | None = None, multiple_of: int = 1) -> Var:
    """A symbolic integer extent (``n = te.var("n", max=4096)``), known when the kernel runs.

    A kernel built with it takes its value from its arguments' shapes at each
    call and refuses one outside ``[min, max]`` or not a multiple of
    ``multiple_of``. Bounds and divisibility let lowering drop checks it can
    prove: with ``multiple_of=8``, a loop split by 8 needs no bound check.
    """
    if not name.isidentifier():
        raise TensorError(f"variable name {name!r} is not an identifier")
    for what, value in (("min", min), ("multiple_of", multiple_of)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TensorError(f"te.var {name}: {what} must be a positive integer, got {value!r}")
    if max is not None and (isinstance(max, bool) or not isinstance(max, int) or max < min):
        raise TensorError(
            f"te.var {name}: max must be an integer of at least min={min}, got {max!r}"
        )
    return Var(name, lo=min, hi=max, multiple=multiple_of)


def placeholder(
    shape: Sequence[ExprLike] | ExprLike, dtype: str = "float32", name: str = ""
) -> Tensor:
    """An input tensor."""
    name = name or f"placeholder{next(_names)}"
    _check_name(name)
    check_dtype(dtype, f"placeholder {name}")
    return Tensor(name, _shape(shape, name), dtype, PlaceholderOp(name))


def reduce_axis(extent: ExprLike | tuple[ExprLike, ExprLike], name: str = "") -> IterVar:
    """A reduction axis over ``range(extent)`` for use in te.sum / te.max / te.min."""
    name = name or f"r{next(_names)}"
    if isinstance(extent, tuple):
        start, stop = extent
        if start != 0:
            raise TensorError(f"reduce axis {name} must start at 0")
        extent = stop
    return IterVar(name, _extent(extent, f"reduce axis {name}"), "reduce")


def compute(
    shape: Sequence[ExprLike] | ExprLike,
    fcompute: Callable[..., ExprLike],
    name: str = "",
    dtype: str | None = None,
) -> Tensor:
    """A tensor whose element at ``(i, j, ...)`` is ``fcompute(i, j, ...)``."""
    name = name or f"compute{next(_names)}"
    _check_name(name)
    dims = _shape(shape, name)
    signature = inspect.signature(fcompute).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in signature):
        # ``lambda *i: ...`` takes any rank: the axes are named i0, i1, ...
        params = [f"i{d}" for d in range(len(dims))]
    else:
        params = [p.name for p in signature]
    if len(params) != len(dims):
        raise TensorError(
            f"compute {name} has {len(dims)} dimension(s) but its function "
            f"takes {len(params)} argument(s)"
        )
    axis = tuple(IterVar(p, d, "spatial") for p, d in zip(params, dims, strict=True))
    body = as_expr(fcompute(*axis))
    if dtype is not None:
        check_dtype(dtype, f"compute {name}")
        if isinstance(body, Reduce):
            raise TensorError(f"compute {name}: cast the reduced value, not the reduction")
        body = body.astype(dtype)
    if isinstance(body, TupleReduce):
        body, component = _bind_components(name, params, body)
        axis, dims = (*axis, component), (*dims, component.extent)
    _check_body(name, axis, body)
    return Tensor(name, dims, body.dtype, ComputeOp(name, axis, body))


def _bind_components(
    name: str, params: list[str], body: TupleReduce
) -> tuple[TupleReduce, IterVar]:
    """The tuple reduction with its values' axis (the compute's last): ``name_v``."""
    n = len(body.sources)
    component = IterVar(f"{name}_v", Const(n, "int64"), "spatial")
    if component.name in params:
        raise TensorError(
            f"compute {name}: axis {component.name} names the values of its reduction"
        )
    source = body.sources[-1]
    for j in reversed(range(n - 1)):
        source = Select(equal(component, j), body.sources[j], source, body.dtype)
    return replace(body, source=source, component=component), component


def _check_name(name: str) -> None:
    if not name.replace(".", "_").isidentifier():
        raise TensorError(f"tensor name {name!r} must be an identifier")


def _check_body(name: str, axis: tuple[IterVar, ...], body: Expr) -> None:
    reduce_axes = body.axes if isinstance(body, Reduce) else ()
    names = [a.name for a in axis] + [a.name for a in reduce_axes]
    if len(set(names)) != len(names):
        raise TensorError(f"compute {name} uses an axis name twice: {names}")
    allowed = set(names)
    extents = [a.extent for a in (*axis, *reduce_axes)]
    symbols = {n.name for e in (body, *extents) for n in walk(e) if type(n) is Var}
    clash = sorted(symbols & allowed)
    if clash:
        raise TensorError(
            f"compute {name} names an axis {clash[0]}, the name of a symbolic extent it uses; "
            "give the axis or the te.var another name"
        )
    for node in walk(body.source if isinstance(body, Reduce) else body):
        if isinstance(node, Reduce):
            raise TensorError(
                f"compute {name} nests a reduction inside an expression; "
                "a reduction must be the whole body (use another compute stage)"
            )
        if isinstance(node, IterVar) and node.name not in allowed:
            what = "reduce axis" if node.kind == "reduce" else "axis"
            raise TensorError(
                f"compute {name} uses {what} {node.name} that is not one of its own axes "
                f"or listed in its reduction"
            )
