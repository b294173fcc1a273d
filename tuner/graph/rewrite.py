"""What every graph rewrite is built from: fresh names, who reads what, and node replacement.

The passes (:mod:`~tuner.graph.passes`) and the pattern recognisers
(:mod:`~tuner.graph.patterns`) share these: :class:`Names` makes value names
that collide with nothing, :class:`Uses` answers "is this node the value's
only reader", and :func:`replace_nodes` swaps nodes by position and then drops
what is dead with :func:`eliminate_dead_code` (which lives here because every
rewrite ends with it; ``passes`` exports it as a pass of its own).

>>> g = replace_nodes(graph, {3: Node("Gelu", ("x",), ("y",))}, dropped={0, 1, 2}, values=[])
"""

from __future__ import annotations

from collections.abc import Mapping

from .ir import Graph, Node, Value

__all__ = ["Names", "Uses", "eliminate_dead_code", "replace_nodes"]


class Names:
    """Fresh value names that collide with nothing in the graph or made before."""

    def __init__(self, graph: Graph) -> None:
        self.taken = set(graph.values)

    def __call__(self, base: str) -> str:
        name, k = base, 1
        while name in self.taken:
            name, k = f"{base}_{k}", k + 1
        self.taken.add(name)
        return name


class Uses:
    """Who reads each value, and which values the caller sees."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.consumers = graph.consumers()
        self.producers = graph.producers()
        self.outputs = set(graph.outputs)

    def only(self, name: str) -> Node | None:
        """The one node reading ``name`` when there is exactly one and it is no graph output."""
        cons = self.consumers.get(name, [])
        if len(cons) != 1 or name in self.outputs:
            return None
        return cons[0]

    def made_by(self, name: str, op: str) -> Node | None:
        n = self.producers.get(name)
        return n if n is not None and n.op == op else None


def replace_nodes(
    graph: Graph,
    replaced: Mapping[int, Node | tuple[Node, ...]],
    dropped: set[int],
    values: list[Value],
) -> Graph:
    """Replace nodes (by position: by one node, or by several in order) and drop others,
    then remove what is dead."""
    nodes: list[Node] = []
    for i, n in enumerate(graph.nodes):
        if i in replaced:
            r = replaced[i]
            nodes.extend(r if isinstance(r, tuple) else (r,))
        elif i not in dropped:
            nodes.append(n)
    g = graph.replace(nodes=tuple(nodes), values=graph.with_values(values))
    return eliminate_dead_code(g)


def eliminate_dead_code(graph: Graph) -> Graph:
    """Drop nodes none of whose outputs reach a graph output (and values nothing reads).

    >>> eliminate_dead_code(g)   # an unused branch goes
    """
    live = set(graph.outputs)
    kept: list[Node] = []
    for node in reversed(graph.nodes):
        if any(o in live for o in node.outputs if o):
            kept.append(node)
            live.update(i for i in node.inputs if i)
    return graph.replace(nodes=tuple(reversed(kept)))
