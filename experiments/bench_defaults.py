"""Default schedules on every task shape real models have, beside the best peer for the operator.

Most kernels a user runs are untuned, so a template's default must hold on
every shape a model brings, on every machine. This sweep collects the task
shapes of whole models (the ONNX files given, or the models of
``experiments/models.py`` exported here), builds each distinct task of the
operators asked for with its template's default config (no tuning log),
checks it against the operator's NumPy reference, and times it beside its
peer, the same thread count for both, in interleaved rounds, each side in a
block after a rest (``tuner.measure.interleave``):

=====================  =====================================================
operator               peer
=====================  =====================================================
matmul, batch_matmul,  NumPy's ``matmul`` (OpenBLAS) into a preallocated
dense                  output (dense: ``x @ W.T``)
conv2d,                PyTorch's ``conv2d`` (oneDNN), ``torch.set_num_threads``
depthwise_conv2d,      the same thread count; NumPy's im2col + BLAS without torch
conv2d_winograd        (Winograd's: the same convolution, a 3 x 3 weight)
=====================  =====================================================

The peer computes the product only, while a model's task also computes its
fused epilogue (bias, activation, residual): the ratio ``speed`` (peer
seconds over ours: above 1 we are faster) is conservative where a task has
one. A convolution of one image reaches the model compiler as a ``matmul``
over its windows (``channels=rows``); its copy of the windows (``im2col``) is
a task of its own, left out here.

It prints, per operator, the distribution of ``speed`` (min, 10th percentile,
median, geometric mean) and the ten worst shapes, and writes every row to
``experiments/results/bench_defaults_<machine>.csv``, the machine named by
``lscpu``'s model name, the CPU family and model, and the target's fingerprint.
Run NumPy at its best (``OPENBLAS_CORETYPE`` and ``OPENBLAS_L2_SIZE`` unset)::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python experiments/bench_defaults.py
    python experiments/bench_defaults.py --models resnet18 --ops matmul --rounds 3
    python experiments/bench_defaults.py --onnx model.onnx --out /tmp/d.csv
"""

from __future__ import annotations

import argparse
import csv
import math
import platform
import re
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

from bench_peers import NUMPY_PEERS, torch_fn  # noqa: E402

from search_spaces.conv2d import Conv2d  # noqa: E402
from tuner.measure.interleave import interleaved, medians  # noqa: E402
from tuner.target import Target  # noqa: E402
from tuner.task import Task  # noqa: E402

#: The operators whose defaults the sweep checks, and the kind of peer each has.
OPERATORS = ("matmul", "dense", "batch_matmul", "conv2d", "depthwise_conv2d", "conv2d_winograd")
_TORCH_PEER = ("conv2d", "depthwise_conv2d", "conv2d_winograd")
MODELS = ("resnet18", "resnet50", "mobilenet_v2", "encoder")


def machine_name(target: Target) -> str:
    """``lscpu``'s model name, the CPU family and model, and the target's fingerprint, as a slug."""
    name, family, model = platform.processor() or "cpu", "", ""
    try:
        info = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        info = ""
    fields = dict(
        (k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in info.splitlines())
    )
    name = fields.get("Model name", name)
    family, model = fields.get("CPU family", family), fields.get("Model", model)
    slug = re.sub(r"[^a-z0-9]+", "-", f"{name} f{family} m{model}".lower()).strip("-")
    return f"{slug}-{target.fingerprint}"


def model_files(names: Iterable[str], folder: Path) -> list[Path]:
    """The ONNX files of ``experiments/models.py``'s models, exported once into ``folder``."""
    paths = []
    for name in names:
        path = folder / f"{name}.onnx"
        if not path.exists():
            import models  # PyTorch: the bench extra

            folder.mkdir(parents=True, exist_ok=True)
            models.export(name, path)
        paths.append(path)
    return paths


