"""Workload keys: an operator name plus its arguments, canonical and stable.

A workload identifies *what* is tuned, independent of *how*: two runs on two
machines that tune ``matmul`` with the same arguments share one key, so their
records can be compared, merged and reused.

>>> w = Workload.make("matmul", N=512, M=512, K=512, dtype="float32")
>>> w.key
'matmul(K=512,M=512,N=512,dtype=float32)'
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

ArgValue = int | float | str | bool | tuple[int, ...]

__all__ = ["ArgValue", "Workload", "WorkloadError"]


class WorkloadError(ValueError):
    """A workload description that cannot be read (bad JSON shape or types)."""


def _canonical(value: Any, where: str) -> ArgValue:
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        return tuple(value)
    raise WorkloadError(f"workload argument {where} has unsupported value {value!r}")


def _render(value: ArgValue) -> str:
    if isinstance(value, tuple):
        return "[" + ",".join(str(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class Workload:
    """An operator and its arguments, sorted by name so equal workloads compare equal."""

    op: str
    args: tuple[tuple[str, ArgValue], ...]

    @classmethod
    def make(cls, op: str, **args: Any) -> Workload:
        items = tuple(sorted((k, _canonical(v, f"{op}.{k}")) for k, v in args.items()))
        return cls(op, items)

    @property
    def key(self) -> str:
        """Canonical text form, used as the workload's identity in logs."""
        inner = ",".join(f"{k}={_render(v)}" for k, v in self.args)
        return f"{self.op}({inner})"

    def arg(self, name: str) -> ArgValue:
        for k, v in self.args:
            if k == name:
                return v
        raise KeyError(name)

    def as_dict(self) -> dict[str, ArgValue]:
        return dict(self.args)

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "args": {k: list(v) if isinstance(v, tuple) else v for k, v in self.args},
        }

    @classmethod
    def from_json(cls, data: Any) -> Workload:
        if not isinstance(data, dict) or not isinstance(data.get("op"), str):
            raise WorkloadError("workload must be an object with a string 'op'")
        args = data.get("args", {})
        if not isinstance(args, dict):
            raise WorkloadError("workload 'args' must be an object")
        return cls.make(data["op"], **args)

    def __str__(self) -> str:
        return self.key


def dumps_canonical(data: Any) -> str:
    """JSON with sorted keys and no spaces: stable text for hashing."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"))
