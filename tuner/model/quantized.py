"""Templates for quantized convolutions (``tuner.NhwcQConv``, from ``tuner.graph.quantized``).

A convolution of one group is an integer matrix product, ``X[N*OH*OW, C*R*S] @
W[R*S*C, K]`` (``matmul_integer``: 64 int8 multiply-adds an instruction where the target
has VNNI): the image itself where the window is one pixel, its windows otherwise
(``im2col_nhwc``, padded with the zero point, first). The weight is laid out once, here;
the scales ``x_scale * w_scale[k]`` and the bias are the epilogue's first steps, so the
activation and the next QuantizeLinear follow them in the kernel, which writes int8.

A grouped or depthwise convolution sums too few terms per output for an integer dot
product (nine for a 3 x 3 depthwise): it runs conv2d's direct float kernel on the int8
image (``x_dtype``, read as ``float32(x) - zero_point``), its weight dequantized and
multiplied by the image's scale at compile time. Either way the image is never
dequantized in memory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from ..graph.ir import Node, Value
from ..task import Task
from .spec import Builder, KernelSpec
from .templates import Match, direct_nhwc, shape_of

__all__ = ["nhwc_qconv", "qmatmul"]


def nhwc_qconv(b: Builder, n: Node, values: Mapping[str, Value]) -> Match | None:
    """The template for a channels-last quantized convolution (the module's docstring)."""
    from ..graph.ops.windows import conv_params

    x, w, y = values[n.inputs[0]], values[n.inputs[1]], values[n.outputs[0]]
    consts = [values[i].data for i in n.inputs[1:5]]
    if any(c is None for c in consts) or len(x.shape) != 4 or not (x.static and y.static):
        return None
    wq, xs, xz, ws = (np.asarray(c) for c in consts)
    N, H, W, C = shape_of(x)
    p = conv_params(n, (N, C, H, W), shape_of(w))
    zero = int(xz.reshape(-1)[0])
    K = wq.shape[0]
    scale = np.float32(xs.reshape(-1)[0]) * ws.astype(np.float32).reshape(-1)
    scale = np.broadcast_to(scale, (K,)).astype(np.float32)
    bias = n.inputs[5] if len(n.inputs) > 5 and n.inputs[5] else ""
    counts = _integer_bias(b, values[bias].data if bias else None, bias, scale)
    if p.group != 1:  # integer weights: the sums are exact in float32 too
        image = {"x_dtype": x.dtype, "x_zero_point": zero}
        made = direct_nhwc(b, n, x, y, wq.astype(np.float32), counts or "", image)
        if made is None:
            return None
        steps, extras = ["mul@c"], [b.const(f"{n.outputs[0]}_scale", scale)]
        if bias and not counts:
            steps.append("add@c")
            extras.append(bias)
        return dataclasses.replace(made, steps=tuple(steps), extras=tuple(extras))
    window = p.uniform()
    if window is None:
        return None
    stride, pad, dilation = window
    _, _, R, S = wq.shape
    _, OH, OW, _ = shape_of(y)
    source, prologue, Cp = n.inputs[0], None, C
    if (R, S, stride, pad) != (1, 1, 1, 0):
        Cp = -(-C // 4) * 4  # whole groups of 4 bytes: A's rows copy without a guard
        source = f"{n.outputs[0]}__im2col{len(b.specs)}"
        b.new_values[source] = Value(source, x.dtype, (N * OH * OW, R * S * Cp))
        cols = {
            "N": N, "C": C, "H": H, "W": W, "R": R, "S": S, "stride": stride, "pad": pad,
            "dilation": dilation, "dtype": x.dtype, "fill": zero, "channels": Cp,
        }  # fmt: skip
        task = Task.make("im2col_nhwc", cols, b.target)
        prologue = KernelSpec(task, (n.inputs[0],), source, "Im2col", (n.name,))
    depth = R * S * Cp
    wide = np.zeros((K, Cp, R, S), np.int8)  # zero weights for the padded channels
    wide[:, :C] = wq
    matrix = wide.transpose(2, 3, 1, 0).reshape(depth, K)
    M = N * OH * OW
    packed, panels = _panels(b, n.inputs[1], matrix, M)
    sums = _colsums(b, n.inputs[1], matrix)
    zp = b.const(f"{n.inputs[0]}_zero_point", xz.reshape(1), x.dtype)
    steps, extras = ["mul@c"], [b.const(f"{n.outputs[0]}_scale", scale)]
    if counts:  # the int32 bias onnxruntime adds to its sums, then one multiply
        steps.insert(0, "add@c")
        extras.insert(0, counts)
    elif bias:
        steps.append("add@c")
        extras.append(bias)
    args = {"M": M, "N": K, "K": depth, "a_dtype": x.dtype, "colsums": True, "b_panels": panels}
    return Match(
        "matmul_integer",
        args,
        [source, packed, zp, sums],
        shape_of(y),
        3,
        tuple(steps),
        tuple(extras),
        prologue,
    )


def _integer_bias(b: Builder, data: np.ndarray | None, bias: str, scale: np.ndarray) -> str:
    """The bias as whole multiples of ``scale`` (``x_scale * w_scale[k]``), float32 constants
    that add to the integer sums exactly, where it is one (what ``quantize_static`` writes: an
    int32 bias dequantized with that scale); '' otherwise. The kernel then computes
    ``(sums + counts) * scale``, as onnxruntime's QLinearConv does."""
    if data is None:
        return ""
    data = np.asarray(data, np.float32).reshape(-1)
    counts = np.rint(data / scale)
    if np.any(np.abs(counts) >= 2**24) or not np.array_equal(counts * scale, data):
        return ""
    return b.const(f"{bias}_counts", counts.astype(np.float32))


def _panels(b: Builder, weight: str, matrix: np.ndarray, M: int) -> tuple[str, int]:
    """A constant int8 ``[K, N]`` matrix as the integer kernel reads it, and its panels' width.

    Where the target has the int8 dot product, in the panels of the default tile's
    width (``matmul_integer``'s ``b_panels``), laid out once here: the kernel packed
    them at every call, a pass over the weight (a 1 x 1280 x 1000 classifier, uint8,
    AMD Zen 4: 0.29 ms packing at each call, 0.046 ms from panels). Else as it is (0).
    """
    from search_spaces import _int8
    from search_spaces.matmul_integer import default_config

    if not _int8.supported(b.target):
        return b.const(weight, matrix, "int8"), 0
    K, N = matrix.shape
    nr = int(default_config(M, N, K, b.target)["nr"])
    return b.const(weight, _int8.pack_panels(matrix.astype(np.int8), nr), "int8"), nr


def _colsums(b: Builder, weight: str, matrix: np.ndarray) -> str:
    """The column sums of a constant int8 ``[K, N]`` matrix, once (``matmul_integer``'s
    ``BS``: the zero-point correction reads them, and summing the weight at every call cost
    as much as reading it)."""
    return b.const(f"{weight}_colsums", matrix.astype(np.int64).sum(axis=0), "int32")


def qmatmul(b: Builder, n: Node, values: Mapping[str, Value]) -> Match | None:
    """A quantized matrix product (``tuner.QMatMul``) as ``matmul_integer``: its rows are
    the left operand's (all batch axes), its zero point an input (a constant, or the value
    ``DynamicQuantizeLinear`` computed), its scales the epilogue's first steps (one
    multiply by the per-column product of constant scales, or by the run-time scale and
    then the weight's)."""
    a, w, y = values[n.inputs[0]], values[n.inputs[1]], values[n.outputs[0]]
    a_s, a_z, w_s = (values[i] for i in n.inputs[2:5])
    if w.data is None or w_s.data is None or not (a.static and y.static):
        return None
    if len(w.shape) != 2:
        return None
    K, N = shape_of(w)
    M = int(np.prod(shape_of(a)[:-1]))
    zp = (
        a_z.name
        if a_z.data is None
        else b.const(f"{a.name}_zero_point", a_z.data.reshape(1), a.dtype)
    )
    ws = np.broadcast_to(np.asarray(w_s.data, np.float32).reshape(-1), (N,)).astype(np.float32)
    if a_s.data is not None:
        scale = np.float32(np.asarray(a_s.data).reshape(-1)[0]) * ws
        steps, extras = ["mul@c"], [b.const(f"{n.outputs[0]}_scale", scale)]
    else:
        steps, extras = ["mul@s", "mul@c"], [a_s.name, b.const(f"{n.outputs[0]}_scale", ws)]
    packed, panels = _panels(b, n.inputs[1], np.asarray(w.data), M)
    args = {"M": M, "N": N, "K": K, "a_dtype": a.dtype, "colsums": True, "b_panels": panels}
    sums = _colsums(b, n.inputs[1], w.data)
    return Match(
        "matmul_integer",
        args,
        [n.inputs[0], packed, zp, sums],
        shape_of(y),
        -1,
        tuple(steps),
        tuple(extras),
    )
