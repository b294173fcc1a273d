"""A fused group as canonical text: what the generic operator is given, and the key of its task.

Two groups that compute the same thing from the same types encode to the same
text, whatever the model named its values and nodes: values are renamed by
position (the inputs ``x0, x1, ...``, the embedded constants ``c0, c1, ...`` in
order of first use, the node outputs ``t0, t1, ...``), node names are dropped,
and the text is compact JSON with sorted keys. Attribute values are written
canonically (tuples as lists, floats by ``repr``, tensors as dtype, shape and
flat data), so the text, and its :func:`digest`, is the same across runs,
machines and hash seeds::

    {"consts":[],"format":1,"inputs":[{"dtype":"float32","shape":[2,3]}],
     "nodes":[{"attrs":{},"inputs":["x0"],"op":"Relu","outputs":[...]}],
     "opset":17,"outputs":["t0"]}

:func:`decode` reads such a text back into a :class:`Graph`, checking every
field (it only parses JSON; nothing in the text is evaluated): a malformed
text is a :class:`GraphError` of one line.

>>> text = encode(group)
>>> decode(text)            # the group, renamed
>>> digest(text)            # '3f2a...' (16 hex digits)
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from .ir import Dim, Graph, GraphError, Node, Value

__all__ = ["FORMAT", "decode", "digest", "encode"]

#: The version of the text's layout; decode refuses any other.
FORMAT = 1

_DTYPES = ("bool", "int8", "uint8", "int32", "int64", "float32", "float64")
_TOP_KEYS = {"consts", "format", "inputs", "nodes", "opset", "outputs"}
_NODE_KEYS = {"attrs", "inputs", "op", "outputs"}
_SPECIAL = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


# -- encoding -----------------------------------------------------------------------------------


def encode(group: Graph) -> str:
    """The canonical text of ``group`` (see the module docstring)."""
    names: dict[str, str] = {"": ""}
    inputs = []
    for k, name in enumerate(group.inputs):
        names[name] = f"x{k}"
        inputs.append(_type(group.value(name)))
    consts: list[dict[str, Any]] = []

    def ref(name: str) -> str:
        if name not in names:
            v = group.value(name)
            if v.data is None:
                raise GraphError(f"group {group.name!r} reads {name!r} before it is defined")
            names[name] = f"c{len(consts)}"
            consts.append(_array(v.data))
        return names[name]

    nodes = []
    count = 0
    for node in group.nodes:
        ins = [ref(i) for i in node.inputs]
        outs = []
        for o in node.outputs:
            if not o:
                outs.append({"name": ""})
                continue
            names[o] = f"t{count}"
            count += 1
            outs.append({"name": names[o], **_type(group.value(o))})
        attrs = {k: _attr(node, k, v) for k, v in node.attrs.items()}
        nodes.append({"attrs": attrs, "inputs": ins, "op": node.op, "outputs": outs})
    doc = {
        "consts": consts,
        "format": FORMAT,
        "inputs": inputs,
        "nodes": nodes,
        "opset": int(group.opset),
        "outputs": [ref(o) for o in group.outputs],
    }
    return json.dumps(
        doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    )


def digest(text: str) -> str:
    """16 hex digits of the text's SHA-256: a short, stable name for a group."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _type(v: Value) -> dict[str, Any]:
    return {"dtype": v.dtype, "shape": list(v.shape)}


def _scalars(arr: np.ndarray) -> list[Any]:
    """Flat elements as JSON scalars: exact floats (non-finite ones as strings), ints, bools."""
    flat = np.ascontiguousarray(arr).reshape(-1).tolist()
    if arr.dtype.kind == "f":
        return [x if math.isfinite(x) else _special_name(x) for x in flat]
    return flat


def _special_name(x: float) -> str:
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _array(arr: np.ndarray) -> dict[str, Any]:
    return {"data": _scalars(arr), "dtype": arr.dtype.name, "shape": list(arr.shape)}


def _attr(node: Node, key: str, value: Any, top: bool = True) -> Any:
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        x = float(value)
        return x if math.isfinite(x) else {"float": _special_name(x)}
    if isinstance(value, str):
        return value
    if isinstance(value, tuple | list) and top:
        return [_attr(node, key, v, top=False) for v in value]
    if isinstance(value, np.ndarray) and top:
        return {"tensor": _array(value)}
    kind = type(value).__name__ + ("" if top else " inside a list")
    raise GraphError(
        f"{node.describe()} attribute {key!r} is a {kind}, which has no canonical text"
    )


# -- decoding -----------------------------------------------------------------------------------


class _Bad(Exception):
    pass


def _need(cond: bool, why: str) -> None:
    if not cond:
        raise _Bad(why)


def decode(text: str) -> Graph:
    """The group that ``text`` (from :func:`encode`) describes; GraphError if it is malformed."""
    try:
        doc = json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_constant=_no_constant,
            parse_float=_finite,
        )
        return _graph(doc)
    except _Bad as exc:
        raise GraphError(f"canonical graph text: {exc}") from None
    except (ValueError, TypeError, RecursionError) as exc:
        if isinstance(exc, GraphError):
            raise GraphError(f"canonical graph text: {exc}") from None
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise GraphError(f"canonical graph text is not valid JSON: {first}") from None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        _need(k not in out, f"key {k!r} appears twice")
        out[k] = v
    return out


