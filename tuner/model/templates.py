"""Templates for a fused group's anchor: which operator computes it, with which arguments.

A matcher looks at the group's first node (a Conv or its channels-last twin,
MatMul, Gemm, pool, Softmax, LayerNormalization) and returns a :class:`Match`:
the template operator, its arguments and input values, the output's channel
axis for the epilogue, and for NCHW convolutions lowered as ``im2col`` +
``matmul`` the kernel that runs first. ``None`` means the template cannot
compute this node (wrong dtype, asymmetric padding...): the group is then
lowered generically.

On a CPU with vectors the layout pass (``tuner.graph.layout``) has made every
convolution channels-last (``_nhwc_conv``); the NCHW matchers serve the
targets it leaves alone.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..graph.ir import Node, Value
from ..task import Task
from .spec import Builder, KernelSpec, broadcast_kind

__all__ = ["TEMPLATES", "Match", "direct_nhwc", "shape_of", "takes_epilogue"]


@dataclass(frozen=True)
class Match:
    """A template for a group's anchor: its operator, arguments and input values."""

    op: str
    args: dict[str, Any]
    inputs: list[str]
    out_shape: tuple[int, ...]
    #: The output axis a per-channel epilogue operand runs along (NCHW: 1; rows: -1).
    channel_axis: int
    #: Epilogue steps the anchor itself needs (depthwise's bias), and their inputs.
    steps: tuple[str, ...] = ()
    extras: tuple[str, ...] = ()
    #: A kernel that runs first and makes one of ``inputs`` (a convolution's im2col).
    prologue: KernelSpec | None = None


Matcher = Callable[[Builder, Node, Mapping[str, Value]], Match | None]


def _f32(*vs: Value) -> bool:
    return all(v.dtype == "float32" and v.static for v in vs)


def shape_of(v: Value) -> tuple[int, ...]:
    """A static value's shape as ints."""
    return tuple(int(d) for d in v.shape)


_shape = shape_of


def _conv(b: Builder, n: Node, values: Mapping[str, Value]) -> Match | None:
    from ..graph.ops.windows import conv_params

    x, w, y = values[n.inputs[0]], values[n.inputs[1]], values[n.outputs[0]]
    if not _f32(x, w, y) or len(x.shape) != 4:
        return None
    p = conv_params(n, _shape(x), _shape(w))
    pads = {*p.pads_begin, *p.pads_end}
    if len(pads) != 1 or len(set(p.strides)) != 1 or len(set(p.dilations)) != 1:
        return None
    N, C, H, W = _shape(x)
    K, _, R, S = _shape(w)
    window = {"R": R, "S": S, "stride": p.strides[0], "pad": pads.pop(), "dilation": p.dilations[0]}
    bias = len(n.inputs) > 2 and bool(n.inputs[2])
    if p.group == C == K and w.shape[1] == 1:
        inputs = [n.inputs[0], n.inputs[1]]
        args = {"N": N, "C": C, "H": H, "W": W, **window}
        if bias:  # depthwise has no bias argument: the epilogue adds it
            return Match("depthwise_conv2d", args, inputs, _shape(y), 1, ("add@c",), (n.inputs[2],))
        return Match("depthwise_conv2d", args, inputs, _shape(y), 1)
    if N == 1 and p.group == 1:
        if R == S == 1 and window["stride"] == 1 and not window["pad"]:
            return _pointwise_conv(n, n.inputs[0], K, C, H * W, bias, _shape(y))
        if C >= _IM2COL_FROM_CHANNELS:
            image = {"N": N, "C": C, "H": H, "W": W, **window}
            return _im2col_conv(b, n, image, K, bias, _shape(y))
    args = {"N": N, "C": C, "H": H, "W": W, "K": K, "groups": p.group, "bias": bias, **window}
    inputs = [n.inputs[0], n.inputs[1], *([n.inputs[2]] if bias else [])]
    return Match("conv2d", args, inputs, _shape(y), 1)


