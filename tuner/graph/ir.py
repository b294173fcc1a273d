"""The graph IR: values with dtypes and shapes, nodes of ONNX operator types, a graph.

A :class:`Value` is a named tensor: its dtype (NumPy's name: ``"float32"``,
``"int64"``, ``"bool"``), its shape (integers, or strings for symbolic
dimensions such as ``"batch"``) and, for constants (weights, folded shape
arithmetic), its data. A :class:`Node` applies one operator (an ONNX operator
type, ``"Conv"``, with its attributes as plain Python values; or a fused group,
``"tuner.Fused"``) to named values and defines named outputs. A
:class:`Graph` lists its nodes in topological order; it is immutable in the
sense that passes build new graphs (``replace``) rather than editing one in
place.

>>> g = Graph.make(
...     inputs=[Value("x", "float32", (1, 4))],
...     nodes=[Node("Relu", ("x",), ("y",))],
...     values=[Value("y", "float32", (1, 4))],
...     outputs=["y"],
... )
>>> print(g)
graph(x: float32[1,4]) -> (y)
  y: float32[1,4] = Relu(x)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["FUSED", "Dim", "Graph", "GraphError", "Node", "Value"]

#: The operator type of a node that stands for a fused group (``attrs["group"]``).
FUSED = "tuner.Fused"

Dim = int | str


class GraphError(ValueError):
    """A graph that is malformed, or a model this compiler cannot take (one line)."""


@dataclass(frozen=True, eq=False)
class Value:
    """A named tensor. ``data`` is set for constants, and then matches dtype and shape."""

    name: str
    dtype: str
    shape: tuple[Dim, ...]
    data: np.ndarray | None = field(default=None, repr=False)

    @property
    def is_const(self) -> bool:
        return self.data is not None

    @property
    def static(self) -> bool:
        """Whether every dimension is a known integer."""
        return all(isinstance(d, int) for d in self.shape)

    @property
    def size(self) -> int:
        """Number of elements (the shape must be static)."""
        return int(np.prod([int(d) for d in self.shape], dtype=np.int64))

    @classmethod
    def const(cls, name: str, data: Any) -> Value:
        arr = np.asarray(data)
        return cls(name, arr.dtype.name, tuple(int(d) for d in arr.shape), arr)

    def type_text(self) -> str:
        return f"{self.dtype}[{','.join(str(d) for d in self.shape)}]"


@dataclass(frozen=True)
class Node:
    """``outputs = op(inputs; attrs)``. An empty input name is an omitted optional input."""

    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    name: str = ""

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def describe(self) -> str:
        """How error messages name the node: ``Conv node 'conv1'``."""
        return f"{self.op} node {self.name!r}" if self.name else f"{self.op} node"


@dataclass(frozen=True, eq=False)
class Graph:
    """Nodes in topological order over named values.

    ``inputs`` are the values a caller feeds, ``outputs`` those it gets back,
    in order; every other value is defined by exactly one node or is a
    constant. ``opset`` is the ONNX default-domain opset the nodes follow.
    """

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    nodes: tuple[Node, ...]
    values: Mapping[str, Value]
    opset: int = 17
    name: str = "graph"

    @classmethod
    def make(
        cls,
        inputs: Sequence[Value],
        nodes: Sequence[Node],
        values: Iterable[Value],
        outputs: Sequence[str],
        opset: int = 17,
        name: str = "graph",
    ) -> Graph:
        table = {v.name: v for v in inputs}
        for v in values:
            table[v.name] = v
        g = cls(tuple(v.name for v in inputs), tuple(outputs), tuple(nodes), table, opset, name)
        g.check()
        return g

    # -- queries -------------------------------------------------------------

    def value(self, name: str) -> Value:
        try:
            return self.values[name]
        except KeyError:
            raise GraphError(f"graph {self.name!r} has no value {name!r}") from None

    def const(self, name: str) -> np.ndarray | None:
        """The data of ``name`` when it is a constant, else None (also for '')."""
        if not name:
            return None
        v = self.values.get(name)
        return None if v is None else v.data

    def producers(self) -> dict[str, Node]:
        """Each node-defined value's node."""
        return {out: n for n in self.nodes for out in n.outputs if out}

    def consumers(self) -> dict[str, list[Node]]:
        """Each value's reading nodes, in graph order (a node reading a value twice counts once)."""
        uses: dict[str, list[Node]] = {}
        for n in self.nodes:
            for name in dict.fromkeys(i for i in n.inputs if i):
                uses.setdefault(name, []).append(n)
        return uses

    def constants(self) -> list[Value]:
        return [v for v in self.values.values() if v.is_const]

    def replace(self, **changes: Any) -> Graph:
        """A new graph with fields changed; values no node, input or output names are dropped."""
        g = dataclasses.replace(self, **changes)
        used = set(g.inputs) | set(g.outputs)
        for n in g.nodes:
            used.update(i for i in n.inputs if i)
            used.update(o for o in n.outputs if o)
        values = {k: v for k, v in g.values.items() if k in used}
        g = dataclasses.replace(g, values=values)
        g.check()
        return g

    def with_values(self, values: Iterable[Value]) -> dict[str, Value]:
        """This graph's value table with ``values`` added or replaced (for ``replace``)."""
        table = dict(self.values)
        for v in values:
            table[v.name] = v
        return table

    # -- checks and printing ---------------------------------------------------

    def check(self) -> None:
        """Raise GraphError unless every read value is defined before it is read, once."""
        defined = set(self.inputs) | {v.name for v in self.values.values() if v.is_const}
        for name in self.inputs:
            if name not in self.values:
                raise GraphError(f"graph input {name!r} has no type")
        for n in self.nodes:
            for i in n.inputs:
                if i and i not in defined:
                    raise GraphError(f"{n.describe()} reads {i!r} before it is defined")
            for o in n.outputs:
                if not o:
                    continue
                if o in defined:
                    raise GraphError(f"{n.describe()} defines {o!r} a second time")
                if o not in self.values:
                    raise GraphError(f"{n.describe()} output {o!r} has no type")
                defined.add(o)
        for o in self.outputs:
            if o not in defined:
                raise GraphError(f"graph output {o!r} is never defined")

    def __str__(self) -> str:
        head = ", ".join(f"{i}: {self.values[i].type_text()}" for i in self.inputs)
        lines = [f"graph({head}) -> ({', '.join(self.outputs)})"]
        for n in self.nodes:
            outs = ", ".join(f"{o}: {self.values[o].type_text()}" for o in n.outputs if o)
            args = ", ".join(_arg_text(self, i) for i in n.inputs)
            attrs = "".join(
                f", {k}={_attr_text(v)}" for k, v in sorted(n.attrs.items()) if k != "group"
            )
            lines.append(f"  {outs} = {n.op}({args}{attrs})")
            group = n.attrs.get("group")
            if isinstance(group, Graph):
                lines.extend("    " + line for line in str(group).splitlines())
        return "\n".join(lines)


def _arg_text(g: Graph, name: str) -> str:
    if not name:
        return "_"
    v = g.values.get(name)
    if v is not None and v.data is not None and v.data.size <= 4:
        return f"{name}={v.data.tolist()!r}"
    return name


def _attr_text(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"array{list(value.shape)}"
    if isinstance(value, float):
        return repr(value)
    return repr(value) if isinstance(value, str) else str(value)
