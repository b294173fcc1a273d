"""A conv2d workload's parameters: shapes, window, layouts of the image and the weight,
groups, bias, activation and epilogue, with the derived extents and the checks.

``conv2d``, ``depthwise_conv2d`` and ``im2col`` all read a :class:`Conv2d`;
``_conv_tiles`` chooses register tiles from one and ``_conv_numpy`` computes
the reference with one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._epilogue import Epilogue
from ._epilogue import parse as parse_epilogue

__all__ = ["Conv2d"]


@dataclass(frozen=True)
class Conv2d:
    """A conv2d workload; depthwise is ``groups == C == K`` with a ``[C, 1, R, S]`` weight."""

    N: int
    C: int
    H: int
    W: int
    K: int
    R: int
    S: int
    stride: int = 1
    pad: int = 0
    dilation: int = 1
    groups: int = 1
    layout: str = "NCHW"
    #: The weight's layout: PyTorch's ``OIHW`` (``W[K, C/groups, R, S]``), ``HWIO``
    #: (``W[R, S, C/groups, K]``, output channels contiguous) or ``blocked``
    #: (``W[ceil(K/block), R, S, C/groups, block]``: a register tile of ``block`` channels
    #: streams one contiguous panel; the channels past K are zeros). A model packs its
    #: constant weight once, at compile time (``pack_weights``), instead of every call.
    weights: str = "OIHW"
    block: int = 0
    bias: bool = False
    activation: str = "none"
    epilogue: str = "none"  # the epilogue DSL (search_spaces._epilogue), after bias and relu
    #: The image's type: float32, or a quantized image (uint8, int8) read as
    #: ``float32(X) - x_zero_point`` (its scale folded into the weight by the caller),
    #: padded with the zero point: a QDQ model's depthwise convolution reads its int8
    #: activations so, without a dequantizing pass before it.
    x_dtype: str = "float32"
    x_zero_point: int = 0

    @classmethod
    def from_args(cls, a: Mapping[str, Any]) -> Conv2d:
        """From parsed operator arguments (depthwise ones have no K: it is C)."""
        fields = {k: a[k] for k in cls.__dataclass_fields__ if k in a}
        if "K" not in a:
            fields.update(K=a["C"], groups=a["C"])
        return cls(**fields)

    @property
    def OH(self) -> int:
        return (self.H + 2 * self.pad - self.dilation * (self.R - 1) - 1) // self.stride + 1

    @property
    def OW(self) -> int:
        return (self.W + 2 * self.pad - self.dilation * (self.S - 1) - 1) // self.stride + 1

    @property
    def Cg(self) -> int:
        """Input channels per group (the reduction's channel extent)."""
        return self.C // self.groups

    @property
    def macs(self) -> int:
        """The convolution's multiply-adds."""
        return self.N * self.K * self.OH * self.OW * self.Cg * self.R * self.S

    @property
    def nhwc(self) -> bool:
        return self.layout == "NHWC"

    @property
    def hwio(self) -> bool:
        return self.weights == "HWIO"

    @property
    def blocked(self) -> bool:
        return self.weights == "blocked"

    @property
    def weight_shape(self) -> tuple[int, ...]:
        """``W``'s shape in its layout."""
        if self.hwio:
            return (self.R, self.S, self.Cg, self.K)
        if self.blocked:
            return (-(-self.K // self.block), self.R, self.S, self.Cg, self.block)
        return (self.K, self.Cg, self.R, self.S)

    def oihw(self, w: np.ndarray) -> np.ndarray:
        """The weight in PyTorch's ``[K, C/groups, R, S]`` layout (a view where it can be)."""
        if self.hwio:
            return w.transpose(3, 2, 0, 1)
        if self.blocked:
            kb, r, s, c, b = w.shape
            return w.transpose(0, 4, 3, 1, 2).reshape(kb * b, c, r, s)[: self.K]
        return w

    def pack_weights(self, w: np.ndarray) -> np.ndarray:
        """A ``[K, C/groups, R, S]`` weight in this workload's layout (a new array)."""
        if self.hwio:
            return np.ascontiguousarray(w.transpose(2, 3, 1, 0))
        if self.blocked:
            kb = -(-self.K // self.block)
            padded = np.zeros((kb * self.block, *w.shape[1:]), w.dtype)
            padded[: self.K] = w
            blocks = padded.reshape(kb, self.block, *w.shape[1:])
            return np.ascontiguousarray(blocks.transpose(0, 3, 4, 2, 1))
        return np.ascontiguousarray(w)

    @property
    def steps(self) -> Epilogue:
        """The parsed ``epilogue`` text."""
        return parse_epilogue(self.epilogue)

    @property
    def has_epilogue(self) -> bool:
        """Whether an output stage ``Y`` follows the sum (a bias, relu or epilogue steps)."""
        return self.bias or self.activation != "none" or self.epilogue != "none"

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return (
            (self.N, self.OH, self.OW, self.K) if self.nhwc else (self.N, self.K, self.OH, self.OW)
        )

    def check(self) -> None:
        """Raise OperatorError (one sentence) for arguments that describe no convolution."""
        from . import OperatorError

        if self.x_dtype == "float32" and self.x_zero_point:
            raise OperatorError("conv2d x_zero_point goes with an integer x_dtype (uint8, int8)")
        if self.x_dtype != "float32":
            info = np.iinfo(self.x_dtype)
            if not info.min <= self.x_zero_point <= info.max:
                raise OperatorError(
                    f"conv2d x_zero_point {self.x_zero_point} is not a {self.x_dtype}"
                )
        if (self.block > 0) != self.blocked:
            raise OperatorError(
                f"conv2d block={self.block}: a block of output channels (> 0) goes with "
                f"weights=blocked, and only with it"
            )
        if self.C % self.groups or self.K % self.groups:
            raise OperatorError(
                f"conv2d groups={self.groups} must divide both C={self.C} and K={self.K}"
            )
        for size, win, name in ((self.H, self.R, "R"), (self.W, self.S, "S")):
            span = self.dilation * (win - 1) + 1
            if span > size + 2 * self.pad:
                raise OperatorError(
                    f"the dilated window {name}={win} (dilation {self.dilation}, span {span}) "
                    f"does not fit the padded input ({size} + 2*{self.pad})"
                )
        self.steps  # noqa: B018 (parsing raises OperatorError for a bad text)
