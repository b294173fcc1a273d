"""Whole models beside onnxruntime, PyTorch eager and torch.compile, in one process.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \\
        python experiments/bench_models.py --models resnet50,mobilenet_v2,encoder --threads 1,2

Each model (``experiments/models.py``: random weights, batch 1, exported once
to experiments/out/models/) is compiled by this project (default schedules,
or the best records of ``--log``), and run beside onnxruntime
(``intra_op_num_threads`` = the same thread count) and, where torch is
installed, PyTorch eager and ``torch.compile``, at each thread count. Before
timing, every output is checked against onnxruntime (rtol 1e-3). Timing is
``tuner.measure.interleave``: every side in blocks of back-to-back calls after
a rest and a warm-up, rounds interleaved in a rotating order, medians.

Compile times come from fresh processes: "cold" into an empty kernel cache,
"cached" a second process on the same cache (the cost a user pays again).
"per launch" is the module's own cost between kernels: the run's median less
the sum of its kernels' medians (``Module`` profile), divided by the number
of kernels. Ratios are peer time / this project's time (above 1: faster).
Break-even: the runs after which the cold compile has paid for itself
against onnxruntime ("never" while slower), beside torch.compile's compile
time (its first call) and the runs it needs to pay for itself over eager.

With ``--log`` the same model on its default schedules ("default") is timed
in the same rounds, and the table gains the tuning time (the wall time
between the log's first and last records of the model's tasks, pauses over
10 minutes left out) and the runs after which the tuning has paid for
itself against the default schedules.
Writes experiments/out/bench_models.csv.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "experiments" / "out"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

CHILD = """
import json, sys, time, warnings
sys.path.insert(0, {root!r})
t0 = time.perf_counter()
import tuner
from tuner.target import Target
t1 = time.perf_counter()
warnings.simplefilter("ignore")
mod = tuner.compile_model({path!r}, {log!r}, target=Target.from_name("cpu", num_threads={threads}))
t2 = time.perf_counter()
print(json.dumps({{"import": t1 - t0, "compile": t2 - t1, "kernels": len(mod.plans[0].specs)}}))
"""


def model_path(name: str) -> Path:
    path = OUT / "models" / f"{name}.onnx"
    if not path.exists():
        from models import export

        export(name, path)
    return path


def timed_compile(path: Path, log: str | None, threads: int, cache: str) -> dict[str, float]:
    """compile_model in a fresh process with the kernel cache at ``cache``."""
    env = {**os.environ, "TUNER_CACHE_DIR": cache}
    code = CHILD.format(root=str(ROOT), path=str(path), log=log, threads=threads)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def peers(path: Path, name: str, threads: int, feeds: dict[str, np.ndarray]) -> dict[str, Any]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    fns: dict[str, Any] = {"onnxruntime": lambda: sess.run(None, feeds)}
    try:
        import torch
        from models import build
    except ImportError:
        return {"fns": fns, "sess": sess}
    torch.set_num_threads(threads)
    model, _ = build(name)
    x = torch.from_numpy(next(iter(feeds.values())))

    def eager() -> Any:
        with torch.inference_mode():
            return model(x)

    torch._dynamo.reset()  # else a second thread count reuses the first one's compiled graphs
    compiled = torch.compile(model)

    def comp() -> Any:
        with torch.inference_mode():
            return compiled(x)

    started = time.perf_counter()
    comp()  # Inductor compiles at the first call: outside the timed blocks, timed here
    compile_s = time.perf_counter() - started
    fns["torch"] = eager
    fns["torch.compile"] = comp
    return {"fns": fns, "sess": sess, "torch_compile_s": compile_s}


def tuning_seconds(log: str, task_keys: set[str], target: Any) -> float:
    """Wall time the log's tuning of these tasks took: first to last record, less long pauses.

    A pause of more than 10 minutes between two records (a resumed run) is
    not counted.
    """
    from records import load

    stamps = sorted(
        r.timestamp
        for r in load(log)
        if r.target.kind == target.kind
        and f"{r.workload.key}@{target.kind}/threads={r.target.threads}" in task_keys
    )
    return sum(b - a for a, b in itertools.pairwise(stamps) if b - a < 600)


def bench(name: str, threads: int, rounds: int, log: str | None) -> dict[str, Any]:
    import warnings

    import tuner
    from tuner.measure.interleave import interleaved, medians
    from tuner.target import Target

    path = model_path(name)
    with tempfile.TemporaryDirectory() as cache:
        cold = timed_compile(path, log, threads, cache)
        cached = timed_compile(path, log, threads, cache)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod = tuner.compile_model(path, log, target=Target.from_name("cpu", num_threads=threads))
    plan = mod.plans[0]
    rng = np.random.default_rng(0)
    feeds = {
        n: rng.standard_normal(s).astype(np.float32)
        for n, s in zip(mod.input_names, plan.signature, strict=True)
    }
    p = peers(path, name, threads, feeds)
    want = p["sess"].run(None, feeds)
    got = mod.run(feeds)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-3)
    fns = {"tuner": lambda: mod.run(feeds)}
    if log is not None:  # the same model on default schedules, timed in the same rounds
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            default = tuner.compile_model(path, target=Target.from_name("cpu", num_threads=threads))
        fns["default"] = lambda: default.run(feeds)
    fns.update(p["fns"])
    times = medians(interleaved(fns, rounds=rounds))
    kernels = sum(plan.profile(list(feeds.values()), repeat=10))
    launches = len(plan.specs)
    row: dict[str, Any] = {
        "model": name,
        "threads": threads,
        "kernels": launches,
        "tasks": len(plan.tasks()),
        "tuned_tasks": sum(u.tuned for u in plan.tasks()),
        "cold_compile_s": round(cold["compile"], 2),
        "cached_compile_s": round(cached["compile"], 2),
        "import_s": round(cached["import"], 2),
        "per_launch_us": round(max(0.0, times["tuner"] - kernels) / launches * 1e6, 2),
    }
    for k, t in times.items():
        row[f"{k}_ms"] = round(t * 1e3, 3)
        if k != "tuner":
            row[f"x_{k}"] = round(t / times["tuner"], 2)
    # Break-even: runs until a compile pays for itself against the peer it beats.
    saving = times["onnxruntime"] - times["tuner"]
    row["breakeven_vs_ort_runs"] = round(cold["compile"] / saving) if saving > 0 else "never"
    if log is not None:
        keys = {u.key for u in plan.tasks()}
        row["tuning_s"] = round(tuning_seconds(log, keys, plan.target), 1)
        gain = times["default"] - times["tuner"]
        row["tuning_breakeven_runs"] = round(row["tuning_s"] / gain) if gain > 0 else "never"
    if "torch_compile_s" in p:
        row["torch_compile_s"] = round(p["torch_compile_s"], 1)
        gain = times["torch"] - times["torch.compile"]
        row["inductor_breakeven_runs"] = round(p["torch_compile_s"] / gain) if gain > 0 else "never"
    return row


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--models", default="resnet50,mobilenet_v2,encoder")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--log", default=None, help="tuning log(s) whose best records to use")
    p.add_argument("--out", type=Path, default=OUT / "bench_models.csv")
    ns = p.parse_args()
    rows = []
    for name in ns.models.split(","):
        for t in (int(x) for x in ns.threads.split(",")):
            row = bench(name, t, ns.rounds, ns.log)
            print(json.dumps(row), flush=True)
            rows.append(row)
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    fields = sorted(
        {k for r in rows for k in r}, key=lambda k: list(rows[0]).index(k) if k in rows[0] else 99
    )
    with ns.out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    cols = ["model", "threads", "tuner_ms", "onnxruntime_ms", "x_onnxruntime"]
    cols += [c for c in ("tuned_tasks", "default_ms", "x_default") if c in fields and ns.log]
    cols += [
        c for c in ("torch_ms", "x_torch", "torch.compile_ms", "x_torch.compile") if c in fields
    ]
    cols += ["kernels", "per_launch_us", "cold_compile_s", "cached_compile_s"]
    cols += [
        c
        for c in (
            "breakeven_vs_ort_runs",
            "tuning_s",
            "tuning_breakeven_runs",
            "torch_compile_s",
            "inductor_breakeven_runs",
        )
        if c in fields
    ]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r.get(c, "")) for c in cols) + " |")


if __name__ == "__main__":
    main()
