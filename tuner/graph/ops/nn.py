"""Neural-network operators over windows: convolutions and pools (the norms are in ``norm``).

Every window (kernel, strides, pads, dilations, output extents) is read by
the parameter readers in :mod:`~tuner.graph.ops.windows`, so the NumPy
evaluation, the te lowering and the choice of a template (task extraction)
agree.

The lowerings are the plain definitions, for correctness (the fast paths are
the templates in ``search_spaces``): padding is a stage ``<name>_pad`` that
reads the input under ``te.if_then_else``; a window is a reduction over
``te.reduce_axis`` per kernel axis::

    pad[n, c, h, w]  = X[n, c, h - pb_h, w - pb_w] inside X, else 0 (-inf for MaxPool)
    conv[n, m, y, x] = sum over c < C/group, r, s of
                       pad[n, (m // (M/group)) * C/group + c, y*s_h + r*d_h, x*s_w + s*d_w] * W[m, c, r, s]
    Y = conv + B[m]                                                   (a stage of its own)
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ... import te
from ...te import Tensor
from ..ir import GraphError, Node
from . import LowerContext, OpKind, register
from .windows import (
    ConvParams,
    ConvTransposeParams,
    PoolParams,
    conv_params,
    conv_transpose_params,
    pool_params,
)

# -- NumPy evaluations ---------------------------------------------------------------------


def _taps(
    offsets: tuple[int, ...],
    out: tuple[int, ...],
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
) -> tuple[slice, ...]:
    """The strided slice of a padded array that kernel tap ``offsets`` reads for every output."""
    return tuple(
        slice(r * d, r * d + (o - 1) * s + 1, s)
        for r, o, s, d in zip(offsets, out, strides, dilations, strict=True)
    )


def _weight_tap(w: np.ndarray, offs: tuple[int, ...]) -> np.ndarray:
    """The weights of kernel tap ``offs`` (its trailing axes)."""
    index: tuple[Any, ...] = (Ellipsis, *offs)
    return w[index]


def _pad_np(x: np.ndarray, pb: Sequence[int], pe: Sequence[int], fill: float) -> np.ndarray:
    widths = [(0, 0)] * (x.ndim - len(pb)) + list(zip(pb, pe, strict=True))
    return np.pad(x, widths, constant_values=fill) if any(pb) or any(pe) else x


def _conv_np(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, p: ConvParams) -> np.ndarray:
    n, c = x.shape[:2]
    g, m = p.group, w.shape[0]
    xp = _pad_np(x.astype(np.float64), p.pads_begin, p.pads_end, 0.0)
    wg = w.astype(np.float64).reshape(g, m // g, c // g, *p.kernel)
    acc = np.zeros((n, g, m // g, *p.out_spatial))
    for offs in itertools.product(*(range(k) for k in p.kernel)):
        patch = xp[(slice(None), slice(None), *_taps(offs, p.out_spatial, p.strides, p.dilations))]
        tap = _weight_tap(wg, offs)
        acc += np.einsum("ngc...,gmc->ngm...", patch.reshape(n, g, c // g, *p.out_spatial), tap)
    y = acc.reshape(n, m, *p.out_spatial)
    if b is not None:
        y += b.astype(np.float64).reshape(m, *(1,) * p.rank)
    return y.astype(x.dtype)


def _conv_transpose_np(
    x: np.ndarray, w: np.ndarray, b: np.ndarray | None, p: ConvTransposeParams
) -> np.ndarray:
    n, c, *spatial = x.shape
    g, mg = p.group, w.shape[1]
    xg = x.astype(np.float64).reshape(n, g, c // g, *spatial)
    wg = w.astype(np.float64).reshape(g, c // g, mg, *p.kernel)
    extent = [
        max(s * (i - 1) + (k - 1) * d + 1, pb + o)
        for i, k, s, d, pb, o in zip(
            spatial, p.kernel, p.strides, p.dilations, p.pads_begin, p.out_spatial, strict=True
        )
    ]
    acc = np.zeros((n, g, mg, *extent))
    for offs in itertools.product(*(range(k) for k in p.kernel)):
        tap = _weight_tap(wg, offs)
        where = (slice(None),) * 3 + _taps(offs, tuple(spatial), p.strides, p.dilations)
        acc[where] += np.einsum("ngc...,gcm->ngm...", xg, tap)
    crop = tuple(slice(b, b + o) for b, o in zip(p.pads_begin, p.out_spatial, strict=True))
    y = acc[(slice(None),) * 3 + crop].reshape(n, g * mg, *p.out_spatial)
    if b is not None:
        y = y + b.astype(np.float64).reshape(g * mg, *(1,) * p.rank)
    return y.astype(x.dtype)


def _overhang(p: PoolParams, spatial: Sequence[int]) -> tuple[int, ...]:
    """Extra end padding that ceil mode's last window reaches past ``pads_end``."""
    return tuple(
        max(0, (o - 1) * s + (k - 1) * d + 1 - (i + b + e))
        for i, k, s, d, b, e, o in zip(
            spatial, p.kernel, p.strides, p.dilations, p.pads_begin, p.pads_end, p.out_spatial,
            strict=True,
        )
    )  # fmt: skip


