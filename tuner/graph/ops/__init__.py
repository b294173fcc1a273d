"""What each supported ONNX operator means: its kind, NumPy semantics and tensor expression.

One :class:`OpDef` per ONNX operator type, registered by the family module
that owns it (``elementwise``, ``unary``, ``reduce``, ``linalg``, ``nn``,
``norm``, ``movement``, ``views``, ``gather``, ``shape``, ...).
Everything the compiler knows about an operator sits in its family module:
how its attributes (and, from some opset on, its constant inputs such as
Reshape's shape or Clip's bounds) are read and normalised, its NumPy
evaluation (constant folding, the graph interpreter) and its lowering to
tensor expressions (the kernels).

Conventions every lowering keeps:

- A rank-0 ONNX value is a te tensor of shape ``(1,)``.
- ``lower`` returns one te tensor per node output, with exactly the output
  value's shape and dtype; intermediate stages it creates are named
  ``f"{ctx.name}_{suffix}"``.
- Inputs listed in ``const_inputs`` must be constants (the lowering and the
  evaluation read them from ``ctx.consts``); a non-constant one is a
  :class:`~tuner.graph.GraphError` naming the node.

>>> opdef("Relu").kind
<OpKind.ELEMENTWISE: 'elementwise'>
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from ...te import Tensor
from ..ir import GraphError, Node, Value

__all__ = [
    "LowerContext",
    "OpDef",
    "OpKind",
    "opdef",
    "register",
    "supported",
]


class OpKind(StrEnum):
    """How an operator fuses (TVM's pattern kinds, plus views and shape arithmetic)."""

    #: One output element from the same-index elements of its inputs, broadcasting
    #: allowed (Add, Relu, Clip, Where, Cast, BatchNormalization in inference).
    ELEMENTWISE = "elementwise"
    #: Each output element reads one input element at a computed index (Transpose,
    #: Slice, Concat, Gather, Pad, Expand).
    INJECTIVE = "injective"
    #: A new shape over the same row-major data; no kernel, the module aliases the
    #: buffer (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout).
    VIEW = "view"
    #: Reduces over some axes, possibly with an elementwise prologue and epilogue of
    #: its own (ReduceMean, Softmax, LayerNormalization, GlobalAveragePool, LRN).
    REDUCTION = "reduction"
    #: A compute-heavy operator with a template (Conv, MatMul, Gemm, pools):
    #: elementwise consumers fuse into its epilogue, nothing fuses before it.
    ANCHOR = "anchor"
    #: Shape arithmetic (Shape, Constant, ConstantOfShape, Range, Size): must fold to
    #: constants at compile time; never a kernel.
    SHAPE = "shape"


@dataclass
class LowerContext:
    """What a lowering sees of one node inside a group."""

    node: Node
    #: One te tensor per node input (None for an omitted optional input ''). A
    #: constant input is a placeholder too (weights are runtime arguments).
    inputs: list[Tensor | None]
    #: The data of each input that is a constant in the graph, else None.
    consts: list[np.ndarray | None]
    #: The types of the node's outputs (static shapes).
    outputs: list[Value]
    #: Prefix for the names of the te stages the lowering creates (an identifier).
    name: str

    def tensor(self, i: int) -> Tensor:
        t = self.inputs[i] if i < len(self.inputs) else None
        if t is None:
            raise GraphError(f"{self.node.describe()} needs input {i}")
        return t

    def const(self, i: int) -> np.ndarray:
        data = self.consts[i] if i < len(self.consts) else None
        if data is None:
            raise GraphError(
                f"{self.node.describe()} needs input {i} to be a constant (computed at compile time)"
            )
        return data


Evaluate = Callable[[Node, Sequence[np.ndarray | None]], list[np.ndarray]]
Lower = Callable[[LowerContext], list[Tensor]]


@dataclass(frozen=True)
class OpDef:
    """One operator: ``evaluate(node, arrays)`` in NumPy, ``lower(ctx)`` to te (None: no kernel)."""

    op: str
    kind: OpKind
    evaluate: Evaluate
    lower: Lower | None = None
    #: Input positions that must be compile-time constants (shape, axes, pads, bounds).
    const_inputs: tuple[int, ...] = ()


_REGISTRY: dict[str, OpDef] = {}
_FAMILIES = (
    "elementwise",
    "unary",
    "reduce",
    "linalg",
    "nn",
    "norm",
    "movement",
    "views",
    "gather",
    "shape",
    "channels_last",
    "quant",
    "quant_linear",
    "lookup",
)
_LOADED = False


def register(
    op: str, kind: OpKind, *, lower: Lower | None = None, const_inputs: tuple[int, ...] = ()
) -> Callable[[Evaluate], Evaluate]:
    """Decorator on an operator's NumPy evaluation: ``@register("Relu", OpKind.ELEMENTWISE, lower=...)``."""

    def deco(evaluate: Evaluate) -> Evaluate:
        if op in _REGISTRY:
            raise ValueError(f"operator {op} is registered twice")
        _REGISTRY[op] = OpDef(op, kind, evaluate, lower, const_inputs)
        return evaluate

    return deco


def _load() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for family in _FAMILIES:  # a missing family is an ImportError, never a smaller registry
        importlib.import_module(f"{__name__}.{family}")


def supported() -> list[str]:
    """The operator types this compiler takes, sorted."""
    _load()
    return sorted(_REGISTRY)


def opdef(op: str) -> OpDef:
    """The operator's definition; GraphError if it is not supported."""
    _load()
    try:
        return _REGISTRY[op]
    except KeyError:
        raise GraphError(f"operator {op} is not supported") from None
