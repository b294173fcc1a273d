"""conv2d and depthwise_conv2d defaults at model shapes, beside a one-node onnxruntime Conv.

The shapes are ResNet-50's and MobileNetV2's convolutions (224 x 224, batch 1,
NCHW, float32, a bias as the exported models have once batch norm is folded).
Each shape's kernel is built with the template's default config (and each
``--config``: JSON knobs merged over the default), checked against onnxruntime, and timed beside a session
of one Conv node whose weights are initializers (constants, as in a model),
``intra_op_num_threads`` the thread count and ``inter_op_num_threads`` 1.
Timing is ``tuner.measure.interleave``: each round times every function once
after a rest, and the figure is the median of the rounds.

``--random N`` also samples N configs of the space per shape, screens them
with a short untimed-order timing, and interleaves the best ``--top`` of them
with the default and onnxruntime::

    python experiments/bench_conv_defaults.py --rounds 5
    python experiments/bench_conv_defaults.py --only r50_3x3_256 --random 20 --top 4
    python experiments/bench_conv_defaults.py --only r50 --config '{"vector": "ow"}'
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from search_spaces import get_operator  # noqa: E402
from tuner.codegen import build  # noqa: E402
from tuner.measure.interleave import calls_per_sample, interleaved, medians  # noqa: E402
from tuner.target import Target  # noqa: E402
from tuner.task import Task  # noqa: E402

#: label -> (operator, arguments); every one NCHW float32 batch 1 with a bias (depthwise: none).
SHAPES: dict[str, tuple[str, dict[str, Any]]] = {
    "r50_stem_7x7s2": ("conv2d", dict(C=3, H=224, W=224, K=64, R=7, S=7, stride=2, pad=3)),
    "r50_1x1_64_256_56": ("conv2d", dict(C=64, H=56, W=56, K=256, R=1, S=1)),
    "r50_3x3_64_56": ("conv2d", dict(C=64, H=56, W=56, K=64, R=3, S=3, pad=1)),
    "r50_3x3_128_28": ("conv2d", dict(C=128, H=28, W=28, K=128, R=3, S=3, pad=1)),
    "r50_3x3_256_14": ("conv2d", dict(C=256, H=14, W=14, K=256, R=3, S=3, pad=1)),
    "r50_3x3_512_7": ("conv2d", dict(C=512, H=7, W=7, K=512, R=3, S=3, pad=1)),
    "r50_1x1_1024_256_14": ("conv2d", dict(C=1024, H=14, W=14, K=256, R=1, S=1)),
    "r50_1x1_512_2048_7": ("conv2d", dict(C=512, H=7, W=7, K=2048, R=1, S=1)),
    "r50_1x1s2_256_512_56": ("conv2d", dict(C=256, H=56, W=56, K=512, R=1, S=1, stride=2)),
    "mb2_stem_3x3s2": ("conv2d", dict(C=3, H=224, W=224, K=32, R=3, S=3, stride=2, pad=1)),
    "mb2_1x1_32_16_112": ("conv2d", dict(C=32, H=112, W=112, K=16, R=1, S=1)),
    "mb2_1x1_16_96_112": ("conv2d", dict(C=16, H=112, W=112, K=96, R=1, S=1)),
    "mb2_1x1_96_24_56": ("conv2d", dict(C=96, H=56, W=56, K=24, R=1, S=1)),
    "mb2_1x1_144_24_56": ("conv2d", dict(C=144, H=56, W=56, K=24, R=1, S=1)),
    "mb2_1x1_64_384_14": ("conv2d", dict(C=64, H=14, W=14, K=384, R=1, S=1)),
    "mb2_1x1_960_160_7": ("conv2d", dict(C=960, H=7, W=7, K=160, R=1, S=1)),
    "mb2_1x1_320_1280_7": ("conv2d", dict(C=320, H=7, W=7, K=1280, R=1, S=1)),
    "mb2_dw_144_56": ("depthwise_conv2d", dict(C=144, H=56, W=56, R=3, S=3, pad=1)),
    "mb2_dw_96_112_s2": ("depthwise_conv2d", dict(C=96, H=112, W=112, R=3, S=3, stride=2, pad=1)),
    "mb2_dw_960_7": ("depthwise_conv2d", dict(C=960, H=7, W=7, R=3, S=3, pad=1)),
    "mb2_dw_32_112": ("depthwise_conv2d", dict(C=32, H=112, W=112, R=3, S=3, pad=1)),
    "mb2_dw_144_56_s2": ("depthwise_conv2d", dict(C=144, H=56, W=56, R=3, S=3, stride=2, pad=1)),
    "mb2_dw_192_28": ("depthwise_conv2d", dict(C=192, H=28, W=28, R=3, S=3, pad=1)),
    "mb2_dw_192_28_s2": ("depthwise_conv2d", dict(C=192, H=28, W=28, R=3, S=3, stride=2, pad=1)),
    "mb2_dw_384_14": ("depthwise_conv2d", dict(C=384, H=14, W=14, R=3, S=3, pad=1)),
    "mb2_dw_576_14_s2": ("depthwise_conv2d", dict(C=576, H=14, W=14, R=3, S=3, stride=2, pad=1)),
}


def shape_args(op: str, args: dict[str, Any], relu: bool) -> dict[str, Any]:
    a = dict(N=1, **args)
    if op == "conv2d":
        a["bias"] = True
        if relu:
            a["activation"] = "relu"
    elif relu:
        a["epilogue"] = "relu"
    return a


def ort_session(
    op: str, a: dict[str, Any], w: np.ndarray, b: np.ndarray | None, threads: int
) -> Any:
    """A one-node Conv (+ Relu) model: weights and bias initializers, X the only input."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    C = a["C"]
    group = 1 if op == "conv2d" else C
    x_info = helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, C, a["H"], a["W"]])
    y_info = helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)
    inits = [numpy_helper.from_array(w, "Wt")]
    ins = ["X", "Wt"]
    if b is not None:
        inits.append(numpy_helper.from_array(b, "Bs"))
        ins.append("Bs")
    relu = a.get("activation") == "relu" or a.get("epilogue") == "relu"
    pad = a.get("pad", 0)
    nodes = [
        helper.make_node(
            "Conv",
            ins,
            ["Z" if relu else "Y"],
            kernel_shape=[a["R"], a["S"]],
            strides=[a.get("stride", 1)] * 2,
            pads=[pad] * 4,
            group=group,
        )
    ]
    if relu:
        nodes.append(helper.make_node("Relu", ["Z"], ["Y"]))
    graph = helper.make_graph(nodes, "conv", [x_info], [y_info], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def kernel_fn(task: Task, cfg: dict[str, Any], inputs: list[np.ndarray]) -> Callable[[], Any]:
    config = task.space.validate(cfg).to_json()
    sched, tensors = task.schedule(config)
    kern = build(sched, tensors, target=task.target)
    out = np.zeros(kern.args[-1].shape, kern.args[-1].dtype)

    def run() -> np.ndarray:
        kern(*inputs, out)
        return out

    return run


def quick_time(fn: Callable[[], Any], samples: int = 3, min_sample: float = 0.03) -> float:
    """Median seconds per call over a few short samples (screening only, not a figure)."""
    n = calls_per_sample(fn, min_sample)
    ts = []
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        ts.append((time.perf_counter() - t0) / n)
    return statistics.median(ts)


def short(cfg: dict[str, Any]) -> str:
    return json.dumps(cfg, separators=(",", ":"))


def bench_shape(label: str, opts: argparse.Namespace, target: Target) -> list[dict[str, Any]]:
    op_name, base = SHAPES[label]
    a = shape_args(op_name, base, opts.relu)
    op = get_operator(op_name)
    task = Task.make(op_name, a, target)
    inputs = op.make_inputs(task.args, target=target)
    x, w = inputs[0], inputs[1]
    b = inputs[2] if op_name == "conv2d" else None
    sess = ort_session(op_name, a, w, b, opts.threads)
    want = sess.run(None, {"X": x})[0]
    fns: dict[str, Callable[[], Any]] = {"onnxruntime": lambda: sess.run(None, {"X": x})}
    configs: dict[str, dict[str, Any]] = {}
    default = task.default_config()
    builds: dict[str, float] = {}

    def add(name: str, cfg: dict[str, Any]) -> bool:
        t0 = time.perf_counter()
        try:
            fn = kernel_fn(task, cfg, inputs)
            got = fn()
        except Exception as exc:
            print(f"  {name}: {type(exc).__name__}: {str(exc).splitlines()[0][:150]}", flush=True)
            return False
        builds[name] = time.perf_counter() - t0
        if not np.allclose(got, want, rtol=1e-3, atol=1e-3):
            print(f"  {name} WRONG ANSWER {short(cfg)}", flush=True)
            return False
        fns[name], configs[name] = fn, cfg
        return True

    add("default", default)
    for i, text in enumerate(opts.config):
        add(f"cfg{i}", {**default, **json.loads(text)})
    if opts.random:
        rng = np.random.default_rng(opts.seed)
        screened: list[tuple[float, str]] = []
        seen = {short(default)}
        for i in range(opts.random):
            cfg = task.space.sample(rng).to_json()
            if short(cfg) in seen:
                continue
            seen.add(short(cfg))
            name = f"rand{i}"
            if add(name, cfg):
                screened.append((quick_time(fns[name]), name))
        keep = {n for _, n in sorted(screened)[: opts.top]}
        for _, name in screened:
            if name not in keep:
                del fns[name]
    if opts.quick:
        sec = {k: quick_time(f) for k, f in fns.items()}
    else:
        sec = medians(interleaved(fns, opts.rounds, min_sample=opts.min_sample))
    flop = task.flops
    rows: list[dict[str, Any]] = []
    for name in fns:
        if name == "onnxruntime":
            continue
        rows.append(
            {
                "shape": label,
                "name": name,
                "ms": sec[name] * 1e3,
                "ort_ms": sec["onnxruntime"] * 1e3,
                "ratio": sec[name] / sec["onnxruntime"],
                "gflops": flop / sec[name] / 1e9,
                "ort_gflops": flop / sec["onnxruntime"] / 1e9,
                "build_s": builds.get(name, 0.0),
                "config": configs[name],
            }
        )
    rows.sort(key=lambda r: r["ms"])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated substrings of shape labels")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-sample", type=float, default=0.05)
    ap.add_argument("--relu", action="store_true", help="fuse a relu (models do)")
    ap.add_argument(
        "--config",
        action="append",
        default=[],
        help="JSON knobs merged over the default, timed beside it as cfg0, cfg1 ... (repeatable)",
    )
    ap.add_argument("--random", type=int, default=0, help="random configs per shape")
    ap.add_argument("--top", type=int, default=3, help="random configs kept for the timed rounds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="short back-to-back timing, no rounds")
    ap.add_argument("--json", default="", help="append the rows to this JSON-lines file")
    opts = ap.parse_args()
    target = Target.from_name("cpu", num_threads=opts.threads)
    subs = [s for s in opts.only.split(",") if s]
    labels = [k for k in SHAPES if not subs or any(s in k for s in subs)]
    print(
        f"target {target}, {target.vector_lanes} lanes, {target.vector_registers} registers",
        flush=True,
    )
    head = f"{'shape':24} {'name':8} {'ms':>8} {'ort ms':>8} {'ratio':>6} {'GF/s':>6} {'ortGF':>6}"
    print(head, flush=True)
    total = {"ours": 0.0, "ort": 0.0}
    for label in labels:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rows = bench_shape(label, opts, target)
        for r in rows:
            print(
                f"{r['shape']:24} {r['name']:8} {r['ms']:8.3f} {r['ort_ms']:8.3f} "
                f"{r['ratio']:6.2f} {r['gflops']:6.1f} {r['ort_gflops']:6.1f}  "
                f"{short(r['config'])}",
                flush=True,
            )
            if r["name"] == "default":
                total["ours"] += r["ms"]
                total["ort"] += r["ort_ms"]
        if opts.json:
            with open(opts.json, "a") as f:
                for r in rows:
                    f.write(json.dumps(r) + "\n")
    if total["ort"]:
        print(
            f"{'sum of defaults':24} {'':8} {total['ours']:8.3f} {total['ort']:8.3f} "
            f"{total['ours'] / total['ort']:6.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