def _bounds(p: PoolParams, j: int, extent: int) -> tuple[int, int]:
    """The input positions an average counts on axis ``j``: ``[lo, hi)``."""
    if p.count_include_pad:
        return -p.pads_begin[j], extent + p.pads_end[j]
    return 0, extent


def _axis_counts(p: PoolParams, j: int, extent: int) -> np.ndarray:
    """How many taps of each window on axis ``j`` an average counts (at least 1)."""
    lo, hi = _bounds(p, j, extent)
    k, s, d = p.kernel[j], p.strides[j], p.dilations[j]
    pos = np.arange(p.out_spatial[j])[:, None] * s - p.pads_begin[j] + np.arange(k)[None, :] * d
    return np.maximum(((pos >= lo) & (pos < hi)).sum(axis=1), 1)


def _counts_np(p: PoolParams, spatial: Sequence[int]) -> np.ndarray:
    """The divisor of each AveragePool output: the product of the axes' counts."""
    total = np.ones((), np.float64)
    for j, extent in enumerate(spatial):
        total = np.multiply.outer(total, _axis_counts(p, j, extent).astype(np.float64))
    return total


def _pool_np(x: np.ndarray, p: PoolParams, kind: str) -> np.ndarray:
    spatial = x.shape[2:]
    ends = [e + h for e, h in zip(p.pads_end, _overhang(p, spatial), strict=True)]
    if kind == "max":
        fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        xp = _pad_np(x, p.pads_begin, ends, fill)
    else:
        xp = _pad_np(x.astype(np.float64), p.pads_begin, ends, 0.0)
    acc: np.ndarray | None = None
    for offs in itertools.product(*(range(k) for k in p.kernel)):
        patch = xp[(slice(None), slice(None), *_taps(offs, p.out_spatial, p.strides, p.dilations))]
        if acc is None:
            acc = patch.copy()
        elif kind == "max":
            np.maximum(acc, patch, out=acc)
        else:
            acc += patch
    assert acc is not None
    if kind == "max":
        return acc
    return (acc / _counts_np(p, spatial)).astype(x.dtype)


def _one_output(node: Node) -> None:
    if any(node.outputs[1:]):
        raise GraphError(f"{node.describe()}: only its first output is supported")


def _float(node: Node, x: np.ndarray | Tensor) -> None:
    dtype = x.dtype if isinstance(x, Tensor) else x.dtype.name
    if dtype not in ("float32", "float64"):
        raise GraphError(f"{node.describe()} takes float32 or float64 inputs, got {dtype}")


def _optional(arrays: Sequence[np.ndarray | None], i: int) -> np.ndarray | None:
    return arrays[i] if i < len(arrays) else None


