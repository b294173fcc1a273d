"""Targets: a kind of device plus its capabilities, as data.

Legality checks and search read capabilities (``target.cap("vector_lanes")``);
no code branches on a target's name. The fingerprint identifies the hardware so
that records measured on one machine are not mistaken for another's.

>>> t = Target.from_name("cpu")
>>> t.kind
'cpu'
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .workload import dumps_canonical

__all__ = ["Target", "TargetError", "register_target", "target_kinds"]

CapValue = int | float | str | bool


class TargetError(ValueError):
    """An unknown target, or one that is not available on this machine."""


@dataclass(frozen=True)
class Target:
    """A device kind with its capabilities and a hardware fingerprint."""

    kind: str
    capabilities: tuple[tuple[str, CapValue], ...]
    fingerprint: str

    def cap(self, name: str) -> CapValue:
        for k, v in self.capabilities:
            if k == name:
                return v
        raise KeyError(f"target {self.kind!r} has no capability {name!r}")

    def get(self, name: str, default: CapValue) -> CapValue:
        try:
            return self.cap(name)
        except KeyError:
            return default

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "capabilities": dict(self.capabilities),
            "fingerprint": self.fingerprint,
        }

    @classmethod
    def from_json(cls, data: Any) -> Target:
        if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
            raise TargetError("target must be an object with a string 'kind'")
        caps = data.get("capabilities", {})
        if not isinstance(caps, dict):
            raise TargetError("target 'capabilities' must be an object")
        return cls(data["kind"], tuple(sorted(caps.items())), str(data.get("fingerprint", "")))

    @classmethod
    def from_name(cls, name: str, **options: Any) -> Target:
        """Detect the target ``name`` ("cpu", "cuda") on this machine."""
        try:
            factory = _REGISTRY[name]
        except KeyError:
            known = ", ".join(sorted(_REGISTRY))
            raise TargetError(f"unknown target {name!r}; known targets: {known}") from None
        return factory(**options)

    def __str__(self) -> str:
        return f"{self.kind}[{self.fingerprint[:8]}]"


_REGISTRY: dict[str, Callable[..., Target]] = {}


def register_target(name: str) -> Callable[[Callable[..., Target]], Callable[..., Target]]:
    """Register a target factory under ``name`` (a plugin point)."""

    def deco(fn: Callable[..., Target]) -> Callable[..., Target]:
        _REGISTRY[name] = fn
        return fn

    return deco


def target_kinds() -> list[str]:
    return sorted(_REGISTRY)


def _fingerprint(caps: dict[str, CapValue]) -> str:
    return hashlib.sha256(dumps_canonical(caps).encode()).hexdigest()[:16]


@functools.cache
def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    for line in text.splitlines():
        if ":" in line:
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    return info


@functools.cache
def _cache_size(level: int) -> int:
    """Bytes of the per-core data/unified cache at ``level`` (0 when unknown)."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(base.glob("index*")) if base.exists() else []:
        try:
            if int((index / "level").read_text()) != level:
                continue
            if (index / "type").read_text().strip() == "Instruction":
                continue
            size = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        if size.endswith("K"):
            return int(size[:-1]) * 1024
        if size.endswith("M"):
            return int(size[:-1]) * 1024 * 1024
        return int(size)
    return 0


@register_target("cpu")
def cpu_target(num_threads: int | None = None) -> Target:
    """The host CPU: cores, SIMD width in float32 lanes, cache sizes."""
    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    if "avx512f" in flags:
        lanes = 16
    elif "avx2" in flags or "avx" in flags:
        lanes = 8
    else:
        lanes = 4
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    caps: dict[str, CapValue] = {
        "model": info.get("model name", platform.processor() or platform.machine()),
        "arch": platform.machine(),
        "cores": int(cores or 1),
        "vector_lanes": lanes,
        "l1d_bytes": _cache_size(1),
        "l2_bytes": _cache_size(2),
        "l3_bytes": _cache_size(3),
    }
    fingerprint = _fingerprint(caps)
    caps["threads"] = int(num_threads or caps["cores"])
    return Target("cpu", tuple(sorted(caps.items())), fingerprint)
