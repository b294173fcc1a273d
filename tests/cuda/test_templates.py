"""The CUDA spaces of the templates: each default and a few random configs against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba.cuda", reason="the cuda extra (numba-cuda) is not installed")

from search_spaces import get_operator
from tuner.codegen import build
from tuner.target import Target

#: Tiny workloads, with extents that no tile divides.
WORKLOADS = [
    ("matmul", {"M": 13, "N": 11, "K": 7}),
    ("matmul", {"M": 16, "N": 16, "K": 16, "trans_b": "true"}),
    ("matmul", {"M": 5, "N": 9, "K": 33, "trans_a": "true"}),
    ("matmul", {"M": 13, "N": 11, "K": 7, "epilogue": "add@c;relu"}),
    ("matmul", {"M": 6, "N": 10, "K": 5, "epilogue": "add@f;tanh", "channels": "rows"}),
    ("batch_matmul", {"B": 3, "M": 5, "N": 6, "K": 7, "trans_b": "true"}),
    ("batch_matmul", {"B": 2, "M": 4, "N": 9, "K": 3, "epilogue": "add@c;relu"}),
    ("dense", {"batch": 3, "in_features": 9, "out_features": 10, "activation": "gelu"}),
    ("dense", {"batch": 4, "in_features": 5, "out_features": 6, "bias": "false"}),
    ("conv2d", {"C": 3, "H": 6, "W": 7, "K": 5, "pad": 1, "stride": 2}),
    (
        "conv2d",
        {
            "N": 2,
            "C": 4,
            "H": 5,
            "W": 5,
            "K": 4,
            "groups": 2,
            "layout": "NHWC",
            "bias": "true",
            "activation": "relu",
        },
    ),
    ("depthwise_conv2d", {"N": 1, "C": 3, "H": 7, "W": 6, "pad": 1, "epilogue": "relu"}),
    ("max_pool2d", {"N": 1, "C": 2, "H": 7, "W": 7, "kernel": 3, "stride": 2, "pad": 1}),
    ("avg_pool2d", {"N": 2, "C": 1, "H": 6, "W": 5, "kernel": 2}),
    ("global_avg_pool2d", {"N": 2, "C": 3, "H": 4, "W": 13}),
    ("softmax", {"M": 3, "N": 37}),
    ("log_softmax", {"M": 2, "N": 20}),
    ("layer_norm", {"M": 3, "N": 19}),
    ("elementwise_chain", {"n": 1000}),
    ("reduce_sum", {"M": 3, "N": 45}),
    ("reduce_max", {"M": 4, "N": 7, "axis": "0"}),
    ("reduce_mean", {"M": 5, "N": 33, "axis": "0"}),
]


def _check(name: str, raw: dict, cfg: dict, gpu: Target) -> None:  # type: ignore[type-arg]
    op = get_operator(name)
    args = op.parse_args(raw)
    sched, tensors = op.schedule(op.space(args, gpu).validate(cfg), args, gpu)
    kern = build(sched, tensors, target=gpu)
    inputs = op.make_inputs(args, target=gpu)
    out = np.zeros(tensors[-1].shape_ints, tensors[-1].dtype)
    kern(*inputs, out)
    np.testing.assert_allclose(out, op.reference(*inputs, **args), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("name", "raw"), WORKLOADS, ids=lambda v: str(v))
def test_default_and_random_configs_match_numpy(name, raw, gpu) -> None:  # type: ignore[no-untyped-def]
    op = get_operator(name)
    args = op.parse_args(raw)
    space = op.space(args, gpu)
    default = op.default_config(args, gpu)
    _check(name, raw, default, gpu)
    rng = np.random.default_rng(len(name) + len(raw))
    for _ in range(3):
        _check(name, raw, space.sample(rng).to_json(), gpu)


def test_the_defaults_fill_a_block_for_large_workloads(gpu) -> None:  # type: ignore[no-untyped-def]
    mm = get_operator("matmul")
    cfg = mm.default_config(mm.parse_args({"M": 4096, "N": 4096, "K": 4096}), gpu)
    assert (cfg["ty"] * cfg["ry"], cfg["tx"] * cfg["rx"], cfg["shared"]) == (64, 64, True)
    sm = get_operator("softmax")
    assert sm.default_config(sm.parse_args({"M": 8192, "N": 4096}), gpu) == {"threads": 256}


def test_the_space_keeps_a_block_within_the_target() -> None:
    small = Target.make("cuda", max_threads_per_block=64, max_shared_memory_per_block=1024)
    op = get_operator("matmul")
    args = op.parse_args({"M": 64, "N": 64, "K": 64})
    rng = np.random.default_rng(0)
    for cfg in op.space(args, small).sample_many(rng, 50):
        assert cfg["ty"] * cfg["tx"] <= 64
        rows, cols = cfg["ty"] * cfg["ry"], cfg["tx"] * cfg["rx"]
        assert not cfg["shared"] or (rows + cols) * cfg["kc"] * 4 <= 1024


def test_an_epilogue_is_applied_to_each_thread_s_register_tile(gpu) -> None:  # type: ignore[no-untyped-def]
    op = get_operator("matmul")
    args = op.parse_args({"M": 8, "N": 8, "K": 4, "epilogue": "add@c;relu"})
    sched, tensors = op.schedule(op.default_config(args, gpu), args, gpu)
    source = build(sched, tensors, target=gpu).source
    assert "C = cuda.local.array(" in source  # the product never reaches device memory
    assert [t.name for t in tensors][-1] == "Y"
