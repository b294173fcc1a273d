"""Targets: what the host CPU reports, identity (fingerprint and key), JSON, old logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuner.target import SIMD_LEVELS, Target, TargetError, cpu_flags, simd_level

#: A format-v1 target as the tuner wrote it before vector_bits and vector_registers
#: (experiments/logs/matmul256_sample_400.jsonl): the thread count among the capabilities.
V1_TARGET = json.loads(
    '{"kind":"cpu","capabilities":{"arch":"x86_64","cores":2,"l1d_bytes":32768,'
    '"l2_bytes":524288,"l3_bytes":33554432,"model":"AMD EPYC","threads":1,"vector_lanes":8},'
    '"fingerprint":"d1b9f50463435ed5"}'
)


def _expected_simd() -> tuple[int, int]:
    """Vector bits and registers as /proc/cpuinfo's flags say, read independently here."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        pytest.skip("no /proc/cpuinfo on this machine")
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags |= set(value.split())
            break
    if "avx512f" in flags:
        return 512, 32
    if "avx2" in flags or "avx" in flags:
        return 256, 16
    if "asimd" in flags:
        return 128, 32
    if "sse2" in flags:
        return 128, 16
    pytest.skip("/proc/cpuinfo names no SIMD level this test knows")


def test_detection_agrees_with_the_cpuinfo_flags() -> None:
    bits, registers = _expected_simd()
    t = Target.from_name("cpu")
    assert t.vector_bits == bits == t.cap("vector_bits")
    assert t.vector_lanes == bits // 32 == t.cap("vector_lanes")
    assert t.vector_registers == registers == t.cap("vector_registers")
    assert t.lanes("float32") == bits // 32
    assert t.lanes("float64") == bits // 64
    assert t.lanes("int8") == bits // 32  # accumulates in int32


def test_simd_levels_pick_the_widest_flag() -> None:
    assert simd_level(frozenset({"sse2", "avx", "avx2", "avx512f"})) == (512, 32)
    assert simd_level(frozenset({"sse2", "avx", "avx2", "fma"})) == (256, 16)
    assert simd_level(frozenset({"fp", "asimd"})) == (128, 32)
    assert simd_level(frozenset({"sse2"})) == (128, 16)
    assert simd_level(frozenset()) == (128, 16)  # no flags: the 128-bit baseline
    assert simd_level(cpu_flags()) in {(b, r) for _, b, r in SIMD_LEVELS} | {(128, 16)}


def test_caches_and_cores_are_positive() -> None:
    t = Target.from_name("cpu")
    assert t.l1d_bytes >= 4096 and t.l2_bytes >= t.l1d_bytes
    assert t.cores >= 1


def test_sysfs_caches_are_reported_as_listed() -> None:
    base = Path("/sys/devices/system/cpu/cpu0/cache/index0")
    if not base.exists():
        pytest.skip("no sysfs cache description")
    sizes = {}
    for index in base.parent.glob("index*"):
        if (index / "type").read_text().strip() != "Instruction":
            size = (index / "size").read_text().strip()
            scale = {"K": 1024, "M": 1024**2}.get(size[-1], 1)
            sizes[int((index / "level").read_text())] = int(size.rstrip("KM")) * scale
    t = Target.from_name("cpu")
    assert t.cap("l1d_bytes") == sizes[1]
    if 2 in sizes:
        assert t.cap("l2_bytes") == sizes[2]


def test_threads_change_the_key_not_the_fingerprint() -> None:
    one = Target.from_name("cpu", num_threads=1)
    two = Target.from_name("cpu", num_threads=2)
    assert (one.threads, two.threads) == (1, 2)
    assert one.fingerprint == two.fingerprint
    assert one.key != two.key
    assert one.key == f"cpu:{one.fingerprint}:threads=1"
    assert two.key == f"cpu:{two.fingerprint}:threads=2"
    assert one.with_threads(2) == two
    assert Target.from_name("cpu").threads == Target.from_name("cpu").cores


def test_the_fingerprint_covers_the_hardware_only() -> None:
    t = Target.from_name("cpu", num_threads=1)
    wider = Target.make("cpu", **{**dict(t.capabilities), "vector_lanes": 2 * t.vector_lanes})
    assert Target.make("cpu", **dict(t.capabilities)).fingerprint != wider.fingerprint
    assert (
        Target.make("cpu", **{**dict(t.capabilities), "threads": 7}).fingerprint
        == Target.make("cpu", **dict(t.capabilities)).fingerprint
    )


def test_json_round_trip() -> None:
    for t in (
        Target.from_name("cpu", num_threads=2),
        Target.make("cpu", vector_lanes=16, vector_registers=32, threads=1),
        Target.make("cuda", fingerprint="gpu", warp_size=32),
    ):
        back = Target.from_json(json.loads(json.dumps(t.to_json())))
        assert back == t
        assert back.key == t.key and back.threads == t.threads


def test_a_v1_target_reads_back_with_its_thread_count() -> None:
    t = Target.from_json(V1_TARGET)
    assert t.threads == 1
    assert t.fingerprint == "d1b9f50463435ed5"
    assert t.key == "cpu:d1b9f50463435ed5:threads=1"
    assert t.to_json() == V1_TARGET
    # Capabilities it predates read as what the templates assumed then.
    assert (t.vector_lanes, t.vector_registers, t.vector_bits) == (8, 16, 256)
    two = Target.from_json(
        {**V1_TARGET, "capabilities": {**V1_TARGET["capabilities"], "threads": 2}}
    )
    assert two.fingerprint == t.fingerprint and two.key != t.key


def test_targets_without_threads_or_simd_capabilities() -> None:
    gpu = Target("cuda", (("warp_size", 32),), "fingerprint-gpu")
    assert gpu.threads == 0 and gpu.key == "cuda:fingerprint-gpu"
    wide_v1 = Target("cpu", (("vector_lanes", 16),), "fp")
    assert wide_v1.vector_registers == 32  # 512-bit vectors come with 32 registers
    assert wide_v1.lanes("float64") == 8


def test_unknown_target_is_one_clear_error() -> None:
    with pytest.raises(TargetError, match="unknown target 'tpu'; known targets: cpu"):
        Target.from_name("tpu")
    with pytest.raises(TargetError, match="capabilities"):
        Target.from_json({"kind": "cpu", "capabilities": [1, 2]})
    with pytest.raises(TargetError, match="capability 'cores' must be a number"):
        Target.from_json({"kind": "cpu", "capabilities": {"cores": [1, 2]}})
