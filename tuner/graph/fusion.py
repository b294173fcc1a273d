"""Fusion: group the nodes that need kernels into fused nodes, one kernel each.

Decisions follow each operator's kind (``opdef(op).kind``, TVM's FuseOps
patterns), in three sweeps over the graph in topological order:

1. An ANCHOR (Conv, MatMul, Gemm, pools) starts a group and absorbs the
   ELEMENTWISE chain after it (bias, BatchNormalization, residual Add,
   activation): each link reads the previous one's output, keeps the anchor
   output's shape and dtype, and reads besides only outer values and earlier
   links; a value joins once all its readers have (SiLU's Sigmoid and Mul
   both read the convolution) and no graph output stays inside: a template's
   epilogue. A QuantizeLinear may end the chain (the kernel writes int8).
2. A REDUCTION (Softmax, LayerNormalization, ReduceMean) takes its
   ELEMENTWISE prologue (producers read only by this group, no graph outputs)
   and then an epilogue by the anchor rule.
3. The remaining ELEMENTWISE and INJECTIVE nodes merge, from the outputs
   backwards, into maximal groups: a producer joins its readers' group when
   all of them are in that one (injective) group and its output is no graph
   output.

Every internal value of a group is read only inside the group, so each group
has exactly ONE output (its last node's) and nothing outside depends on its
inside: groups cannot form cycles (each join also checks reachability), and a
fused node placed where its last node was keeps the order topological. VIEW
and SHAPE nodes stay plain nodes between groups.

A fused node is ``Node(FUSED, inputs, (output,), attrs={"group": Graph,
"kind": "anchor" | "reduction" | "injective", "anchor": op})`` where ``anchor``
is the anchor's or the reduction's op type ('' for injective groups). The
group graph's inputs are the outer values it reads; constants of at most
:data:`SMALL_CONST` elements, and constants an operator needs at compile time
(its ``const_inputs``), are copied into the group instead.

>>> groups_summary(fuse(optimize(resnet_block)))
['Conv+Relu', 'Conv+Add+Relu']
"""

from __future__ import annotations

import dataclasses

from .ir import FUSED, Graph, Node, Value
from .ops import OpKind, opdef

__all__ = ["SMALL_CONST", "fuse", "groups_summary"]

#: Constants up to this many elements are copied into the groups that read them.
SMALL_CONST = 16
#: The longest elementwise path an epilogue holds open until every reader of a value read
#: twice has joined (SiLU's Sigmoid and Mul: 2; a decomposed GELU: 5).
DIAMOND = 8

_KERNEL = (OpKind.ELEMENTWISE, OpKind.INJECTIVE, OpKind.REDUCTION, OpKind.ANCHOR)


@dataclasses.dataclass
class _Group:
    kind: str  # "anchor" | "reduction" | "injective"
    anchor: str
    members: set[int]


