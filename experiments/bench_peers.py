"""The peers of experiments/bench_ops.py: NumPy's best formulation and PyTorch, per operator.

Each NumPy peer takes the parsed arguments and the inputs, allocates its
buffers once, and returns a function that runs the computation into them
(BLAS for matmul, im2col + one BLAS call for convolution, ``out=``
everywhere). ``torch_fn`` gives the ``torch.nn.functional`` call that
PyTorch eager and ``torch.compile`` run.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from search_spaces._conv_numpy import numpy_fast as conv2d_numpy  # noqa: E402
from search_spaces.conv2d import Conv2d  # noqa: E402

Peer = Callable[[], np.ndarray]  # runs once, returns its output buffer


# -- NumPy peers: the best plain-NumPy formulation per family, buffers allocated once ------------


def np_matmul(a: Mapping[str, Any], x: np.ndarray, y: np.ndarray) -> Peer:
    A = x.T if a.get("trans_a") else x
    B = y.T if a.get("trans_b") else y
    M, K = A.shape
    if a.get("dtype") != "int8":
        c = np.empty((M, B.shape[1]), x.dtype)
        return lambda: np.matmul(A, B, out=c)
    # BLAS on floats is exact while every partial sum fits the mantissa: 128*128*K <= 2**24.
    ft = np.float32 if 128 * 128 * K <= 2**24 else np.float64
    af, bf = np.empty(A.shape, ft), np.empty(B.shape, ft)
    cf, ci = np.empty((M, B.shape[1]), ft), np.empty((M, B.shape[1]), np.int32)

    def run() -> np.ndarray:
        np.copyto(af, A)
        np.copyto(bf, B)
        np.matmul(af, bf, out=cf)
        np.copyto(ci, cf, casting="unsafe")
        return ci

    return run


def np_batch_matmul(a: Mapping[str, Any], x: np.ndarray, y: np.ndarray) -> Peer:
    B = y.transpose(0, 2, 1) if a.get("trans_b") else y
    c = np.empty((x.shape[0], x.shape[1], B.shape[2]), x.dtype)
    return lambda: np.matmul(x, B, out=c)


def _gelu(y: np.ndarray, t: np.ndarray) -> None:
    from scipy.special import erf

    np.multiply(y, np.float32(math.sqrt(0.5)), out=t)
    erf(t, out=t)
    t += 1
    y *= t
    y *= np.float32(0.5)


def _sigmoid(y: np.ndarray, t: np.ndarray) -> None:
    np.negative(y, out=y)
    np.exp(y, out=y)
    y += 1
    np.reciprocal(y, out=y)


ACTIVATIONS: dict[str, Callable[[np.ndarray, np.ndarray], object]] = {
    "none": lambda y, t: None,
    "relu": lambda y, t: np.maximum(y, 0, out=y),
    "gelu": _gelu,
    "sigmoid": _sigmoid,
    "tanh": lambda y, t: np.tanh(y, out=y),
}


def np_dense(a: Mapping[str, Any], x: np.ndarray, w: np.ndarray, *bias: np.ndarray) -> Peer:
    y, t = np.empty((x.shape[0], w.shape[0]), x.dtype), np.empty((x.shape[0], w.shape[0]), x.dtype)
    act = ACTIVATIONS[a["activation"]]

    def run() -> np.ndarray:
        np.matmul(x, w.T, out=y)
        if bias:
            np.add(y, bias[0], out=y)
        act(y, t)
        return y

    return run


def _padded(p: Conv2d, x: np.ndarray, fill: float) -> tuple[np.ndarray, Callable[[], None]]:
    """A padded copy of ``x`` allocated once, and the copy of the interior done per call."""
    if not p.pad:
        return x, lambda: None
    q = p.pad
    xp = np.full((*x.shape[:2], x.shape[2] + 2 * q, x.shape[3] + 2 * q), fill, x.dtype)
    inner = xp[:, :, q : q + x.shape[2], q : q + x.shape[3]]
    return xp, lambda: np.copyto(inner, x)


def _taps(p: Conv2d, xp: np.ndarray) -> list[tuple[int, int, np.ndarray]]:
    """Strided views of the padded input, one per window position ``(r, s)``."""
    st, d = p.stride, p.dilation
    return [
        (
            r,
            s,
            xp[
                :,
                :,
                r * d : r * d + st * (p.OH - 1) + 1 : st,
                s * d : s * d + st * (p.OW - 1) + 1 : st,
            ],
        )
        for r in range(p.R)
        for s in range(p.S)
    ]


def np_conv2d(a: Mapping[str, Any], x: np.ndarray, w: np.ndarray, *bias: np.ndarray) -> Peer:
    """im2col (one copy of the windows into a buffer, none for 1x1/stride 1) and one BLAS call."""
    p = Conv2d.from_args(a)
    w = np.ascontiguousarray(p.oihw(w))
    if p.nhwc:  # NumPy's best in NHWC: the windows as rows, then one BLAS call
        plain = dataclasses.replace(p, weights="OIHW", block=0)
        return lambda: conv2d_numpy(plain, x, w, *bias)
    G, P = p.groups, p.OH * p.OW
    xp, pad = _padded(p, x, 0.0)
    y = np.empty((p.N, p.K, p.OH, p.OW), np.float32)
    wg = w.reshape(G, p.K // G, p.Cg * p.R * p.S)
    direct = p.R == p.S == p.stride == 1
    cols = np.empty((p.N, p.C, p.R, p.S, p.OH, p.OW), np.float32)
    taps = _taps(p, xp)
    act = ACTIVATIONS[p.activation]

    def run() -> np.ndarray:
        pad()
        if direct:
            np.matmul(wg, xp.reshape(p.N, G, p.Cg, P), out=y.reshape(p.N, G, p.K // G, P))
        else:
            for r, s, tap in taps:
                np.copyto(cols[:, :, r, s], tap)
            c2 = cols.reshape(p.N, G, p.Cg * p.R * p.S, P)
            np.matmul(wg, c2, out=y.reshape(p.N, G, p.K // G, P))
        if bias:
            np.add(y, bias[0].reshape(1, -1, 1, 1), out=y)
        act(y, y)
        return y

    return run


def np_depthwise(a: Mapping[str, Any], x: np.ndarray, w: np.ndarray) -> Peer:
    """One multiply-add of a shifted slice per window tap, into ``out=`` buffers."""
    p = Conv2d.from_args(a)  # no K: depthwise
    xp, pad = _padded(p, x, 0.0)
    y, t = (
        np.empty((p.N, p.C, p.OH, p.OW), np.float32),
        np.empty((p.N, p.C, p.OH, p.OW), np.float32),
    )
    taps = [(w[None, :, 0, r, s, None, None], tap) for r, s, tap in _taps(p, xp)]

    def run() -> np.ndarray:
        pad()
        np.multiply(taps[0][1], taps[0][0], out=y)
        for wv, tap in taps[1:]:
            np.multiply(tap, wv, out=t)
            np.add(y, t, out=y)
        return y

    return run


def np_max_pool2d(a: Mapping[str, Any], x: np.ndarray) -> Peer:
    """A -inf padded copy, then ``kernel**2`` strided slices folded with ``np.maximum(out=)``."""
    k = a["kernel"]
    p = Conv2d.from_args({**a, "R": k, "S": k, "stride": a["stride"] or k})
    xp, pad = _padded(p, x, -np.inf)
    y = np.empty((p.N, p.C, p.OH, p.OW), np.float32)
    taps = [tap for _, _, tap in _taps(p, xp)]

    def run() -> np.ndarray:
        pad()
        np.copyto(y, taps[0])
        for tap in taps[1:]:
            np.maximum(y, tap, out=y)
        return y

    return run


def np_softmax(a: Mapping[str, Any], x: np.ndarray) -> Peer:
    y, m, s = (
        np.empty_like(x),
        np.empty((x.shape[0], 1), x.dtype),
        np.empty((x.shape[0], 1), x.dtype),
    )

    def run() -> np.ndarray:
        np.max(x, axis=1, keepdims=True, out=m)
        np.subtract(x, m, out=y)
        np.exp(y, out=y)
        np.sum(y, axis=1, keepdims=True, out=s)
        np.divide(y, s, out=y)
        return y

    return run


def np_log_softmax(a: Mapping[str, Any], x: np.ndarray) -> Peer:
    y, m, s = (
        np.empty_like(x),
        np.empty((x.shape[0], 1), x.dtype),
        np.empty((x.shape[0], 1), x.dtype),
    )
    e = np.empty_like(x)

    def run() -> np.ndarray:
        np.max(x, axis=1, keepdims=True, out=m)
        np.subtract(x, m, out=y)
        np.exp(y, out=e)
        np.sum(e, axis=1, keepdims=True, out=s)
        np.log(s, out=s)
        np.subtract(y, s, out=y)
        return y

    return run


def np_layer_norm(a: Mapping[str, Any], x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> Peer:
    n, eps = x.shape[1], np.float32(float(a.get("eps", 1e-5)))
    y, mean, var = (
        np.empty_like(x),
        np.empty((x.shape[0], 1), x.dtype),
        np.empty(x.shape[0], x.dtype),
    )

    def run() -> np.ndarray:
        np.mean(x, axis=1, keepdims=True, out=mean)
        np.subtract(x, mean, out=y)
        np.einsum("ij,ij->i", y, y, out=var)
        np.multiply(var, np.float32(1.0 / n), out=var)
        np.add(var, eps, out=var)
        np.sqrt(var, out=var)
        np.divide(y, var[:, None], out=y)
        np.multiply(y, gamma, out=y)
        np.add(y, beta, out=y)
        return y

    return run


def np_elementwise(
    a: Mapping[str, Any], x: np.ndarray, s: np.ndarray, b: np.ndarray, c: np.ndarray
) -> Peer:
    y, t = np.empty_like(x), np.empty_like(x)

    def run() -> np.ndarray:
        np.multiply(x, s[0], out=t)
        np.add(t, b[0], out=t)
        np.maximum(t, 0, out=t)
        np.multiply(t, c[0], out=t)
        np.tanh(x, out=y)
        np.add(y, t, out=y)
        return y

    return run


def np_reduce_sum(a: Mapping[str, Any], x: np.ndarray) -> Peer:
    y = np.empty(x.shape[1 - a["axis"]], x.dtype)
    return lambda: np.sum(x, axis=a["axis"], out=y)


NUMPY_PEERS: dict[str, Callable[..., Peer]] = {
    "matmul": np_matmul,
    "batch_matmul": np_batch_matmul,
    "dense": np_dense,
    "conv2d": np_conv2d,
    "depthwise_conv2d": np_depthwise,
    "max_pool2d": np_max_pool2d,
    "softmax": np_softmax,
    "log_softmax": np_log_softmax,
    "layer_norm": np_layer_norm,
    "elementwise_chain": np_elementwise,
    "reduce_sum": np_reduce_sum,
}


# -- PyTorch peers: the torch.nn.functional call, run eagerly and through torch.compile -----------


def torch_fn(op: str, a: Mapping[str, Any]) -> Callable[..., Any]:
    """The PyTorch function computing ``op`` on tensors laid out as the operator's inputs."""
    import torch
    import torch.nn.functional as F

    acts: dict[str, Callable[[Any], Any]] = {
        "none": lambda v: v,
        "relu": F.relu,
        "gelu": F.gelu,
        "sigmoid": torch.sigmoid,
        "tanh": torch.tanh,
    }

    def matmul(x: Any, y: Any) -> Any:
        A = x.T if a.get("trans_a") else x
        B = y.T if a.get("trans_b") else y
        if a.get("dtype") == "int8":  # through float BLAS where exact, as the NumPy peer
            ft = torch.float32 if 128 * 128 * A.shape[1] <= 2**24 else torch.float64
            return torch.matmul(A.to(ft), B.to(ft)).to(torch.int32)
        return torch.matmul(A, B)

    def conv(x: Any, w: Any, *b: Any) -> Any:
        if a.get("layout") == "NHWC":  # a channels_last view: oneDNN's NHWC path, no copy
            x = x.permute(0, 3, 1, 2)
        y = F.conv2d(
            x, w, b[0] if b else None, a["stride"], a["pad"], a["dilation"], a.get("groups", 1)
        )
        return acts[a.get("activation", "none")](y)

    fns: dict[str, Callable[..., Any]] = {
        "matmul": matmul,
        "batch_matmul": lambda x, y: torch.bmm(x, y.transpose(1, 2) if a.get("trans_b") else y),
        "dense": lambda x, w, *b: acts[a["activation"]](F.linear(x, w, b[0] if b else None)),
        "conv2d": conv,
        "depthwise_conv2d": lambda x, w: F.conv2d(
            x, w, None, a["stride"], a["pad"], a["dilation"], a["C"]
        ),
        "max_pool2d": lambda x: F.max_pool2d(x, a["kernel"], a["stride"] or a["kernel"], a["pad"]),
        "softmax": lambda x: torch.softmax(x, dim=1),
        "log_softmax": lambda x: torch.log_softmax(x, dim=1),
        "layer_norm": lambda x, g, b: F.layer_norm(x, (x.shape[1],), g, b, float(a["eps"])),
        "elementwise_chain": lambda x, s, b, c: torch.relu(x * s + b) * c + torch.tanh(x),
        "reduce_sum": lambda x: x.sum(dim=a["axis"]),
    }
    return fns[op]
