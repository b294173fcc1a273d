"""The module's cost per kernel launch: a chain of tiny kernels, beside onnxruntime.

    python experiments/bench_dispatch.py --kernels 60 --threads 2

A model of ``--kernels`` alternating Relu / Neg nodes on a 1 x 16 tensor,
compiled unfused (one kernel per node), so the work per kernel is nothing
and the time per call is the module's own cost between kernels: argument
slots, the compiled function's dispatch, the threads setting. onnxruntime
runs the same graph at the same thread count (its per-node cost). Timing is
``tuner.measure.interleave`` (blocks after a rest, rounds rotated, medians).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def chain_model(n: int):  # type: ignore[no-untyped-def]
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Relu" if k % 2 == 0 else "Neg", [f"v{k}"], [f"v{k + 1}"])
        for k in range(n)
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info(f"v{n}", TensorProto.FLOAT, [1, 16])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--kernels", type=int, default=60)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=9)
    ns = p.parse_args()

    import onnxruntime as ort

    import tuner
    from tuner.measure.interleave import interleaved, medians
    from tuner.target import Target

    model = chain_model(ns.kernels)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod = tuner.compile_model(
            model, target=Target.from_name("cpu", num_threads=ns.threads), fuse=False
        )
    n = len(mod.plans[0].specs)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = ns.threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    x = {"v0": np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)}
    np.testing.assert_allclose(mod.run(x)[0], sess.run(None, x)[0])
    t = medians(
        interleaved(
            {"tuner": lambda: mod.run(x), "onnxruntime": lambda: sess.run(None, x)}, ns.rounds
        )
    )
    print(f"{n} kernels, {ns.threads} threads, medians of {ns.rounds} rounds:")
    for k, v in t.items():
        print(f"  {k:<12} {v * 1e6:8.1f} us per call, {v / n * 1e6:6.2f} us per kernel")


if __name__ == "__main__":
    main()