class _Fuser:
    """Group assignment over node positions of one graph."""

    def __init__(self, graph: Graph, alone: frozenset[str] = frozenset()) -> None:
        self.graph = graph
        self.alone = alone  # op types that stay kernels of their own
        self.nodes = graph.nodes
        self.kinds = [None if n.op == FUSED else opdef(n.op).kind for n in self.nodes]
        self.out = [next((o for o in n.outputs if o), "") for n in self.nodes]
        self.producer = {o: i for i, n in enumerate(self.nodes) for o in n.outputs if o}
        position = {id(n): i for i, n in enumerate(self.nodes)}
        self.readers = {v: [position[id(n)] for n in ns] for v, ns in graph.consumers().items()}
        self.outputs = set(graph.outputs)
        self.group_of: list[int | None] = [None] * len(self.nodes)
        self.groups: list[_Group] = []

    def kernel(self, i: int) -> bool:
        return self.kinds[i] in _KERNEL

    def new(self, i: int, kind: str, anchor: str) -> int:
        self.groups.append(_Group(kind, anchor, {i}))
        self.group_of[i] = len(self.groups) - 1
        return len(self.groups) - 1

    def add(self, g: int, i: int) -> None:
        self.groups[g].members.add(i)
        self.group_of[i] = g

    def depends_on(self, value: str, g: int) -> bool:
        """Whether ``value`` is computed (transitively) from a node of group ``g``."""
        members = self.groups[g].members
        first = min(members)
        stack, seen = [value], set()
        while stack:
            p = self.producer.get(stack.pop())
            if p is None or p < first or p in seen:  # nodes before the group cannot read it
                continue
            if p in members:
                return True
            seen.add(p)
            stack.extend(i for i in self.nodes[p].inputs if i)
        return False

    def can_join(self, g: int, i: int) -> bool:
        """Node ``i`` may join group ``g`` without making a cycle through outer nodes, and
        neither is one of the operators that stay alone."""
        members = self.groups[g].members
        if self.nodes[i].op in self.alone or any(self.nodes[m].op in self.alone for m in members):
            return False
        inside = {self.out[m] for m in members}
        return not any(self.depends_on(v, g) for v in self.nodes[i].inputs if v and v not in inside)

    def only_reader(self, value: str) -> int | None:
        readers = self.readers.get(value, [])
        return readers[0] if len(readers) == 1 and value not in self.outputs else None

    # -- the three sweeps ------------------------------------------------------------

    def epilogue(self, g: int, head: int) -> None:
        """Grow group ``g`` by the elementwise chain after ``head``: each next node reads the
        previous one's output and, besides outer values, only earlier values of the chain.
        A value read twice (``x * sigmoid(x)``) joins once every reader of it has: the
        tentative path is kept until it closes, at most :data:`DIAMOND` nodes long."""
        ref = self.graph.value(self.out[head])
        inside = {self.out[m] for m in self.groups[g].members}
        path: list[int] = []
        end = head
        while len(path) < DIAMOND:
            c = self.next_link(g, end, inside | {self.out[p] for p in path}, ref)
            if c is None:
                return
            path.append(c)
            end = c
            if self.closes(head, path):
                for m in path:
                    self.add(g, m)
                inside |= {self.out[m] for m in path}
                head, path = end, []
            if self.quantizes(c, ref):
                return  # the kernel writes the integers; nothing follows

    def next_link(self, g: int, end: int, inside: set[str], ref: Value) -> int | None:
        """The first reader of ``end``'s output that may follow it in group ``g``'s chain."""
        value = self.out[end]
        if value in self.outputs:
            return None
        for c in sorted(set(self.readers.get(value, []))):
            if self.kinds[c] != OpKind.ELEMENTWISE or self.group_of[c] is not None:
                continue
            if self.nodes[c].op in self.alone:
                continue
            v = self.graph.value(self.out[c])
            if (v.shape, v.dtype) != (ref.shape, ref.dtype) and not self.quantizes(c, ref):
                continue
            outer = [i for i in self.nodes[c].inputs if i and i not in inside]
            if not any(self.depends_on(i, g) for i in outer):
                return c
        return None

    def quantizes(self, c: int, ref: Value) -> bool:
        """Whether node ``c`` is a QuantizeLinear of the chain's value, which may end an
        epilogue: the kernel then writes its integers (a quantized model's next layer reads
        them)."""
        v = self.graph.value(self.out[c])
        return self.nodes[c].op == "QuantizeLinear" and v.shape == ref.shape

    def closes(self, head: int, path: list[int]) -> bool:
        """Whether every value the path leaves inside (the head's and all but the last
        link's) is read only by the path and is no graph output."""
        links = set(path)
        for m in (head, *path[:-1]):
            value = self.out[m]
            if value in self.outputs or not set(self.readers.get(value, [])) <= links:
                return False
        return True

    def prologue(self, g: int) -> None:
        members = self.groups[g].members
        grown = True
        while grown:
            grown = False
            for m in sorted(members, reverse=True):
                for v in self.nodes[m].inputs:
                    p = self.producer.get(v) if v else None
                    if p is None or self.group_of[p] is not None:
                        continue
                    if self.kinds[p] != OpKind.ELEMENTWISE or self.out[p] in self.outputs:
                        continue
                    if all(r in members for r in self.readers.get(self.out[p], [])) and (
                        self.can_join(g, p)
                    ):
                        self.add(g, p)
                        grown = True

    def run(self, enabled: bool) -> None:
        n = len(self.nodes)
        if enabled:
            for i in range(n):
                if self.kinds[i] == OpKind.ANCHOR and self.group_of[i] is None:
                    self.epilogue(self.new(i, "anchor", self.nodes[i].op), i)
            for i in range(n):
                if self.kinds[i] == OpKind.REDUCTION and self.group_of[i] is None:
                    g = self.new(i, "reduction", self.nodes[i].op)
                    self.prologue(g)
                    self.epilogue(g, i)
            for i in reversed(range(n)):
                if self.group_of[i] is None and self.kinds[i] in (
                    OpKind.ELEMENTWISE,
                    OpKind.INJECTIVE,
                ):
                    target = self.injective_target(i)
                    if target is not None:
                        self.add(target, i)
                    else:
                        self.new(i, "injective", "")
        for i in range(n):
            if self.kernel(i) and self.group_of[i] is None:
                kind = self.kinds[i]
                if kind == OpKind.ANCHOR:
                    self.new(i, "anchor", self.nodes[i].op)
                elif kind == OpKind.REDUCTION:
                    self.new(i, "reduction", self.nodes[i].op)
                else:
                    self.new(i, "injective", "")

    def injective_target(self, i: int) -> int | None:
        value = self.out[i]
        readers = self.readers.get(value, [])
        if not readers or value in self.outputs:
            return None
        gs = {self.group_of[r] for r in readers}
        g = gs.pop() if len(gs) == 1 else None
        if g is None or self.groups[g].kind != "injective" or not self.can_join(g, i):
            return None
        return g


