"""A conv2d workload's definition: its stages in te (the padded input, the sum, the epilogue).

``conv2d``'s CPU schedule, the GPU schedule (``_cuda.conv2d``),
``depthwise_conv2d`` and ``im2col`` all schedule these stages::

    Xp[n, c, h, w] = X[n, c, h - pad, w - pad] inside the image, else 0   # with padding
    conv[n, k, oh, ow] = sum_{c, r, s} Xp[n, c, oh*st + r*dil, ow*st + s*dil] * W[k, c, r, s]
    Y = epilogue(conv)     # a bias, relu or epilogue steps; without them Y is conv

(NHWC the same, channels last; grouped convolutions read their group's channels.)
"""

from __future__ import annotations

from tuner import te
from tuner.te import Tensor

from ._conv_params import Conv2d

__all__ = ["arguments", "finish", "image", "padded", "stages"]


def padded(
    p: Conv2d, X: Tensor, extent: tuple[int, int] | None = None, dequantize: bool = False
) -> Tensor | None:
    """The zero-padded input stage ``Xp`` (None without padding), ``extent`` rows and columns
    (by default the input's and ``pad`` on each side; more reads zeros past the image).

    A quantized image is padded with its zero point; with ``dequantize``, ``Xp`` is
    float32, each value ``image(X)`` (zero in the padding), so that a sum reading a
    copied ``Xp`` converts each pixel once rather than at each of its window's taps.
    """
    if p.pad == 0 and extent is None:
        return None
    pad, H, W = p.pad, p.H, p.W
    rows, cols = extent or (H + 2 * pad, W + 2 * pad)
    quantized = p.x_dtype != "float32"
    fill = te.const(p.x_zero_point, X.dtype) if quantized and not dequantize else 0.0
    value = image if dequantize else (lambda _, v: v)

    def inside(h: te.Expr, w: te.Expr) -> te.Expr:
        return (h >= pad) & (h < H + pad) & (w >= pad) & (w < W + pad)

    if p.nhwc:
        return te.compute(
            (p.N, rows, cols, p.C),
            lambda n, h, w, c: te.if_then_else(
                inside(h, w), value(p, X[n, h - pad, w - pad, c]), fill
            ),
            name="Xp",
        )
    return te.compute(
        (p.N, p.C, rows, cols),
        lambda n, c, h, w: te.if_then_else(inside(h, w), value(p, X[n, c, h - pad, w - pad]), fill),
        name="Xp",
    )


def image(p: Conv2d, v: te.Expr) -> te.Expr:
    """An image value as the sum reads it: a quantized one is ``float32(v) - zero point``."""
    if p.x_dtype == "float32":
        return v
    return v.astype("float32") - float(p.x_zero_point)


def stages(p: Conv2d) -> dict[str, Tensor]:
    """Every tensor by role: X, W, B (bias), Xp (padding), conv (the sum) and Y (output)."""
    xshape = (p.N, p.H, p.W, p.C) if p.nhwc else (p.N, p.C, p.H, p.W)
    X = te.placeholder(xshape, p.x_dtype, name="X")
    Wt = te.placeholder(p.weight_shape, "float32", name="W")
    out: dict[str, Tensor] = {"X": X, "W": Wt}
    Xp = padded(p, X, dequantize=True)
    if Xp is not None:
        out["Xp"] = Xp
    c = te.reduce_axis(p.Cg, name="rc")
    r = te.reduce_axis(p.R, name="rr")
    s = te.reduce_axis(p.S, name="rs")
    st, d, Kg, Cg = p.stride, p.dilation, p.K // p.groups, p.Cg

    def chan(k: te.Expr) -> te.Expr:
        return c if p.groups == 1 else (k // Kg) * Cg + c

    def weight(k: te.Expr) -> te.Expr:
        if p.blocked:
            return Wt[k // p.block, r, s, c, k % p.block]
        return Wt[r, s, c, k] if p.hwio else Wt[k, c, r, s]

    def pixel(*idx: te.Expr) -> te.Expr:
        return image(p, X[idx]) if Xp is None else Xp[idx]

    name = "conv" if p.has_epilogue else "Y"
    if p.nhwc:
        conv = te.compute(
            (p.N, p.OH, p.OW, p.K),
            lambda n, oh, ow, k: te.sum(
                pixel(n, oh * st + r * d, ow * st + s * d, chan(k)) * weight(k),
                axis=[c, r, s],
            ),
            name=name,
        )
    else:
        conv = te.compute(
            (p.N, p.K, p.OH, p.OW),
            lambda n, k, oh, ow: te.sum(
                pixel(n, chan(k), oh * st + r * d, ow * st + s * d) * weight(k),
                axis=[c, r, s],
            ),
            name=name,
        )
    out["conv"] = conv
    if not p.has_epilogue:
        out["Y"] = conv
        return out
    if p.bias:
        out["B"] = te.placeholder((p.K,), "float32", name="B")
    for e in p.steps.placeholders(p.K, p.out_shape):
        out[e.name] = e
    if p.nhwc:
        out["Y"] = te.compute(
            conv.shape, lambda n, oh, ow, k: _epilogue(p, out, (n, oh, ow, k), k), name="Y"
        )
    else:
        out["Y"] = te.compute(
            conv.shape, lambda n, k, oh, ow: _epilogue(p, out, (n, k, oh, ow), k), name="Y"
        )
    return out


def _epilogue(p: Conv2d, t: dict[str, Tensor], idx: tuple[te.Expr, ...], k: te.Expr) -> te.Expr:
    """Bias and activation of the convolution's element ``idx`` (output channel ``k``)."""
    return finish(p, t, t["conv"][idx], idx, k)


def finish(
    p: Conv2d, t: dict[str, Tensor], value: te.Expr, idx: tuple[te.Expr, ...], k: te.Expr
) -> te.Expr:
    """``value``, the convolution's element ``idx`` (output channel ``k``), with the bias
    ``t["B"]``, the activation and the epilogue steps on their inputs ``t["E0"]``..."""
    if p.bias:
        value = value + t["B"][k]
    if p.activation == "relu":
        value = te.maximum(value, 0.0)
    return p.steps.apply(value, k, idx, _extras(p, t))


def _extras(p: Conv2d, t: dict[str, Tensor]) -> list[Tensor]:
    """The epilogue's extra inputs ``E0``, ``E1`` ... (after X, W and B)."""
    return [t[f"E{i}"] for i in range(len(p.steps.extras))]


def arguments(p: Conv2d, t: dict[str, Tensor]) -> list[Tensor]:
    """The kernel's arguments among ``stages(p)``: X, W, (B,) the epilogue's inputs, Y."""
    return [t["X"], t["W"], *([t["B"]] if p.bias else []), *_extras(p, t), t["Y"]]
