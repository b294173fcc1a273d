"""The seed's shape-transition experiment: a request trace of changing sequence lengths.

Two workloads serve the trace (``--workload``). ``attention``: one attention head's core, ``softmax(Q @ K.T) @ V`` over a sequence of ``S``
tokens (head width 64), served request by request while ``S`` changes: the
three kernels (``matmul`` with ``trans_b``, ``softmax``, ``matmul``) built by
``tuner.build_op`` with ``S = te.var("S", min=8, max=512)`` in each mode:

- ``specialize``: a kernel per new length, compiled when it first arrives;
- ``generic``: one kernel per operator for every length;
- ``bucket``: lengths padded to the next power of two (8 ... 512).

Each mode runs in its own process with an empty kernel cache, so a shape
compiled by one mode is never found by another. The trace goes through four times:
the first pass, cold, gives the cumulative time (compiles included) and the
shape-transition cost (seconds spent building kernels when a new shape
arrived); three more, with everything built and a rest before each, the
steady-state time per request (each request's median, averaged over the
trace). Modes run one after another, not interleaved: each needs a cold
process of its own. With torch installed, ``torch.compile(dynamic=False)`` and
``torch.compile(dynamic=True)`` serve the same trace (``--peers``), each in
its own process, at the same thread count; their transition cost is the time
of the first call at each new length (a compile where dynamo makes one) and
their ``kernels`` the graphs dynamo compiled.

``encoder``: the whole-models issue's encoder stack (BERT-base layers,
``--layers``, default 4) as an ONNX model whose sequence length is symbolic
(``experiments/models.py encoder ... --dynamic-seq``; ``--model`` takes
another file with a symbolic ``seq``, such as the small test model), served
by ``tuner.compile_model(..., dynamic=mode, bounds={"seq": (8, 512)})``,
compiled at the first request: ``specialize`` compiles the model per length,
``generic`` builds its kernels once and plans each length, ``bucket``
compiles per power of two with its softmaxes masked. A new shape's
transition cost is the whole time of its first call (lowering, kernel builds
and the run), as for torch; onnxruntime, which serves any length with no
compile, is a peer too.

Writes the cumulative times per request (``--out``), a summary per mode
(``*_summary.csv``, read by ``experiments/dynamic_shapes.ipynb``) and a plot.

    python experiments/dynamic_shapes.py                 # 300 requests, table + CSV + plot
    python experiments/dynamic_shapes.py --requests 40 --peers none   # a quick look
    python experiments/dynamic_shapes.py --workload encoder --requests 100

Lengths come from a fixed-seed log-normal (median 64) clipped to [8, 512]:
most requests are short, a few long, as in served traffic.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
MODES = ("specialize", "generic", "bucket")
PEERS = ("torch-static", "torch-dynamic")
#: The encoder's modes and its peers.
MODEL_MODES = ("specialize", "generic", "bucket")
MODEL_PEERS = ("onnxruntime", "torch-static", "torch-dynamic")
ENCODER = HERE / "out" / "models" / "encoder_dynamic.onnx"
HEAD = 64
LO, HI = 8, 512
#: Warm passes over the trace; each request's steady-state time is its median.
WARM_ROUNDS = 3


def trace(requests: int, seed: int = 0) -> list[int]:
    """Sequence lengths, skewed short: log-normal with median 64, clipped to [8, 512]."""
    rng = np.random.default_rng(seed)
    raw = rng.lognormal(mean=np.log(64), sigma=0.8, size=requests)
    return [int(v) for v in np.clip(np.round(raw), LO, HI)]


def _inputs(s: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return tuple(rng.standard_normal((s, HEAD)).astype(np.float32) for _ in range(3))  # type: ignore[return-value]


def _tuner_server(mode: str):  # type: ignore[no-untyped-def]
    import tuner
    from tuner import te

    S = te.var("S", min=LO, max=HI)
    kw = {"dynamic": mode}
    scores = tuner.build_op("matmul", M=S, N=S, K=HEAD, trans_b=True, **kw)
    probs = tuner.build_op("softmax", M=S, N=S, **kw)
    mix = tuner.build_op("matmul", M=S, N=HEAD, K=S, **kw)
    scale = np.float32(1 / np.sqrt(HEAD))

    def serve(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
        return mix(probs(scores(q * scale, k)), v)  # type: ignore[no-any-return]

    def compile_seconds() -> float:
        return sum(c.seconds for f in (scores, probs, mix) for c in f.compiles)

    def kernels() -> int:
        return sum(len(f.compiles) for f in (scores, probs, mix))

    return serve, compile_seconds, kernels


def _torch_server(dynamic: bool):  # type: ignore[no-untyped-def]
    import torch

    torch._dynamo.config.cache_size_limit = 1024  # recompile for every shape, never fall back
    torch.set_num_threads(int(os.environ.get("TUNER_THREADS", "2")))

    def attention(q, k, v):  # type: ignore[no-untyped-def]
        return torch.softmax((q / HEAD**0.5) @ k.T, dim=-1) @ v

    fn = torch.compile(attention, dynamic=dynamic)
    spent = [0.0]
    seen: set[int] = set()

    def serve(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
        t = [torch.from_numpy(a) for a in (q, k, v)]
        with torch.no_grad():
            if q.shape[0] not in seen:  # the first call at a shape pays any compile
                seen.add(q.shape[0])
                t0 = time.perf_counter()
                out = fn(*t)
                spent[0] += time.perf_counter() - t0
                return out.numpy()  # type: ignore[no-any-return]
            return fn(*t).numpy()  # type: ignore[no-any-return]

    def graphs() -> int:  # what dynamo compiled (with dynamic=True, far fewer than shapes)
        return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])

    return serve, lambda: spent[0], graphs


def _bounds(path: Path) -> dict[str, tuple[int, int]]:
    """``seq`` in [LO, HI]; any other symbol (the small model's batch) at 1, as the trace feeds."""
    import onnx

    dims = onnx.load(path).graph.input[0].type.tensor_type.shape.dim
    return {d.dim_param: (LO, HI) if d.dim_param == "seq" else (1, 1) for d in dims if d.dim_param}


def _hidden(path: Path) -> int:
    import onnx

    dims = onnx.load(path).graph.input[0].type.tensor_type.shape.dim
    return int(dims[-1].dim_value)


def _first_calls(serve, is_new):  # type: ignore[no-untyped-def]
    """``serve`` timing the calls that meet a new shape: what a shape transition costs."""
    spent = [0.0]

    def timed(x: np.ndarray) -> np.ndarray:
        if not is_new(x):
            return serve(x)  # type: ignore[no-any-return]
        t0 = time.perf_counter()
        out = serve(x)
        spent[0] += time.perf_counter() - t0
        return out  # type: ignore[no-any-return]

    return timed, lambda: spent[0]


def _model_server(name: str, path: Path):  # type: ignore[no-untyped-def]
    """The encoder served by a mode of ``compile_model`` or a peer: (serve(x), transition, kernels)."""
    if name in MODEL_MODES:
        from tuner.model import compile_model

        mods: list[Any] = []
        spent = [0.0]

        def serve(x: np.ndarray) -> np.ndarray:
            t0 = time.perf_counter()
            if not mods:  # compiled on the first request: generic builds its kernels here
                mods.append(compile_model(path, dynamic=name, bounds=_bounds(path)))
            before = len(mods[0].plans)
            out = mods[0].run({"input": x})[0]
            if len(mods[0].plans) > before:  # this call met a new shape (or bucket)
                spent[0] += time.perf_counter() - t0
            return out  # type: ignore[no-any-return]

        def kernels() -> int:
            if mods[0].generic is not None:
                return len(mods[0].generic.families)
            return sum(len(p.tasks()) for p in mods[0].plans)

        return serve, lambda: spent[0], kernels
    if name == "onnxruntime":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = int(os.environ.get("TUNER_THREADS", "2"))
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        return (lambda x: sess.run(None, {"input": x})[0]), (lambda: 0.0), (lambda: 0)
    import torch

    sys.path.insert(0, str(HERE))
    import models

    torch._dynamo.config.cache_size_limit = 1024
    torch.set_num_threads(int(os.environ.get("TUNER_THREADS", "2")))
    small = _hidden(path) == 32
    layers = sum(1 for n in _onnx_ops(path) if n == "Softmax")
    model, _ = models.build("encoder", small=small, layers=layers, dynamic_seq=True)
    fn = torch.compile(model, dynamic=name == "torch-dynamic")
    shapes: set[int] = set()

    def run(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return fn(torch.from_numpy(x)).numpy()  # type: ignore[no-any-return]

    def new(x: np.ndarray) -> bool:
        fresh = x.shape[1] not in shapes
        shapes.add(x.shape[1])
        return fresh

    serve, spent_fn = _first_calls(run, new)
    return serve, spent_fn, lambda: int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def _onnx_ops(path: Path) -> list[str]:
    import onnx

    return [n.op_type for n in onnx.load(path).graph.node]


def _reference(path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {"input": x})[0]  # type: ignore[no-any-return]


def run_one(name: str, lengths: list[int], model: Path | None = None) -> dict[str, object]:
    """Serve ``lengths`` twice with ``name`` (a mode or a peer): cold, then warm."""
    rng = np.random.default_rng(1)
    requests: list[tuple[np.ndarray, ...]]
    if model is not None:
        serve, compile_seconds, kernels = _model_server(name, model)
        hidden = _hidden(model)
        requests = [(rng.standard_normal((1, s, hidden)).astype(np.float32),) for s in lengths]
    elif name in MODES:
        serve, compile_seconds, kernels = _tuner_server(name)
        requests = [_inputs(s, rng) for s in lengths]
    else:
        serve, compile_seconds, kernels = _torch_server(name == "torch-dynamic")
        requests = [_inputs(s, rng) for s in lengths]
    cumulative, elapsed = [], 0.0
    for args in requests:
        t0 = time.perf_counter()
        out = serve(*args)
        elapsed += time.perf_counter() - t0
        cumulative.append(elapsed)
    if model is not None:  # the longest request against onnxruntime
        longest = max(requests, key=lambda a: a[0].shape[1])
        np.testing.assert_allclose(
            serve(*longest), _reference(model, *longest), rtol=1e-3, atol=1e-3
        )
    else:
        q, k, v = requests[-1]
        _check(out, q, k, v)
    transition = compile_seconds()
    rounds: list[list[float]] = []
    for _ in range(WARM_ROUNDS):  # the trace again, everything built: a median per request
        time.sleep(0.5)  # let threads that spin after a call settle first
        times = []
        for args in requests:
            t0 = time.perf_counter()
            serve(*args)
            times.append(time.perf_counter() - t0)
        rounds.append(times)
    warm = [statistics.median(per) for per in zip(*rounds, strict=True)]
    return {
        "name": name,
        "kernels": kernels(),
        "transition_s": transition,
        "total_s": elapsed,
        "steady_ms": 1e3 * statistics.fmean(warm),
        "cumulative_s": cumulative,
    }


def _check(out: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
    s = q @ k.T / np.sqrt(HEAD)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    want = (e / e.sum(axis=1, keepdims=True)) @ v
    np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-4)


def _child(name: str, requests: int, seed: int, model: Path | None) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="tuner-dyn-") as cache:
        env = {**os.environ, "TUNER_CACHE_DIR": cache, "PYTHONPATH": str(HERE.parent)}
        cmd = [sys.executable, __file__, "--child", name, "--requests", str(requests)]
        cmd += ["--seed", str(seed)]
        if model is not None:
            cmd += ["--workload", "encoder", "--model", str(model)]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{name} failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--peers", choices=("auto", "none"), default="auto")
    ap.add_argument("--workload", choices=("attention", "encoder"), default="attention")
    ap.add_argument(
        "--model", help=f"encoder: an ONNX file with a symbolic seq (default {ENCODER})"
    )
    ap.add_argument("--layers", type=int, default=4, help="encoder layers when it is exported")
    ap.add_argument("--out", help="default: experiments/results/dynamic_shapes[_encoder].csv")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    lengths = trace(a.requests, a.seed)
    model = _encoder_file(a) if a.workload == "encoder" else None
    if a.child:
        print(json.dumps(run_one(a.child, lengths, model)))
        return 0
    names = list(MODES if model is None else MODEL_MODES)
    if model is not None:
        names.append("onnxruntime")
    if a.peers == "auto":
        try:
            import torch  # noqa: F401

            names += PEERS
        except ImportError:
            print("torch is not installed: the torch.compile peers are left out")
    what = "attention head" if model is None else f"encoder {model.name}"
    print(f"{what}: {a.requests} requests, {len(set(lengths))} distinct lengths in [{LO}, {HI}]")
    results = [_child(n, a.requests, a.seed, model) for n in names]
    base = next(r for r in results if r["name"] == "specialize")
    print(
        f"{'mode':15} {'kernels':>8} {'transition s':>13} {'vs specialize':>14}"
        f" {'steady ms':>10} {'vs specialize':>14} {'total s':>8}"
    )
    for r in results:
        cut = 1 - float(r["transition_s"]) / float(base["transition_s"])  # type: ignore[arg-type]
        slow = float(r["steady_ms"]) / float(base["steady_ms"])  # type: ignore[arg-type]
        print(
            f"{r['name']:15} {r['kernels']:>8} {r['transition_s']:>13.2f} {-cut:>+13.0%}"
            f" {r['steady_ms']:>10.3f} {slow:>13.2f}x {r['total_s']:>8.1f}"
        )
    suffix = "" if model is None else "_encoder"
    _write(results, lengths, Path(a.out or HERE / "results" / f"dynamic_shapes{suffix}.csv"))
    return 0


def _encoder_file(a: argparse.Namespace) -> Path:
    """The encoder model: ``--model``, else the full-size one, exported on first use."""
    if a.model:
        return Path(a.model).resolve()
    path = ENCODER if a.layers == 4 else ENCODER.with_name(f"encoder_dynamic_{a.layers}.onnx")
    if not path.exists():
        sys.path.insert(0, str(HERE))
        import models

        models.export("encoder", path, layers=a.layers, dynamic_seq=True)
    return path


SUMMARY = ("name", "kernels", "transition_s", "steady_ms", "total_s")


def _write(results: list[dict[str, object]], lengths: list[int], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = out.with_name(f"{out.stem}_summary.csv")
    with summary.open("w") as f:  # what the notebook (experiments/dynamic_shapes.ipynb) reads
        f.write(",".join(SUMMARY) + "\n")
        for r in results:
            f.write(",".join(str(r[k]) for k in SUMMARY) + "\n")
    with out.open("w") as f:
        f.write("request,length," + ",".join(str(r["name"]) for r in results) + "\n")
        for i, s in enumerate(lengths):
            cells = ",".join(f"{r['cumulative_s'][i]:.4f}" for r in results)  # type: ignore[index]
            f.write(f"{i},{s},{cells}\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"wrote {out} (matplotlib not installed: no plot)")
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    for r in results:
        ax.plot(r["cumulative_s"], label=str(r["name"]))  # type: ignore[arg-type]
    ax.set_xlabel("request")
    ax.set_ylabel("cumulative seconds (compiles included)")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=120)
    print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    sys.exit(main())
