"""A loop nest as GPU kernels: what each launches, and the legality checks that read a target.

A lowered function runs on a GPU as one kernel per top-level statement (a
root stage's nest, in order: a launch boundary is the only grid-wide barrier).
The loops of a kernel bound to ``blockIdx.*`` / ``threadIdx.*`` are its
launch grid: each index's extent is the largest loop bound to it, and a loop
bound to fewer threads than that is guarded. Buffers allocated at the top
(intermediates between root stages) live in device memory and are passed to
the kernels; those allocated inside a kernel are a block's ``shared`` memory
or each thread's own (``local``) arrays.

``check_gpu`` refuses, before anything is built, what would fail to launch or
race: too many threads or too much shared memory per block, too many blocks
along a dimension of the grid, an index bound
twice on one path (unless the inner loop is a cooperative copy into shared
memory), a bound loop writing memory its iterations do not share, and a
shared buffer whose barriers not every thread of the block reaches.

>>> program = gpu_program(tuner.lower(s, [A, B, C]).body)
>>> program.kernels[0].grid, program.kernels[0].block
((4, 4, 1), (16, 16, 1))
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ..kinds import LoopKind, Scope
from ..schedule.state import ScheduleError
from ..schedule.steps import Bind, CacheRead, ComputeAt, Step
from ..target import Target
from ..te.expr import Const, Expr, Var, walk
from .ir import Alloc, Barrier, Buffer, For, If, Seq, Stmt, Store
from .visitor import walk_stmts

__all__ = ["GpuKernel", "GpuProgram", "check_gpu", "gpu_program"]

_AXES = ("x", "y", "z")


@dataclass(frozen=True)
class GpuKernel:
    """One launch: its statement, grid and block sizes (x, y, z)."""

    body: Stmt
    grid: tuple[int, int, int]
    block: tuple[int, int, int]

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    def dim(self, kind: LoopKind) -> int:
        """The launch's size along ``kind``'s index (1 where nothing is bound to it)."""
        sizes = self.grid if kind.value.startswith("blockIdx.") else self.block
        return sizes[_AXES.index(kind.value[-1])]


@dataclass(frozen=True)
class GpuProgram:
    """The kernels of a lowered function, in launch order, and its device temporaries."""

    temps: tuple[Buffer, ...]
    kernels: tuple[GpuKernel, ...]


def gpu_program(body: Stmt) -> GpuProgram:
    """Split a lowered function's body into device temporaries and kernels."""
    temps: list[Buffer] = []
    while isinstance(body, Alloc):
        temps.append(body.buffer)
        body = body.body
    items = body.body if isinstance(body, Seq) else (body,)
    return GpuProgram(tuple(temps), tuple(_kernel(s) for s in items))


def _kernel(s: Stmt) -> GpuKernel:
    sizes: dict[LoopKind, int] = {}
    for x in walk_stmts(s):
        if isinstance(x, For) and x.kind.is_thread:
            extent = int(x.extent.value) if isinstance(x.extent, Const) else 0
            sizes[x.kind] = max(sizes.get(x.kind, 1), extent)

    def dims(prefix: str) -> tuple[int, int, int]:
        d = tuple(sizes.get(LoopKind(f"{prefix}.{a}"), 1) for a in _AXES)
        return d  # type: ignore[return-value]

    return GpuKernel(s, dims("blockIdx"), dims("threadIdx"))


# -- legality ---------------------------------------------------------------------------------


def _named(trace: Iterable[Step], what: str, pick: object) -> str:
    """The step of ``trace`` that ``pick`` selects, described, or ``what`` when none does."""
    for step in trace:
        if pick(step):  # type: ignore[operator]
            return step.describe()
    return what


def _bind_step(trace: tuple[Step, ...], loop: For) -> str:
    def pick(step: Step) -> bool:
        return (
            isinstance(step, Bind)
            and step.thread == loop.kind
            and loop.var in (step.axis, f"{step.stage}_{step.axis}")
        )

    return _named(trace, f"loop {loop.var} bound to {loop.kind}", pick)


