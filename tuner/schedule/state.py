"""The state a trace builds: its stages, their loops, how they are split and attached.

``tuner.schedule.apply.apply_step`` turns one state and one step into the
next; the records here are frozen, so every state of a trace stays valid.
An illegal step raises :class:`ScheduleError` naming the step and the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..kinds import AttachKind, LoopKind, Scope
from ..te.expr import Expr
from ..te.tensor import ComputeOp, Tensor

__all__ = [
    "MAX_UNROLL",
    "Attach",
    "Axis",
    "Relation",
    "ScheduleError",
    "Stage",
    "State",
    "check",
]

#: Unrolling more than this many iterations only bloats compile time.
MAX_UNROLL = 256


class ScheduleError(ValueError):
    """An illegal schedule; the message names the step and the reason."""


class _Illegal(Exception):
    pass


def check(cond: bool, why: str) -> None:
    if not cond:
        raise _Illegal(why)


@dataclass(frozen=True)
class Axis:
    name: str
    extent: Expr
    kind: str  # "spatial" or "reduce"
    annotation: LoopKind = LoopKind.SERIAL
    thread: LoopKind | None = None
    intrin: str = ""  # a tensor intrinsic computing this loop and the one inside it
    #: (tensor, loop) pairs: each iteration prefetches what the next one reads of the tensor,
    #: a share at each iteration of the loop ("": the one just inside)
    prefetch: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "annotation", LoopKind(self.annotation))
        if self.thread is not None:
            object.__setattr__(self, "thread", LoopKind(self.thread))


@dataclass(frozen=True)
class Relation:
    """``split``: parents=(x,), children=(outer, inner); ``fuse``: parents=(outer, inner)."""

    kind: str
    parents: tuple[str, ...]
    children: tuple[str, ...]
    factor: Expr  # inner extent


@dataclass(frozen=True)
class Attach:
    """Where a stage is computed: at the root, inlined, or at loop ``axis`` of stage ``parent``."""

    kind: AttachKind = AttachKind.ROOT
    parent: str = ""
    axis: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", AttachKind(self.kind))


@dataclass(frozen=True)
class Stage:
    """One loop nest: the tensor it writes and how its loops are arranged."""

    name: str
    tensor: Tensor
    origin: str  # "compute", "cache_read" or "cache_write"
    root: tuple[str, ...]
    axes: tuple[Axis, ...]
    leaves: tuple[str, ...]
    relations: tuple[Relation, ...] = ()
    attach: Attach = Attach()
    scope: Scope = Scope.GLOBAL
    source: str = ""  # the cached tensor, for cache stages
    is_output: bool = False

    def axis(self, name: str) -> Axis:
        for a in self.axes:
            if a.name == name:
                return a
        raise KeyError(name)

    @property
    def op(self) -> ComputeOp:
        assert isinstance(self.tensor.op, ComputeOp)
        return self.tensor.op

    def reads(self) -> set[str]:
        return {t.name for t in self.op.inputs}

    def _set_axis(self, axis: Axis) -> Stage:
        return replace(self, axes=tuple(axis if a.name == axis.name else a for a in self.axes))


@dataclass(frozen=True)
class State:
    stages: tuple[Stage, ...]  # producers before consumers
    inputs: tuple[Tensor, ...]

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise _Illegal(f"there is no stage named {name!r}")

    def has(self, name: str) -> bool:
        return any(s.name == name for s in self.stages)

    def with_stage(self, stage: Stage) -> State:
        return replace(
            self, stages=tuple(stage if s.name == stage.name else s for s in self.stages)
        )

    def consumers(self, name: str) -> list[Stage]:
        return [s for s in self.stages if name in s.reads() and s.origin != "cache_write"]