def static_shapes(path: Path, dims: dict[str, int]) -> dict[str, list[int]]:
    """Each graph input's shape, a symbolic dimension taking its value in ``dims`` (else 1)."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    inits = {i.name for i in graph.initializer}
    return {
        i.name: [
            d.dim_value if d.HasField("dim_value") else dims.get(d.dim_param, 1)
            for d in i.type.tensor_type.shape.dim
        ]
        for i in graph.input
        if i.name not in inits
    }


def model_tasks(
    paths: Iterable[Path], target: Target, ops: Iterable[str], dims: dict[str, int] | None = None
) -> dict[str, tuple[Task, int, set[str]]]:
    """Each distinct task of ``ops`` in the models: (task, occurrences, the models it is in)."""
    from tuner.graph.onnx_import import from_onnx
    from tuner.model.lowered import Lowered

    wanted = set(ops)
    found: dict[str, tuple[Task, int, set[str]]] = {}
    for path in paths:
        graph = from_onnx(str(path), static_shapes(path, dims or {}))
        lowered = Lowered.from_graph(graph, target, fuse=True)
        for spec in lowered.specs:
            task = spec.task
            if task.op_name not in wanted:
                continue
            task, count, where = found.get(task.key, (task, 0, set()))
            found[task.key] = (task, count + 1, where | {path.stem})
    return found


def _peer(task: Task, inputs: list[np.ndarray], threads: int) -> tuple[str, Callable[[], Any]]:
    """The operator's best peer on ``inputs`` (the product alone: no epilogue)."""
    op, args = task.op_name, task.args
    if op in _TORCH_PEER:
        try:
            import torch
        except ImportError:
            pass
        else:
            torch.set_num_threads(threads)
            if op == "conv2d_winograd":  # the same convolution, direct, from a 3 x 3 weight
                op, args = "conv2d", {**args, "R": 3, "S": 3, "stride": 1, "dilation": 1}
                args |= {"layout": "NHWC", "weights": "OIHW", "block": 0}
                w = np.random.default_rng(0).standard_normal((args["K"], args["C"], 3, 3))
                inputs = [inputs[0], w.astype(np.float32), *inputs[2:]]
            fn = torch_fn(op, {**args, "activation": "none"})
            if op == "conv2d":  # PyTorch's weight layout, packed before the timing
                w = np.ascontiguousarray(Conv2d.from_args(args).oihw(inputs[1]))
                inputs = [inputs[0], w, *inputs[2:]]
            ts = [torch.from_numpy(x) for x in inputs[:2]]
            if op == "conv2d" and args.get("bias"):
                ts.append(torch.from_numpy(inputs[2]))
            return "torch", lambda: fn(*ts)
    peer_args = {**args, "activation": "none"}
    count = 3 if op in ("dense", "conv2d") and args.get("bias") else 2
    return "numpy", NUMPY_PEERS[op](peer_args, *inputs[:count])


def time_task(task: Task, rounds: int, min_sample: float) -> dict[str, Any]:
    """Build ``task``'s default, check it against the reference, and time it beside its peer."""
    from tuner.kernels import build_task

    op = task.operator
    inputs = op.make_inputs(task.args, target=task.target)
    row: dict[str, Any] = {"op": task.op_name, "args": _args_text(task.args)}
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        built = build_task(task, records=None)
    row["build_s"] = round(time.perf_counter() - t0, 2)
    row["config"] = " ".join(f"{k}={v}" for k, v in sorted(built.config.items()))
    out = np.zeros(built.kernel.args[-1].shape, built.kernel.args[-1].dtype)
    built.kernel(*inputs, out)
    ref = np.asarray(op.reference(*inputs, **task.args))
    err = float(np.max(np.abs(out.astype(np.float64) - ref))) if ref.size else 0.0
    if err > 1e-3 * (float(np.max(np.abs(ref))) or 1.0):
        row["note"] = f"WRONG ANSWER (max error {err:.3g}), not timed"
        return row
    name, peer = _peer(task, inputs, task.target.threads or 1)

    def ours() -> None:
        built.kernel(*inputs, out)

    times = medians(interleaved({"default": ours, name: peer}, rounds, min_sample))
    flops = task.flops
    row.update(
        peer=name,
        default_ms=_sig(times["default"] * 1e3),
        peer_ms=_sig(times[name] * 1e3),
        speed=_sig(times[name] / times["default"]),
        default_gflops=_sig(flops / times["default"] / 1e9),
        peer_gflops=_sig(flops / times[name] / 1e9),
    )
    return row


