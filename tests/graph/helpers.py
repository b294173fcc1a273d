"""One ONNX node three ways: onnxruntime (the reference), our NumPy evaluation, our te kernel.

>>> check_op("Add", [a, b])                                  # two runtime inputs
>>> check_op("Reshape", [x, np.array([2, -1])], const={1})   # input 1 is a constant
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from tuner.graph import Node, Value
from tuner.graph.ops import LowerContext, opdef

_ONNX_TYPES = {
    "float32": 1, "uint8": 2, "int8": 3, "int32": 6, "int64": 7, "bool": 9, "float64": 11,
}  # fmt: skip


def ort_run(
    op: str,
    inputs: Sequence[np.ndarray | None],
    attrs: Mapping[str, Any] | None = None,
    *,
    n_outputs: int = 1,
    const: Collection[int] = (),
    opset: int = 17,
    domain: str = "",
) -> list[np.ndarray]:
    """Run one node in onnxruntime; inputs in ``const`` are initializers, None is omitted."""
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    names = ["" if x is None else f"in{i}" for i, x in enumerate(inputs)]
    while names and not names[-1]:
        names.pop()
    outs = [f"out{i}" for i in range(n_outputs)]
    graph_inputs, inits, feeds = [], [], {}
    for i, (name, x) in enumerate(zip(names, inputs, strict=False)):
        if x is None:
            continue
        if i in const:
            inits.append(numpy_helper.from_array(np.asarray(x), name))
        else:
            graph_inputs.append(
                helper.make_tensor_value_info(name, _ONNX_TYPES[x.dtype.name], list(x.shape))
            )
            feeds[name] = x
    node = helper.make_node(op, names, outs, domain=domain, **dict(attrs or {}))
    graph = helper.make_graph(
        [node],
        "one",
        graph_inputs,
        [helper.make_value_info(o, onnx.TypeProto()) for o in outs],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(r) for r in sess.run(outs, feeds)]


def our_node(
    op: str, inputs: Sequence[np.ndarray | None], attrs: Mapping[str, Any] | None, n_outputs: int
) -> Node:
    """The node as the importer makes it: attributes as plain Python values."""
    names = tuple("" if x is None else f"in{i}" for i, x in enumerate(inputs))
    return Node(op, names, tuple(f"out{i}" for i in range(n_outputs)), dict(attrs or {}), "n0")


def evaluate(
    op: str,
    inputs: Sequence[np.ndarray | None],
    attrs: Mapping[str, Any] | None = None,
    n_outputs: int = 1,
) -> list[np.ndarray]:
    return opdef(op).evaluate(our_node(op, inputs, attrs, n_outputs), list(inputs))


def _te_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape if shape else (1,)


def lower_and_run(
    op: str,
    inputs: Sequence[np.ndarray | None],
    attrs: Mapping[str, Any] | None,
    outputs: Sequence[np.ndarray],
    const: Collection[int] = (),
) -> list[np.ndarray]:
    """Lower the node to te, schedule it plainly, build it with the CPU backend and run it.

    ``outputs`` (the reference results) give the output types. Every input is
    a placeholder (weights are runtime arguments); those in ``const`` are also
    given to the lowering as data.
    """
    import tuner
    from tuner import te

    node = our_node(op, inputs, attrs, len(outputs))
    d = opdef(op)
    assert d.lower is not None, f"{op} has no lowering"
    tensors = [
        None if x is None else te.placeholder(_te_shape(x.shape), x.dtype.name, name=f"in{i}")
        for i, x in enumerate(inputs)
    ]
    consts = [None if (x is None or i not in const) else x for i, x in enumerate(inputs)]
    out_values = [Value(f"out{i}", o.dtype.name, o.shape) for i, o in enumerate(outputs)]
    ctx = LowerContext(node, tensors, consts, out_values, "n0")
    results = d.lower(ctx)
    assert len(results) == len(outputs)
    got = []
    for res, ref in zip(results, outputs, strict=True):
        assert res.shape_ints == _te_shape(ref.shape), (res.shape_ints, ref.shape)
        assert res.dtype == ref.dtype.name, (res.dtype, ref.dtype)
        s = te.create_schedule(res)
        # Only placeholders the output reads are kernel arguments.
        names = {t.name for t in s.state.inputs}
        used = [t for t in tensors if t is not None and t.name in names]
        f = tuner.build(s, [*used, res])
        arrays = {f"in{i}": x for i, x in enumerate(inputs) if x is not None}
        out = np.empty(_te_shape(ref.shape), ref.dtype)
        f(*[np.ascontiguousarray(arrays[t.name]).reshape(t.shape_ints) for t in used], out)
        got.append(out.reshape(ref.shape))
    return got


def check_op(
    op: str,
    inputs: Sequence[np.ndarray | None],
    attrs: Mapping[str, Any] | None = None,
    *,
    const: Collection[int] = (),
    n_outputs: int = 1,
    opset: int = 17,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    lower: bool = True,
) -> list[np.ndarray]:
    """Assert onnxruntime, our NumPy evaluation and (if ``lower``) our kernel agree; return ORT's."""
    ref = ort_run(op, inputs, attrs, n_outputs=n_outputs, const=const, opset=opset)
    ours = evaluate(op, inputs, attrs, n_outputs)
    assert len(ours) == len(ref)
    for r, o in zip(ref, ours, strict=True):
        assert o.shape == r.shape and o.dtype == r.dtype, (o.shape, o.dtype, r.shape, r.dtype)
        np.testing.assert_allclose(o, r, rtol=rtol, atol=atol)
    if lower:
        for r, k in zip(ref, lower_and_run(op, inputs, attrs, ref, const), strict=True):
            np.testing.assert_allclose(k, r, rtol=rtol, atol=atol)
    return ref
