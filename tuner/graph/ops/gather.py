"""Gathers: reads at indices a tensor holds (Gather, GatherElements), as kernels and in NumPy.

Both read ``data`` along one axis at the indices of a second tensor, negative
ones counting from the end; constant indices out of range are a GraphError
naming the node. The extent gathered along may be symbolic (``dynamic=
"generic"``: a padding mask flattened to ``batch * seq`` positions).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ... import te
from ...te import Expr, Tensor
from ..ir import GraphError, Node
from . import LowerContext, OpKind, register
from .movement import Index, _compute, _norm_axis, _out_shape, _owned, _read

__all__ = ["gather_axis"]


def gather_axis(node: Node, rank: int) -> int:
    return _norm_axis(node, int(node.attr("axis", 0)), rank)


def _out_of_range(known: np.ndarray | None, n: Any) -> bool:
    """Whether constant indices fall outside an extent (unknowable for a symbolic one)."""
    if known is None or not known.size or not isinstance(n, int):
        return False
    return bool(known.min() < -n or known.max() >= n)


def _lower_gather(ctx: LowerContext) -> list[Tensor]:
    data, indices = ctx.tensor(0), ctx.tensor(1)
    rank = data.ndim
    axis = gather_axis(ctx.node, rank)
    n = data.extents[axis]  # symbolic under dynamic="generic": negative indices wrap by it
    ind_rank = len(_out_shape(ctx)) - rank + 1
    known = ctx.consts[1] if len(ctx.consts) > 1 else None
    if _out_of_range(known, n):
        raise GraphError(f"{ctx.node.describe()} has an index out of range for extent {n}")

    def at(i: Index) -> Expr:
        k = _read(indices, i[axis : axis + ind_rank]).astype("int64")
        k = te.if_then_else(k < 0, k + n, k)
        return data[(*i[:axis], k, *i[axis + ind_rank :])]

    return [_compute(ctx, at)]


@register("Gather", OpKind.INJECTIVE, lower=_lower_gather)
def _gather(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    data, indices = arrays[0], arrays[1]
    assert data is not None and indices is not None
    axis = gather_axis(node, data.ndim)
    n = data.shape[axis]
    if indices.size and (indices.min() < -n or indices.max() >= n):
        raise GraphError(f"{node.describe()} has an index out of range for extent {n}")
    return [_owned(np.take(data, indices.astype(np.int64), axis=axis))]


def _lower_gather_elements(ctx: LowerContext) -> list[Tensor]:
    data, indices = ctx.tensor(0), ctx.tensor(1)
    axis = gather_axis(ctx.node, data.ndim)
    n = data.extents[axis]
    known = ctx.consts[1] if len(ctx.consts) > 1 else None
    if _out_of_range(known, n):
        raise GraphError(f"{ctx.node.describe()} has an index out of range for extent {n}")

    def at(i: Index) -> Expr:
        k = _read(indices, i).astype("int64")
        k = te.if_then_else(k < 0, k + n, k)
        return data[(*i[:axis], k, *i[axis + 1 :])]

    return [_compute(ctx, at)]


@register("GatherElements", OpKind.INJECTIVE, lower=_lower_gather_elements)
def _gather_elements(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    data, indices = arrays[0], arrays[1]
    assert data is not None and indices is not None
    if data.ndim != indices.ndim:
        raise GraphError(
            f"{node.describe()} has indices of rank {indices.ndim} for data of rank {data.ndim}"
        )
    axis = gather_axis(node, data.ndim)
    n = data.shape[axis]
    if _out_of_range(indices, n):
        raise GraphError(f"{node.describe()} has an index out of range for extent {n}")
    k = np.where(indices < 0, indices + n, indices).astype(np.int64)
    return [_owned(np.take_along_axis(data, k, axis=axis))]
