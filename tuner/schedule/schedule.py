"""The user-facing schedule: TVM-style calls that record a replayable trace.

>>> s = create_schedule(C)
>>> i, j = s[C].op.axis
>>> io, ii = s[C].split(i, factor=32)

Every call appends one step to ``s.trace`` and re-derives the state through
the pure :func:`apply_step`; nothing else is mutated. ``s.to_json()`` and
``Schedule.from_json(outputs, data)`` round-trip the trace.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..te.expr import TupleReduce
from ..te.tensor import ComputeOp, Tensor, TensorError
from .apply import apply_step
from .state import Axis, ScheduleError, Stage, State
from .steps import (
    Annotate,
    Bind,
    CacheRead,
    CacheWrite,
    ComputeAt,
    ComputeInline,
    ComputeRoot,
    Fuse,
    Prefetch,
    Reorder,
    Split,
    Step,
    Tensorize,
    step_from_json,
)

__all__ = ["AxisRef", "Schedule", "StageRef", "create_schedule"]


@dataclass(frozen=True)
class AxisRef:
    """A handle to one loop of one stage, as returned by split, fuse and ``op.axis``."""

    stage: str
    name: str

    def __repr__(self) -> str:
        return f"{self.stage}.{self.name}"


def _axis_name(stage: str, axis: AxisRef | str | Any) -> str:
    if isinstance(axis, AxisRef):
        if axis.stage != stage:
            raise ScheduleError(
                f"axis {axis.name} belongs to stage {axis.stage}, not to stage {stage}"
            )
        return axis.name
    if isinstance(axis, str):
        return axis
    name = getattr(axis, "name", None)
    if isinstance(name, str):
        return name
    raise ScheduleError(f"{axis!r} is not an axis of stage {stage}")


class _OpView:
    def __init__(self, stage: Stage):
        root = [stage.axis(n) for n in stage.root]
        self.axis = tuple(AxisRef(stage.name, a.name) for a in root if a.kind == "spatial")
        self.reduce_axis = tuple(AxisRef(stage.name, a.name) for a in root if a.kind == "reduce")


class StageRef:
    """The schedule calls for one stage; each records one step."""

    def __init__(self, sched: Schedule, name: str):
        self._s = sched
        self.name = name

    @property
    def op(self) -> _OpView:
        return _OpView(self._s.state.stage(self.name))

    @property
    def leaf_axes(self) -> tuple[AxisRef, ...]:
        return tuple(AxisRef(self.name, n) for n in self._s.state.stage(self.name).leaves)

    def _ax(self, axis: AxisRef | str) -> str:
        return _axis_name(self.name, axis)

    def split(
        self, axis: AxisRef | str, factor: int | None = None, nparts: int | None = None
    ) -> tuple[AxisRef, AxisRef]:
        """Split a loop in two. ``for i in range(64)`` with factor 16 becomes::

            for i_o in range(4):
                for i_i in range(16):      # i = i_o * 16 + i_i
        A factor that does not divide the extent adds a bound on the inner loop.
        """
        self._s._add(Split(self.name, self._ax(axis), factor, nparts))
        leaves = self._s.state.stage(self.name).leaves
        pos = leaves.index(self._s.state.stage(self.name).relations[-1].children[0])
        return AxisRef(self.name, leaves[pos]), AxisRef(self.name, leaves[pos + 1])

    def tile(
        self, x: AxisRef | str, y: AxisRef | str, x_factor: int, y_factor: int
    ) -> tuple[AxisRef, AxisRef, AxisRef, AxisRef]:
        """Split two loops and order them ``x_o, y_o, x_i, y_i``::

        for i_o in range(M/xf): for j_o in range(N/yf): for i_i in range(xf): for j_i in range(yf):
        """
        xo, xi = self.split(x, factor=x_factor)
        yo, yi = self.split(y, factor=y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def fuse(self, *axes: AxisRef | str) -> AxisRef:
        """Fuse adjacent loops: ``for i: for j:`` becomes ``for i_j_f in range(I*J)``."""
        self._s._add(Fuse(self.name, tuple(self._ax(a) for a in axes)))
        return AxisRef(self.name, self._s.state.stage(self.name).relations[-1].children[0])

    def reorder(self, *axes: AxisRef | str) -> None:
        """Put these loops in this order, in the slots they occupy now."""
        self._s._add(Reorder(self.name, tuple(self._ax(a) for a in axes)))

    def vectorize(self, axis: AxisRef | str) -> None:
        """Make this innermost loop a SIMD loop (constant extent, no reduction)."""
        self._s._add(Annotate(self.name, self._ax(axis), "vectorize"))

    def tensorize(self, axis: AxisRef | str, intrin: str) -> None:
        """Compute this loop and the reduction loop just inside it as tensor intrinsic ``intrin``.

        See ``tuner.schedule.intrin`` for the intrinsics and the computation each one stands for.
        """
        self._s._add(Tensorize(self.name, self._ax(axis), intrin))

    def unroll(self, axis: AxisRef | str) -> None:
        """Unroll this constant-extent loop fully."""
        self._s._add(Annotate(self.name, self._ax(axis), "unroll"))

    def parallel(self, axis: AxisRef | str) -> None:
        """Run this loop's iterations on all cores (``prange``); never a reduction axis."""
        self._s._add(Annotate(self.name, self._ax(axis), "parallel"))

    def prefetch(
        self, tensor: Tensor, axis: AxisRef | str, spread: AxisRef | str | None = None
    ) -> None:
        """At each iteration of this loop, prefetch what its next iteration reads of
        ``tensor`` into the cache, a share at each iteration of loop ``spread`` (one inside
        ``axis``; by default the loop just inside), on the CPU; a GPU kernel ignores it. A
        parallel loop's threads each run a contiguous run of its iterations, so the next
        one is most often the same thread's.
        Apply it once the loops are split and ordered: a split or fuse of either loop drops
        it."""
        inside = "" if spread is None else self._ax(spread)
        self._s._add(Prefetch(self.name, self._ax(axis), tensor.name, inside))

    def bind(self, axis: AxisRef | str, thread: str) -> None:
        """Map this loop onto a GPU index (``"blockIdx.x"``, ``"threadIdx.x"``, ...)."""
        self._s._add(Bind(self.name, self._ax(axis), thread))

    def compute_at(self, parent: StageRef, axis: AxisRef | str) -> None:
        """Compute this stage inside ``parent``'s loop ``axis``, just the region used there."""
        self._s._add(ComputeAt(self.name, parent.name, _axis_name(parent.name, axis)))

    def compute_inline(self) -> None:
        """Substitute this elementwise stage into its consumers."""
        self._s._add(ComputeInline(self.name))

    def compute_root(self) -> None:
        self._s._add(ComputeRoot(self.name))

    def __repr__(self) -> str:
        return f"Stage({self.name})"


