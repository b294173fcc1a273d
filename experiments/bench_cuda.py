"""Tuned CUDA kernels beside cuBLAS (CuPy) and PyTorch on one GPU: issue 15's benchmark.

    python experiments/bench_cuda.py             # on a GPU machine: under 8 minutes (--budget 420)
    python experiments/bench_cuda.py --smoke     # tiny sizes; Numba's simulator without a GPU

For ``--target cuda`` it tunes four workloads with a small budget each (the
project's ``tuner.tuning.tune.tune``, every measurement appended to ``--log``):
matmul 4096^3 float32, conv2d 3x3 (N=8 C=256 H=W=28 K=256, pad 1), softmax
8192x4096 and layer norm 8192x4096. ``--budget`` bounds the whole run: the
tuning of each workload stops at its trial budget or at its share of the
time left, whichever comes first. Then, in this one process, each best
record is built (``tuner.apply_best`` + ``tuner.build_op``) and timed beside
its peers:

- CuPy: ``cupy.matmul`` (cuBLAS), softmax and layer norm written with CuPy
  ops (max, exp, sum; mean, var, rsqrt); CuPy has no conv2d of its own, so
  that row has no CuPy figure (a note says so).
- PyTorch CUDA: ``torch.matmul``, ``F.conv2d`` (cuDNN, ``benchmark`` on),
  ``torch.softmax``, ``F.layer_norm``. TF32 is switched off for matmul and
  convolution: every side computes in float32.

Every output (ours from the very device buffers that are timed) is checked
against the operator's NumPy reference before any timing. Timing is by CUDA
events on the default stream: our kernel through the backend's own
``CudaTimer`` (inputs copied to the device once, launches between two
events), the peers through ``cupy.cuda.Event`` / ``torch.cuda.Event`` the
same way. A sample launches a side as many times as fill ``--min-sample``
seconds (a launch costs microseconds of host time, so small kernels are
timed many launches between two events); each round takes ``--samples`` of
them per side after a short rest and a warm-up, in an order that rotates
from round to round, and a side's figure is the median of all its samples.

Prints a table (ratios are peer time over ours: above 1 we are faster),
writes ``--out`` (experiments/out/bench_cuda.csv; bench_cuda_smoke.csv for
a smoke run, whose log is apart too) and says which of the issue's bars it
meets: tuned matmul >= 0.5x cuBLAS, softmax >= 0.8x PyTorch. A peer that is not installed, or has no GPU, is skipped with one
line. ``--smoke`` runs the same path at tiny sizes with 2 trials each; with
no GPU it sets ``NUMBA_ENABLE_CUDASIM=1`` before Numba is imported, and the
simulator's timings (its wall clock, Python threads) mean nothing. With
neither a GPU nor ``--smoke`` it says so in one line and exits non-zero.

On a lent GPU machine without network (numba, numba-cuda, CuPy and PyTorch
there; optuna and xgboost not), the wheels travel: fetch them here once,
then run one command there with the folder carried::

    pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .whl optuna==5.0.0 alembic==1.20.1 sqlalchemy==2.1.9 mako==1.4.3 colorlog==6.12.0 \
        xgboost-cpu==3.2.0 numba-cuda==0.30.4
    pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl \
        && PYTHONPATH=/tmp/site:$PWD python3 experiments/bench_cuda.py --out $OUT/bench_cuda.csv --log $OUT/bench_cuda.jsonl
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from bench_cuda_report import Row, Workload, bars, table, write_csv
from cuda_peers import cupy_side, first_line, interleaved, load_peers, torch_side

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "experiments" / "out"


FULL = [
    Workload("matmul 4096^3", "matmul", {"M": 4096, "N": 4096, "K": 4096}),
    Workload(
        "conv2d 3x3 N=8 C=K=256 28x28",
        "conv2d",
        {"N": 8, "C": 256, "H": 28, "W": 28, "K": 256, "R": 3, "S": 3, "pad": 1},
    ),
    Workload("softmax 8192x4096", "softmax", {"M": 8192, "N": 4096}),
    Workload("layer_norm 8192x4096", "layer_norm", {"M": 8192, "N": 4096}),
]
SMOKE = [
    Workload("matmul 16^3", "matmul", {"M": 16, "N": 16, "K": 16}),
    Workload(
        "conv2d 3x3 N=1 C=K=4 6x6",
        "conv2d",
        {"N": 1, "C": 4, "H": 6, "W": 6, "K": 4, "R": 3, "S": 3, "pad": 1},
    ),
    Workload("softmax 8x32", "softmax", {"M": 8, "N": 32}),
    Workload("layer_norm 8x32", "layer_norm", {"M": 8, "N": 32}),
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny sizes, 2 trials, simulator if no GPU")
    p.add_argument("--trials", type=int, default=None, help="per workload (default 32; smoke 2)")
    p.add_argument(
        "--budget",
        type=float,
        default=420.0,
        help="seconds for the whole run (default 420); tuning gets what timing does not need",
    )
    p.add_argument("--strategy", default="xgb", help="search strategy (default xgb)")
    p.add_argument("--jobs", type=int, default=None, help="build processes (default: cores, <= 8)")
    p.add_argument("--retime", type=int, default=None, help="leaders re-timed (default 2; smoke 0)")
    p.add_argument("--log", type=Path, default=None, help="(default out/bench_cuda[_smoke].jsonl)")
    p.add_argument("--out", type=Path, default=None, help="(default out/bench_cuda[_smoke].csv)")
    p.add_argument("--no-tune", action="store_true", help="time the best records already in --log")
    p.add_argument("--only", default="", help="comma-separated ops (matmul,conv2d,softmax,...)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 5)")
    p.add_argument("--samples", type=int, default=None, help="samples per side a round (3)")
    p.add_argument("--min-sample", type=float, default=None, help="seconds a sample (0.02)")
    p.add_argument("--rest", type=float, default=0.1, help="seconds of rest before each side")
    p.add_argument("--seed", type=int, default=0)
    ns = p.parse_args(argv)
    small = ns.smoke
    stem = OUT / ("bench_cuda_smoke" if small else "bench_cuda")  # a smoke run keeps off the GPU's
    ns.log = ns.log if ns.log is not None else stem.with_suffix(".jsonl")
    ns.out = ns.out if ns.out is not None else stem.with_suffix(".csv")
    ns.trials = ns.trials if ns.trials is not None else (2 if small else 32)
    ns.retime = ns.retime if ns.retime is not None else (0 if small else 2)
    ns.rounds = ns.rounds if ns.rounds is not None else (1 if small else 5)
    ns.samples = ns.samples if ns.samples is not None else (2 if small else 3)
    ns.min_sample = ns.min_sample if ns.min_sample is not None else (0.0 if small else 0.02)
    if small:
        ns.rest = min(ns.rest, 0.01)
    return ns


# -- is there a GPU? (asked of the driver, before Numba is imported) --------------------------


def gpu_count() -> int:
    """CUDA devices the driver sees (0 without a driver); Numba is not imported for this.

    The driver is the library Numba would load: ``NUMBA_CUDA_DRIVER`` where it is set.
    """
    try:
        lib = ctypes.CDLL(os.environ.get("NUMBA_CUDA_DRIVER") or "libcuda.so.1")
    except OSError:
        return 0
    try:
        if lib.cuInit(0) != 0:
            return 0
        n = ctypes.c_int(0)
        if lib.cuDeviceGetCount(ctypes.byref(n)) != 0:
            return 0
        return n.value
    except AttributeError:
        return 0


def choose_device(smoke: bool) -> tuple[bool, str | None]:
    """(simulated, error): the simulator is set up for a smoke run without a GPU.

    ``NUMBA_ENABLE_CUDASIM=1`` already in the environment is respected for a
    smoke run; a full run needs a real GPU.
    """
    asked = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
    if asked:
        if smoke:
            return True, None
        return True, (
            "bench_cuda: NUMBA_ENABLE_CUDASIM=1 is set; the full benchmark needs a real GPU"
            " (unset it), or run --smoke"
        )
    if gpu_count() > 0:
        return False, None
    if not smoke:
        return True, (
            "bench_cuda: no CUDA GPU on this machine (the driver sees none); run it where"
            " there is one, or add --smoke to run tiny sizes on Numba's CUDA simulator"
        )
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # read by Numba when it is first imported
    return True, None


# -- one workload: tune, build, check, time ---------------------------------------------------


#: Relative tolerance of every check, elementwise; the absolute one is this much of the
#: output's largest magnitude (a softmax over 4096 columns has elements near 1/4096: a fixed
#: absolute tolerance of 1e-3 would pass an output of zeros).
RTOL, ATOL_OF_MAX = 1e-3, 1e-5


def check(name: str, got: np.ndarray, ref: np.ndarray) -> str | None:
    """None when ``got`` matches ``ref``; else one line saying by how much it does not."""
    if got.shape != ref.shape:
        return f"{name}: shape {got.shape}, expected {ref.shape}"
    atol = ATOL_OF_MAX * float(np.abs(ref).max(initial=0.0))
    if np.allclose(got, ref, rtol=RTOL, atol=atol):
        return None
    err = float(np.nanmax(np.abs(got.astype(np.float64) - ref)))
    return f"{name}: output differs from NumPy's by up to {err:.3g}"


def tune_one(w: Workload, ns: argparse.Namespace, time_limit: float, jobs: int) -> Row:
    from tuner.measure import MeasureOptions
    from tuner.tuning.tune import TuneOptions, tune

    measure = MeasureOptions(jobs=jobs)
    if ns.smoke:
        measure = MeasureOptions(jobs=jobs, samples=2, passes=1, min_sample_seconds=0.0)
    opts = TuneOptions(
        trials=ns.trials,
        time_limit=time_limit,
        strategy=ns.strategy,
        log=ns.log,
        seed=ns.seed,
        batch=min(8, ns.trials),
        target="cuda",
        measure=measure,
        retime=ns.retime,
        baseline=False,
    )
    result = tune(w.op, w.args, opts)
    row = Row(w, trials=result.measured, errors=result.errors, tune_seconds=result.elapsed)
    best = result.best
    got = f"best {best.median * 1e3:.3f} ms" if best is not None else "no candidate ran"
    print(
        f"tuned {w.name}: {result.measured} measured ({result.resumed} in the log before),"
        f" {result.errors} errors, {got}, {result.elapsed:.0f} s ({result.stopped_because})",
        flush=True,
    )
    return row


def measure_one(
    row: Row, ns: argparse.Namespace, gpu: Any, peers: dict[str, Any], records: Any
) -> None:
    """Build the best record of ``row``'s workload, check every side, time them interleaved."""
    from search_spaces import get_operator
    from tuner.kernels import UntunedWorkloadWarning
    from tuner.kernels.op import build_op

    w = row.workload
    op = get_operator(w.op)
    args = op.parse_args(w.args)
    row.flops = op.flops(args)
    row.bytes_moved = op.bytes_moved(args) if op.bytes_moved is not None else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntunedWorkloadWarning)
        f = build_op(w.op, target=gpu, records=records, **w.args)
    row.tuned = f.record is not None
    row.config = " ".join(f"{k}={v}" for k, v in sorted(f.config.items()))
    if not row.tuned:
        row.notes["ours"] = "no tuning record: the default schedule"
    inputs = op.make_inputs(args, seed=ns.seed, target=gpu)
    t0 = time.perf_counter()
    ref = np.asarray(op.reference(*inputs, **args))
    print(f"{w.name}: NumPy reference in {time.perf_counter() - t0:.1f} s", flush=True)

    buf = f.kernel.args[-1]
    out = np.zeros(buf.shape, buf.dtype)
    timers: dict[str, Any] = {}
    ours = f.kernel.timer(*(np.ascontiguousarray(a) for a in inputs), out)
    ours.run()
    ours.fetch()  # the output of the very device buffers that are then timed
    bad = check("ours", out, ref)
    if bad:
        row.notes["ours"] = bad
        print(f"{w.name}: {bad}; not timed", flush=True)
    else:
        timers["ours"] = ours
    for name, make in (("cupy", cupy_side), ("torch", torch_side)):
        if name not in peers:
            row.notes[name] = "not available"
            continue
        try:
            side = make(peers[name], w.op, args, inputs)
            if isinstance(side, str):
                row.notes[name] = side
                print(f"{w.name}: {name}: {side}", flush=True)
                continue
            timer, fetch = side
            timer.run()
            bad = check(name, np.asarray(fetch()), ref)
        except Exception as exc:  # a peer's failure is its row's note, never the run's end
            bad = f"{name}: failed ({type(exc).__name__}: {first_line(exc)})"
        if bad:
            row.notes[name] = bad
            print(f"{w.name}: {bad}; not timed", flush=True)
        else:
            timers[name] = timer
    if not timers:
        return
    try:
        got = interleaved(timers, ns.rounds, ns.samples, ns.min_sample, ns.rest)
    except Exception as exc:
        row.notes["timing"] = f"timing failed: {type(exc).__name__}: {first_line(exc)}"
        print(f"{w.name}: {row.notes['timing']}", flush=True)
        return
    for name, (samples, reps) in got.items():
        row.ms[name] = statistics.median(samples) * 1e3
        row.reps[name] = reps
    if "ours" in timers:  # the timed launches still compute the right thing
        ours.fetch()
        bad = check("ours after timing", out, ref)
        if bad:
            row.notes["ours"] = bad
            row.ms["ours"] = None
            print(f"{w.name}: {bad}", flush=True)