def _sig(x: float) -> float:
    """``x`` to 4 significant figures."""
    return float(f"{x:.4g}")


def _args_text(args: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in args.items())


def summarize(rows: list[dict[str, Any]]) -> str:
    """Per operator: shapes, min, 10th percentile, median and geometric mean of ``speed``;
    then the ten worst shapes."""
    timed = [r for r in rows if "speed" in r]
    lines = [f"{'operator':<18}{'shapes':>7}{'min':>8}{'p10':>8}{'median':>8}{'geomean':>9}"]
    for op in sorted({r["op"] for r in timed}):
        s = sorted(float(r["speed"]) for r in timed if r["op"] == op)
        p10 = s[min(len(s) - 1, int(0.1 * len(s)))]
        geo = math.exp(statistics.fmean(math.log(x) for x in s))
        lines.append(
            f"{op:<18}{len(s):>7}{s[0]:>8.2f}{p10:>8.2f}{statistics.median(s):>8.2f}{geo:>9.2f}"
        )
    lines.append("\nthe ten worst (speed = peer time / default time):")
    for r in sorted(timed, key=lambda r: float(r["speed"]))[:10]:
        lines.append(
            f"  {r['speed']:>6.2f}  {r['op']} {r['args']}  ({r['default_gflops']} vs "
            f"{r['peer']} {r['peer_gflops']} GFLOP/s)"
        )
    wrong = [r for r in rows if "note" in r]
    lines += [f"  {r['op']} {r['args']}: {r['note']}" for r in wrong]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help="models of experiments/models.py")
    ap.add_argument("--onnx", action="append", default=[], help="an ONNX file (repeatable)")
    ap.add_argument("--ops", default=",".join(OPERATORS))
    ap.add_argument(
        "--dim", action="append", default=[], help="NAME=VALUE for a symbolic dimension (else 1)"
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-sample", type=float, default=0.02, help="seconds per timed sample")
    ap.add_argument("--limit", type=int, default=0, help="time at most this many tasks")
    ap.add_argument("--cache", type=Path, default=ROOT / "experiments" / "out" / "models")
    ap.add_argument("--out", type=Path, help="the CSV (default: experiments/results/...)")
    opts = ap.parse_args(argv)
    target = Target.from_name("cpu", num_threads=opts.threads)
    ops = [o for o in opts.ops.split(",") if o]
    unknown = sorted(set(ops) - set(OPERATORS))
    if unknown:
        print(f"bench_defaults: unknown operator(s) {', '.join(unknown)}", file=sys.stderr)
        return 2
    paths = [Path(p) for p in opts.onnx]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        print(f"bench_defaults: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    names = [m for m in opts.models.split(",") if m] if not paths else []
    paths += model_files(names, opts.cache)
    try:
        dims = {k: int(v) for k, _, v in (d.partition("=") for d in opts.dim)}
    except ValueError:
        print(f"bench_defaults: --dim takes NAME=INTEGER, not {opts.dim}", file=sys.stderr)
        return 2
    tasks = model_tasks(paths, target, ops, dims)
    items = sorted(tasks.values(), key=lambda t: (t[0].op_name, t[0].key))
    if opts.limit:
        items = items[: opts.limit]
    out = (
        opts.out or ROOT / "experiments" / "results" / f"bench_defaults_{machine_name(target)}.csv"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    fields = [
        "op", "args", "models", "occurrences", "peer", "default_ms", "peer_ms", "speed",
        "default_gflops", "peer_gflops", "build_s", "config", "note",
    ]  # fmt: skip
    rows = []
    print(f"{len(items)} distinct tasks; {target.threads} threads; writing {out}", flush=True)
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for i, (task, count, where) in enumerate(items, 1):
            row = {**time_task(task, opts.rounds, opts.min_sample)}
            row.update(models=" ".join(sorted(where)), occurrences=count)
            rows.append(row)
            writer.writerow(row)
            f.flush()
            print(
                f"[{i}/{len(items)}] {row['op']} {row['args']}: "
                f"{row.get('speed', row.get('note'))}",
                flush=True,
            )
    print(summarize(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
