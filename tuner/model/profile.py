"""Where a compiled model's time goes, kernel by kernel, beside onnxruntime's own profile.

``Module.profile(feeds)`` gives one row per kernel of the module, in the order
they run: the ONNX nodes it computes, its operators and task, its output
shape, its median time, its share of the model's time, and whether a tuning
record or the template's default scheduled it. :func:`onnxruntime_profile`
times the same model in onnxruntime at the same thread count, with its
profiler on, and :func:`join` puts its per-node times beside ours.

onnxruntime rewrites the graph before it runs it (Conv and Relu become one
node, convolutions a blocked-layout ``Conv`` named after its output value
with ``_nchwc``, reorders are added between layouts), so its nodes are matched
to ours through the values they produce: a node of its optimized graph
belongs to the original node that produced the same value (``_nchwc``
stripped), and an original node to the kernel of ours that makes its output
(the product of an ``im2col`` convolution, not the copy of its windows). Its
nodes that produce no value of the original graph (a layout reorder feeding a
blocked value) are rows of their own, so both sides' totals add up.

>>> df = mod.profile(feeds)
>>> ort = onnxruntime_profile("model.onnx", feeds, threads=2)
>>> joined = join(df, ort)                      # + ort_ms, ort_nodes, speed
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["COLUMNS", "OrtProfile", "join", "onnxruntime_profile", "rows"]

#: The columns of ``Module.profile``'s frame, in order.
COLUMNS = ("kernel", "nodes", "ops", "task", "shape", "ms", "share", "schedule")
#: Suffixes onnxruntime gives a value it re-lays (its NCHWc transformer).
_LAYOUT_SUFFIXES = ("_nchwc",)


def rows(plan: Any, seconds: Sequence[float]) -> list[dict[str, Any]]:
    """One row per kernel of ``plan`` (a compiled plan of ``Module``), timed as ``seconds``."""
    from .runner import key_label

    total = sum(seconds) or 1.0
    out = []
    for k, (spec, kernel, t) in enumerate(zip(plan.specs, plan.kernels, seconds, strict=True)):
        value = plan.values[spec.output]
        out.append(
            {
                "kernel": k,
                "nodes": " ".join(spec.nodes),
                "ops": spec.ops,
                "task": key_label(spec.task.key),
                "shape": "x".join(str(d) for d in value.shape),
                "ms": t * 1e3,
                "share": t / total,
                "schedule": "tuned" if kernel.record is not None else "default",
            }
        )
    return out


@dataclass(frozen=True)
class OrtProfile:
    """onnxruntime's median milliseconds per node of its optimized graph, and which
    original node (the producer of the same value) each belongs to (None: none)."""

    ms: dict[str, float]
    op: dict[str, str]
    origin: dict[str, str | None]


def onnxruntime_profile(
    model: str | os.PathLike[str],
    feeds: Mapping[str, np.ndarray],
    threads: int,
    repeat: int = 10,
) -> OrtProfile:
    """Run ``model`` ``repeat`` times in onnxruntime (all graph optimizations, ``threads``
    intra-op threads, one inter-op) with its profiler on; median time per node.

    Raises ImportError when onnxruntime is not installed.
    """
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        opts.enable_profiling = True
        opts.profile_file_prefix = str(Path(tmp) / "ort")
        sess = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
        optimized = onnx.load(opts.optimized_model_filepath, load_external_data=False)
        for _ in range(repeat + 1):  # the first run warms up: its samples are dropped
            sess.run(None, dict(feeds))
        events = json.loads(Path(sess.end_profiling()).read_text())
    samples: dict[str, list[float]] = {}
    ops: dict[str, str] = {}
    for e in events:
        name = str(e.get("name", ""))
        if e.get("cat") != "Node" or not name.endswith("_kernel_time"):
            continue
        node = name[: -len("_kernel_time")]
        samples.setdefault(node, []).append(float(e["dur"]) / 1e3)
        ops[node] = str(e.get("args", {}).get("op_name", ""))
    ms = {n: statistics.median(s[1:] or s) for n, s in samples.items()}
    producers = {o: n.name for n in onnx.load(str(model)).graph.node for o in n.output}
    origin = {}
    for node in optimized.graph.node:
        if node.name in ms:  # a re-laid node is named after the value it makes
            origin[node.name] = _original([*node.output, node.name], producers)
    return OrtProfile(ms, ops, {n: origin.get(n) for n in ms})


def _original(names: Sequence[str], producers: Mapping[str, str]) -> str | None:
    """The original node producing the first of ``names`` that is (a re-laid copy of) one
    of its values."""
    for o in names:
        for name in (o, *(o[: -len(s)] for s in _LAYOUT_SUFFIXES if o.endswith(s))):
            if name in producers:
                return producers[name]
    return None


def join(ours: Any, ort: OrtProfile) -> Any:
    """``ours`` (``Module.profile``'s frame) with onnxruntime's time for the nodes each kernel
    computes (``ort_ms``, ``ort_nodes``) and ``speed`` (its time over ours: above 1 we are
    faster); then a row per onnxruntime node that belongs to no original node."""
    import pandas as pd

    kernel_of: dict[str, int] = {}  # the last kernel computing a node makes its output
    for k, nodes in zip(ours["kernel"], ours["nodes"], strict=True):
        for n in str(nodes).split():
            kernel_of[n] = int(k)
    ort_ms: dict[int, float] = {}
    ort_nodes: dict[int, list[str]] = {}
    extra = []
    for node, ms in ort.ms.items():
        k = kernel_of.get(ort.origin.get(node) or "")
        if k is None:
            extra.append({"nodes": node, "ops": ort.op.get(node, ""), "ort_ms": ms})
            continue
        ort_ms[k] = ort_ms.get(k, 0.0) + ms
        ort_nodes.setdefault(k, []).append(node)
    df = ours.copy()
    df["ort_ms"] = [ort_ms.get(int(k), np.nan) for k in df["kernel"]]
    df["ort_nodes"] = [" ".join(ort_nodes.get(int(k), [])) for k in df["kernel"]]
    df["speed"] = df["ort_ms"] / df["ms"]
    if extra:
        df = pd.concat([df, pd.DataFrame(extra)], ignore_index=True)
    return df