# -- main ----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ns = parse_args(argv)
    simulated, error = choose_device(ns.smoke)
    if error:
        print(error, file=sys.stderr)
        return 2
    start = time.monotonic()
    sys.path.insert(0, str(ROOT))
    missing = [m for m in ("optuna", "pandas", "scipy") if importlib.util.find_spec(m) is None]
    if missing:
        print(
            f"bench_cuda: the tuner needs {', '.join(missing)}, not installed here"
            " (with no network, bring them as wheels)",
            file=sys.stderr,
        )
        return 2
    if ns.strategy == "xgb" and importlib.util.find_spec("xgboost") is None:
        print("bench_cuda: xgboost is not installed: searching with --strategy random instead")
        ns.strategy = "random"
    from tuner.kernels import apply_best
    from tuner.target import Target, TargetError

    try:
        gpu = Target.from_name("cuda")
    except TargetError as exc:
        print(f"bench_cuda: {exc}", file=sys.stderr)
        return 2
    device = (
        f"{gpu.get('model', '?')} (compute capability {gpu.get('compute_capability', '?')},"
        f" {gpu.get('multiprocessors', '?')} multiprocessors)"
    )
    if simulated:
        print(
            "bench_cuda: no GPU: Numba's CUDA simulator runs the kernels; its timings are its"
            " wall clock over Python threads and mean nothing (the run checks the path only)"
        )
    print(f"device: {device}; log {ns.log}; {ns.trials} trials a workload", flush=True)
    workloads = SMOKE if ns.smoke else FULL
    if ns.only:
        keep = {s.strip() for s in ns.only.split(",") if s.strip()}
        workloads = [w for w in workloads if w.op in keep]
    if not workloads:
        print(f"bench_cuda: --only {ns.only!r} names none of the workloads", file=sys.stderr)
        return 2
    jobs = ns.jobs or max(1, min(8, os.cpu_count() or 1))
    ns.log.parent.mkdir(parents=True, exist_ok=True)

    rows: list[Row] = []
    # What the timing half needs: builds, references, checks and the rounds, per workload.
    reserve = 0.0 if ns.smoke else 30.0 * len(workloads)
    for i, w in enumerate(workloads):
        if ns.no_tune:
            rows.append(Row(w))
            continue
        left = ns.budget - reserve - (time.monotonic() - start)
        share = max(10.0, left / (len(workloads) - i))
        try:
            rows.append(tune_one(w, ns, share, jobs))
        except Exception as exc:  # one workload's failure is its row's note, not the run's end
            print(f"tuning {w.name} failed: {type(exc).__name__}: {first_line(exc)}", flush=True)
            rows.append(Row(w, notes={"tune": f"tuning failed: {first_line(exc)}"}))

    peers = load_peers()
    if not ns.log.exists():
        print(f"bench_cuda: {ns.log} does not exist: nothing tuned", file=sys.stderr)
    with apply_best(ns.log if ns.log.exists() else []) as records:
        for row in rows:
            try:
                measure_one(row, ns, gpu, peers, records)
            except Exception as exc:  # one workload's failure is its row's note
                row.notes["ours"] = f"failed: {type(exc).__name__}: {first_line(exc)}"
                print(f"{row.workload.name}: {row.notes['ours']}", flush=True)

    print()
    print(table(rows))
    clock = "the simulator's wall clock" if simulated else "CUDA events"
    print(f"(ms: median per launch, by {clock}; x: peer time / ours, above 1 ours is faster)")
    for r in rows:
        for side, note in r.notes.items():
            if note != "not available":
                print(f"  {r.workload.name} / {side}: {note}")
    if simulated:
        print("(simulator: the times above are meaningless; only the path was exercised)")
    for line in bars(rows, simulated):
        print(line)
    write_csv(ns.out, rows, device, simulated, ns.strategy)
    print(f"wrote {ns.out} ({time.monotonic() - start:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
