"""``im2col``: a convolution's input windows as the columns of a matrix, for the matmul nest.

``Y[n, c, r, s, oh, ow] = Xp[n, c, oh*stride + r*dilation, ow*stride + s*dilation]``
(``Xp`` the input zero-padded by ``pad``), so that for one image the flat
output is the ``[C*R*S, OH*OW]`` matrix whose product with the weight
``W[K, C*R*S]`` (the ``[K, C, R, S]`` weight, flat) is the convolution::

    Xp = pad(X)                             # pad_at="root": once, in parallel over planes
    for c, r, s in C*R*S:                   # parallel
      for oh in OH:
        for ow in OW:                       # vectorized (a contiguous copy when stride is 1)
          Y[c, r, s, oh, ow] = Xp[c, oh*stride + r*dil, ow*stride + s*dil]

The model compiler (``tuner.model.tasks``) gives a convolution of one image
this kernel and a matmul (``channels="rows"``, the convolution's bias and
epilogue on the product's rows): the GotoBLAS nest runs ResNet-50's 3 x 3
convolutions about twice as fast as conv2d's direct kernel, for a copy of
the input R*S times over (1.8 MB at 256 x 14 x 14).
``pad_at="inline"`` reads the input through a condition instead of a padded copy.

>>> args = get_operator("im2col").parse_args({"C": 4, "H": 6, "W": 6, "pad": 1})
>>> x = np.arange(144, dtype=np.float32).reshape(1, 4, 6, 6)
>>> get_operator("im2col").reference(x, **args).shape
(1, 4, 3, 3, 6, 6)
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

from . import Operator, get_operator, register_operator  # noqa: F401 (doctest)
from ._conv_define import padded
from ._conv_numpy import windows
from ._target import resolve
from .conv2d import IMAGE_PARAMS, WINDOW_PARAMS, Conv2d

__all__ = ["default_config", "define", "reference", "schedule", "space"]


def _conv(a: Mapping[str, Any]) -> Conv2d:
    return Conv2d.from_args({**a, "K": a["C"]})


def define(p: Conv2d) -> tuple[Tensor, Tensor | None, Tensor]:
    """``X``, the padded stage ``Xp`` (None without padding) and the windows ``Y``."""
    X = te.placeholder((p.N, p.C, p.H, p.W), "float32", name="X")
    Xp = padded(p, X)
    src = X if Xp is None else Xp
    st, d = p.stride, p.dilation
    Y = te.compute(
        (p.N, p.C, p.R, p.S, p.OH, p.OW),
        lambda n, c, r, s, oh, ow: src[n, c, oh * st + r * d, ow * st + s * d],
        name="Y",
    )
    return X, Xp, Y


def reference(x: np.ndarray, **a: Any) -> np.ndarray:
    """NumPy's windows of the padded input, in ``[N, C, R, S, OH, OW]`` order."""
    p = _conv(a)
    win = windows(p, x)  # [N, C, OH, OW, R, S] at the stride and dilation
    return np.ascontiguousarray(win.transpose(0, 1, 4, 5, 2, 3))


def space(a: Mapping[str, Any], target: Target | None = None) -> ConfigSpace:
    sp = ConfigSpace()
    sp.define_knob("pad_at", ["root", "inline"] if a["pad"] else ["none"])
    sp.define_knob("parallel", [True, False])
    return sp.freeze()


def default_config(a: Mapping[str, Any], target: Target | None = None) -> dict[str, Any]:
    """The padded copy first (a condition per load keeps the copy scalar), in parallel."""
    resolve(target)
    return {"pad_at": "root" if a["pad"] else "none", "parallel": True}


def schedule(cfg: Mapping[str, Any], a: Mapping[str, Any]) -> tuple[Schedule, list[Tensor]]:
    p = _conv(a)
    X, Xp, Y = define(p)
    s = te.create_schedule(Y)
    if Xp is not None:
        if cfg["pad_at"] == "inline":
            s[Xp].compute_inline()
        elif cfg["parallel"]:
            s[Xp].parallel(s[Xp].fuse(*s[Xp].op.axis[:2]))
    n, c, r, sw, oh, ow = s[Y].op.axis
    rows = s[Y].fuse(n, c, r, sw)
    if cfg["parallel"]:
        s[Y].parallel(rows)
    if p.stride == 1:
        s[Y].vectorize(ow)
    return s, [X, Y]


def _register() -> None:
    register_operator(
        Operator(
            name="im2col",
            doc="a convolution's input windows as a [C*R*S, OH*OW] matrix per image (float32, NCHW)",
            params=(*IMAGE_PARAMS, *WINDOW_PARAMS),
            space=lambda a, target: space(a, target),
            schedule=lambda cfg, a, target: schedule(cfg, a),
            default_config=lambda a, target: default_config(a, target),
            reference=reference,
            flops=lambda a: 0.0,
            bytes_moved=_bytes,
            check=lambda a: _conv(a).check(),
        )
    )


def _bytes(a: Mapping[str, Any]) -> float:
    p = _conv(a)
    return 4.0 * p.N * p.C * (p.H * p.W + p.R * p.S * p.OH * p.OW)


_register()
