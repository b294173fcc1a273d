"""Schedule steps: a closed vocabulary of small frozen records.

A schedule *is* its trace of steps. The trace is JSON-serialisable and
replaying it on the same expression gives the identical loop nest, so a
schedule can be stored in a tuning log and rebuilt years later. Reading a
trace never executes anything: each JSON object is matched against this
vocabulary field by field.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from ..kinds import ANNOTATIONS, SCOPES, THREAD_TAGS

__all__ = [
    "ANNOTATIONS",
    "SCOPES",
    "STEP_TYPES",
    "THREAD_TAGS",
    "Annotate",
    "Bind",
    "CacheRead",
    "CacheWrite",
    "ComputeAt",
    "ComputeInline",
    "ComputeRoot",
    "Fuse",
    "Prefetch",
    "Reorder",
    "Split",
    "Step",
    "Tensorize",
    "step_from_json",
]


@dataclass(frozen=True)
class Step:
    """Base of all steps; ``kind`` is the name used in JSON."""

    kind: ClassVar[str] = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"step": self.kind}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    def describe(self) -> str:
        args = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))
        return f"{self.kind}({args})"


@dataclass(frozen=True)
class Split(Step):
    """Split ``axis`` into an outer and an inner loop (by ``factor`` or ``nparts``)."""

    kind: ClassVar[str] = "split"
    stage: str
    axis: str
    factor: int | None = None
    nparts: int | None = None


@dataclass(frozen=True)
class Fuse(Step):
    """Fuse adjacent loops into one (outermost first)."""

    kind: ClassVar[str] = "fuse"
    stage: str
    axes: tuple[str, ...]


@dataclass(frozen=True)
class Reorder(Step):
    """Put the named loops in this order, keeping the others where they are."""

    kind: ClassVar[str] = "reorder"
    stage: str
    axes: tuple[str, ...]


@dataclass(frozen=True)
class Annotate(Step):
    """Mark a loop parallel, vectorized, unrolled or serial."""

    kind: ClassVar[str] = "annotate"
    stage: str
    axis: str
    annotation: str


@dataclass(frozen=True)
class Prefetch(Step):
    """At each iteration of loop ``axis``, prefetch into the cache what the next one reads of
    ``tensor``, a share at each iteration of loop ``spread`` (one inside ``axis``; "": the
    loop just inside)."""

    kind: ClassVar[str] = "prefetch"
    stage: str
    axis: str
    tensor: str
    spread: str = ""


@dataclass(frozen=True)
class Bind(Step):
    """Bind a loop to a GPU block or thread index."""

    kind: ClassVar[str] = "bind"
    stage: str
    axis: str
    thread: str


@dataclass(frozen=True)
class Tensorize(Step):
    """Compute a loop and the reduction loop inside it as one tensor intrinsic."""

    kind: ClassVar[str] = "tensorize"
    stage: str
    axis: str
    intrin: str


@dataclass(frozen=True)
class ComputeAt(Step):
    """Compute ``stage`` inside loop ``axis`` of ``parent``, just the region needed there."""

    kind: ClassVar[str] = "compute_at"
    stage: str
    parent: str
    axis: str


@dataclass(frozen=True)
class ComputeInline(Step):
    """Substitute the stage's expression into its consumers; it gets no loops or buffer."""

    kind: ClassVar[str] = "compute_inline"
    stage: str


@dataclass(frozen=True)
class ComputeRoot(Step):
    """Undo compute_at / compute_inline: compute the whole stage at the top level."""

    kind: ClassVar[str] = "compute_root"
    stage: str


@dataclass(frozen=True)
class CacheRead(Step):
    """Copy ``tensor`` into a new buffer in ``scope`` that ``readers`` read instead."""

    kind: ClassVar[str] = "cache_read"
    tensor: str
    scope: str
    readers: tuple[str, ...]


@dataclass(frozen=True)
class CacheWrite(Step):
    """Accumulate ``tensor`` in a buffer in ``scope`` (registers for "local")."""

    kind: ClassVar[str] = "cache_write"
    tensor: str
    scope: str


STEP_TYPES: dict[str, type[Step]] = {
    cls.kind: cls
    for cls in (
        Split,
        Fuse,
        Reorder,
        Annotate,
        Prefetch,
        Bind,
        Tensorize,
        ComputeAt,
        ComputeInline,
        ComputeRoot,
        CacheRead,
        CacheWrite,
    )
}


def step_from_json(data: Any) -> Step:
    """Rebuild a step from its JSON object; raises ValueError on anything unexpected."""
    if not isinstance(data, dict) or data.get("step") not in STEP_TYPES:
        kind = data.get("step") if isinstance(data, dict) else data
        raise ValueError(f"unknown schedule step {kind!r}")
    cls = STEP_TYPES[data["step"]]
    kwargs: dict[str, Any] = {}
    for f in fields(cls):
        value = data.get(f.name)
        if f.name not in data and f.default is not None:
            raise ValueError(f"schedule step {cls.kind!r} is missing field {f.name!r}")
        kwargs[f.name] = _check_field(cls.kind, f.name, str(f.type), value)
    extra = set(data) - {f.name for f in fields(cls)} - {"step"}
    if extra:
        raise ValueError(f"schedule step {cls.kind!r} has unknown fields {sorted(extra)}")
    return cls(**kwargs)


def _check_field(kind: str, name: str, annotation: str, value: Any) -> Any:
    """Accept ``value`` only if it has the field's declared JSON shape."""
    if annotation.startswith("tuple"):
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
    elif annotation.startswith("int"):
        if value is None or (isinstance(value, int) and not isinstance(value, bool)):
            return value
    elif isinstance(value, str):
        return value
    raise ValueError(f"schedule step {kind!r} field {name!r} has a bad value {value!r}")