def fuse(
    graph: Graph,
    enabled: bool = True,
    small_const: int = SMALL_CONST,
    alone: frozenset[str] = frozenset(),
) -> Graph:
    """The graph with every node that needs a kernel inside a fused node (see the module doc).

    ``enabled=False`` gives the unfused baseline: one group per kernel node. Nodes of an
    op in ``alone`` join no group and take none in (no epilogue reaches them): a table
    lookup where the target reads tables in vectors (``tuner.codegen.cpu.tables``), which
    inside a bigger kernel is one scalar read per element.
    Nodes with several outputs in use are first split into one copy per
    output (the others left out as ''), so that every group has one output.

    >>> fuse(g).nodes[0].op == FUSED
    True
    """
    graph = _one_output_each(graph)
    fuser = _Fuser(graph, alone)
    fuser.run(enabled)
    last = {g: max(grp.members) for g, grp in enumerate(fuser.groups)}
    nodes: list[Node] = []
    for i, node in enumerate(graph.nodes):
        g = fuser.group_of[i]
        if g is None:
            nodes.append(node)
        elif last[g] == i:
            nodes.append(_fused_node(graph, fuser.groups[g], len(nodes), small_const))
    return graph.replace(nodes=tuple(nodes))


def groups_summary(graph: Graph) -> list[str]:
    """Each fused node's op chain in order, such as ``"Conv+Add+Relu"``.

    >>> groups_summary(fuse(g))
    ['MatMul+Add+Gelu', 'Softmax']
    """
    return [
        "+".join(n.op for n in node.attrs["group"].nodes)
        for node in graph.nodes
        if node.op == FUSED
    ]


def _one_output_each(graph: Graph) -> Graph:
    """Kernel nodes with several used outputs become one copy per output; unused ones go ''."""
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    nodes: list[Node] = []
    changed = False
    for node in graph.nodes:
        named = [o for o in node.outputs if o]
        if node.op == FUSED or len(named) < 2 or opdef(node.op).kind not in _KERNEL:
            nodes.append(node)
            continue
        used = [o for o in named if o in consumers or o in outputs] or named[:1]
        for k, o in enumerate(used):
            outs = tuple(x if x == o else "" for x in node.outputs)
            name = node.name if k == 0 or not node.name else f"{node.name}:{k}"
            nodes.append(dataclasses.replace(node, outputs=outs, name=name))
        changed = True
    return graph.replace(nodes=tuple(nodes)) if changed else graph


def _fused_node(graph: Graph, group: _Group, index: int, small_const: int) -> Node:
    members = [graph.nodes[m] for m in sorted(group.members)]
    inside = {o for n in members for o in n.outputs if o}
    output = next(o for o in members[-1].outputs if o)
    read: dict[str, bool] = {}  # outer value -> must be a compile-time constant here
    for n in members:
        const_inputs = opdef(n.op).const_inputs
        for k, i in enumerate(n.inputs):
            if i and i not in inside:
                read[i] = read.get(i, False) or k in const_inputs
    inputs: list[Value] = []
    consts: list[Value] = []
    for value_name, compile_time in read.items():
        v = graph.value(value_name)
        if v.data is not None and (compile_time or v.data.size <= small_const):
            consts.append(v)
        else:  # a runtime argument of the kernel: the group sees its type, not its data
            inputs.append(Value(v.name, v.dtype, v.shape))
    name = members[0].name or f"group{index}"
    body = Graph.make(
        inputs=inputs,
        nodes=members,
        values=[graph.value(o) for o in inside] + consts,
        outputs=[output],
        opset=graph.opset,
        name=name,
    )
    attrs = {"group": body, "kind": group.kind, "anchor": group.anchor}
    return Node(FUSED, tuple(v.name for v in inputs), (output,), attrs, name)
