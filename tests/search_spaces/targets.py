"""Synthetic targets, so that template tests mean the same on every machine.

``AVX2`` is what the templates assumed before they read the target (8 float32
lanes, 16 vector registers): the spaces and defaults under it are those that
existing logs were drawn from. ``AVX512`` has 16 lanes and 32 registers.
"""

from __future__ import annotations

from tuner.target import Target

AVX2 = Target.make(
    "cpu", fingerprint="synthetic-avx2", vector_bits=256, vector_lanes=8, vector_registers=16
)
AVX512 = Target.make(
    "cpu", fingerprint="synthetic-avx512", vector_bits=512, vector_lanes=16, vector_registers=32
)
#: 128-bit vectors: SSE (16 registers) and AArch64 NEON (32).
SSE = Target.make(
    "cpu", fingerprint="synthetic-sse", vector_bits=128, vector_lanes=4, vector_registers=16
)
NEON = Target.make(
    "cpu", fingerprint="synthetic-neon", vector_bits=128, vector_lanes=4, vector_registers=32
)
SYNTHETIC = (AVX2, AVX512, SSE, NEON)