def _nhwc_conv(b: Builder, n: Node, values: Mapping[str, Value]) -> Match | None:
    """A channels-last convolution (``tuner.NhwcConv``, from the layout pass): conv2d's direct
    NHWC kernel, every kind (3 x 3, 1 x 1, strided, grouped, depthwise, a first layer).

    Its constant weight is packed once, here, into panels of as many output channels as
    the default register tile holds (``weights="blocked"``; ``block`` is that tile's width,
    so records of this task are for that width): the tile streams one contiguous panel. In
    ``[R, S, C, K]`` order instead, a tile's rows of the weight lie K floats apart, a power
    of two in most networks: they fall into a few cache sets, and the panel, re-read for
    every row of pixels, is evicted between rows (3 x 3, 512 channels at 7 x 7: 93
    GFLOP/s at K = 512 against 167 at K = 496, same tile, same machine).

    A 3 x 3 convolution of stride 1 that ``search_spaces.winograd.pays`` finds cheaper
    as Winograd's F(2 x 2, 3 x 3) (2.25 times fewer multiply-adds, for transforms of the
    input and output tiles) runs as ``conv2d_winograd`` instead, its weight transformed
    here, once (``transform_weights``).
    """
    x, w, y = values[n.inputs[0]], values[n.inputs[1]], values[n.outputs[0]]
    if not _f32(x, w, y) or w.data is None or len(x.shape) != 4:
        return None
    bias = n.inputs[2] if len(n.inputs) > 2 and n.inputs[2] else ""
    return direct_nhwc(b, n, x, y, w.data, bias)


def direct_nhwc(
    b: Builder,
    n: Node,
    x: Value,
    y: Value,
    weight: np.ndarray,
    bias: str,
    image: Mapping[str, Any] | None = None,
) -> Match | None:
    """conv2d's direct channels-last kernel for convolution node ``n`` of image ``x`` (NHWC)
    with the float ``[K, C/group, R, S]`` ``weight`` (packed here) and ``bias`` (a value
    name, or ''); ``image`` adds conv2d arguments about X (a quantized image's type and
    zero point: no Winograd then, whose transforms read float)."""
    from search_spaces import winograd
    from search_spaces.conv2d import Conv2d, channels_last_default

    from ..graph.ops.windows import conv_params

    N, H, W, C = _shape(x)
    p = conv_params(n, (N, C, H, W), weight.shape)
    window = p.uniform()
    if window is None:
        return None
    stride, pad, dilation = window
    K, _, R, S = weight.shape
    args = {
        "N": N, "C": C, "H": H, "W": W, "K": K, "R": R, "S": S,
        "stride": stride, "pad": pad, "dilation": dilation, "groups": p.group,
        "layout": "NHWC", "weights": "HWIO", "bias": bool(bias), **(image or {}),
    }  # fmt: skip
    if not image and winograd.pays(Conv2d.from_args(args), b.target):
        wargs = {k: args[k] for k in ("N", "C", "H", "W", "K", "pad", "bias")}
        packed = b.const(n.inputs[1], winograd.transform_weights(weight))
        inputs = [n.inputs[0], packed, *([bias] if bias else [])]
        return Match("conv2d_winograd", wargs, inputs, _shape(y), 3)
    args["block"] = channels_last_default(Conv2d.from_args(args), b.target)["kr"]
    args["weights"] = "blocked"
    packed = b.const(n.inputs[1], Conv2d.from_args(args).pack_weights(weight))
    inputs = [n.inputs[0], packed, *([bias] if bias else [])]
    return Match("conv2d", args, inputs, _shape(y), 3)


def _nhwc_qconv(b: Builder, n: Node, values: Mapping[str, Value]) -> Match | None:
    from .quantized import nhwc_qconv

    return nhwc_qconv(b, n, values)


def _qmatmul(b: Builder, n: Node, values: Mapping[str, Value]) -> Match | None:
    from .quantized import qmatmul

    return qmatmul(b, n, values)


def _pointwise_conv(
    n: Node, x: str, K: int, C: int, pixels: int, bias: bool, out_shape: tuple[int, ...]
) -> Match:
    """A 1 x 1 convolution of one image as the matmul ``W[K, C] @ X[C, H*W]`` (the same
    buffers, flat), its output channels the rows an epilogue's channel inputs run along.

    The matmul nest beat conv2d's direct kernel (both defaults, two threads) on 19
    of the 21 pointwise convolutions of ResNet-50 and MobileNetV2, by up to 2.9x
    where the image is 7 x 7 (512 x 49 x 2048: 0.91 against 2.64 ms) and within
    7 % on the other two.
    """
    args = {"M": K, "N": pixels, "K": C, "channels": "rows"}
    if bias:  # matmul has no bias argument: the epilogue adds it
        return Match("matmul", args, [n.inputs[1], x], out_shape, 1, ("add@c",), (n.inputs[2],))
    return Match("matmul", args, [n.inputs[1], x], out_shape, 1)


