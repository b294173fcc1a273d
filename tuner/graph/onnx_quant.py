"""Quantized operators (the QOperator format) rewritten into QDQ form at import.

``onnxruntime.quantization`` writes a quantized model in one of two formats: QDQ
(float operators between ``QuantizeLinear``/``DequantizeLinear`` pairs, which the
importer takes as they are, ``tuner.graph.ops.quant``) or QOperator, integer
operators with their scales and zero points as inputs. Each of the latter is
rewritten here into what it means, in the former's terms, before anything else
reads the model::

    QLinearConv(x, xs, xz, w, ws, wz, ys, yz, B)  ->  Q(Conv(DQ(x), DQ(w), DQ(B, xs*ws)), ys, yz)
    QLinearMatMul(a, as, az, b, bs, bz, ys, yz)   ->  Q(MatMul(DQ(a), DQ(b)), ys, yz)
    QLinearAdd / QLinearMul (com.microsoft)       ->  Q(DQ(a) + DQ(b)) and Q(DQ(a) * DQ(b))
    QLinearGlobalAveragePool (com.microsoft)      ->  Q(GlobalAveragePool(DQ(x)))
    MatMulInteger(a, b, az, bz)                   ->  Cast<int32>(MatMul(DQ(a, 1, az), DQ(b, 1, bz)))
    ConvInteger(x, w, xz, wz)                     ->  Cast<int32>(Conv(DQ(x, 1, xz), DQ(w, 1, wz)))
    DynamicQuantizeLinear(x)                      ->  ONNX's own definition: scale from the
                                                      range of x and 0, zero point, Q(x)

A per-channel weight scale dequantizes along the weight's output axis (0 for a
convolution, the last for a matrix product). The float products are exact where
onnxruntime's integer ones are while the sums stay below 2^24 in magnitude;
``MatMulInteger`` over more terms differs by float32's rounding of the sum.
The dequantized weights are constants, folded into float32 at compile time.
"""

from __future__ import annotations

import itertools
from typing import Any

import onnx
from onnx import TensorProto, helper

__all__ = ["QUANTIZED_OPS", "decompose_quantized"]

_MS = "com.microsoft"


class _Names:
    """Fresh value names for a node's rewrite, from its own outputs."""

    def __init__(self, node: onnx.NodeProto, taken: set[str]):
        self.base, self.taken, self.count = (
            node.output[0] or node.name or "q",
            taken,
            itertools.count(),
        )

    def __call__(self, what: str) -> str:
        while True:
            name = f"{self.base}__{what}{next(self.count)}"
            if name not in self.taken:
                self.taken.add(name)
                return name


def _input(node: onnx.NodeProto, i: int) -> str:
    return node.input[i] if i < len(node.input) else ""


def _attrs(node: onnx.NodeProto, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name not in drop}


def _dq(x: str, scale: str, zp: str, out: str, axis: int | None = None) -> onnx.NodeProto:
    inputs = [x, scale] + ([zp] if zp else [])
    kw: dict[str, Any] = {"axis": axis} if axis is not None else {}
    return helper.make_node("DequantizeLinear", inputs, [out], **kw)


def _q(x: str, scale: str, zp: str, out: str) -> onnx.NodeProto:
    return helper.make_node("QuantizeLinear", [x, scale] + ([zp] if zp else []), [out])


def _one(new: _Names, consts: list[onnx.TensorProto]) -> str:
    name = new("one")
    consts.append(helper.make_tensor(name, TensorProto.FLOAT, [], [1.0]))
    return name


def _qlinear_conv(n: onnx.NodeProto, new: _Names, consts: list) -> list[onnx.NodeProto]:  # type: ignore[type-arg]
    xs, ws, bias = _input(n, 1), _input(n, 4), _input(n, 8)
    xd, wd, yf = new("x"), new("w"), new("conv")
    nodes = [_dq(n.input[0], xs, n.input[2], xd), _dq(n.input[3], ws, n.input[5], wd, axis=0)]
    inputs = [xd, wd]
    if bias:
        bs, bd = new("bias_scale"), new("bias")
        nodes += [helper.make_node("Mul", [xs, ws], [bs]), _dq(bias, bs, "", bd, axis=0)]
        inputs.append(bd)
    nodes.append(helper.make_node("Conv", inputs, [yf], **_attrs(n)))
    return [*nodes, _q(yf, n.input[6], _input(n, 7), n.output[0])]


def _qlinear_matmul(n: onnx.NodeProto, new: _Names, consts: list) -> list[onnx.NodeProto]:  # type: ignore[type-arg]
    ad, bd, yf = new("a"), new("b"), new("matmul")
    return [
        _dq(n.input[0], n.input[1], n.input[2], ad, axis=-1),
        _dq(n.input[3], n.input[4], n.input[5], bd, axis=-1),
        helper.make_node("MatMul", [ad, bd], [yf]),
        _q(yf, n.input[6], _input(n, 7), n.output[0]),
    ]


