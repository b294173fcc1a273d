"""Run a graph with each operator's NumPy evaluation: the compiler's own reference.

Passes are tested by running the graph before and after them; the generic
operator's reference is its group run here; constant folding evaluates the
same functions. A fused node runs its group.

>>> run_graph(graph, {"x": x})     # -> [y], the graph's outputs in order
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .ir import FUSED, Graph, GraphError
from .ops import opdef

__all__ = ["evaluate_all", "run_graph"]


def run_graph(graph: Graph, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """The graph's outputs for ``feeds`` (one array per graph input, by name)."""
    env = evaluate_all(graph, feeds)
    return [env[o] for o in graph.outputs]


def evaluate_all(graph: Graph, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every value of the graph (inputs, constants, node outputs) for ``feeds``, by name."""
    env: dict[str, np.ndarray] = {v.name: v.data for v in graph.constants() if v.data is not None}
    for name in graph.inputs:
        if name not in feeds:
            raise GraphError(f"graph {graph.name!r} needs input {name!r}")
        env[name] = np.asarray(feeds[name])
    for node in graph.nodes:
        args = [env[i] if i else None for i in node.inputs]
        if node.op == FUSED:
            group: Graph = node.attrs["group"]
            fed = {k: a for k, a in zip(group.inputs, args, strict=True) if a is not None}
            results = run_graph(group, fed)
        else:
            results = opdef(node.op).evaluate(node, args)
        for name, value in zip(node.outputs, results, strict=False):
            if name:
                env[name] = value
    return env