# -- te lowerings: shared pieces ---------------------------------------------------------


def _all(conds: Sequence[te.Expr]) -> te.Expr | None:
    return functools.reduce(lambda a, b: a & b, conds) if conds else None


def _padded(
    ctx: LowerContext, x: Tensor, pb: Sequence[int], pe: Sequence[int], fill: float
) -> Tensor:
    """``x`` padded by ``pb`` / ``pe`` on its trailing axes with ``fill`` (``x`` itself if no pad)."""
    if not any(pb) and not any(pe):
        return x
    shape = x.shape_ints
    lead = len(shape) - len(pb)
    padded = shape[:lead] + tuple(n + b + e for n, b, e in zip(shape[lead:], pb, pe, strict=True))

    def body(*i: te.Expr) -> te.Expr:
        idx, conds = list(i[:lead]), []
        for v, n, b, e in zip(i[lead:], shape[lead:], pb, pe, strict=True):
            idx.append(v - b if b else v)
            if b:
                conds.append(v >= b)
            if e:
                conds.append(v < b + n)
        inside = _all(conds)
        read = x[tuple(idx)]
        return read if inside is None else te.if_then_else(inside, read, te.const(fill, x.dtype))

    return te.compute(padded, body, name=f"{ctx.name}_pad")


def _at(o: te.Expr, s: int, r: te.Expr, d: int) -> te.Expr:
    """``o * s + r * d`` without the unit factors."""
    return (o * s if s != 1 else o) + (r * d if d != 1 else r)


def _with_bias(ctx: LowerContext, y: Tensor, bias: Tensor | None) -> Tensor:
    if bias is None:
        return y
    return te.compute(y.shape_ints, lambda *i: y[i] + bias[i[1]], name=ctx.name)


def _bias(ctx: LowerContext) -> Tensor | None:
    return ctx.inputs[2] if len(ctx.inputs) > 2 else None


# -- Conv, ConvTranspose ---------------------------------------------------------------------