def _collect(outputs: tuple[Tensor, ...]) -> tuple[list[Tensor], list[Tensor]]:
    """Inputs and computes reachable from ``outputs``; computes in dependency order."""
    order: list[Tensor] = []
    inputs: list[Tensor] = []
    seen: dict[str, Tensor] = {}

    def visit(t: Tensor) -> None:
        if t.name in seen:
            if seen[t.name] is not t:
                raise TensorError(f"two different tensors are named {t.name}")
            return
        seen[t.name] = t
        if isinstance(t.op, ComputeOp):
            for dep in t.op.inputs:
                visit(dep)
            order.append(t)
        else:
            inputs.append(t)

    for out in outputs:
        visit(out)
    return inputs, order


def _initial_state(outputs: tuple[Tensor, ...]) -> State:
    inputs, computes = _collect(outputs)
    stages = []
    for t in computes:
        op = t.op
        assert isinstance(op, ComputeOp)
        axes = tuple(Axis(a.name, a.extent, a.kind) for a in (*op.axis, *op.reduce_axis))
        names = tuple(a.name for a in axes)
        leaves = names
        if isinstance(op.body, TupleReduce) and op.body.component is not None:
            # The values of a tuple reduction are combined together at each step: their
            # axis is the innermost loop, inside the reduction's (lowering keeps it there).
            v = op.body.component.name
            leaves = (*(n for n in names if n != v), v)
        stages.append(Stage(t.name, t, "compute", names, axes, leaves, is_output=t in outputs))
    return State(tuple(stages), tuple(inputs))


