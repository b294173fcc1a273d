"""The closed vocabularies shared by the schedule language, the IR and the backends.

Each is a ``StrEnum``: a member *is* its string (``LoopKind.PARALLEL == "parallel"``),
so JSON traces, logs and printouts stay readable, and code that reads them
from data gets a member with ``LoopKind(text)`` (a ``ValueError`` otherwise).

>>> LoopKind("threadIdx.x").is_thread
True
>>> str(Scope.SHARED)
'shared'
"""

from __future__ import annotations

import enum

__all__ = ["ANNOTATIONS", "SCOPES", "THREAD_TAGS", "AttachKind", "LoopKind", "Scope"]


class LoopKind(enum.StrEnum):
    """How a loop runs: a plain annotation, or bound to a GPU block or thread index."""

    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZE = "vectorize"
    UNROLL = "unroll"
    BLOCK_X = "blockIdx.x"
    BLOCK_Y = "blockIdx.y"
    BLOCK_Z = "blockIdx.z"
    THREAD_X = "threadIdx.x"
    THREAD_Y = "threadIdx.y"
    THREAD_Z = "threadIdx.z"

    @property
    def is_thread(self) -> bool:
        """Whether the loop is bound to a GPU index (its iterations are threads or blocks)."""
        return self.value.startswith(("blockIdx.", "threadIdx."))


class Scope(enum.StrEnum):
    """Where a buffer lives: device memory, a GPU block's shared memory, or registers/stack."""

    GLOBAL = "global"
    LOCAL = "local"
    SHARED = "shared"


class AttachKind(enum.StrEnum):
    """Where a stage is computed: at the top level, inside a loop of another stage, or inlined."""

    ROOT = "root"
    AT = "at"
    INLINE = "inline"


# The names, as plain strings for messages (``x in ANNOTATIONS`` holds for members too).
#: Loop kinds a schedule's ``annotate`` step may set.
ANNOTATIONS: tuple[str, ...] = tuple(k.value for k in LoopKind if not k.is_thread)
#: Loop kinds a schedule's ``bind`` step may set.
THREAD_TAGS: tuple[str, ...] = tuple(k.value for k in LoopKind if k.is_thread)
SCOPES: tuple[str, ...] = tuple(s.value for s in Scope)
