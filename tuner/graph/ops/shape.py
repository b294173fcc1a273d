"""Shape arithmetic: operators whose result is known at compile time (ONNX opsets 13..21).

Shape, Size, ConstantOfShape, Range and Constant compute shapes and small
constants, not tensors a kernel would make: their kind is
:attr:`~tuner.graph.ops.OpKind.SHAPE`, constant folding (``passes``) evaluates
them away, and they have no lowering. Apart from ``movement`` because they
move no data. :func:`constant_value` is also what the ONNX importer reads a
Constant node with.

>>> constant_value(Node("Constant", (), ("c",), {"value_ints": [2, 3]}))
array([2, 3])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..ir import GraphError, Node
from . import OpKind, register

__all__ = ["constant_value"]


@register("Shape", OpKind.SHAPE)
def _shape(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x = arrays[0]
    assert x is not None
    rank = x.ndim
    start, end = int(node.attr("start", 0)), int(node.attr("end", rank))
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return [np.array(x.shape[start:end], np.int64)]


@register("Size", OpKind.SHAPE)
def _size(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x = arrays[0]
    assert x is not None
    return [np.array(x.size, np.int64)]


@register("ConstantOfShape", OpKind.SHAPE, const_inputs=(0,))
def _constant_of_shape(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    value = node.attr("value")
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    shape = tuple(int(v) for v in np.asarray(arrays[0]).reshape(-1))
    return [np.full(shape, fill[0], fill.dtype)]


@register("Range", OpKind.SHAPE, const_inputs=(0, 1, 2))
def _range(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    start, limit, delta = (np.asarray(a).reshape(()) for a in arrays[:3])
    if delta == 0:
        raise GraphError(f"{node.describe()} has delta 0")
    n = max(int(np.ceil((limit - start) / delta)), 0)
    return [(start + np.arange(n, dtype=start.dtype) * delta).astype(start.dtype)]


def constant_value(node: Node) -> np.ndarray:
    """The tensor a Constant node defines (``value``, ``value_float(s)``, ``value_int(s)``)."""
    attrs = node.attrs
    if "value" in attrs:
        return np.array(attrs["value"])
    if "value_float" in attrs:
        return np.array(attrs["value_float"], np.float32)
    if "value_floats" in attrs:
        return np.array(attrs["value_floats"], np.float32)
    if "value_int" in attrs:
        return np.array(attrs["value_int"], np.int64)
    if "value_ints" in attrs:
        return np.array(attrs["value_ints"], np.int64)
    kinds = ", ".join(sorted(attrs)) or "nothing"
    raise GraphError(f"{node.describe()} holds {kinds}; only dense numeric values are supported")


@register("Constant", OpKind.SHAPE)
def _constant(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    return [constant_value(node)]
