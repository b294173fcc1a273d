"""``im2col_nhwc``: a channels-last image's windows as the rows of a matrix, for the
integer matmul nest (``matmul_integer``) that a quantized model's convolutions run on.

``Y[n, oh, ow, r, s, c] = X[n, oh*stride + r*dil - pad, ow*stride + s*dil - pad, c]``,
and ``fill`` outside the image (and past C, where ``channels`` rounds the taps up to whole
groups of 4 bytes, the integer nest's unit: a 3-channel first layer's rows then need
no guarded copy): the ``[N*OH*OW, R*S*C]`` matrix whose product with the
weight ``W[R*S*C, K]`` is the convolution. A quantized image is padded with its zero
point (the integer that stands for 0.0), so the zero-point correction of the product
holds in the padding too::

    for n, oh in N * OH:                     # parallel
      for ow, r, s in OW * R * S:
        for c in C:                          # vectorized: a contiguous copy of C bytes
          Y[n, oh, ow, r, s, c] = X[n, ih, iw, c] inside the image, else fill

>>> args = get_operator("im2col_nhwc").parse_args({"C": 4, "H": 6, "W": 6, "pad": 1})
>>> x = np.arange(144, dtype=np.uint8).reshape(1, 6, 6, 4)
>>> get_operator("im2col_nhwc").reference(x, **args).shape
(1, 6, 6, 3, 3, 4)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tuner import te
from tuner.schedule import Schedule
from tuner.space import ConfigSpace
from tuner.target import Target
from tuner.te import Tensor

from . import Operator, OperatorError, Param, get_operator, register_operator  # noqa: F401
from ._conv_numpy import windows
from .conv2d import IMAGE_PARAMS, WINDOW_PARAMS, Conv2d

__all__ = ["define", "reference", "schedule"]


def _conv(a: Mapping[str, Any]) -> Conv2d:
    keep = ("N", "C", "H", "W", "R", "S", "stride", "pad", "dilation")
    return Conv2d.from_args({**{k: a[k] for k in keep}, "K": a["C"], "layout": "NHWC"})


def define(p: Conv2d, dtype: str, fill: int, channels: int = 0) -> tuple[Tensor, Tensor]:
    """``X`` (``[N, H, W, C]`` of ``dtype``) and the windows ``Y`` (``fill`` past the image,
    and in the channels past C up to ``channels``, when that is more than C)."""
    X = te.placeholder((p.N, p.H, p.W, p.C), dtype, name="X")
    st, d, pad = p.stride, p.dilation, p.pad
    Cp = max(channels, p.C)

    def window(n: Any, oh: Any, ow: Any, r: Any, s: Any, c: Any) -> te.Expr:
        h, w = oh * st + r * d - pad, ow * st + s * d - pad
        conds = []
        if pad:
            conds.append((h >= 0) & (h < p.H) & (w >= 0) & (w < p.W))
            h = te.minimum(te.maximum(h, 0), p.H - 1)
            w = te.minimum(te.maximum(w, 0), p.W - 1)
        if Cp > p.C:
            conds.append(c < p.C)
            c = te.minimum(c, p.C - 1)
        if not conds:
            return X[n, h, w, c]
        inside = conds[0] if len(conds) == 1 else conds[0] & conds[1]
        return te.if_then_else(inside, X[n, h, w, c], te.const(fill, dtype))

    Y = te.compute((p.N, p.OH, p.OW, p.R, p.S, Cp), window, name="Y")
    return X, Y


def reference(x: np.ndarray, **a: Any) -> np.ndarray:
    """NumPy's windows of the input padded with ``fill``, in ``[N, OH, OW, R, S, C]`` order."""
    p = _conv(a)
    fill = int(a.get("fill", 0))
    extra = max(int(a.get("channels", 0)), p.C) - p.C
    x = np.pad(x, ((0, 0), (0, 0), (0, 0), (0, extra)), constant_values=fill)
    p = _conv({**a, "C": p.C + extra})
    xc = x.transpose(0, 3, 1, 2).astype(np.int64) - fill
    win = windows(p, xc) + fill  # [N, C, OH, OW, R, S]; windows pads with 0
    return np.ascontiguousarray(win.transpose(0, 2, 3, 4, 5, 1)).astype(x.dtype)


def space(a: Mapping[str, Any], target: Target | None = None) -> ConfigSpace:
    sp = ConfigSpace()
    sp.define_knob("parallel", [True, False])
    return sp.freeze()


def schedule(cfg: Mapping[str, Any], a: Mapping[str, Any]) -> tuple[Schedule, list[Tensor]]:
    p = _conv(a)
    X, Y = define(p, str(a["dtype"]), int(a["fill"]), int(a["channels"]))
    s = te.create_schedule(Y)
    n, oh, *_, c = s[Y].op.axis
    rows = s[Y].fuse(n, oh)
    if cfg["parallel"]:
        s[Y].parallel(rows)
    s[Y].vectorize(c)
    return s, [X, Y]


def _check(a: Mapping[str, Any]) -> None:
    _conv(a).check()
    info = np.iinfo(str(a["dtype"]))
    if not info.min <= int(a["fill"]) <= info.max:
        raise OperatorError(f"im2col_nhwc fill {a['fill']} is not a {a['dtype']}")


def _bytes(a: Mapping[str, Any]) -> float:
    p = _conv(a)
    taps = max(int(a["channels"]), p.C) * p.R * p.S * p.OH * p.OW
    return float(p.N * (p.C * p.H * p.W + taps))


register_operator(
    Operator(
        name="im2col_nhwc",
        doc="a channels-last image's windows as a [N*OH*OW, R*S*C] matrix (int8 or uint8),"
        " padded with fill (a quantized image's zero point)",
        params=(
            *IMAGE_PARAMS,
            *WINDOW_PARAMS,
            Param("dtype", str, "uint8", ("uint8", "int8")),
            Param("fill", int, 0, doc="the value past the image", minimum=-128),
            Param(
                "channels",
                int,
                0,
                doc="channels per tap in Y, C rounded up (the extra ones read fill); 0: C",
                minimum=0,
            ),
        ),
        space=lambda a, target: space(a, target),
        schedule=lambda cfg, a, target: schedule(cfg, a),
        default_config=lambda a, target: {"parallel": True},
        reference=reference,
        flops=lambda a: 0.0,
        bytes_moved=_bytes,
        check=_check,
    )
)
