"""ONNX's tensors, dtypes and attributes as the compiler's values: what the importer and the
import-time folding (``onnx_fold``) both read."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, numpy_helper

from .ir import GraphError

__all__ = ["DTYPES", "array_of", "attr_value", "dtype_of", "elem_type", "first_line", "node_attrs"]

#: The ONNX element types the compiler has, by its own dtype names.
DTYPES: dict[int, str] = {
    TensorProto.FLOAT: "float32",
    TensorProto.DOUBLE: "float64",
    TensorProto.INT8: "int8",
    TensorProto.UINT8: "uint8",
    TensorProto.INT32: "int32",
    TensorProto.INT64: "int64",
    TensorProto.BOOL: "bool",
}


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def dtype_of(elem_type: int, what: str) -> str:
    dtype = DTYPES.get(elem_type)
    if dtype is None:
        name = TensorProto.DataType.Name(elem_type).lower() if elem_type else "unknown"
        supported_ = ", ".join(DTYPES.values())
        raise GraphError(f"{what} has dtype {name}, which is not supported ({supported_})")
    return dtype


def array_of(tensor: TensorProto, what: str) -> np.ndarray:
    """An owned, writable copy of a tensor's data; GraphError for external data or a dtype the
    compiler does not have."""
    if tensor.data_location == TensorProto.EXTERNAL:
        raise GraphError(f"{what} keeps its data in an external file; import the model by its path")
    dtype_of(tensor.data_type, what)
    try:
        return np.array(numpy_helper.to_array(tensor), copy=True)
    except Exception as exc:
        raise GraphError(f"{what} cannot be read: {first_line(exc)}") from None


def elem_type(data: np.ndarray) -> int:
    try:
        return int(onnx.helper.np_dtype_to_tensor_dtype(data.dtype))
    except Exception:
        return 0


def attr_value(a: AttributeProto, where: str) -> Any:
    """An attribute as a plain Python value: int, float, str, tuple of them, or np.ndarray."""
    kind = a.type
    if kind == AttributeProto.INT:
        return int(a.i)
    if kind == AttributeProto.FLOAT:
        return float(a.f)
    if kind == AttributeProto.STRING:
        return a.s.decode("utf-8")
    if kind == AttributeProto.INTS:
        return tuple(int(v) for v in a.ints)
    if kind == AttributeProto.FLOATS:
        return tuple(float(v) for v in a.floats)
    if kind == AttributeProto.STRINGS:
        return tuple(s.decode("utf-8") for s in a.strings)
    if kind == AttributeProto.TENSOR:
        return array_of(a.t, f"{where} attribute {a.name!r}")
    what = AttributeProto.AttributeType.Name(kind).lower()
    raise GraphError(f"{where} has a {what} attribute {a.name!r}, which is not supported")


def node_attrs(n: onnx.NodeProto, where: str) -> dict[str, Any]:
    """Every attribute of ``n`` (``attr_value``); ``where`` names the node in errors."""
    return {a.name: attr_value(a, where) for a in n.attribute}