class Schedule:
    """A schedule of the computation that produces ``outputs``."""

    def __init__(self, outputs: Tensor | list[Tensor] | tuple[Tensor, ...]):
        outs = tuple(outputs) if isinstance(outputs, list | tuple) else (outputs,)
        for t in outs:
            if not isinstance(t.op, ComputeOp):
                raise ScheduleError(f"output {t.name} is a placeholder; schedule a compute")
        self.outputs = outs
        self._initial = _initial_state(outs)
        self.state = self._initial
        self._trace: list[Step] = []

    @property
    def trace(self) -> tuple[Step, ...]:
        return tuple(self._trace)

    def _add(self, step: Step) -> None:
        self.state = apply_step(self.state, step)
        self._trace.append(step)

    def apply(self, step: Step) -> None:
        """Append a step record (as replayed from a trace)."""
        self._add(step)

    def __getitem__(self, tensor: Tensor | str) -> StageRef:
        name = tensor if isinstance(tensor, str) else tensor.name
        if not self.state.has(name):
            raise ScheduleError(f"there is no stage named {name!r}; placeholders have no stage")
        return StageRef(self, name)

    def cache_read(self, tensor: Tensor, scope: str, readers: list[Tensor] | Tensor) -> Tensor:
        """Copy ``tensor`` into a new ``scope`` buffer that ``readers`` read instead.

        Computed at a loop (``s[T_c].compute_at(...)``), it holds just the region
        read inside that loop, packed contiguously; its buffer is laid out in the
        order of its own loops, so splitting and reordering the cache stage
        changes the packing (``[N/16][K][16]`` panels for a matmul).
        """
        rs = readers if isinstance(readers, list | tuple) else [readers]
        self._add(CacheRead(tensor.name, scope, tuple(r.name for r in rs)))
        return self.state.stage(f"{tensor.name}_{scope}").tensor

    def cache_write(self, tensor: Tensor, scope: str) -> Tensor:
        """Accumulate ``tensor`` in a ``scope`` buffer (registers for ``"local"``).

        Computed at a loop of ``tensor``'s own stage, the region of ``tensor``
        updated inside that loop lives in the buffer: it is loaded (or set to the
        reduction's identity) before the loop body and stored back after it.
        """
        self._add(CacheWrite(tensor.name, scope))
        return self.state.stage(f"{tensor.name}_{scope}").tensor

    def to_json(self) -> list[dict[str, Any]]:
        return [step.to_json() for step in self._trace]

    def dumps(self) -> str:
        return json.dumps(self.to_json())

    @classmethod
    def from_json(cls, outputs: Tensor | list[Tensor], data: Any) -> Schedule:
        """Replay a trace on ``outputs``; raises ScheduleError on an illegal or unknown step."""
        if not isinstance(data, list):
            raise ScheduleError("a schedule trace must be a JSON list of steps")
        sched = cls(outputs)
        for item in data:
            try:
                step = step_from_json(item)
            except ValueError as exc:
                raise ScheduleError(str(exc)) from None
            sched._add(step)
        return sched


def create_schedule(outputs: Tensor | list[Tensor]) -> Schedule:
    """A default schedule (every stage at the root, loops in definition order)."""
    return Schedule(outputs)