def conv_sum(
    ctx: LowerContext,
    x: Tensor,
    w: Tensor,
    fill: float,
    name: str,
    product: Callable[[te.Expr, te.Expr], te.Expr] = lambda xv, wv: xv * wv,
) -> Tensor:
    """The convolution's sum of ``product(input, weight)`` over channels and taps, the input
    padded with ``fill`` (a quantized image's zero point; 0.0 for a float one)."""
    p = conv_params(ctx.node, x.shape_ints, w.shape_ints)
    n, c = x.shape_ints[:2]
    m = w.shape_ints[0]
    cg, mg = c // p.group, m // p.group
    src = _padded(ctx, x, p.pads_begin, p.pads_end, fill)
    rc = te.reduce_axis(cg, name=f"{ctx.name}_rc")
    rk = [te.reduce_axis(k, name=f"{ctx.name}_r{j}") for j, k in enumerate(p.kernel)]

    def body(*i: te.Expr) -> te.Expr:
        b, k, *o = i
        chan = rc if p.group == 1 else (k // mg) * cg + rc
        pos = [_at(*a) for a in zip(o, p.strides, rk, p.dilations, strict=True)]
        return te.sum(product(src[(b, chan, *pos)], w[(k, rc, *rk)]), axis=[rc, *rk])

    return te.compute((n, m, *p.out_spatial), body, name=name)


def _lower_conv(ctx: LowerContext) -> list[Tensor]:
    x, w, bias = ctx.tensor(0), ctx.tensor(1), _bias(ctx)
    _float(ctx.node, x)
    y = conv_sum(ctx, x, w, 0.0, ctx.name if bias is None else f"{ctx.name}_conv")
    return [_with_bias(ctx, y, bias)]


@register("Conv", OpKind.ANCHOR, lower=_lower_conv)
def _conv(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x, w = arrays[0], arrays[1]
    assert x is not None and w is not None
    _float(node, x)
    return [_conv_np(x, w, _optional(arrays, 2), conv_params(node, x.shape, w.shape))]


def _lower_conv_transpose(ctx: LowerContext) -> list[Tensor]:
    """``Y[n, m, o] = sum over c, r of X[n, c, q / s] * W[c, m, r]`` where ``q = o + pb - r*d``
    is a multiple of ``s`` inside the input (the gather form of the scatter)."""
    x, w, bias = ctx.tensor(0), ctx.tensor(1), _bias(ctx)
    _float(ctx.node, x)
    p = conv_transpose_params(ctx.node, x.shape_ints, w.shape_ints)
    n, c, *spatial = x.shape_ints
    mg = w.shape_ints[1]
    cg = c // p.group
    rc = te.reduce_axis(cg, name=f"{ctx.name}_rc")
    rk = [te.reduce_axis(k, name=f"{ctx.name}_r{j}") for j, k in enumerate(p.kernel)]

    def body(*i: te.Expr) -> te.Expr:
        b, k, *o = i
        g = k // mg if p.group > 1 else None
        chan = rc if g is None else g * cg + rc
        wk = k if g is None else k - g * mg
        conds, pos = [], []
        for v, r, s, d, pb, extent in zip(
            o, rk, p.strides, p.dilations, p.pads_begin, spatial, strict=True
        ):
            q = (v + pb if pb else v) - (r * d if d != 1 else r)
            conds += [q >= 0, q < s * (extent - 1) + 1]
            if s != 1:
                conds.append(te.equal(q % s, 0))
            pos.append(q // s if s != 1 else q)
        term = x[(b, chan, *pos)] * w[(chan, wk, *rk)]
        inside = _all(conds)
        assert inside is not None
        return te.sum(te.if_then_else(inside, term, 0.0), axis=[rc, *rk])

    name = ctx.name if bias is None else f"{ctx.name}_conv"
    y = te.compute((n, mg * p.group, *p.out_spatial), body, name=name)
    return [_with_bias(ctx, y, bias)]


@register("ConvTranspose", OpKind.ANCHOR, lower=_lower_conv_transpose)
def _conv_transpose(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x, w = arrays[0], arrays[1]
    assert x is not None and w is not None
    _float(node, x)
    p = conv_transpose_params(node, x.shape, w.shape)
    return [_conv_transpose_np(x, w, _optional(arrays, 2), p)]


# -- pools -----------------------------------------------------------------------------------


def _pool_window(ctx: LowerContext, kind: str) -> tuple[PoolParams, Tensor, list[te.IterVar]]:
    x = ctx.tensor(0)
    p = pool_params(ctx.node, x.shape_ints)
    ends = [e + h for e, h in zip(p.pads_end, _overhang(p, x.shape_ints[2:]), strict=True)]
    fill = -np.inf if kind == "max" else 0.0
    if kind == "max" and not x.dtype.startswith("float"):
        fill = float(np.iinfo(x.dtype).min)
    src = _padded(ctx, x, p.pads_begin, ends, fill)
    rk = [te.reduce_axis(k, name=f"{ctx.name}_r{j}") for j, k in enumerate(p.kernel)]
    return p, src, rk


def _window_read(
    p: PoolParams, src: Tensor, rk: list[te.IterVar], i: tuple[te.Expr, ...]
) -> te.Expr:
    pos = [_at(*a) for a in zip(i[2:], p.strides, rk, p.dilations, strict=True)]
    return src[(i[0], i[1], *pos)]


def _lower_max_pool(ctx: LowerContext) -> list[Tensor]:
    _one_output(ctx.node)
    p, src, rk = _pool_window(ctx, "max")
    shape = (*ctx.tensor(0).shape_ints[:2], *p.out_spatial)
    return [
        te.compute(shape, lambda *i: te.max(_window_read(p, src, rk, i), axis=rk), name=ctx.name)
    ]


@register("MaxPool", OpKind.ANCHOR, lower=_lower_max_pool)
def _max_pool(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    _one_output(node)
    x = arrays[0]
    assert x is not None
    return [_pool_np(x, pool_params(node, x.shape), "max")]


def _count(
    p: PoolParams, spatial: Sequence[int], o: Sequence[te.Expr], dtype: str
) -> te.Expr | float:
    """The divisor of an AveragePool output at ``o``: a number where the count is the same
    along an axis, else the in-bounds taps from ``max(0, ceil((lo - start) / d))`` to
    ``min(k - 1, floor((hi - 1 - start) / d))``."""
    const = 1.0
    terms: list[te.Expr] = []
    for j, (v, extent, k, s, d) in enumerate(
        zip(o, spatial, p.kernel, p.strides, p.dilations, strict=True)
    ):
        counts = _axis_counts(p, j, extent)
        if counts.min() == counts.max():
            const *= float(counts[0])
            continue
        lo, hi = _bounds(p, j, extent)
        start = v * s - p.pads_begin[j]
        first = te.maximum(0, (lo - start + (d - 1)) // d)
        last = te.minimum(k - 1, (hi - 1 - start) // d)
        terms.append(te.maximum(last - first + 1, 1))
    if not terms:
        return const
    total = functools.reduce(lambda a, b: a * b, terms).astype(dtype)
    return total * const if const != 1.0 else total


def _lower_average_pool(ctx: LowerContext) -> list[Tensor]:
    x = ctx.tensor(0)
    _float(ctx.node, x)
    p, src, rk = _pool_window(ctx, "avg")
    shape = (*x.shape_ints[:2], *p.out_spatial)
    total = te.compute(
        shape, lambda *i: te.sum(_window_read(p, src, rk, i), axis=rk), name=f"{ctx.name}_sum"
    )
    spatial = x.shape_ints[2:]
    return [
        te.compute(shape, lambda *i: total[i] / _count(p, spatial, i[2:], x.dtype), name=ctx.name)
    ]


@register("AveragePool", OpKind.ANCHOR, lower=_lower_average_pool)
def _average_pool(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x = arrays[0]
    assert x is not None
    _float(node, x)
    return [_pool_np(x, pool_params(node, x.shape), "avg")]


def _global_shape(node: Node, shape: tuple[int, ...]) -> tuple[int, ...]:
    if len(shape) < 3:
        raise GraphError(f"{node.describe()} needs an input of rank 3 or more, got {shape}")
    return (*shape[:2], *(1,) * (len(shape) - 2))


def _lower_global(ctx: LowerContext, kind: str) -> Tensor:
    x = ctx.tensor(0)
    shape = _global_shape(ctx.node, x.shape_ints)
    rk = [te.reduce_axis(e, name=f"{ctx.name}_r{j}") for j, e in enumerate(x.shape_ints[2:])]
    reduce = te.sum if kind == "avg" else te.max
    name = f"{ctx.name}_sum" if kind == "avg" else ctx.name
    y = te.compute(shape, lambda *i: reduce(x[(i[0], i[1], *rk)], axis=rk), name=name)
    if kind == "max":
        return y
    size = float(np.prod(x.shape_ints[2:]))
    return te.compute(shape, lambda *i: y[i] / size, name=ctx.name)


@register("GlobalAveragePool", OpKind.REDUCTION, lower=lambda ctx: [_lower_global(ctx, "avg")])
def _global_average_pool(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x = arrays[0]
    assert x is not None
    _float(node, x)
    _global_shape(node, x.shape)
    axes = tuple(range(2, x.ndim))
    return [x.astype(np.float64).mean(axis=axes, keepdims=True).astype(x.dtype)]


@register("GlobalMaxPool", OpKind.REDUCTION, lower=lambda ctx: [_lower_global(ctx, "max")])
def _global_max_pool(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x = arrays[0]
    assert x is not None
    _global_shape(node, x.shape)
    return [x.max(axis=tuple(range(2, x.ndim)), keepdims=True)]
