"""Targets: a kind of device plus its capabilities, as data.

Legality checks and search read capabilities, never a target's name::

    target.lanes("float32")      # SIMD lanes of one vector register for a dtype
    target.vector_registers      # architectural vector registers (32 with AVX-512)
    target.l1d_bytes, target.l2_bytes

The fingerprint identifies the hardware, so that records measured on one
machine are not mistaken for another's; the key adds how the target is run
(its thread count), so a 1-thread and a 2-thread timing of one config are told
apart while both stay records of the same machine.

>>> t = Target.from_name("cpu", num_threads=2)
>>> t.kind, t.threads
('cpu', 2)
>>> t.key == f"cpu:{t.fingerprint}:threads=2"
True
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import os
import platform
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .workload import dumps_canonical

__all__ = ["Target", "TargetError", "register_target", "target_kinds"]

CapValue = int | float | str | bool


class TargetError(ValueError):
    """An unknown target, or one that is not available on this machine."""


#: Bytes of the accumulator of each element type that is not 32 bits wide there:
#: int8 (and the other narrow integers) accumulate in int32, as many lanes as float32.
_ACCUMULATOR_BYTES = {"float64": 8, "int64": 8, "uint64": 8}

#: Capabilities that a target recorded before they existed reads as (see the properties).
_FALLBACK_LANES = 4  # 128-bit vectors: SSE2 and NEON, on every 64-bit x86 and Arm CPU
_FALLBACK_REGISTERS = 16


@dataclass(frozen=True)
class Target:
    """A device kind with its capabilities and a hardware fingerprint.

    ``capabilities`` are sorted ``(name, value)`` pairs; on a CPU they are
    ``vector_bits`` and ``vector_lanes`` (float32 lanes of one vector register),
    ``vector_registers``, ``l1d_bytes``, ``l1d_ways`` and ``l2_bytes`` (the caches one
    core sees), ``l3_bytes``, ``cores``, ``model``, ``arch`` and ``threads`` (the
    thread count kernels run with; not part of the fingerprint). On a CUDA
    GPU (see ``tuner.codegen.cuda.device``) they are ``max_threads_per_block`` (what marks a
    target as running GPU threads), ``max_block_dim_{x,y,z}``,
    ``max_shared_memory_per_block``, ``max_registers_per_block``,
    ``multiprocessors``, ``warp_size``, ``compute_capability``, ``model`` and
    ``simulator``.
    """

    kind: str
    capabilities: tuple[tuple[str, CapValue], ...]
    fingerprint: str

    @classmethod
    def make(cls, kind: str, fingerprint: str | None = None, **capabilities: CapValue) -> Target:
        """A target from keyword capabilities (a synthetic one in tests, a plugin's).

        Without ``fingerprint``, one is computed from the capabilities other
        than ``threads``, so targets of different hardware never share one.

        >>> wide = Target.make("cpu", vector_lanes=16, vector_registers=32, threads=1)
        >>> wide.lanes("float64"), wide.vector_registers
        (8, 32)
        """
        caps = dict(capabilities)
        if fingerprint is None:
            fingerprint = _fingerprint({k: v for k, v in caps.items() if k != "threads"})
        return cls(kind, tuple(sorted(caps.items())), fingerprint)

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

    # -- identity -----------------------------------------------------------------------------

    @property
    def threads(self) -> int:
        """The thread count kernels run with; 0 where the target sets none (the backend's)."""
        return int(self.get("threads", 0))

    @property
    def key(self) -> str:
        """The hardware plus how it is run: ``cpu:<fingerprint>:threads=2``.

        Timings are comparable only under one key; records of one fingerprint
        with other keys are the same machine run another way.
        """
        base = f"{self.kind}:{self.fingerprint}"
        return f"{base}:threads={self.threads}" if self.threads else base

    def with_threads(self, threads: int) -> Target:
        """The same hardware run with ``threads`` threads (same fingerprint, another key)."""
        caps = {**dict(self.capabilities), "threads": int(threads)}
        return Target(self.kind, tuple(sorted(caps.items())), self.fingerprint)

    # -- what templates read ------------------------------------------------------------------

    @property
    def vector_lanes(self) -> int:
        """float32 lanes of one vector register (4 where the target recorded none)."""
        return int(self.get("vector_lanes", _FALLBACK_LANES))

    @property
    def vector_bits(self) -> int:
        return int(self.get("vector_bits", 32 * self.vector_lanes))

    @property
    def vector_registers(self) -> int:
        """Architectural vector registers.

        A target recorded before the capability existed reads as 32 when its
        vectors are 512 bits wide (every such ISA has 32) and 16 otherwise.
        """
        default = 32 if self.vector_bits >= 512 else _FALLBACK_REGISTERS
        return int(self.get("vector_registers", default))

    def lanes(self, dtype: str) -> int:
        """Lanes of one vector register for ``dtype``'s accumulator.

        float64 has half as many as float32; int8 accumulates in int32, so it
        has as many as float32.

        >>> Target.make("cpu", vector_lanes=16).lanes("int8")
        16
        """
        return max(1, self.vector_lanes * 4 // _ACCUMULATOR_BYTES.get(dtype, 4))

    @property
    def int8_dot_bits(self) -> int:
        """Widest vector of int8 dot products into int32 (x86 VNNI's ``vpdpbusd``), 0 if none.

        512 with AVX-512 VNNI, 256 with AVX-VNNI (or AVX-512 VNNI on a target
        whose vectors are 256 bits); a target recorded before it existed has none.
        """
        return int(self.get("int8_dot_bits", 0))

    @property
    def table_lookup_bits(self) -> int:
        """Widest vector that reads a 256-entry byte table at one key per byte (AVX-512
        VBMI's ``vpermi2b``, ``tuner.codegen.cpu.tables``), 0 if none."""
        return int(self.get("table_lookup_bits", 0))

    @property
    def l1d_bytes(self) -> int:
        return int(self.get("l1d_bytes", 0)) or _FALLBACK_L1D

    @property
    def l2_bytes(self) -> int:
        return int(self.get("l2_bytes", 0)) or _FALLBACK_L2

    @property
    def l1d_ways(self) -> int:
        """Lines one set of the L1 data cache holds (its associativity): 8 on AMD Zen 2 and
        Zen 4, 12 on Zen 5 and Intel's recent cores; 8 where the target does not say."""
        return int(self.get("l1d_ways", 0)) or _FALLBACK_L1D_WAYS

    @property
    def l1d_sets(self) -> int:
        """Sets of 64-byte lines in the L1 data cache: addresses ``64 * l1d_sets`` bytes
        apart share one (4 kB on every x86 core so far)."""
        return max(1, self.l1d_bytes // (CACHE_LINE * self.l1d_ways))

    @property
    def cores(self) -> int:
        return max(1, int(self.get("cores", 1)))

    # -- data ---------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "capabilities": dict(self.capabilities),
            "fingerprint": self.fingerprint,
        }

    @classmethod
    def from_json(cls, data: Any) -> Target:
        """Read ``to_json``'s object; format v1's targets (threads among the capabilities) too."""
        if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
            raise TargetError("target must be an object with a string 'kind'")
        caps = data.get("capabilities", {})
        if not isinstance(caps, dict):
            raise TargetError("target 'capabilities' must be an object")
        for name, value in caps.items():
            if not isinstance(value, int | float | str | bool):
                raise TargetError(f"target capability {name!r} must be a number, string or bool")
        threads = caps.get("threads", 0)
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
            raise TargetError(f"target capability 'threads' must be a count, got {threads!r}")
        return cls(data["kind"], tuple(sorted(caps.items())), str(data.get("fingerprint", "")))

    @classmethod
    def from_name(cls, name: str, **options: Any) -> Target:
        """Detect the target ``name`` ("cpu", "cuda") on this machine."""
        if name not in _REGISTRY and name in _PLUGINS:
            importlib.import_module(_PLUGINS[name])
        try:
            factory = _REGISTRY[name]
        except KeyError:
            known = ", ".join(target_kinds())
            raise TargetError(f"unknown target {name!r}; known targets: {known}") from None
        return factory(**options)

    def __str__(self) -> str:
        threads = f", {self.threads} threads" if self.threads else ""
        return f"{self.kind}[{self.fingerprint[:8]}{threads}]"


_REGISTRY: dict[str, Callable[..., Target]] = {}
#: Targets whose detection needs a backend's libraries, by the module that registers them:
#: imported on first use (the CUDA GPU is asked through numba-cuda).
_PLUGINS = {"cuda": "tuner.codegen.cuda.device"}


def register_target(name: str) -> Callable[[Callable[..., Target]], Callable[..., Target]]:
    """Register a target factory under ``name`` (a plugin point)."""

    def deco(fn: Callable[..., Target]) -> Callable[..., Target]:
        _REGISTRY[name] = fn
        return fn

    return deco


def target_kinds() -> list[str]:
    """Target names known here: registered ones and the built-in plugins, loaded or not."""
    return sorted(set(_REGISTRY) | set(_PLUGINS))


def _fingerprint(caps: Mapping[str, CapValue]) -> str:
    return hashlib.sha256(dumps_canonical(dict(caps)).encode()).hexdigest()[:16]


# -- the host CPU -------------------------------------------------------------------------------

#: SIMD levels by the /proc/cpuinfo flag (x86 "flags", Arm "Features") that announces
#: them, widest first: vector bits and architectural vector registers.
SIMD_LEVELS: tuple[tuple[str, int, int], ...] = (
    ("avx512f", 512, 32),
    ("avx2", 256, 16),
    ("avx", 256, 16),
    ("asimd", 128, 32),  # AArch64 Advanced SIMD (NEON): 32 registers of 128 bits
    ("sse2", 128, 16),
    ("neon", 128, 16),  # 32-bit Arm: 16 quad registers
)
#: Where the flags name no SIMD level (no /proc/cpuinfo, an unknown ISA): 128-bit vectors.
_FALLBACK_SIMD = (32 * _FALLBACK_LANES, _FALLBACK_REGISTERS)
#: Cache sizes where neither sysfs nor sysconf tells: small ones of current x86 and Arm cores.
_FALLBACK_L1D = 32 * 1024
_FALLBACK_L2 = 256 * 1024
_FALLBACK_L1D_WAYS = 8
#: Bytes of a cache line (every x86 core, and the Arm cores this project meets).
CACHE_LINE = 64

#: The capabilities the fingerprint covers (those it covered before vector_bits and
#: vector_registers existed: they follow from the same flags, and logs keep their machine).
_IDENTITY = ("arch", "cores", "l1d_bytes", "l2_bytes", "l3_bytes", "model", "vector_lanes")


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


def cpu_flags() -> frozenset[str]:
    """The first CPU's feature flags as /proc/cpuinfo lists them (empty where there is none)."""
    info = _cpuinfo()
    return frozenset(f"{info.get('flags', '')} {info.get('Features', '')}".split())


def int8_dot_bits(flags: frozenset[str], vector_bits: int) -> int:
    """Widest VNNI dot product (``vpdpbusd``) ``flags`` announce, within ``vector_bits``."""
    if "avx512_vnni" in flags and "avx512f" in flags:
        return min(512, vector_bits)
    if "avx_vnni" in flags:
        return min(256, vector_bits)
    return 0


def table_lookup_bits(flags: frozenset[str], vector_bits: int) -> int:
    """512 where ``flags`` announce AVX-512 VBMI and the vectors are that wide, else 0."""
    return 512 if {"avx512f", "avx512vbmi"} <= flags and vector_bits >= 512 else 0


def simd_level(flags: frozenset[str]) -> tuple[int, int]:
    """``(vector_bits, vector_registers)`` of the widest SIMD level ``flags`` announce."""
    for flag, bits, registers in SIMD_LEVELS:
        if flag in flags:
            return bits, registers
    return _FALLBACK_SIMD


def _parse_size(text: str) -> int:
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    text = text.strip()
    if text and text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text)


@functools.cache
def _cache_size(level: int) -> int:
    """Bytes of the data (or unified) cache at ``level`` that serves one core (0 if unknown).

    sysfs describes the caches of cpu0; where it is missing, glibc's sysconf
    (which asks the CPU itself) answers for L1 to L3.
    """
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(base.glob("index*")) if base.exists() else []:
        try:
            if int((index / "level").read_text()) != level:
                continue
            if (index / "type").read_text().strip() == "Instruction":
                continue
            return _parse_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
    name = {1: "SC_LEVEL1_DCACHE_SIZE", 2: "SC_LEVEL2_CACHE_SIZE", 3: "SC_LEVEL3_CACHE_SIZE"}
    try:
        return max(0, int(os.sysconf(name[level])))
    except (KeyError, ValueError, OSError):
        return 0


@functools.cache
def _l1d_ways() -> int:
    """Associativity of cpu0's L1 data cache as sysfs gives it (0 if unknown)."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(base.glob("index*")) if base.exists() else []:
        try:
            if int((index / "level").read_text()) == 1 and (
                (index / "type").read_text().strip() != "Instruction"
            ):
                return int((index / "ways_of_associativity").read_text())
        except (OSError, ValueError):
            continue
    return 0


@register_target("cpu")
def cpu_target(num_threads: int | None = None) -> Target:
    """The host CPU: cores, SIMD width and registers, cache sizes; ``num_threads`` to run with.

    The fingerprint covers the hardware (see ``_IDENTITY``), not the thread
    count: ``num_threads=1`` and ``=2`` give one fingerprint and two keys.
    """
    info = _cpuinfo()
    flags = cpu_flags()
    bits, registers = simd_level(flags)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    caps: dict[str, CapValue] = {
        "model": info.get("model name", platform.processor() or platform.machine()),
        "arch": platform.machine(),
        "cores": int(cores or 1),
        "vector_lanes": bits // 32,
        "vector_bits": bits,
        "vector_registers": registers,
        "int8_dot_bits": int8_dot_bits(flags, bits),
        "table_lookup_bits": table_lookup_bits(flags, bits),
        "l1d_bytes": _cache_size(1) or _FALLBACK_L1D,
        "l1d_ways": _l1d_ways() or _FALLBACK_L1D_WAYS,
        "l2_bytes": _cache_size(2) or _FALLBACK_L2,
        "l3_bytes": _cache_size(3),
    }
    fingerprint = _fingerprint({k: caps[k] for k in _IDENTITY})
    caps["threads"] = int(num_threads or caps["cores"])
    return Target("cpu", tuple(sorted(caps.items())), fingerprint)