def _qlinear_binary(n: onnx.NodeProto, new: _Names, consts: list) -> list[onnx.NodeProto]:  # type: ignore[type-arg]
    ad, bd, yf = new("a"), new("b"), new(n.op_type[len("QLinear") :].lower())
    return [
        _dq(n.input[0], n.input[1], _input(n, 2), ad),
        _dq(n.input[3], n.input[4], _input(n, 5), bd),
        helper.make_node(n.op_type[len("QLinear") :], [ad, bd], [yf]),
        _q(yf, n.input[6], _input(n, 7), n.output[0]),
    ]


def _qlinear_pool(n: onnx.NodeProto, new: _Names, consts: list) -> list[onnx.NodeProto]:  # type: ignore[type-arg]
    if _attrs(n).get("channels_last"):
        raise ValueError("channels_last=1 is not supported")
    xd, yf = new("x"), new("pool")
    return [
        _dq(n.input[0], n.input[1], _input(n, 2), xd),
        helper.make_node("GlobalAveragePool", [xd], [yf]),
        _q(yf, n.input[3], _input(n, 4), n.output[0]),
    ]


def _integer(op: str, axis: int):  # type: ignore[no-untyped-def]
    """MatMulInteger and ConvInteger: the float product of the zero-point-shifted integers,
    cast to int32 (exact integers while the sums stay below 2^24)."""

    def rewrite(n: onnx.NodeProto, new: _Names, consts: list) -> list[onnx.NodeProto]:  # type: ignore[type-arg]
        one = _one(new, consts)
        ad, bd, yf = new("a"), new("b"), new("product")
        return [
            _dq(n.input[0], one, _input(n, 2), ad),
            _dq(n.input[1], one, _input(n, 3), bd, axis=axis),
            helper.make_node(op, [ad, bd], [yf], **_attrs(n)),
            helper.make_node("Cast", [yf], [n.output[0]], to=TensorProto.INT32),
        ]

    return rewrite


def _dynamic_quantize(n: onnx.NodeProto, new: _Names, consts: list) -> list[onnx.NodeProto]:  # type: ignore[type-arg]
    """ONNX's own definition (its function body): the range of x widened to hold 0, a
    uint8 scale and zero point, then QuantizeLinear."""
    q_min, q_max = new("q_min"), new("q_max")
    consts += [
        helper.make_tensor(q_min, TensorProto.FLOAT, [], [0.0]),
        helper.make_tensor(q_max, TensorProto.FLOAT, [], [255.0]),
    ]
    x, (y, scale, zp) = n.input[0], n.output
    lo, hi, lo0, hi0, span = new("min"), new("max"), new("min0"), new("max0"), new("range")
    scaled, zf, clipped, rounded = new("min_scaled"), new("zp_f"), new("zp_clipped"), new("zp_r")
    return [
        helper.make_node("ReduceMin", [x], [lo], keepdims=0),
        helper.make_node("Min", [lo, q_min], [lo0]),
        helper.make_node("ReduceMax", [x], [hi], keepdims=0),
        helper.make_node("Max", [hi, q_min], [hi0]),
        helper.make_node("Sub", [hi0, lo0], [span]),
        helper.make_node("Div", [span, q_max], [scale]),
        helper.make_node("Div", [lo0, scale], [scaled]),
        helper.make_node("Sub", [q_min, scaled], [zf]),
        helper.make_node("Clip", [zf, q_min, q_max], [clipped]),
        helper.make_node("Round", [clipped], [rounded]),
        helper.make_node("Cast", [rounded], [zp], to=TensorProto.UINT8),
        _q(x, scale, zp, y),
    ]


_REWRITES = {
    ("", "QLinearConv"): _qlinear_conv,
    ("", "QLinearMatMul"): _qlinear_matmul,
    ("", "MatMulInteger"): _integer("MatMul", -1),
    ("", "ConvInteger"): _integer("Conv", 0),
    ("", "DynamicQuantizeLinear"): _dynamic_quantize,
    (_MS, "QLinearAdd"): _qlinear_binary,
    (_MS, "QLinearMul"): _qlinear_binary,
    (_MS, "QLinearGlobalAveragePool"): _qlinear_pool,
}
#: (domain, op type) of every operator rewritten here.
QUANTIZED_OPS = frozenset(_REWRITES)


def decompose_quantized(proto: onnx.ModelProto) -> None:
    """Rewrite ``proto``'s QOperator nodes in place (see the module docstring); ValueError
    naming the node for one that cannot be."""
    g = proto.graph
    found = [n for n in g.node if (_domain(n), n.op_type) in _REWRITES]
    if not found:
        return
    taken = {v for n in g.node for v in (*n.input, *n.output)} | {t.name for t in g.initializer}
    consts: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    for n in g.node:
        rewrite = _REWRITES.get((_domain(n), n.op_type))
        if rewrite is None:
            nodes.append(n)
            continue
        try:
            nodes += rewrite(n, _Names(n, taken), consts)
        except ValueError as exc:
            raise ValueError(f"{n.op_type} node {n.name or n.output[0]!r}: {exc}") from None
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(consts)


def _domain(n: onnx.NodeProto) -> str:
    return "" if n.domain == "ai.onnx" else n.domain