#: Input channels from which a convolution's windows are copied for the matmul nest.
_IM2COL_FROM_CHANNELS = 16


def _im2col_conv(
    b: Builder, n: Node, args: dict[str, Any], K: int, bias: bool, out_shape: tuple[int, ...]
) -> Match:
    """Any other convolution of one image: its windows as a ``[C*R*S, OH*OW]`` matrix
    (the ``im2col`` kernel, first), then the product with the ``[K, C*R*S]`` weight.

    Against conv2d's direct kernel, both defaults, two threads, the copy included
    (bias on the rows): ResNet-50's 3 x 3 convolutions 1.6x (64 x 56 x 56: 3.66
    against 2.28 ms) to 1.95x (128 x 28 x 28: 3.68 against 1.89), its strided
    1 x 1 ones 1.16x (256 x 56 x 56) and 3.17x (1024 x 14 x 14: 6.55 against
    2.06). Not for an image's first convolution: with 3 channels the copy is the
    work (ResNet-50's 7 x 7 stem 1.77 against 3.06 ms; MobileNetV2's 1.09x).
    """
    from search_spaces.conv2d import Conv2d

    p = Conv2d.from_args({**args, "K": K})
    rows, cols = p.C * p.R * p.S, p.OH * p.OW
    name = f"{n.outputs[0]}__im2col{len(b.specs)}"
    b.new_values[name] = Value(name, "float32", (rows, cols))
    task = Task.make("im2col", args, b.target)
    first = KernelSpec(task, (n.inputs[0],), name, "Im2col", (n.name,))
    return dataclasses.replace(
        _pointwise_conv(n, name, K, rows, cols, bias, out_shape), prologue=first
    )


def _matmul(b: Builder, n: Node, values: Mapping[str, Value]) -> Match | None:
    a, w, y = values[n.inputs[0]], values[n.inputs[1]], values[n.outputs[0]]
    if not _f32(a, w, y) or len(a.shape) < 2 or len(w.shape) < 2:
        return None
    ash, wsh = _shape(a), _shape(w)
    K = ash[-1]
    if len(wsh) == 2:
        M, N = math.prod(ash[:-1]), wsh[1]
        if w.data is not None:  # a weight: dense reads it as [N, K] rows
            return _dense(b, n, n.inputs[0], w.data.T, "", _shape(y))
        return Match("matmul", {"M": M, "N": N, "K": K}, [n.inputs[0], n.inputs[1]], _shape(y), -1)
    if ash[:-2] == wsh[:-2]:
        args = {"B": math.prod(ash[:-2]), "M": ash[-2], "N": wsh[-1], "K": K}
        return Match("batch_matmul", args, [n.inputs[0], n.inputs[1]], _shape(y), -1)
    return None


def _gemm(b: Builder, n: Node, values: Mapping[str, Value]) -> Match | None:
    a, w, y = values[n.inputs[0]], values[n.inputs[1]], values[n.outputs[0]]
    if not _f32(a, w, y) or n.attr("transA", 0) or w.data is None:
        return None
    alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0))
    weight = w.data if n.attr("transB", 0) else w.data.T
    M, K = _shape(a)
    N = weight.shape[0]
    bias = ""
    if len(n.inputs) > 2 and n.inputs[2]:
        c = values[n.inputs[2]]
        if c.data is None or broadcast_kind(c.shape, (M, N), -1) not in ("c", "s"):
            return None
        data = np.broadcast_to(c.data.reshape(-1) * np.float32(beta), (N,))
        bias = b.const(n.inputs[2], data)
    return _dense(b, n, n.inputs[0], weight * np.float32(alpha), bias, (M, N))


