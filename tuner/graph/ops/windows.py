"""Convolution and pooling windows: what a Conv, ConvTranspose or pool node's attributes say.

The parameter readers (:func:`conv_params`, :func:`conv_transpose_params`,
:func:`pool_params`) are the one place that reads these operators'
attributes: they fill ONNX's defaults, resolve ``auto_pad`` from the input
shape and compute the output's spatial extents, so the NumPy evaluation, the
te lowering (both in ``nn``) and the choice of a template (task extraction)
agree. They are apart from ``nn`` because task extraction needs the window
and not the operators. Every window follows ONNX's arithmetic, per spatial axis::

    span = (kernel - 1) * dilation + 1
    out  = floor((in + pad_begin + pad_end - span) / stride) + 1          (ceil in ceil_mode)

``auto_pad`` SAME_UPPER / SAME_LOWER pads ``need = max(0, (ceil(in / stride) - 1) * stride
+ span - in)`` in all, the odd one at the end (UPPER) or the beginning (LOWER);
VALID pads nothing (Conv follows the spec for SAME with dilations, which
onnxruntime rejects; pools refuse it, as onnxruntime's answer differs from the
spec's). In ceil mode a last window that would start in the end
padding is dropped (``(out - 1) * stride >= in + pad_begin``), as onnxruntime
does.

>>> p = conv_params(Node("Conv", ("x", "w"), ("y",), {"pads": (1, 1, 1, 1)}), (1, 3, 8, 8), (4, 3, 3, 3))
>>> p.out_spatial, p.uniform()
((8, 8), (1, 1, 1))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..ir import Dim, GraphError, Node

__all__ = [
    "ConvParams",
    "ConvTransposeParams",
    "PoolParams",
    "conv_params",
    "conv_transpose_params",
    "pool_params",
]

_AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


@dataclass(frozen=True)
class ConvParams:
    """A Conv node's window, per spatial axis, with ONNX's defaults filled and auto_pad resolved.

    ``kernel`` comes from the weight's shape; ``out_spatial`` is the output's
    spatial extents (the output is ``(N, M, *out_spatial)``).
    """

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]
    dilations: tuple[int, ...]
    group: int
    out_spatial: tuple[int, ...]

    @property
    def rank(self) -> int:
        """Number of spatial axes (1 for Conv1d, 2 for Conv2d)."""
        return len(self.kernel)

    def uniform(self) -> tuple[int, int, int] | None:
        """``(stride, pad, dilation)`` when each is one number on every axis and pads are
        symmetric (what the conv2d templates take), else None."""
        return _uniform(self.strides, self.pads_begin, self.pads_end, self.dilations)


@dataclass(frozen=True)
class ConvTransposeParams:
    """A ConvTranspose node's window (ONNX defaults filled, pads resolved from auto_pad or
    output_shape); the output is ``(N, W.shape[1] * group, *out_spatial)``."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]
    dilations: tuple[int, ...]
    group: int
    output_padding: tuple[int, ...]
    out_spatial: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.kernel)


@dataclass(frozen=True)
class PoolParams:
    """A MaxPool / AveragePool node's window (ONNX defaults filled, auto_pad resolved).

    ``count_include_pad`` only matters to AveragePool: when set, the divisor
    counts the window's taps inside the padded input (``[-pad_begin, in +
    pad_end)``), else those inside the input; ceil mode's overhang past the
    end padding never counts. The output is ``(N, C, *out_spatial)``.
    """

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]
    dilations: tuple[int, ...]
    ceil_mode: bool
    count_include_pad: bool
    out_spatial: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.kernel)

    def uniform(self) -> tuple[int, int, int] | None:
        """``(stride, pad, dilation)`` when each is one number on every axis and pads are
        symmetric, else None."""
        return _uniform(self.strides, self.pads_begin, self.pads_end, self.dilations)


def _uniform(*per_axis: tuple[int, ...]) -> tuple[int, int, int] | None:
    strides, pb, pe, dil = per_axis
    if len({*strides}) == 1 and len({*pb, *pe}) == 1 and len({*dil}) == 1:
        return strides[0], pb[0], dil[0]
    return None


def _static(node: Node, shape: Sequence[Dim], what: str) -> tuple[int, ...]:
    if not all(isinstance(d, int) for d in shape):
        raise GraphError(f"{node.describe()} needs a static {what} shape, got {tuple(shape)}")
    return tuple(int(d) for d in shape)


