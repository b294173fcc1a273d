"""``tuner.Lookup``: an elementwise function of one 8-bit tensor, read from a table.

::

    Lookup(x, table)[i] = table[x[i] - min(x's type)]        x int8 or uint8, table 256 entries

What the graph pass ``tuner.graph.tables`` makes of a chain of elementwise operators
between quantizers (a quantized SiLU ``Q(DQ(q) * DQ(Q(Sigmoid(DQ(q)))))``, hard-swish,
GELU): its output depends on one byte, so 256 entries, computed once by the chain's
own NumPy evaluation, hold every result (onnxruntime's QLinearSigmoid and TFLite's int8
activations are tables too). The table is a kernel input, not a literal, so every
lookup of one shape and types shares one kernel.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ... import te
from ...te import Expr, Tensor
from ..ir import GraphError, Node
from . import LowerContext, OpKind, register
from .elementwise import input_array, te_shape

__all__ = ["KEYS", "LOOKUP"]

LOOKUP = "tuner.Lookup"
#: The types a lookup's key may have, each with 256 values.
KEYS = ("int8", "uint8")


def _first(node: Node, dtype: str, entries: int) -> int:
    """The key type's least value (the table's entry 0); GraphError unless the pair fits."""
    if dtype not in KEYS:
        raise GraphError(f"{node.describe()} looks up a {dtype} key; int8 or uint8")
    if entries != 256:
        raise GraphError(f"{node.describe()} has a table of {entries} entries, not 256")
    return int(np.iinfo(dtype).min)


@register(LOOKUP, OpKind.ELEMENTWISE, lower=lambda ctx: _lower(ctx))
def _evaluate(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x, table = input_array(node, arrays, 0), input_array(node, arrays, 1).reshape(-1)
    lo = _first(node, x.dtype.name, table.size)
    return [table[x.astype(np.int64) - lo]]


def _lower(ctx: LowerContext) -> list[Tensor]:
    x, table = ctx.tensor(0), ctx.tensor(1)
    lo = _first(ctx.node, x.dtype, int(np.prod(table.shape_ints)))
    out = ctx.outputs[0]

    def body(*idx: Expr) -> Expr:
        return table[(x[idx].astype("int64") - lo,)]

    return [te.compute(te_shape(out.shape), body, name=ctx.name, dtype=out.dtype)]
