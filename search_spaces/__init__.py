"""Operator templates, found by name: definition, NumPy reference, knobs and schedule.

Every template receives the target it is tuned and built for: knob ranges and
legality read its capabilities (vector lanes per dtype, vector registers, cache
sizes), never its name.

>>> op = get_operator("matmul")
>>> args = op.parse_args({"M": "512", "N": "512", "K": "512"})
>>> target = Target.from_name("cpu")
>>> space = op.space(args, target)
>>> sched, tensors = op.schedule(op.default_config(args, target), args, target)
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tuner.schedule import Schedule
from tuner.space import ConfigSpace
from tuner.target import Target
from tuner.te import Tensor
from tuner.workload import Workload

if TYPE_CHECKING:
    from records import Record

__all__ = [
    "Operator",
    "OperatorError",
    "Param",
    "canonical_records",
    "get_operator",
    "is_builtin",
    "operators",
    "register_operator",
]


class OperatorError(ValueError):
    """An unknown operator, or arguments it does not accept."""


@dataclass(frozen=True)
class Param:
    name: str
    kind: type  # int, str or bool
    default: Any = None
    choices: tuple[Any, ...] = ()
    doc: str = ""
    minimum: int = 1  # for int parameters: the smallest value accepted (0 for a padding)
    #: For a dimension (int) parameter: the value its inputs may be padded with along it
    #: without changing the output's valid part (0.0 for a matmul's K, -inf for a softmax's
    #: columns), which lets a module serve it in buckets; None: no such value.
    pad: float | None = None


@dataclass(frozen=True)
class Operator:
    """One tunable operator; every callable takes the parsed argument mapping.

    ``space(args, target)``, ``schedule(config, args, target)`` and
    ``default_config(args, target)`` also take the :class:`Target`: a space
    may differ between targets (a register tile that fits 32 vector registers
    does not fit 16), and so may a choice the config leaves to the template
    (the vector width of conv2d's epilogue).
    """

    name: str
    doc: str
    params: tuple[Param, ...]
    space: Callable[[Mapping[str, Any], Target], ConfigSpace]
    schedule: Callable[
        [Mapping[str, Any], Mapping[str, Any], Target], tuple[Schedule, list[Tensor]]
    ]
    default_config: Callable[[Mapping[str, Any], Target], dict[str, Any]]
    reference: Callable[..., np.ndarray]  # reference(*inputs, **args) -> the output
    flops: Callable[[Mapping[str, Any]], float]
    #: Compulsory memory traffic in bytes (inputs read once, outputs written once),
    #: for reporting memory-bound operators in GB/s; None where FLOPs tell more.
    bytes_moved: Callable[[Mapping[str, Any]], float] | None = None
    #: Cross-argument checks (groups divide channels, a window fits the padded
    #: input, ...): raise OperatorError with one sentence; None when there are none.
    check: Callable[[Mapping[str, Any]], None] | None = None

    def parse_args(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Check and convert ``NAME=VALUE`` arguments (strings from a command line or typed)."""
        known = {p.name: p for p in self.params}
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise OperatorError(
                f"{self.name} has no argument {unknown[0]!r}; its arguments are {', '.join(known)}"
            )
        out: dict[str, Any] = {}
        for p in self.params:
            if p.name not in raw:
                if p.default is None:
                    raise OperatorError(f"{self.name} needs argument {p.name}")
                out[p.name] = p.default
                continue
            out[p.name] = _convert(self.name, p, raw[p.name])
        if self.check is not None:
            self.check(out)
        return out

    def make_inputs(
        self, args: Mapping[str, Any], seed: int = 0, target: Target | None = None
    ) -> list[np.ndarray]:
        """Random inputs for the operator's placeholders, in argument order.

        The inputs do not depend on the target; ``target`` (the host CPU when
        None) only names the one whose default schedule lists the placeholders.
        """
        tgt = target if target is not None else Target.from_name("cpu")
        _, tensors = self.schedule(self.default_config(args, tgt), args, tgt)
        rng = np.random.default_rng(seed)
        arrays = []
        for t in tensors[:-1]:
            if t.dtype in ("int8", "uint8"):
                info = np.iinfo(t.dtype)
                arrays.append(rng.integers(info.min, info.max + 1, t.shape_ints).astype(t.dtype))
            else:
                arrays.append((rng.random(t.shape_ints) * 2 - 1).astype(t.dtype))
        return arrays


def _convert(op: str, p: Param, value: Any) -> Any:
    try:
        if p.kind is bool:
            if isinstance(value, str):
                if value.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(value)
                value = value.lower() in ("true", "1")
            converted: Any = bool(value)
        elif p.kind is int:
            if isinstance(value, bool):
                raise ValueError(value)
            converted = int(value)
            if converted < p.minimum:
                raise ValueError(value)
        else:
            converted = str(value)
    except (TypeError, ValueError):
        raise OperatorError(
            f"{op} argument {p.name} must be {_kind_words(p)}, got {value!r}"
        ) from None
    if p.choices and converted not in p.choices:
        raise OperatorError(
            f"{op} argument {p.name} must be one of {', '.join(map(str, p.choices))}, got {value!r}"
        )
    return converted


def _kind_words(p: Param) -> str:
    if p.kind is int:
        return {1: "a positive integer", 0: "a non-negative integer"}.get(
            p.minimum, f"an integer of at least {p.minimum}"
        )
    return f"a {p.kind.__name__}"


_REGISTRY: dict[str, Operator] = {}
#: Operators registered by this package's own modules (not by a plugin): ``is_builtin``.
_BUILTIN: set[str] = set()


def register_operator(op: Operator) -> Operator:
    """Make ``op`` known by name. Its reference is called as ``reference(*inputs, **args)``
    (the parsed arguments as keywords); one that needs no arguments may leave them out.
    """
    caller = str(sys._getframe(1).f_globals.get("__name__", ""))
    if caller == __name__ or caller.startswith(f"{__name__}."):
        _BUILTIN.add(op.name)
    else:  # a plugin's, or a plugin's over a built-in name
        _BUILTIN.discard(op.name)
    if not any(
        p.kind is inspect.Parameter.VAR_KEYWORD
        for p in inspect.signature(op.reference).parameters.values()
    ):
        plain = op.reference
        op = dataclasses.replace(op, reference=lambda *inputs, **_: plain(*inputs))
    _REGISTRY[op.name] = op
    return op


def is_builtin(name: str) -> bool:
    """Whether operator ``name`` is this package's own, registered by its modules: its code
    is what the kernel index's fingerprint covers (``tuner.codegen.index``), where a
    plugin's compute is not."""
    _load_builtin()
    return name in _BUILTIN


def get_operator(name: str) -> Operator:
    _load_builtin()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise OperatorError(
            f"unknown operator {name!r}; known operators: {', '.join(sorted(_REGISTRY))}"
        ) from None


def operators() -> list[Operator]:
    _load_builtin()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


_LOADED = False


def canonical_records(records: Iterable[Record]) -> list[Record]:
    """Records as the operators read them now: arguments and knobs completed.

    A log written before an operator gained an argument (matmul's ``trans_b``)
    names its workloads without it, and one written before its space gained
    a knob (matmul's ``pack_a``) has configs without it. With the argument's
    default and the knob's ``absent`` value filled in, those records match
    the workloads and configs they measured. Each record's knobs are those of
    the space on the record's own target. Unknown operators and arguments
    that no longer parse are left as they are.
    """
    out = []
    cache: dict[tuple[str, Target], tuple[Workload, ConfigSpace | None]] = {}
    for r in records:
        key = (r.workload.key, r.target)
        if key not in cache:
            cache[key] = (r.workload, None)
            try:
                op = get_operator(r.workload.op)
                parsed = op.parse_args(r.workload.as_dict())
                own = op.space(parsed, r.target)
                cache[key] = (Workload.make(r.workload.op, **parsed), own)
            except (OperatorError, ValueError):
                pass
        w, space = cache[key]
        config = space.complete(r.config) if space is not None else r.config
        if config != r.config:
            r = r.with_config(config)
        if w != r.workload:
            r = dataclasses.replace(r, workload=w)
        out.append(r)
    return out


def _load_builtin() -> None:
    """Import every public module of this package once; each registers its operators."""
    global _LOADED
    if _LOADED:
        return
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")
    _LOADED = True
