"""What model compilation makes of a fused group: kernel specs, and the builder that collects them.

Shared by the template matchers (``templates``) and the extraction that
drives them (``tasks``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..graph.ir import Value
from ..target import Target
from ..task import Task

__all__ = ["Builder", "KernelSpec", "broadcast_kind"]


@dataclass(frozen=True)
class KernelSpec:
    """One kernel of a model: ``task`` computes ``output`` from ``inputs`` (value names).

    ``inputs`` are in the order of the task's placeholders; each names a value
    of the model (an activation or a constant, possibly one made here: a
    transposed weight, a per-channel bias).
    """

    task: Task
    inputs: tuple[str, ...]
    output: str
    #: The ONNX operators it computes, in order ("Conv+Add+Relu").
    ops: str
    #: The names of the model's nodes it computes.
    nodes: tuple[str, ...] = ()


@dataclass
class Builder:
    """The outputs of extraction being built: kernels, new constants and values."""

    target: Target
    values: dict[str, Value]
    #: Whether templates may choose channels-last kernels (off in the shape-generic mode,
    #: whose kernels serve every shape: ``Lowered.from_graph``'s ``layout``).
    layout: bool = True
    specs: list[KernelSpec] = field(default_factory=list)
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    new_values: dict[str, Value] = field(default_factory=dict)

    def const(self, stem: str, data: np.ndarray, dtype: str = "float32") -> str:
        name = f"{stem}__{len(self.consts)}"
        arr = np.ascontiguousarray(data, dtype=dtype)
        self.consts[name] = arr
        self.new_values[name] = Value(name, dtype, tuple(arr.shape), arr)
        return name

    def value(self, name: str) -> Value:
        return self.new_values.get(name) or self.values[name]


def broadcast_kind(shape: tuple[Any, ...], out_shape: tuple[int, ...], channel_axis: int) -> str:
    """How an operand of ``shape`` broadcasts over an output of ``out_shape``.

    ``"s"`` a scalar, ``"c"`` one value per channel (along ``channel_axis``),
    ``"f"`` the full shape, ``""`` anything else.
    """
    if math.prod(int(d) for d in shape) == 1:
        return "s"
    if len(shape) > len(out_shape):
        return ""
    padded = (1,) * (len(out_shape) - len(shape)) + tuple(int(d) for d in shape)
    axis = channel_axis % len(out_shape)
    # Per channel first: a classifier's bias [N] over a batch of one output [1, N] is both.
    if padded[axis] == out_shape[axis] and all(d == 1 for i, d in enumerate(padded) if i != axis):
        return "c"
    if padded == tuple(out_shape):
        return "f"
    return ""