def _dense(
    b: Builder, n: Node, x: str, weight: np.ndarray, bias: str, out_shape: tuple[int, ...]
) -> Match:
    """``x @ weight.T (+ bias)`` with a constant ``[N, K]`` weight: ``dense``, or past
    ``dense.GEMV_DEFAULT_UP_TO`` rows on a target with vectors conv2d's channels-last 1 x 1
    kernel over an image of one row of ``M`` pixels (the same buffers; not in the
    shape-generic mode, ``Builder.layout``, whose dense kernels serve every row count).

    The convolution's weight is packed here, once, into panels of its register tile's
    width (``direct_nhwc``'s ``weights="blocked"``), and its tile reads the rows of ``x``
    in place. dense packs on every call instead: W into panels with its vectors along the
    features, or ``x`` (and reads its product back transposed) with its vectors along the
    batch. Xeon with AVX-512, 2 threads, the zoo's shapes (rows x in -> out), both
    defaults: ConvNeXt's 3136 x 384 -> 96 0.90 against 1.42 ms (NumPy 0.88), 3136 x 96
    -> 384 with GELU 1.05 against 1.50; ViT's 197 x 1536 -> 384 0.74 against 1.03; 49 x
    3072 -> 768 0.77 against 1.16; BERT's 128 x 768 -> 768 0.54 against 0.54. Up to 8
    rows dense's matrix-vector kernel reads the weight once, in place.

    Only where the convolution's default tile holds more than half the vector registers
    in accumulators: a row count its tiles of four vectors of channels divide only by 4
    pixels (T5's 128 rows, 512 -> 2048 and back: 16 accumulators of 32) ran the
    convolution 1.1 to 1.4 times slower than dense (in the model, 6.2 against 4.4 ms).
    """
    from search_spaces.dense import GEMV_DEFAULT_UP_TO

    N, K = weight.shape
    M = math.prod(out_shape) // N
    lanes = int(b.target.get("vector_lanes", 1))
    if M > GEMV_DEFAULT_UP_TO and lanes > 1 and b.layout:
        from search_spaces._conv_tiles import vectors
        from search_spaces.conv2d import Conv2d, channels_last_default

        args: dict[str, Any] = {
            "N": 1, "C": K, "H": 1, "W": M, "K": N, "R": 1, "S": 1,
            "stride": 1, "pad": 0, "dilation": 1, "groups": 1,
            "layout": "NHWC", "weights": "HWIO", "bias": bool(bias),
        }  # fmt: skip
        tile = channels_last_default(Conv2d.from_args(args), b.target)
        accumulators = vectors(tile["kr"], lanes) * tile["owr"] * tile["ohr"]
        if 2 * accumulators > b.target.vector_registers:
            args["block"], args["weights"] = tile["kr"], "blocked"
            conv = Conv2d.from_args(args)
            packed = b.const(n.inputs[1], conv.pack_weights(weight.reshape(N, K, 1, 1)))
            return Match("conv2d", args, [x, packed, *([bias] if bias else [])], out_shape, -1)
    args = {"batch": M, "in_features": K, "out_features": N, "bias": bool(bias)}
    wt = b.const(n.inputs[1], np.ascontiguousarray(weight))
    return Match("dense", args, [x, wt, *([bias] if bias else [])], out_shape, -1)


