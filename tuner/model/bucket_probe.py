"""Deciding by running the model padded: for the nodes the rules of ``bucket`` cannot judge.

``tuner.model.bucket`` proves padding sound operator by operator. Some nodes it
cannot judge from their kind alone: a Gather that reads a padded tensor at
indices the model computes from the padded length (``transformers`` builds its
attention mask this way: the ``[batch, seq]`` mask flattened, read at
``b * seq + j``), arithmetic on a Shape that turns out to read an axis padding
does not change (a head size). :class:`Probe` runs the model twice with the
interpreter, on one random input at the base probe shape and on the same input
zero-padded past it (masks as the bucket runtime adds them), and a node passes
when its outputs agree on the real positions. The real run and the padded
import are made once; the padded run again only when a new softmax mask is found.

It is a test on one input, not a proof: a node whose effect on real positions
depends on the data in a way one random input does not show would pass it. The
operators it judges move values or compute on integers (``Probe.judges``): index and
shape arithmetic, whose effect on positions does not depend on the values moved.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..graph.ir import Graph, GraphError, Node

__all__ = ["Probe"]

#: How far past the base probe shape the padded run goes.
PAST = 3
#: Operators that move or select values without computing on them.
_MOVES = frozenset(
    ("Gather", "GatherElements", "GatherND", "Slice", "Expand", "Tile", "Reshape", "Flatten",
     "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "Where", "Pad", "Identity")
)  # fmt: skip


class Probe:
    """``probe(node, masks)``: whether ``node``'s outputs on real positions survive padding."""

    def __init__(
        self,
        source: Any,
        graph: Graph,
        base: Mapping[str, int],
        limits: Mapping[str, tuple[int, int | None]],
        shapes_at: Callable[[Mapping[str, int]], dict[str, tuple[int, ...]]],
        follows: Mapping[str, Mapping[str, Mapping[int, bool]]],
    ):
        self.source, self.follows, self.shapes_at = source, follows, shapes_at
        # Real values PAST below the padded ones, both within each symbol's bounds: at the
        # analysis's base shape where there is room above it, else below the bound (a batch
        # bounded by 4 is probed at 1, padded to 4).
        self.base: dict[str, int] = {}
        self.padded: dict[str, int] = {}
        for n, b in base.items():
            lo, hi = limits[n]
            top = b + PAST if hi is None else min(b + PAST, hi)
            self.padded[n] = top
            self.base[n] = b if top > b else max(lo, top - PAST)
        self.graph: Graph | None = graph if self.base == dict(base) else None
        self.types = {name: v.dtype for name, v in graph.values.items()}
        self._padded_graph: Graph | None = None
        self._runs: dict[tuple[Any, ...], dict[str, np.ndarray]] = {}  # padded, by masks
        self._real: tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | None = None

    def __call__(self, node: Node, masks: Sequence[tuple[str, str, int]]) -> bool:
        if self.padded == self.base or not self.judges(node):
            return False
        try:
            real, padded = self._run(tuple(masks))
        except (GraphError, ValueError, IndexError, KeyError, FloatingPointError):
            return False  # a run that fails decides nothing: the refusal stands
        return all(self._agree(o, real, padded) for o in node.outputs if o)

    def judges(self, node: Node) -> bool:
        """Whether ``node`` is one the probe may pass: it moves or selects values (``_MOVES``)
        or computes on integers and flags only (shape and index arithmetic). Arithmetic on
        data (a convolution, a max pool) keeps the rules' verdict: one random input could
        miss the positions where padding changes it."""
        if node.op in _MOVES:
            return True
        return all(np.dtype(self.types[i]).kind in "iub" for i in node.inputs if i)

    def _run(self, masks: tuple[Any, ...]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """The real run (made once) and the padded run with ``masks`` (once per set)."""
        from ..graph.interpret import evaluate_all
        from ..graph.onnx_import import from_onnx
        from .bucket import Padding, masked

        if self._real is None:
            if self.graph is None:
                self.graph = from_onnx(self.source, self.shapes_at(self.base))
            rng = np.random.default_rng(0)
            feeds = {i: _random(self.graph.value(i), rng) for i in self.graph.inputs}
            with np.errstate(all="ignore"):
                self._real = feeds, evaluate_all(self.graph, feeds)
            self._padded_graph = from_onnx(self.source, self.shapes_at(self.padded))
        feeds, real = self._real
        if masks not in self._runs:
            assert self._padded_graph is not None
            big, mask_inputs = masked(self._padded_graph, Padding(masks, ()))
            wide = {
                i: _zero_padded(a, tuple(int(d) for d in big.value(i).shape))
                for i, a in feeds.items()
            }
            for m in mask_inputs:
                wide[m.name] = m.array(self.base[m.symbol], self.padded[m.symbol])
            with np.errstate(all="ignore"):
                self._runs[masks] = evaluate_all(big, wide)
        return real, self._runs[masks]

    def _agree(
        self, name: str, real: Mapping[str, np.ndarray], padded: Mapping[str, np.ndarray]
    ) -> bool:
        a, b = np.asarray(real[name]), np.asarray(padded[name])
        cut = [slice(None)] * b.ndim
        for axes in self.follows.get(name, {}).values():
            for axis, same in axes.items():
                if not same or axis >= b.ndim:
                    return False  # an axis made of a symbol and more: no real part to cut
                cut[axis] = slice(0, a.shape[axis])
        b = b[tuple(cut)]
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype.kind == "f":
            return bool(np.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True))
        return bool(np.array_equal(a, b))


def _random(v: Any, rng: np.random.Generator) -> np.ndarray:
    """An input for the probe: normal floats; zeros and ones for integers (any table has
    rows 0 and 1, and a mask of ones and zeros is a mask)."""
    shape = tuple(int(d) for d in v.shape)
    dtype = np.dtype(v.dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, 2, shape).astype(dtype)


def _zero_padded(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if a.shape == shape:
        return a
    if len(shape) != a.ndim or any(s < n for s, n in zip(shape, a.shape, strict=True)):
        raise ValueError(f"cannot pad {a.shape} to {shape}")
    big = np.zeros(shape, a.dtype)
    big[tuple(slice(0, n) for n in a.shape)] = a
    return big