def _ints(node: Node, key: str, default: int, n: int) -> tuple[int, ...]:
    value = node.attr(key)
    if value is None:
        return (default,) * n
    out = tuple(int(v) for v in value)
    if len(out) != n:
        raise GraphError(f"{node.describe()} has {key}={list(out)}, expected {n} values")
    if any(v < 0 for v in out) or (key in ("strides", "dilations") and min(out) < 1):
        raise GraphError(f"{node.describe()} has an out-of-range {key}={list(out)}")
    return out


def _auto_pad(node: Node) -> str:
    auto = str(node.attr("auto_pad", "NOTSET"))
    if auto not in _AUTO_PADS:
        raise GraphError(f"{node.describe()} has unknown auto_pad {auto!r}")
    return auto


def _window(
    node: Node,
    spatial: tuple[int, ...],
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    ceil_mode: bool = False,
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """``(pads_begin, pads_end, out_spatial)`` of a Conv or pool window (see the module doc)."""
    n = len(spatial)
    auto = _auto_pad(node)
    if auto == "NOTSET":
        pads = _ints(node, "pads", 0, 2 * n)
        pb, pe = pads[:n], pads[n:]
    elif auto == "VALID":
        pb = pe = (0,) * n
    else:
        need = [
            max(0, (-(-i // s) - 1) * s + (k - 1) * d + 1 - i)
            for i, k, s, d in zip(spatial, kernel, strides, dilations, strict=True)
        ]
        small = tuple(t // 2 for t in need)
        big = tuple(t - t // 2 for t in need)
        pb, pe = (small, big) if auto == "SAME_UPPER" else (big, small)
    out = []
    for i, k, s, d, b, e in zip(spatial, kernel, strides, dilations, pb, pe, strict=True):
        room = i + b + e - ((k - 1) * d + 1)
        if room < 0:
            raise GraphError(
                f"{node.describe()}: the window (kernel {k}, dilation {d}) does not fit "
                f"the padded input extent {i + b + e}"
            )
        o = (-(-room // s) if ceil_mode else room // s) + 1
        if ceil_mode and (o - 1) * s >= i + b:
            o -= 1
        out.append(o)
    return pb, pe, tuple(out)


def _kernel(node: Node, w_spatial: tuple[int, ...]) -> tuple[int, ...]:
    given = node.attr("kernel_shape")
    if given is not None and tuple(int(k) for k in given) != w_spatial:
        raise GraphError(
            f"{node.describe()} has kernel_shape={list(given)} but its weight's window is "
            f"{list(w_spatial)}"
        )
    return w_spatial


def _conv_shapes(
    node: Node, x_shape: Sequence[Dim], w_shape: Sequence[Dim], transpose: bool
) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """The static input and weight shapes and the group, checked against each other."""
    x = _static(node, x_shape, "input")
    w = _static(node, w_shape, "weight")
    group = int(node.attr("group", 1))
    if len(x) < 3 or len(w) != len(x):
        raise GraphError(
            f"{node.describe()} needs an input of rank 3 or more and a weight of the same rank, "
            f"got {x} and {w}"
        )
    fits = w[0] == x[1] if transpose else w[0] % group == 0 and w[1] * group == x[1]
    if group < 1 or x[1] % group or not fits:
        raise GraphError(
            f"{node.describe()}: group={group} does not fit {x[1]} input channels and a weight "
            f"of shape {w}"
        )
    return x, w, group


def conv_params(node: Node, x_shape: Sequence[Dim], w_shape: Sequence[Dim]) -> ConvParams:
    """The window of Conv ``node`` with input ``X[N, C, *spatial]`` and weight ``W[M, C/group, *kernel]``.

    >>> n = Node("Conv", ("x", "w"), ("y",), {"strides": (2,), "auto_pad": "SAME_UPPER"})
    >>> p = conv_params(n, (1, 2, 7), (4, 2, 3))
    >>> p.pads_begin, p.pads_end, p.out_spatial
    ((1,), (1,), (4,))
    """
    x, w, group = _conv_shapes(node, x_shape, w_shape, transpose=False)
    n = len(x) - 2
    kernel = _kernel(node, w[2:])
    strides = _ints(node, "strides", 1, n)
    dilations = _ints(node, "dilations", 1, n)
    pb, pe, out = _window(node, x[2:], kernel, strides, dilations)
    return ConvParams(kernel, strides, pb, pe, dilations, group, out)


def conv_transpose_params(
    node: Node, x_shape: Sequence[Dim], w_shape: Sequence[Dim]
) -> ConvTransposeParams:
    """The window of ConvTranspose ``node``: input ``X[N, C, *spatial]``, weight
    ``W[C, M/group, *kernel]``.

    Output extent per axis: ``stride * (in - 1) + output_padding + span - pad_begin -
    pad_end``. With ``output_shape`` (its last ``rank`` entries) the total padding
    is whatever gives that extent (none if the extent is larger: zeros are added
    at the end); SAME_UPPER / SAME_LOWER pad for an extent of ``in * stride``
    (none if the extent is larger: then it stays the unpadded extent). Such
    a total is split as onnxruntime does: the odd one at the end for SAME_UPPER,
    at the beginning otherwise. ``output_padding`` must be less than the stride
    (onnxruntime's rule).
    """
    x, w, group = _conv_shapes(node, x_shape, w_shape, transpose=True)
    n = len(x) - 2
    kernel = _kernel(node, w[2:])
    strides = _ints(node, "strides", 1, n)
    dilations = _ints(node, "dilations", 1, n)
    adj = _ints(node, "output_padding", 0, n)
    if any(a >= s for a, s in zip(adj, strides, strict=True)):
        raise GraphError(
            f"{node.describe()} has output_padding={list(adj)}, not less than its "
            f"strides={list(strides)}"
        )
    full = tuple(
        s * (i - 1) + a + (k - 1) * d + 1
        for i, k, s, d, a in zip(x[2:], kernel, strides, dilations, adj, strict=True)
    )
    auto = _auto_pad(node)
    target: tuple[int, ...] | None = None
    if node.attr("output_shape") is not None:
        shape = tuple(int(v) for v in node.attr("output_shape"))
        if len(shape) < n:
            raise GraphError(f"{node.describe()} has output_shape={list(shape)} of too few axes")
        target = shape[len(shape) - n :]
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        target = tuple(i * s for i, s in zip(x[2:], strides, strict=True))
    if target is not None:
        total = [max(0, f - t) for f, t in zip(full, target, strict=True)]
        big = tuple(t - t // 2 for t in total)
        small = tuple(t // 2 for t in total)
        pb, pe = (small, big) if auto == "SAME_UPPER" else (big, small)
    elif auto == "VALID":
        pb = pe = (0,) * n
    else:
        pads = _ints(node, "pads", 0, 2 * n)
        pb, pe = pads[:n], pads[n:]
    out = tuple(f - b - e for f, b, e in zip(full, pb, pe, strict=True))
    if node.attr("output_shape") is not None:
        out = target or out
    if min(out) < 1:
        raise GraphError(f"{node.describe()} has an empty output (spatial extents {list(out)})")
    return ConvTransposeParams(kernel, strides, pb, pe, dilations, group, adj, out)


def pool_params(node: Node, x_shape: Sequence[Dim]) -> PoolParams:
    """The window of MaxPool / AveragePool ``node`` over ``X[N, C, *spatial]``.

    >>> pool_params(Node("MaxPool", ("x",), ("y",), {"kernel_shape": (3, 3), "strides": (2, 2),
    ...             "ceil_mode": 1}), (1, 1, 6, 6)).out_spatial
    (3, 3)
    """
    x = _static(node, x_shape, "input")
    if len(x) < 3:
        raise GraphError(f"{node.describe()} needs an input of rank 3 or more, got {x}")
    n = len(x) - 2
    if node.attr("kernel_shape") is None:
        raise GraphError(f"{node.describe()} has no kernel_shape")
    kernel = _ints(node, "kernel_shape", 1, n)
    if min(kernel) < 1:
        raise GraphError(f"{node.describe()} has kernel_shape={list(kernel)}")
    strides = _ints(node, "strides", 1, n)
    dilations = _ints(node, "dilations", 1, n)
    ceil_mode = bool(node.attr("ceil_mode", 0))
    if _auto_pad(node).startswith("SAME") and max(dilations) > 1:
        # onnxruntime pads for the undilated kernel here, against the spec: no answer is safe.
        raise GraphError(f"{node.describe()} combines auto_pad SAME with dilations; not supported")
    pb, pe, out = _window(node, x[2:], kernel, strides, dilations, ceil_mode)
    include = bool(node.attr("count_include_pad", 0))
    return PoolParams(kernel, strides, pb, pe, dilations, ceil_mode, include, out)