def _pool(b: Builder, n: Node, values: Mapping[str, Value]) -> Match | None:
    from ..graph.ops.windows import pool_params

    x, y = values[n.inputs[0]], values[n.outputs[0]]
    if not _f32(x, y) or len(x.shape) != 4:
        return None
    p = pool_params(n, _shape(x))
    pads = {*p.pads_begin, *p.pads_end}
    kernel = set(p.kernel)
    if len(pads) != 1 or len(kernel) != 1 or len(set(p.strides)) != 1 or {*p.dilations} != {1}:
        return None
    pad, k, stride = pads.pop(), kernel.pop(), p.strides[0]
    N, C, H, W = _shape(x)
    expect = ((H + 2 * pad - k) // stride + 1, (W + 2 * pad - k) // stride + 1)
    if _shape(y)[2:] != expect:
        return None  # ceil_mode changed the output
    kind = "max" if n.op == "MaxPool" else "avg"
    if kind == "avg" and pad and not p.count_include_pad:
        return None
    args = {"N": N, "C": C, "H": H, "W": W, "kernel": k, "stride": stride, "pad": pad}
    return Match(f"{kind}_pool2d", args, [n.inputs[0]], _shape(y), 1)


def _global_pool(b: Builder, n: Node, values: Mapping[str, Value]) -> Match | None:
    x, y = values[n.inputs[0]], values[n.outputs[0]]
    if not _f32(x, y) or len(x.shape) != 4:
        return None
    N, C, H, W = _shape(x)
    return Match("global_avg_pool2d", {"N": N, "C": C, "H": H, "W": W}, [n.inputs[0]], _shape(y), 1)


def _rows(x: Value, axis: int) -> tuple[int, int] | None:
    shape = _shape(x)
    if axis % len(shape) != len(shape) - 1:
        return None
    return math.prod(shape[:-1]), shape[-1]


def _softmax(b: Builder, n: Node, values: Mapping[str, Value]) -> Match | None:
    x, y = values[n.inputs[0]], values[n.outputs[0]]
    rows = _rows(x, int(n.attr("axis", -1))) if _f32(x, y) else None
    if rows is None:
        return None
    op = "softmax" if n.op == "Softmax" else "log_softmax"
    return Match(op, {"M": rows[0], "N": rows[1]}, [n.inputs[0]], _shape(y), -1)


def _layer_norm(b: Builder, n: Node, values: Mapping[str, Value]) -> Match | None:
    x, y = values[n.inputs[0]], values[n.outputs[0]]
    rows = _rows(x, int(n.attr("axis", -1))) if _f32(x, y) else None
    if rows is None or len([o for o in n.outputs if o]) != 1:
        return None
    M, N = rows
    gamma = n.inputs[1] if len(n.inputs) > 1 and n.inputs[1] else b.const("ln_gamma", np.ones(N))
    beta = n.inputs[2] if len(n.inputs) > 2 and n.inputs[2] else b.const("ln_beta", np.zeros(N))
    if any(_shape(values.get(g) or b.value(g)) != (N,) for g in (gamma, beta)):
        return None
    args = {"M": M, "N": N, "eps": repr(float(n.attr("epsilon", 1e-5)))}
    return Match("layer_norm", args, [n.inputs[0], gamma, beta], _shape(y), -1)


def _transpose(b: Builder, n: Node, values: Mapping[str, Value]) -> Match | None:
    """The layout pass's transposes (``tuner.graph.layout``) as tiled copies: NCHW to NHWC
    (``nchw_to_nhwc``), and back for one image (the ``[H*W, C]`` matrix transposed). A
    model's own transposes stay generic (the shape-generic mode has no kernel of these)."""
    from search_spaces._cuda import is_gpu

    from ..graph.layout import LAYOUT_ATTR
    from ..graph.ops.movement import perm_of

    x, y = values[n.inputs[0]], values[n.outputs[0]]
    if not n.attr(LAYOUT_ATTR) or not _f32(x, y) or len(x.shape) != 4 or is_gpu(b.target):
        return None
    perm = perm_of(n, 4)
    N, A, B, C = _shape(x)
    if perm == (0, 2, 3, 1):
        args = {"N": N, "C": A, "H": B, "W": C}
        return Match("nchw_to_nhwc", args, [n.inputs[0]], _shape(y), 1)
    if perm == (0, 3, 1, 2) and N == 1:
        return Match("transpose", {"M": A * B, "N": C}, [n.inputs[0]], _shape(y), 1)
    return None


TEMPLATES: dict[str, Matcher] = {
    "Conv": _conv,
    "tuner.NhwcConv": _nhwc_conv,
    "tuner.NhwcQConv": _nhwc_qconv,
    "tuner.QMatMul": _qmatmul,
    "MatMul": _matmul,
    "Gemm": _gemm,
    "MaxPool": _pool,
    "AveragePool": _pool,
    "GlobalAveragePool": _global_pool,
    "Softmax": _softmax,
    "LogSoftmax": _softmax,
    "LayerNormalization": _layer_norm,
    "Transpose": _transpose,
}


def takes_epilogue(op: str) -> bool:
    """Whether the template has an ``epilogue`` argument (pools and row operators have none)."""
    from search_spaces import get_operator

    return any(p.name == "epilogue" for p in get_operator(op).params)