def _no_constant(name: str) -> Any:
    raise _Bad(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    x = float(text)
    _need(math.isfinite(x), f"number {text} is out of range")
    return x


def _keys(obj: Any, keys: set[str], what: str) -> Mapping[str, Any]:
    _need(isinstance(obj, dict), f"{what} must be an object")
    missing, extra = sorted(keys - set(obj)), sorted(set(obj) - keys)
    _need(not missing, f"{what} lacks {', '.join(missing)}")
    _need(not extra, f"{what} has unknown key {', '.join(extra)}")
    return obj  # type: ignore[no-any-return]


def _list(obj: Any, what: str) -> list[Any]:
    _need(isinstance(obj, list), f"{what} must be a list")
    return obj  # type: ignore[no-any-return]


def _int(obj: Any, what: str, minimum: int = 0) -> int:
    _need(
        isinstance(obj, int) and not isinstance(obj, bool) and obj >= minimum,
        f"{what} must be an integer of at least {minimum}",
    )
    return int(obj)


def _dtype(obj: Any, what: str) -> str:
    _need(obj in _DTYPES, f"{what} has unknown dtype {obj!r}")
    return str(obj)


def _shape(obj: Any, what: str) -> tuple[Dim, ...]:
    dims: list[Dim] = []
    for d in _list(obj, f"{what} shape"):
        if isinstance(d, str):
            _need(d.isidentifier(), f"{what} has symbolic dimension {d!r}, not an identifier")
            dims.append(d)
        else:
            dims.append(_int(d, f"{what} dimension", 1))
    return tuple(dims)


def _value(obj: Any, name: str, what: str) -> Value:
    body = _keys(obj, {"dtype", "shape"}, what)
    return Value(name, _dtype(body["dtype"], what), _shape(body["shape"], what))


def _data(obj: Any, what: str) -> np.ndarray:
    body = _keys(obj, {"data", "dtype", "shape"}, what)
    dtype = _dtype(body["dtype"], what)
    shape = tuple(_int(d, f"{what} dimension") for d in _list(body["shape"], f"{what} shape"))
    flat = _list(body["data"], f"{what} data")
    _need(len(flat) == math.prod(shape), f"{what} has {len(flat)} elements for shape {list(shape)}")
    kind = np.dtype(dtype).kind
    for x in flat:
        if kind == "f":
            ok = isinstance(x, float) or (isinstance(x, str) and x in _SPECIAL)
        elif kind == "b":
            ok = isinstance(x, bool)
        else:
            ok = isinstance(x, int) and not isinstance(x, bool)
        _need(ok, f"{what} element {x!r} is not a {dtype}")
    if kind == "f":
        flat = [_SPECIAL[x] if isinstance(x, str) else x for x in flat]
    try:
        return np.array(flat, dtype=dtype).reshape(shape)
    except OverflowError:
        raise _Bad(f"{what} has an element out of range for {dtype}") from None


def _attr_value(obj: Any, what: str, top: bool = True) -> Any:
    if isinstance(obj, bool | int | str):
        return obj
    if isinstance(obj, float):
        return obj
    if isinstance(obj, dict) and len(obj) == 1 and "float" in obj:
        _need(
            isinstance(obj["float"], str) and obj["float"] in _SPECIAL,
            f"{what} has an unknown special float",
        )
        return _SPECIAL[obj["float"]]
    if isinstance(obj, dict) and top:
        _need(set(obj) == {"tensor"}, f"{what} is an object that is neither a float nor a tensor")
        return _data(obj["tensor"], what)
    if isinstance(obj, list) and top:
        return tuple(_attr_value(x, what, top=False) for x in obj)
    raise _Bad(f"{what} is not an int, float, string, list or tensor")


def _graph(doc: Any) -> Graph:
    top = _keys(doc, _TOP_KEYS, "the text")
    fmt = top["format"]
    _need(type(fmt) is int and fmt == FORMAT, f"format {fmt!r} is not {FORMAT}")
    opset = _int(top["opset"], "opset", 1)
    inputs = [
        _value(v, f"x{k}", f"input {k}") for k, v in enumerate(_list(top["inputs"], "inputs"))
    ]
    values: list[Value] = []
    defined = {v.name for v in inputs}
    for k, c in enumerate(_list(top["consts"], "consts")):
        arr = _data(c, f"constant c{k}")
        values.append(Value(f"c{k}", arr.dtype.name, tuple(int(d) for d in arr.shape), arr))
        defined.add(f"c{k}")
    nodes = []
    count = 0
    for n, obj in enumerate(_list(top["nodes"], "nodes")):
        what = f"node {n}"
        body = _keys(obj, _NODE_KEYS, what)
        op = body["op"]
        _need(isinstance(op, str) and bool(op), f"{what} op must be a non-empty string")
        ins = []
        for i in _list(body["inputs"], f"{what} inputs"):
            _need(isinstance(i, str), f"{what} inputs must be names")
            _need(i == "" or i in defined, f"{what} reads {i!r}, which is not defined before it")
            ins.append(i)
        outs = []
        for o in _list(body["outputs"], f"{what} outputs"):
            _need(isinstance(o, dict), f"{what} outputs must be objects")
            if o == {"name": ""}:
                outs.append("")
                continue
            name = f"t{count}"
            _need(
                isinstance(o, dict) and o.get("name") == name,
                f"{what} output must be named {name!r}",
            )
            rest = {k: v for k, v in o.items() if k != "name"}
            values.append(_value(rest, name, f"{what} output {name}"))
            defined.add(name)
            outs.append(name)
            count += 1
        attrs_obj = body["attrs"]
        _need(isinstance(attrs_obj, dict), f"{what} attrs must be an object")
        attrs = {k: _attr_value(v, f"{what} attribute {k!r}") for k, v in attrs_obj.items()}
        nodes.append(Node(op, tuple(ins), tuple(outs), attrs, f"t{n}"))
    outputs = []
    for o in _list(top["outputs"], "outputs"):
        _need(isinstance(o, str) and o in defined, f"output {o!r} is not defined")
        outputs.append(o)
    _need(bool(outputs), "a group needs an output")
    return Graph.make(inputs, nodes, values, outputs, opset=opset, name="fused")
