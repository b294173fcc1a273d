"""The canonical text of a group: stable, blind to names, exact about everything else."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tuner.graph import Graph, GraphError, Node, Value
from tuner.graph.canonical import decode, digest, encode

GOLDEN = (
    '{"consts":[{"data":[3.0],"dtype":"float32","shape":[]}],"format":1,'
    '"inputs":[{"dtype":"float32","shape":[2]}],"nodes":[{"attrs":{},"inputs":["x0","c0"],'
    '"op":"Mul","outputs":[{"dtype":"float32","name":"t0","shape":[2]}]},'
    '{"attrs":{"alpha":0.1},"inputs":["t0"],"op":"LeakyRelu",'
    '"outputs":[{"dtype":"float32","name":"t1","shape":[2]}]}],"opset":17,"outputs":["t1"]}'
)


def tiny(inp: str = "in", k: str = "k", mid: str = "m", out: str = "out", **attrs: Any) -> Graph:
    """``LeakyRelu(in * 3)`` over float32[2], with the given value names."""
    return Graph.make(
        [Value(inp, "float32", (2,))],
        [
            Node("Mul", (inp, k), (mid,), name="first"),
            Node("LeakyRelu", (mid,), (out,), {"alpha": 0.1, **attrs}, name="second"),
        ],
        [Value.const(k, np.float32(3.0)), Value(mid, "float32", (2,)), Value(out, "float32", (2,))],
        [out],
    )


def rich(
    names: tuple[str, ...] = ("a", "b", "w", "s", "y", "z"), shape: tuple[Any, ...] = (2, 3)
) -> Graph:
    """Two inputs, two constants, every kind of attribute, an omitted optional output."""
    a, b, w, s, y, z = names
    attrs = {
        "perm": (1, 0),
        "alpha": 1e-5,
        "lo": float("-inf"),
        "mode": "constant",
        "scales": (0.5, 2.0),
        "names": ("p", "q"),
        "count": np.int64(3),
        "flag": True,
        "value": np.array([[1.5, -0.0], [np.inf, 2.0]], np.float32),
        "mask": np.array([True, False]),
    }
    return Graph.make(
        [Value(a, "float32", shape), Value(b, "int64", (3,))],
        [
            Node("Custom", (a, w, "", b), (y, ""), attrs, name="n1"),
            Node("Add", (y, s), (z,), name="n2"),
        ],
        [
            Value.const(w, np.arange(6, dtype=np.int32).reshape(2, 3)),
            Value.const(s, np.float64(0.25)),
            Value(y, "float32", shape),
            Value(z, "float32", shape),
        ],
        [z],
        opset=13,
    )


def test_golden_text_of_a_tiny_group() -> None:
    assert encode(tiny()) == GOLDEN
    assert digest(GOLDEN) == hashlib.sha256(GOLDEN.encode()).hexdigest()[:16]
    assert len(digest(GOLDEN)) == 16


def test_names_do_not_matter() -> None:
    renamed = tiny("input_7", "weight", "hidden", "result")
    assert encode(renamed) == encode(tiny())
    assert encode(rich(("p", "q", "r", "t", "u", "v"))) == encode(rich())


def test_attribute_order_does_not_matter() -> None:
    g = rich()
    node = g.nodes[0]
    flipped = Node(node.op, node.inputs, node.outputs, dict(reversed(list(node.attrs.items()))))
    assert encode(g.replace(nodes=(flipped, g.nodes[1]))) == encode(g)


@pytest.mark.parametrize(
    "changed",
    [
        tiny(alpha=0.2),
        tiny(extra=(1, 2)),
        Graph.make(
            [Value("in", "float32", (3,))],
            [Node("Relu", ("in",), ("out",))],
            [Value("out", "float32", (3,))],
            ["out"],
        ),
    ],
    ids=["attribute value", "extra attribute", "other graph"],
)
def test_what_a_group_computes_changes_the_text(changed: Graph) -> None:
    assert encode(changed) != encode(tiny())


def test_shapes_dtypes_and_constants_change_the_text() -> None:
    base = encode(rich())
    assert encode(rich(shape=(3, 2))) != base
    g = rich()
    other = g.with_values([Value.const("s", np.float64(0.5))])
    assert encode(g.replace(values=other)) != base
    wider = g.with_values([Value.const("s", np.float32(0.25))])
    assert encode(g.replace(values=wider)) != base
    assert encode(g.replace(opset=17)) != base


def test_round_trip() -> None:
    text = encode(rich())
    g = decode(text)
    assert encode(g) == text
    assert g.inputs == ("x0", "x1") and g.outputs == ("t1",)
    assert [n.outputs for n in g.nodes] == [("t0", ""), ("t1",)]
    assert g.nodes[0].inputs == ("x0", "c0", "", "x1")
    attrs = g.nodes[0].attrs
    assert (
        attrs["perm"] == (1, 0) and attrs["scales"] == (0.5, 2.0) and attrs["names"] == ("p", "q")
    )
    assert attrs["alpha"] == 1e-5 and attrs["lo"] == float("-inf") and attrs["mode"] == "constant"
    assert attrs["count"] == 3 and type(attrs["count"]) is int and attrs["flag"] is True
    value = attrs["value"]
    assert value.dtype == np.float32 and value.shape == (2, 2)
    np.testing.assert_array_equal(value, np.array([[1.5, -0.0], [np.inf, 2.0]], np.float32))
    assert np.signbit(value[0, 1])
    assert attrs["mask"].dtype == np.bool_ and attrs["mask"].tolist() == [True, False]
    w, s = g.value("c0"), g.value("c1")
    assert w.data is not None and w.data.dtype == np.int32 and w.shape == (2, 3)
    assert s.data is not None and s.data.dtype == np.float64 and s.shape == () and s.data == 0.25
    assert g.opset == 13


def test_float32_data_round_trips_exactly() -> None:
    data = np.random.default_rng(0).standard_normal(16).astype(np.float32)
    g = Graph.make(
        [Value("x", "float32", (16,))],
        [Node("Add", ("x", "c"), ("y",))],
        [Value.const("c", data), Value("y", "float32", (16,))],
        ["y"],
    )
    back = decode(encode(g)).value("c0").data
    assert back is not None and back.dtype == np.float32
    np.testing.assert_array_equal(back, data)


def test_symbolic_dimensions_round_trip() -> None:
    g = Graph.make(
        [Value("x", "float32", ("batch", 4))],
        [Node("Relu", ("x",), ("y",))],
        [Value("y", "float32", ("batch", 4))],
        ["y"],
    )
    assert decode(encode(g)).value("x0").shape == ("batch", 4)


def test_the_text_is_compact_sorted_json() -> None:
    text = encode(rich())
    assert " " not in text and "\n" not in text
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))


def test_the_text_is_the_same_under_other_hash_seeds() -> None:
    script = (
        "import tests.graph.test_canonical as t; from tuner.graph.canonical import encode; "
        "print(encode(t.rich()))"
    )
    root = Path(__file__).resolve().parents[2]
    texts = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(root)}
        run = subprocess.run(
            [sys.executable, "-c", script], env=env, cwd=root, capture_output=True, text=True
        )
        assert run.returncode == 0, run.stderr
        texts.add(run.stdout.strip())
    assert texts == {encode(rich())}


def test_attributes_without_a_text_are_refused() -> None:
    g = tiny(inner=tiny())
    with pytest.raises(GraphError, match="LeakyRelu node 'second' attribute 'inner' is a Graph"):
        encode(g)
    with pytest.raises(GraphError, match="inside a list"):
        encode(tiny(arrays=(np.zeros(2),)))


def _edit(text: str, path: tuple[Any, ...], value: Any) -> str:
    doc = json.loads(text)
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return json.dumps(doc)


_DELETE = object()


@pytest.mark.parametrize(
    "text, why",
    [
        ("", "not valid JSON"),
        ("[]", "the text must be an object"),
        (GOLDEN[:-1], "not valid JSON"),
        (GOLDEN.replace('"opset":17', '"opset":17,"opset":17'), "key 'opset' appears twice"),
        (GOLDEN.replace("3.0", "NaN"), "NaN is not a JSON number"),
        (GOLDEN.replace("3.0", "1e999"), "out of range"),
        (_edit(GOLDEN, ("format",), 2), "format 2 is not 1"),
        (_edit(GOLDEN, ("format",), True), "format True is not 1"),
        (_edit(GOLDEN, ("nodes",), _DELETE), "the text lacks nodes"),
        (_edit(GOLDEN, ("extra",), 1), "unknown key extra"),
        (_edit(GOLDEN, ("inputs", 0, "dtype"), "float16"), "unknown dtype 'float16'"),
        (_edit(GOLDEN, ("inputs", 0, "shape"), [0]), "dimension must be an integer of at least 1"),
        (_edit(GOLDEN, ("inputs", 0, "shape"), [True]), "dimension must be an integer"),
        (_edit(GOLDEN, ("inputs", 0, "shape"), ["a b"]), "not an identifier"),
        (_edit(GOLDEN, ("consts", 0, "data"), [1.0, 2.0]), "has 2 elements for shape []"),
        (_edit(GOLDEN, ("consts", 0, "data"), [3]), "element 3 is not a float32"),
        (_edit(GOLDEN, ("consts", 0, "data"), ["inf "]), "is not a float32"),
        (_edit(GOLDEN, ("nodes", 0, "inputs", 0), "x1"), "reads 'x1', which is not defined"),
        (_edit(GOLDEN, ("nodes", 1, "inputs", 0), "t1"), "reads 't1', which is not defined"),
        (_edit(GOLDEN, ("nodes", 0, "outputs", 0, "name"), "t3"), "must be named 't0'"),
        (_edit(GOLDEN, ("nodes", 0, "op"), ""), "op must be a non-empty string"),
        (_edit(GOLDEN, ("nodes", 1, "attrs", "alpha"), {"float": "big"}), "unknown special"),
        (_edit(GOLDEN, ("nodes", 1, "attrs", "alpha"), {"code": "x"}), "neither a float nor"),
        (_edit(GOLDEN, ("nodes", 1, "attrs", "alpha"), [[1]]), "is not an int, float"),
        (_edit(GOLDEN, ("nodes", 1, "attrs", "alpha"), None), "is not an int, float"),
        (_edit(GOLDEN, ("outputs",), ["t9"]), "output 't9' is not defined"),
        (_edit(GOLDEN, ("outputs",), []), "a group needs an output"),
        (_edit(GOLDEN, ("consts", 0, "dtype"), "int8").replace("3.0", "300"), "out of range"),
    ],
)
def test_malformed_texts_are_one_line_graph_errors(text: str, why: str) -> None:
    with pytest.raises(GraphError) as info:
        decode(text)
    message = str(info.value)
    assert why in message
    assert "\n" not in message and message.startswith("canonical graph text")
