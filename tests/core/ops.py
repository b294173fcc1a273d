"""Small operator definitions shared by the core tests, each with a NumPy reference."""

from __future__ import annotations

from typing import Any

import numpy as np

from tuner import te


def machine_code(kernel: Any) -> str:
    """The machine code of a CPU kernel's own compiled functions (compiled in this process:
    Numba does not keep it for code loaded from its cache)."""
    import sys

    from tuner.codegen.cpu.backend import _dispatchers

    module = sys.modules[kernel.module_name]
    return "\n".join(a for d in _dispatchers(module) for a in d.inspect_asm().values())


def chunked(source: str) -> bool:
    """Whether a kernel runs its parallel loops as chunks on threads, with no ``prange`` of its own.

    Either launch: Numba's threading layer (``launch(kernel_p0_a, ...)``) or the
    Python pool (``parallel_for(kernel_p0, ...)``).
    """
    body = source.split("from numba import prange")[1]
    return ("launch(" in body or "parallel_for(" in body) and "prange(" not in body


def launches(source: str, call: str) -> bool:
    """Whether a kernel's entry runs ``call`` (``kernel_p0, 10, A, B``) as chunks on threads."""
    name, extent, args = call.split(", ", 2)
    native = f"launch({name}_a, {extent}, {args})"
    return chunked(source) and (native in source or f"parallel_for({call})" in source)


def matmul(m: int, n: int, k: int, dtype: str = "float32"):  # type: ignore[no-untyped-def]
    A = te.placeholder((m, k), dtype, name="A")
    B = te.placeholder((k, n), dtype, name="B")
    r = te.reduce_axis(k, name="k")
    acc = "int32" if dtype == "int8" else dtype
    C = te.compute(
        (m, n), lambda i, j: te.sum(A[i, r].astype(acc) * B[r, j].astype(acc), axis=r), name="C"
    )

    def ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return a.astype(acc) @ b.astype(acc)

    return [A, B], C, ref


def conv2d(n: int, c: int, h: int, w: int, k: int, r: int, stride: int, pad: int):  # type: ignore[no-untyped-def]
    X = te.placeholder((n, c, h, w), "float32", name="X")
    W = te.placeholder((k, c, r, r), "float32", name="W")
    P = te.compute(
        (n, c, h + 2 * pad, w + 2 * pad),
        lambda b, ch, y, x: te.if_then_else(
            (y >= pad) & (y < h + pad) & (x >= pad) & (x < w + pad), X[b, ch, y - pad, x - pad], 0.0
        ),
        name="P",
    )
    oh = (h + 2 * pad - r) // stride + 1
    ow = (w + 2 * pad - r) // stride + 1
    rc, ry, rx = te.reduce_axis(c, "rc"), te.reduce_axis(r, "ry"), te.reduce_axis(r, "rx")
    O = te.compute(
        (n, k, oh, ow),
        lambda b, f, y, x: te.sum(
            P[b, rc, y * stride + ry, x * stride + rx] * W[f, rc, ry, rx], axis=[rc, ry, rx]
        ),
        name="O",
    )

    def ref(x: np.ndarray, wt: np.ndarray) -> np.ndarray:
        xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        out = np.zeros((n, k, oh, ow), np.float32)
        for dy in range(r):
            for dx in range(r):
                patch = xp[:, :, dy : dy + stride * oh : stride, dx : dx + stride * ow : stride]
                out += np.einsum("nchw,kc->nkhw", patch, wt[:, :, dy, dx])
        return out

    return [X, W], O, ref


def row_max(m: int, n: int):  # type: ignore[no-untyped-def]
    A = te.placeholder((m, n), "float32", name="A")
    k = te.reduce_axis(n, name="k")
    M = te.compute((m,), lambda i: te.max(A[i, k], axis=k), name="M")
    return [A], M, lambda a: a.max(axis=1)


def chain(m: int, n: int):  # type: ignore[no-untyped-def]
    """relu(x*a + b)*c + tanh(x), with exp, sigmoid and erf stages, fused or not."""
    X = te.placeholder((m, n), "float32", name="X")
    T = te.compute((m, n), lambda i, j: te.maximum(X[i, j] * 1.5 + 0.25, 0.0) * 0.5, name="T")
    U = te.compute(
        (m, n),
        lambda i, j: (
            T[i, j]
            + te.tanh(X[i, j])
            + te.sigmoid(X[i, j]) * te.erf(X[i, j])
            - te.exp(X[i, j] * 0.1)
        ),
        name="U",
    )

    def ref(x: np.ndarray) -> np.ndarray:
        from math import erf

        t = np.maximum(x * 1.5 + 0.25, 0.0) * 0.5
        sig = 1 / (1 + np.exp(-x))
        return t + np.tanh(x) + sig * np.vectorize(erf)(x).astype(np.float32) - np.exp(x * 0.1)

    return [X], U, ref
