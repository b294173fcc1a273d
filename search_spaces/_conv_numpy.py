"""The convolution by NumPy: the reference every conv2d kernel is checked against, and the
best plain NumPy formulation (im2col then BLAS) that benchmarks compare with.

Both read the parameters of ``conv2d.Conv2d`` (the window, the layout, the
groups, the epilogue); ``im2col`` takes its windows from here too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

if TYPE_CHECKING:
    from ._conv_params import Conv2d

__all__ = ["finish", "numpy_fast", "reference", "windows"]


def windows(p: Conv2d, x: np.ndarray) -> np.ndarray:
    """Every window of the padded NCHW input: ``[N, C, OH, OW, R, S]`` (a view, no copy)."""
    xp = np.pad(x, ((0, 0), (0, 0), (p.pad, p.pad), (p.pad, p.pad)))
    span_r, span_s = p.dilation * (p.R - 1) + 1, p.dilation * (p.S - 1) + 1
    v = sliding_window_view(xp, (span_r, span_s), axis=(2, 3))
    return v[:, :, :: p.stride, :: p.stride, :: p.dilation, :: p.dilation][:, :, : p.OH, : p.OW]


def finish(p: Conv2d, y: np.ndarray, b: np.ndarray | None, nchw: bool = True) -> np.ndarray:
    """Bias and activation, in place, then the output layout (``y`` is NCHW, or NHWC already)."""
    if b is not None:
        y += b.reshape(1, -1, 1, 1) if nchw else b
    if p.activation == "relu":
        np.maximum(y, 0, out=y)
    return np.ascontiguousarray(y.transpose(0, 2, 3, 1)) if p.nhwc and nchw else y


def reference(
    p: Conv2d,
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    extras: Sequence[np.ndarray] = (),
) -> np.ndarray:
    """The convolution by einsum over the windows of the padded input (float64 sums),
    then the bias, the activation and the epilogue on its ``extras``."""
    if p.x_dtype != "float32":  # a quantized image: its values less the zero point
        x = x.astype(np.float64) - p.x_zero_point
    xc = x.transpose(0, 3, 1, 2) if p.nhwc else x
    v = windows(p, xc.astype(np.float64)).reshape(p.N, p.groups, p.Cg, p.OH, p.OW, p.R, p.S)
    wg = p.oihw(w).astype(np.float64).reshape(p.groups, p.K // p.groups, p.Cg, p.R, p.S)
    y = np.einsum("ngcyxrs,gkcrs->ngkyx", v, wg).reshape(p.N, p.K, p.OH, p.OW)
    y = finish(p, y, None if b is None else b.astype(np.float64))
    y = p.steps.apply_numpy(y, extras, channel_axis=3 if p.nhwc else 1)
    return y.astype(p.steps.out_dtype("float32"))  # a quantizing epilogue writes integers


def numpy_fast(p: Conv2d, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """The best plain NumPy formulation: im2col (one copy of the windows) then BLAS per group.

    NCHW multiplies ``W[K, C*R*S] @ cols[C*R*S, OH*OW]``; NHWC multiplies
    ``cols[OH*OW, C*R*S] @ W.T``, so that both write their output layout directly.
    """
    G, Kg, CRS = p.groups, p.K // p.groups, p.Cg * p.R * p.S
    wg = np.ascontiguousarray(p.oihw(w)).reshape(G, Kg, CRS)
    if p.nhwc:
        v = windows(p, x.transpose(0, 3, 1, 2)).reshape(p.N, G, p.Cg, p.OH, p.OW, p.R, p.S)
        cols = np.ascontiguousarray(v.transpose(1, 0, 3, 4, 2, 5, 6)).reshape(G, -1, CRS)
        y = np.matmul(cols, wg.transpose(0, 2, 1)).transpose(1, 0, 2)
        return finish(p, y.reshape(p.N, p.OH, p.OW, p.K), b, nchw=False)
    v = windows(p, x).reshape(p.N, G, p.Cg, p.OH, p.OW, p.R, p.S)
    cols = np.ascontiguousarray(v.transpose(0, 1, 2, 5, 6, 3, 4))
    y = np.matmul(wg[None], cols.reshape(p.N, G, CRS, p.OH * p.OW))
    return finish(p, y.reshape(p.N, p.K, p.OH, p.OW), b)