def _buffer_step(trace: tuple[Step, ...], name: str) -> str:
    def pick(step: Step) -> bool:
        if isinstance(step, CacheRead):
            return f"{step.tensor}_{step.scope}" == name
        return isinstance(step, ComputeAt) and step.stage == name

    return _named(trace, f"buffer {name}", pick)


def _fail(step: str, why: str) -> None:
    raise ScheduleError(f"{step}: {why}")


def _free(e: Expr) -> set[str]:
    return {v.name for v in walk(e) if isinstance(v, Var)}


def _writes(s: Stmt) -> set[str]:
    return {x.buffer for x in walk_stmts(s) if isinstance(x, Store)}


class _Checker:
    """One walk over one kernel with what encloses each statement."""

    def __init__(self, kernel: GpuKernel, target: Target, trace: tuple[Step, ...]):
        self.kernel, self.target, self.trace = kernel, target, trace
        self.scopes: dict[str, Scope] = {}  # buffers allocated in the kernel so far
        self.shared_bytes: dict[str, int] = {}

    def run(self) -> None:
        self.check_block()
        self.visit(self.kernel.body, {}, set(), "", set())
        used = sum(self.shared_bytes.values())
        limit = int(self.target.get("max_shared_memory_per_block", 0))
        if used > limit:
            names = ", ".join(f"{n} {b}" for n, b in self.shared_bytes.items())
            biggest = max(self.shared_bytes, key=lambda n: self.shared_bytes[n])
            _fail(
                _buffer_step(self.trace, biggest),
                f"the block's shared buffers take {used} bytes ({names}), more than the "
                f"{limit} bytes per block of target {self.target}",
            )

    def check_block(self) -> None:
        k, t = self.kernel, self.target
        limit = int(t.get("max_threads_per_block", 0))
        loops = [x for x in walk_stmts(k.body) if isinstance(x, For) and x.kind.is_thread]
        for x in loops:
            if not isinstance(x.extent, Const):
                _fail(
                    _bind_step(self.trace, x), "a loop bound to a GPU index needs a constant extent"
                )
        threads = [x for x in loops if x.kind.value.startswith("threadIdx.")]
        if k.threads > limit:
            widest = max(threads, key=lambda x: int(x.extent.value))  # type: ignore[attr-defined]
            shape = " x ".join(f"{a} {n}" for a, n in zip(_AXES, k.block, strict=True) if n > 1)
            _fail(
                _bind_step(self.trace, widest),
                f"the block would have {k.threads} threads ({shape}), more than the "
                f"{limit} per block of target {t}",
            )
        for axis, n in zip(_AXES, k.block, strict=True):
            most = int(t.get(f"max_block_dim_{axis}", limit))
            if n > most:
                loop = next(x for x in threads if x.kind.value.endswith(axis))
                _fail(
                    _bind_step(self.trace, loop),
                    f"{n} threads along {axis}, more than the {most} of target {t}",
                )
        blocks = [x for x in loops if x.kind.value.startswith("blockIdx.")]
        for axis, n in zip(_AXES, k.grid, strict=True):
            most = int(t.get(f"max_grid_dim_{axis}", 0))
            if most and n > most:
                loop = next(x for x in blocks if x.kind.value.endswith(axis))
                _fail(
                    _bind_step(self.trace, loop),
                    f"the grid would have {n} blocks along {axis}, more than the {most} of "
                    f"target {t}; bind the larger loop to blockIdx.x",
                )

    def visit(
        self,
        s: Stmt,
        bound: dict[LoopKind, For],
        divergent: set[str],
        why: str,
        outside: set[str],
    ) -> None:
        """``bound``: enclosing bound loops; ``divergent``: variables that differ between a
        block's threads; ``why``: what makes this statement run on some threads only (empty:
        all reach it); ``outside``: the kernel's buffers allocated around this statement."""
        if isinstance(s, Seq):
            for k, child in enumerate(s.body):
                if isinstance(child, Barrier) and why:
                    near = [*s.body[k + 1 : k + 2], *s.body[max(0, k - 1) : k]]
                    shared = [b for x in near for b in _writes(x) if self.scopes.get(b) == "shared"]
                    step = _buffer_step(self.trace, shared[0]) if shared else "a barrier"
                    _fail(
                        step,
                        f"the barrier of this shared buffer sits where only some of the "
                        f"block's threads go ({why}), so the others would never reach it; "
                        "keep shared copies outside guarded or unevenly bound loops",
                    )
                self.visit(child, bound, divergent, why, outside)
        elif isinstance(s, Barrier):
            if why:
                _fail("a barrier", f"not every thread of the block reaches it ({why})")
        elif isinstance(s, If):
            if _free(s.cond) & divergent and not why:
                why = f"the condition {s.cond!r}"
            self.visit(s.then, bound, divergent, why, outside)
            if s.orelse is not None:
                self.visit(s.orelse, bound, divergent, why, outside)
        elif isinstance(s, Alloc):
            self.scopes[s.buffer.name] = s.buffer.scope
            if s.buffer.scope == Scope.SHARED:
                elements = s.buffer.size
                if not isinstance(elements, int):
                    raise ScheduleError(
                        f"shared buffer {s.buffer.name} has symbolic extent {list(s.buffer.shape)};"
                        " a GPU block's shared memory needs a constant size"
                    )
                size = elements * np.dtype(s.buffer.dtype).itemsize
                self.shared_bytes[s.buffer.name] = max(
                    self.shared_bytes.get(s.buffer.name, 0), size
                )
            self.visit(s.body, bound, divergent, why, outside | {s.buffer.name})
        elif isinstance(s, For):
            self.loop(s, bound, divergent, why, outside)

    def loop(
        self, s: For, bound: dict[LoopKind, For], divergent: set[str], why: str, outside: set[str]
    ) -> None:
        if _free(s.extent) & divergent and not why:
            why = f"loop {s.var} runs a different count on each thread"
        if not s.kind.is_thread:
            var_divergent = divergent | ({s.var} if _free(s.extent) & divergent else set())
            self.visit(s.body, bound, var_divergent, why, outside)
            return
        step = _bind_step(self.trace, s)
        block = s.kind.value.startswith("blockIdx.")
        if block and any(k.value.startswith("threadIdx.") for k in bound):
            _fail(step, "a loop bound to a block index must enclose every thread-bound loop")
        written = _writes(s.body)
        private = {b for b in written & outside if self.scopes.get(b) != Scope.SHARED}
        if block and written & outside:
            _fail(
                step,
                f"its iterations run on different blocks, but buffer {sorted(written & outside)[0]}"
                " that they write is a block's own; compute it inside this loop",
            )
        if private:
            _fail(
                step,
                f"its iterations run on different threads, but buffer {sorted(private)[0]} that "
                "they write is private to each thread; compute it inside this loop or cache it "
                "in shared memory",
            )
        if s.kind in bound:
            coop = written and all(self.scopes.get(b) == Scope.SHARED for b in written & outside)
            if block or not coop or not written <= outside:
                _fail(
                    step,
                    f"{s.kind} is already bound to loop {bound[s.kind].var} around it; an index "
                    "is bound once on a path, except by a cooperative copy into shared memory",
                )
        extent = int(s.extent.value)  # type: ignore[attr-defined]
        if extent < self.kernel.dim(s.kind) and not why and not block:
            why = f"loop {s.var} is bound to {extent} of the block's {self.kernel.dim(s.kind)} threads along {s.kind.value[-1]}"
        inner = divergent | ({s.var} if not block else set())
        self.visit(s.body, {**bound, s.kind: s}, inner, why, outside)


def check_gpu(body: Stmt, target: Target, trace: tuple[Step, ...] = ()) -> None:
    """Refuse a loop nest that ``target``'s blocks cannot run, or would run racily.

    ``trace`` (the schedule's steps) names the step at fault in the message.
    """
    program = gpu_program(body)
    for buf in program.temps:
        if buf.scope == Scope.SHARED:
            _fail(
                _buffer_step(trace, buf.name),
                f"shared buffer {buf.name} is computed at the root, in a kernel of its own, "
                "and a block's shared memory lives for one kernel; compute it at a loop of its "
                "reader inside the block",
            )
    for kernel in program.kernels:
        _Checker(kernel, target, trace).run()
