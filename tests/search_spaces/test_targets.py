"""Every template reads the target it is given: spaces and defaults on synthetic targets.

Cheap (no compile). The per-operator files build and run kernels for tiles
that only a wide target admits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from records import load
from search_spaces import canonical_records, get_operator, operators

from .targets import AVX2, AVX512, SYNTHETIC

ROOT = Path(__file__).resolve().parents[2]

#: Small and awkward arguments of every registered operator (primes, tiny extents).
CASES: dict[str, list[dict[str, Any]]] = {
    "matmul": [
        {"M": 7, "N": 5, "K": 3},
        {"M": 37, "N": 53, "K": 41, "trans_a": True},
        {"M": 3, "N": 2, "K": 1500, "dtype": "int8"},
        {"M": 19, "N": 23, "K": 37, "dtype": "float64", "trans_b": True},
        {"M": 1024, "N": 1024, "K": 1024},
        {"M": 13, "N": 49, "K": 7, "channels": "rows", "epilogue": "add@c;relu"},
    ],
    "batch_matmul": [
        {"B": 3, "M": 5, "N": 7, "K": 4, "trans_b": True},
        {"B": 2, "M": 9, "N": 3, "K": 5},
    ],
    "dense": [
        {"batch": 5, "in_features": 7, "out_features": 9, "activation": "relu"},
        {"batch": 128, "in_features": 31, "out_features": 3, "bias": False},
    ],
    "conv2d": [
        {"N": 2, "C": 6, "H": 9, "W": 7, "K": 4, "stride": 2, "pad": 1},
        {"C": 5, "H": 7, "W": 13, "K": 37, "R": 3, "S": 3, "pad": 1, "bias": True},
        {"C": 3, "H": 5, "W": 5, "K": 5, "R": 1, "S": 1, "layout": "NHWC"},
    ],
    "conv2d_winograd": [
        {"N": 2, "C": 6, "H": 9, "W": 7, "K": 4, "pad": 1, "bias": True},
        {"C": 3, "H": 3, "W": 5, "K": 37, "pad": 0, "epilogue": "relu"},
    ],
    "depthwise_conv2d": [
        {"N": 2, "C": 5, "H": 9, "W": 8, "stride": 2, "pad": 1},
        {"C": 3, "H": 3, "W": 3},
    ],
    "softmax": [{"M": 5, "N": 33}, {"M": 3, "N": 3}],
    "log_softmax": [{"M": 5, "N": 7}],
    "layer_norm": [{"M": 5, "N": 33}, {"M": 2, "N": 67}],
    "batch_norm": [{"N": 1, "C": 3, "H": 5, "W": 3}],
    "elementwise_chain": [{"n": 1001}, {"n": 3}],
    "reduce_sum": [{"M": 7, "N": 13}, {"M": 7, "N": 5, "axis": 0}],
    "reduce_mean": [{"M": 3, "N": 2, "axis": 0}],
    "reduce_max": [{"M": 7, "N": 3}],
    "max_pool2d": [{"N": 1, "C": 3, "H": 11, "W": 9, "kernel": 3, "stride": 2, "pad": 1}],
    "avg_pool2d": [{"N": 2, "C": 3, "H": 5, "W": 3, "kernel": 2}],
    "global_avg_pool2d": [{"N": 1, "C": 2, "H": 3, "W": 100}, {"N": 2, "C": 3, "H": 5, "W": 7}],
    "transpose": [{"M": 3, "N": 5}, {"M": 37, "N": 45}],
    "nchw_to_nhwc": [{"N": 1, "C": 3, "H": 4, "W": 5}],
    "pad": [{"N": 1, "C": 3, "H": 5, "W": 6, "pad_h": 1, "pad_w": 2}],
    "im2col": [{"C": 3, "H": 5, "W": 6, "pad": 1}, {"N": 2, "C": 2, "H": 7, "W": 5, "stride": 2}],
    "im2col_nhwc": [{"C": 3, "H": 5, "W": 6, "pad": 1, "fill": 7, "channels": 4}],
    "matmul_integer": [
        {"M": 1, "N": 1, "K": 1},
        {"M": 49, "N": 24, "K": 27, "a_dtype": "int8", "epilogue": "mul@c;quant_int8:0.5:1.0"},
    ],
    # a model's group with no template: here the identity on a 3 x 5 input
    "fused": [
        {
            "graph": '{"consts":[],"format":1,"inputs":[{"dtype":"float32","shape":[3,5]}],'
            '"nodes":[],"opset":17,"outputs":["x0"]}'
        }
    ],
}


def test_every_operator_has_cases() -> None:
    builtin = {op.name for op in operators() if op.space.__module__.startswith("search_spaces.")}
    assert builtin == set(CASES)  # (test plugins register operators of their own)


@pytest.mark.parametrize("target", SYNTHETIC, ids=lambda t: t.fingerprint)
@pytest.mark.parametrize("op_name", sorted(CASES))
def test_defaults_are_in_the_space_of_every_target(op_name: str, target: Any) -> None:
    op = get_operator(op_name)
    for raw in CASES[op_name]:
        args = op.parse_args(raw)
        space = op.space(args, target)
        cfg = space.validate(op.default_config(args, target))
        op.schedule(cfg, args, target)  # builds the schedule (no compile)
        space.sample(np.random.default_rng(0))  # and the space has more than its default


def _largest_tile(op_name: str, args: dict[str, Any], target: Any) -> int:
    """The most accumulator registers of any register tile in the space on ``target``."""
    from search_spaces.conv2d import vectors
    from search_spaces.matmul import tile_registers

    space = get_operator(op_name).space(args, target)
    lanes = target.lanes(args.get("dtype", "float32"))
    most = 0
    for cfg in space.enumerate():
        if "nr" in cfg:
            most = max(most, tile_registers(cfg["mr"], cfg["nr"], lanes))
        else:
            simd, other = ("kr", "owr") if cfg["vector"] == "k" else ("owr", "kr")
            most = max(most, vectors(cfg[simd], lanes) * cfg[other] * cfg["ohr"])
    return most


@pytest.mark.parametrize(
    "op_name, raw",
    [
        ("matmul", {"M": 64, "N": 64, "K": 64}),
        ("batch_matmul", {"B": 2, "M": 64, "N": 64, "K": 64}),
        ("dense", {"batch": 16, "in_features": 64, "out_features": 64}),
        ("conv2d", {"C": 8, "H": 16, "W": 16, "K": 64, "R": 1, "S": 1}),
    ],
)
def test_register_tiles_use_the_registers_the_target_has(op_name: str, raw: dict) -> None:
    """32 registers of 16 lanes admit tiles of more than 16 registers; 16 of 8 at most 12."""
    op = get_operator(op_name)
    args = op.parse_args(raw)
    assert _largest_tile(op_name, args, AVX2) == 12
    assert 16 < _largest_tile(op_name, args, AVX512) <= 28


def test_matmul_tiles_reach_the_avx512_register_file() -> None:
    op = get_operator("matmul")
    args = op.parse_args({"M": 256, "N": 256, "K": 256})
    wide, narrow = op.space(args, AVX512), op.space(args, AVX2)
    base = op.default_config(args, AVX512)
    for mr, nr in [(6, 48), (12, 32), (14, 32), (6, 64), (8, 48)]:
        assert wide.is_valid({**base, "mr": mr, "nr": nr}), (mr, nr)
    assert not wide.is_valid({**base, "mr": 16, "nr": 32})  # 32 accumulators: no room for B
    for mr, nr in [(6, 16), (4, 24), (3, 32), (8, 8)]:  # AVX2's largest tiles are still there
        assert narrow.is_valid({**base, "mr": mr, "nr": nr}), (mr, nr)
    assert not narrow.is_valid({**base, "mr": 8, "nr": 32})


def test_the_avx2_default_is_unchanged_and_avx512_scales_it_by_the_lanes() -> None:
    op = get_operator("matmul")
    args = op.parse_args({"M": 1024, "N": 1024, "K": 1024})
    narrow, wide = op.default_config(args, AVX2), op.default_config(args, AVX512)
    assert (narrow["mr"], narrow["nr"]) == (6, 16)
    assert (wide["mr"], wide["nr"]) == (6, 32)  # 12 accumulators of 16 lanes


def test_every_record_of_the_shipped_logs_fits_the_space_of_its_own_target() -> None:
    """The logs were drawn from the spaces of 8 lanes and 16 registers; they still validate."""
    logs = sorted((ROOT / "experiments" / "logs").glob("*.jsonl"))
    records = canonical_records(r for path in logs for r in load(path))
    assert len(records) > 1000
    for r in records:
        op = get_operator(r.workload.op)
        assert op.space(op.parse_args(r.workload.as_dict()), r.target).is_valid(r.config), r
