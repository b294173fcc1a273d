"""``build``: a schedule into a callable kernel for a target, through that target's backend."""

from __future__ import annotations

from ..lower.lower import lower
from ..schedule.schedule import Schedule
from ..target import Target
from ..te.tensor import Tensor
from .backend import BuildOptions, Kernel, get_backend

__all__ = ["build"]


def build(
    sched: Schedule,
    args: list[Tensor],
    target: str | Target = "cpu",
    name: str = "kernel",
    options: BuildOptions | None = None,
    out_pitch: int = 0,
) -> Kernel:
    """Compile ``sched`` into a kernel taking ``args`` (inputs then outputs).

    ``out_pitch``: the output's rows lie that many elements apart
    (``LoweredFunc.with_output_pitch``); 0 is its own last extent.

    Lowering checks the schedule against the target's capabilities; the
    target's backend (``tuner.codegen.get_backend``) compiles the loop nest.

    >>> f = build(s, [A, B, C], target="cpu")
    >>> f(a, b, c)          # writes c (c may not share memory with a or b)
    >>> print(f.source)     # the generated Python
    """
    tgt = Target.from_name(target) if isinstance(target, str) else target
    backend = get_backend(tgt)
    func = lower(sched, args, name, target=tgt)
    if out_pitch:
        func = func.with_output_pitch(out_pitch)
    return backend.compile(func, tgt, options or BuildOptions())
