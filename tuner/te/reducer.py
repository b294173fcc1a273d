"""Tuple reductions: a reduction carrying several values, as TVM's ``te.comm_reducer``.

A reducer is a combiner and an identity over tuples of one dtype. Calling it
over a reduce axis gives a compute with one more, innermost axis over the
values; consumers read each value by its index there::

    sums = te.comm_reducer(
        lambda a, b: (a[0] + b[0], a[1] + b[1]), lambda dtype: (0.0, 0.0), name="sums"
    )
    k = te.reduce_axis(N, name="k")
    S = te.compute((M,), lambda i: sums((X[i, k], X[i, k] * X[i, k]), axis=k), name="S")
    # S has shape (M, 2): S[i, 0] the sum, S[i, 1] the sum of squares, in one pass over X

At each step every new value is computed from all the old ones before any
is stored, so combiners whose values depend on each other (a running maximum
and a sum rescaled to it; a count, a mean and a sum of squared deviations)
are exact. The combiner is called once, with symbolic values, when the
reduction is defined: it must be built from te arithmetic (``te.max``,
``te.exp``, ``te.if_then_else`` ...) and read no tensor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .dtypes import is_float
from .expr import Const, Expr, ExprLike, IterVar, TensorRead, TupleReduce, Var, as_expr, walk
from .ops import const
from .tensor import TensorError

__all__ = ["CommReducer", "comm_reducer"]

Combine = Callable[[tuple[Expr, ...], tuple[Expr, ...]], Sequence[ExprLike]]
Identity = Callable[[str], Sequence[ExprLike]]


class CommReducer:
    """A combiner and identity over tuples; call it as ``reducer(values, axis=k)``."""

    def __init__(self, fcombine: Combine, fidentity: Identity, name: str):
        if not name.isidentifier():
            raise TensorError(f"reducer name {name!r} must be an identifier")
        self.fcombine, self.fidentity, self.name = fcombine, fidentity, name

    def __call__(
        self, values: Sequence[ExprLike], axis: IterVar | Sequence[IterVar]
    ) -> TupleReduce:
        what = f"reducer {self.name}"
        sources = tuple(as_expr(v) for v in values)
        if not sources:
            raise TensorError(f"{what} needs at least one value")
        dtype = sources[0].dtype
        if any(s.dtype != dtype for s in sources) or not is_float(dtype):
            kinds = ", ".join(s.dtype for s in sources)
            raise TensorError(f"{what} takes values of one float dtype, got {kinds}")
        axes = (axis,) if isinstance(axis, IterVar) else tuple(axis)
        if not axes or any(not isinstance(a, IterVar) or a.kind != "reduce" for a in axes):
            raise TensorError(f"{what} needs te.reduce_axis axes, got {axis!r}")
        n = len(sources)
        lhs = tuple(Var(f"{self.name}_old{j}", dtype) for j in range(n))
        rhs = tuple(Var(f"{self.name}_new{j}", dtype) for j in range(n))
        results = self._results(lhs, rhs, dtype, what)
        identity = tuple(self._identity(v, dtype, what) for v in self.fidentity(dtype))
        if len(identity) != n:
            raise TensorError(f"{what}'s identity has {len(identity)} values for {n}")
        return TupleReduce(self.name, sources[0], axes, dtype, sources, lhs, rhs, results, identity)

    def _results(
        self, lhs: tuple[Var, ...], rhs: tuple[Var, ...], dtype: str, what: str
    ) -> tuple[Expr, ...]:
        out = tuple(as_expr(r).astype(dtype) for r in self.fcombine(lhs, rhs))
        if len(out) != len(lhs):
            raise TensorError(f"{what}'s combiner gives {len(out)} values for {len(lhs)}")
        own = {v.name for v in (*lhs, *rhs)}
        for r in out:
            for node in walk(r):
                if isinstance(node, TensorRead | IterVar):
                    raise TensorError(f"{what}'s combiner reads {node!r}; it may only combine")
                if type(node) is Var and node.name not in own:
                    raise TensorError(f"{what}'s combiner uses {node.name}, not one of its values")
        return out

    @staticmethod
    def _identity(value: ExprLike, dtype: str, what: str) -> Expr:
        if isinstance(value, bool) or not isinstance(value, int | float | Const):
            raise TensorError(f"{what}'s identity must be numbers, got {value!r}")
        return const(value.value if isinstance(value, Const) else value, dtype)

    def __repr__(self) -> str:
        return f"comm_reducer({self.name})"


def comm_reducer(fcombine: Combine, fidentity: Identity, name: str = "reduce") -> CommReducer:
    """A reducer of tuples: ``fcombine(old, new)`` gives the combined values, each a te
    expression of the two tuples; ``fidentity(dtype)`` the starting values (numbers).

    >>> sums = comm_reducer(lambda a, b: (a[0] + b[0], a[1] + b[1]), lambda t: (0.0, 0.0), "sums")
    """
    return CommReducer(fcombine, fidentity, name)
