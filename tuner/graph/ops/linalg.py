"""MatMul and Gemm: the matrix products, as plain te reductions (the correctness path).

The fast paths are the templates in ``search_spaces`` (``matmul``, ``dense``,
``batch_matmul``); what is here is what a fused group falls back to and the
reference the templates are checked against::

    MatMul(a: [2,1,M,K], b: [3,K,N]) -> n0[b0, b1, i, j] = sum_k a[b0, 0, i, k] * b[b1, k, j]
    Gemm(A, B, C; alpha, beta)       -> n0_mm[i, j] = sum_k A[i, k] * B[k, j]
                                        n0[i, j] = alpha * n0_mm[i, j] + beta * C[...]

MatMul follows ``numpy.matmul``: a 1-D first operand is a row, a 1-D second
operand a column (both dropped from the result), batch dimensions broadcast.
Gemm's ``C`` broadcasts (unidirectionally) to ``M x N``.

>>> matmul_shape((2, 1, 4, 8), (3, 8, 5))
(2, 3, 4, 5)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ... import te
from ...te import Expr, Tensor
from ..ir import GraphError, Node
from . import LowerContext, OpKind, register
from .elementwise import broadcast_dims, broadcast_index, input_array, te_shape

__all__ = ["gemm_shape", "matmul_shape"]


def matmul_shape(
    a_shape: Sequence[int], b_shape: Sequence[int], node: Node | None = None
) -> tuple[int, ...]:
    """The result shape of ``MatMul(a, b)`` (NumPy's matmul rules); GraphError if they disagree."""
    what = node.describe() if node is not None else "MatMul"
    a, b = tuple(a_shape), tuple(b_shape)
    if not a or not b:
        raise GraphError(f"{what} needs operands of rank at least 1, got {a} and {b}")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise GraphError(
            f"{what} multiplies {a} by {b}: inner extents {a2[-1]} and {b2[-2]} differ"
        )
    try:
        batch = np.broadcast_shapes(a2[:-2], b2[:-2])
    except ValueError:
        raise GraphError(
            f"{what} batch dimensions {a2[:-2]} and {b2[:-2]} do not broadcast"
        ) from None
    out = (*batch, *((a2[-2],) if len(a) > 1 else ()), *((b2[-1],) if len(b) > 1 else ()))
    return tuple(int(d) for d in out)


@register("MatMul", OpKind.ANCHOR, lower=lambda ctx: _lower_matmul(ctx))
def _eval_matmul(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    a, b = (np.asarray(input_array(node, arrays, i)) for i in (0, 1))
    matmul_shape(a.shape, b.shape, node)
    return [np.asarray(np.matmul(a, b)).astype(a.dtype, copy=False)]


def _lower_matmul(ctx: LowerContext) -> list[Tensor]:
    a, b = ctx.tensor(0), ctx.tensor(1)
    sa, sb = a.shape_ints, b.shape_ints
    out = ctx.outputs[0]
    k = te.reduce_axis(sa[-1], name="k")

    def body(*i: Expr) -> Expr:
        if len(sa) == 1 and len(sb) == 1:
            return te.sum(a[k] * b[k], axis=k)
        if len(sa) == 1:  # [K] x [..., K, N] -> [..., N]
            batch, n = i[:-1], i[-1]
            return te.sum(a[k] * b[(*broadcast_dims(sb[:-2], batch), k, n)], axis=k)
        if len(sb) == 1:  # [..., M, K] x [K] -> [..., M]
            batch, m = i[:-1], i[-1]
            return te.sum(a[(*broadcast_dims(sa[:-2], batch), m, k)] * b[k], axis=k)
        batch, m, n = i[:-2], i[-2], i[-1]
        ia = (*broadcast_dims(sa[:-2], batch), m, k)
        ib = (*broadcast_dims(sb[:-2], batch), k, n)
        return te.sum(a[ia] * b[ib], axis=k)

    return [te.compute(te_shape(out.shape), body, name=ctx.name)]


def gemm_shape(a_shape: Sequence[int], b_shape: Sequence[int], node: Node) -> tuple[int, int, int]:
    """Gemm's (M, K, N) after ``transA``/``transB``; GraphError if the operands disagree."""
    if len(a_shape) != 2 or len(b_shape) != 2:
        raise GraphError(
            f"{node.describe()} needs 2-D A and B, got {tuple(a_shape)} and {tuple(b_shape)}"
        )
    m, ka = (a_shape[1], a_shape[0]) if node.attrs.get("transA", 0) else tuple(a_shape)
    kb, n = (b_shape[1], b_shape[0]) if node.attrs.get("transB", 0) else tuple(b_shape)
    if ka != kb:
        raise GraphError(f"{node.describe()} has inner extents {ka} (A) and {kb} (B) that differ")
    return int(m), int(ka), int(n)


@register("Gemm", OpKind.ANCHOR, lower=lambda ctx: _lower_gemm(ctx))
def _eval_gemm(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    a, b = (np.asarray(input_array(node, arrays, i)) for i in (0, 1))
    gemm_shape(a.shape, b.shape, node)
    alpha = float(node.attrs.get("alpha", 1.0))
    beta = float(node.attrs.get("beta", 1.0))
    a2 = a.T if node.attrs.get("transA", 0) else a
    b2 = b.T if node.attrs.get("transB", 0) else b
    y = np.matmul(a2, b2)
    if alpha != 1.0:
        y = y * alpha
    c = arrays[2] if len(arrays) > 2 else None
    if c is not None and beta != 0.0:
        y = y + (c * beta if beta != 1.0 else c)
    return [np.asarray(y).astype(a.dtype, copy=False)]


def _lower_gemm(ctx: LowerContext) -> list[Tensor]:
    node = ctx.node
    a, b = ctx.tensor(0), ctx.tensor(1)
    m, kk, n = gemm_shape(a.shape_ints, b.shape_ints, node)
    alpha = float(node.attrs.get("alpha", 1.0))
    beta = float(node.attrs.get("beta", 1.0))
    c = ctx.inputs[2] if len(ctx.inputs) > 2 and beta != 0.0 else None
    ta, tb = node.attrs.get("transA", 0), node.attrs.get("transB", 0)
    dtype = ctx.outputs[0].dtype
    k = te.reduce_axis(kk, name="k")

    def product(i: Expr, j: Expr) -> Expr:
        va = a[k, i] if ta else a[i, k]
        vb = b[j, k] if tb else b[k, j]
        return te.sum(va * vb, axis=k)

    if c is None and alpha == 1.0:
        return [te.compute((m, n), product, name=ctx.name)]
    mm = te.compute((m, n), product, name=f"{ctx.name}_mm")

    def epilogue(i: Expr, j: Expr) -> Expr:
        v = mm[i, j] * alpha if alpha != 1.0 else mm[i, j]
        if c is not None:
            vc = c[broadcast_index(c, (i, j))]
            v = v + (vc * beta if beta != 1.0 else vc)
        return v

    return [te.compute((m, n), epilogue, name=ctx.name, dtype=dtype)]
