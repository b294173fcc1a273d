"""Tuned operators beside NumPy and PyTorch: the operator benchmark suite.

    python experiments/bench_ops.py --trials 64                  # tune, then time (about an hour)
    python experiments/bench_ops.py --trials 64 --from-logs      # re-time from the kept logs
    python experiments/bench_ops.py --trials 8 --workloads softmax --threads 1,2 --rounds 7

Each workload of the suite (below, as the command line names it) is tuned
with ``--trials`` measured candidates on 2 threads; every measurement goes to
``experiments/logs/bench_ops_<trials>.jsonl``, the tuning wall time to
``bench_ops_<trials>.tuning.json`` beside it (keyed ``workload@fingerprint``).
``--from-logs`` skips the tuning and rebuilds the best record of each workload
from those files; a resumed run only measures what the log still lacks of the
budget on this machine: records carry the machine's fingerprint, and those of
other machines stay in the log for them. ``--time-limit`` caps each workload's
tuning in seconds.

Timing happens in one fresh process per thread count (thread pools are fixed
at start; ``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``, ``NUMBA_NUM_THREADS``
and ``torch.set_num_threads`` all set to it). In it, per workload: the tuned
kernel (the best record of the log), the template's default schedule, the best
NumPy formulation (BLAS for matmul, im2col + one BLAS call for convolution,
``out=`` buffers everywhere), PyTorch eager and ``torch.compile`` (where torch
is importable) are each checked against the operator's NumPy reference, then
timed in interleaved rounds whose order rotates; the median of the rounds is
reported. A short probe before and after each timing process records how many
CPUs two busy processes got (about 2 on a quiet 2-core machine): trust a
2-thread row only when both are close to 2.

The records do not tell thread counts apart (a CPU target's fingerprint
leaves threads out), so the 1-thread rows run the configs tuned on 2 threads,
their parallel loops on one thread.

Writes ``experiments/out/bench_ops_<trials>.csv`` and ``.md`` and prints the
table. Memory-bound operators (those with ``bytes_moved``) are reported in
GB/s, the rest in GFLOP/s (GOP/s for int8). Ratios are peer time over tuned
time: above 1 the tuned kernel is faster.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

from bench_schedules import cpus_available, thread_env  # noqa: E402

from search_spaces import OperatorError, get_operator  # noqa: E402
from tuner.measure.interleave import interleaved, medians  # noqa: E402

OUT = ROOT / "experiments" / "out"
LOGS = ROOT / "experiments" / "logs"
TUNE_THREADS = 2  # the suite's setting
DEFAULT_BAR = 3.0  # a default schedule must be within this factor of the tuned one

#: label -> the workload as the command line names it (float32 unless said).
SUITES: dict[str, dict[str, str]] = {
    "full": {
        "matmul_1024": "matmul M=1024 N=1024 K=1024",
        "matmul_512": "matmul M=512 N=512 K=512",
        "batch_matmul": "batch_matmul B=12 M=128 N=128 K=64",
        "dense_relu": "dense batch=128 in_features=768 out_features=3072 bias=true activation=relu",
        "dense_gelu": "dense batch=128 in_features=3072 out_features=768 bias=true activation=gelu",
        "conv2d_3x3": "conv2d N=1 C=64 H=56 W=56 K=64 R=3 S=3 stride=1 pad=1",
        "conv2d_1x1": "conv2d N=1 C=256 H=56 W=56 K=64 R=1 S=1 stride=1 pad=0",
        "conv2d_3x3_s2": "conv2d N=1 C=128 H=56 W=56 K=128 R=3 S=3 stride=2 pad=1",
        "depthwise_conv2d": "depthwise_conv2d N=1 C=128 H=56 W=56 R=3 S=3 stride=1 pad=1",
        "max_pool2d": "max_pool2d N=1 C=64 H=112 W=112 kernel=3 stride=2 pad=1",
        "softmax": "softmax M=4096 N=1024",
        "log_softmax": "log_softmax M=4096 N=1024",
        "layer_norm": "layer_norm M=4096 N=768",
        "elementwise_chain": "elementwise_chain n=16777216",
        "reduce_sum": "reduce_sum M=4096 N=4096",
        "matmul_int8": "matmul M=1024 N=1024 K=1024 dtype=int8",
    },
    # Tiny shapes for the tests: seconds, not minutes.
    "small": {
        "matmul_small": "matmul M=24 N=20 K=17",
        "softmax_small": "softmax M=16 N=40",
        "elementwise_small": "elementwise_chain n=1000",
        "conv2d_small": "conv2d N=1 C=4 H=9 W=9 K=8 R=3 S=3 stride=2 pad=1",
    },
}

from bench_peers import NUMPY_PEERS, Peer, torch_fn  # noqa: E402
from bench_report import PEERS, markdown, write  # noqa: E402

# -- the timing process ----------------------------------------------------------------------------


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    op, *pairs = spec.split()
    return op, dict(p.split("=", 1) for p in pairs)


def verify(out: np.ndarray, ref: np.ndarray) -> str:
    """'' when ``out`` matches the reference (exactly for integers), else what is wrong."""
    out = np.asarray(out)
    if out.shape != ref.shape:
        return f"shape {out.shape} instead of {ref.shape}"
    if ref.dtype.kind in "iu":
        return "" if np.array_equal(out, ref) else "wrong integers"
    err = float(np.max(np.abs(out.astype(np.float64) - ref))) if ref.size else 0.0
    scale = float(np.max(np.abs(ref))) or 1.0
    return "" if err <= 1e-3 * scale else f"max error {err:.2g} (scale {scale:.2g})"


def _reference(op: Any, inputs: list[np.ndarray], args: dict[str, Any]) -> np.ndarray:
    """The operator's NumPy reference output (registered references take the args as keywords)."""
    return np.asarray(op.reference(*inputs, **args))


def time_rounds(fns: dict[str, Peer], rounds: int, min_sample: float) -> dict[str, float]:
    """Median seconds per call of each function over interleaved rounds (``tuner.measure.interleave``)."""
    return medians(interleaved(fns, rounds, min_sample))


def _torch_peers(
    op: str, args: dict[str, Any], inputs: list[np.ndarray], threads: int, wanted: list[str]
) -> tuple[dict[str, Peer], dict[str, Any]]:
    """PyTorch eager and ``torch.compile`` (compiled and run once here) on the same arrays."""
    import torch

    torch.set_num_threads(threads)
    ts = [torch.from_numpy(x) for x in inputs]
    fn = torch_fn(op, args)
    peers: dict[str, Peer] = {"torch": lambda: fn(*ts).numpy()} if "torch" in wanted else {}
    info: dict[str, Any] = {}
    if "torch_compile" not in wanted:
        return peers, info
    try:
        compiled = torch.compile(fn, dynamic=False)
        t0 = time.perf_counter()
        compiled(*ts)
        info["torch_compile_build_s"] = time.perf_counter() - t0
        peers["torch_compile"] = lambda: compiled(*ts).numpy()
    except Exception as exc:  # no C++ compiler, an unsupported op, ...
        info["note"] = f"torch.compile failed: {str(exc).splitlines()[0][:120]}"
    return peers, info


def time_workload(
    label: str, spec: str, log: Path | None, threads: int, opts: argparse.Namespace
) -> dict[str, Any]:
    """Build, verify and time the tuned and default kernels and every peer of one workload."""
    from tuner import Target
    from tuner.kernels import BestRecords, UntunedWorkloadWarning
    from tuner.kernels.op import build_op

    op_name, raw = parse_spec(spec)
    op = get_operator(op_name)
    args = op.parse_args(raw)
    target = Target.from_name("cpu", num_threads=threads)
    row: dict[str, Any] = {"workload": label, "spec": spec, "threads": threads}
    notes: list[str] = []
    inputs = op.make_inputs(args, target=target)
    ref = _reference(op, inputs, args)
    builders: dict[str, Callable[[], Peer]] = {}

    def kernel(records: BestRecords | None) -> Peer:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UntunedWorkloadWarning)
            built = build_op(op_name, target=target, records=records, **args)
        if records is not None and built.record is None:
            raise LookupError("no correct record in the log")
        out = np.zeros(built.kernel.args[-1].shape, built.kernel.args[-1].dtype)
        kern = built.kernel

        def run() -> np.ndarray:
            kern(*inputs, out)
            return out

        return run

    if log is not None and log.exists():
        records = BestRecords(log)
        builders["tuned"] = lambda: kernel(records)
    else:
        notes.append("no tuning log")
    builders["default"] = lambda: kernel(None)
    if "numpy" not in opts.peers:
        pass
    elif op_name in NUMPY_PEERS:
        builders["numpy"] = lambda: NUMPY_PEERS[op_name](args, *inputs)
    else:
        notes.append(f"no NumPy peer for {op_name}")
    fns: dict[str, Peer] = {}
    for name, build in builders.items():
        try:
            t0 = time.perf_counter()
            fn = build()
            row[f"{name}_build_s"] = time.perf_counter() - t0
            bad = verify(fn(), ref)
        except Exception as exc:
            notes.append(
                f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
            )
            continue
        if bad:
            notes.append(f"{name} WRONG ANSWER ({bad}), not timed")
        else:
            fns[name] = fn
    try:
        if {"torch", "torch_compile"} & set(opts.peers):
            import torch  # noqa: F401
    except ImportError:
        row["torch_missing"] = True
    else:
        try:
            peers, info = _torch_peers(op_name, args, inputs, threads, opts.peers)
        except Exception as exc:
            peers, info = {}, {"note": f"torch: {type(exc).__name__}: {exc}"}
        if "note" in info:
            notes.append(info.pop("note"))
        row.update(info)
        for name, fn in peers.items():
            try:
                bad = verify(fn(), ref)
            except Exception as exc:
                bad = f"{type(exc).__name__}: {str(exc)[:120]}"
            if bad:
                notes.append(f"{name}: {bad}, not timed")
            else:
                fns[name] = fn
    for name, seconds in time_rounds(fns, opts.rounds, opts.min_sample).items():
        row[f"{name}_s"] = seconds
    row["worker_notes"] = notes
    return row


def worker(opts: argparse.Namespace) -> None:
    """One process, one thread count: print one ``ROW <json>`` line per workload."""
    log = Path(opts.log) if opts.log else None
    for label, spec in selected(opts):
        try:
            row = time_workload(label, spec, log, opts.worker, opts)
        except Exception as exc:
            row = {
                "workload": label,
                "spec": spec,
                "threads": opts.worker,
                "worker_notes": [f"failed: {type(exc).__name__}: {exc}"],
            }
        print("ROW " + json.dumps(row), flush=True)


# -- tuning, reporting and the command line ---------------------------------------------------------


def selected(opts: argparse.Namespace) -> list[tuple[str, str]]:
    suite = SUITES[opts.suite]
    if not opts.workloads:
        return list(suite.items())
    wanted = opts.workloads.split(",")
    unknown = [
        w for w in wanted if w not in suite and not any(s.split()[0] == w for s in suite.values())
    ]
    if unknown:
        raise SystemExit(
            f"unknown workload {unknown[0]!r}; the {opts.suite} suite has {', '.join(suite)}"
        )
    return [(k, s) for k, s in suite.items() if k in wanted or s.split()[0] in wanted]


def runnable(items: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The workloads whose operator exists and accepts the arguments; one line for each other."""
    keep = []
    for label, spec in items:
        op_name, raw = parse_spec(spec)
        try:
            get_operator(op_name).parse_args(raw)
        except OperatorError as exc:
            print(f"skipping {label}: {exc}")
            continue
        keep.append((label, spec))
    return keep


def workload_key(spec: str) -> str:
    from tuner.workload import Workload

    op_name, raw = parse_spec(spec)
    return Workload.make(op_name, **get_operator(op_name).parse_args(raw)).key


def host_fingerprint() -> str:
    """This machine's CPU fingerprint: a log keeps each machine's records apart by it."""
    from tuner import Target

    return Target.from_name("cpu").fingerprint


def logged(log: Path, spec: str) -> list[Any]:
    """This machine's records of ``spec`` in ``log`` (records of other machines stay, unused)."""
    from records import load

    if not log.exists():
        return []
    here = host_fingerprint()
    records = load(log, workload=workload_key(spec), target_kind="cpu")
    return [r for r in records if r.target.fingerprint == here]


def times_key(spec: str) -> str:
    """The tuning-time entry of ``spec`` on this machine (``key@fingerprint``)."""
    return f"{workload_key(spec)}@{host_fingerprint()}"


def searched(records: list[Any]) -> int:
    """Trials of the search itself (a tune's closing re-timings of its leaders are not trials)."""
    from records.log import RETIME

    return sum(r.strategy != RETIME for r in records)


def tune_all(
    items: list[tuple[str, str]],
    trials: int,
    log: Path,
    times: Path,
    time_limit: float | None = None,
) -> None:
    """Tune each workload up to ``trials`` of this machine's records in ``log`` (or for
    ``time_limit`` seconds, whichever ends first); add the wall time to ``times``."""
    from tuner.tuning.tune import TuneOptions, tune

    spent = json.loads(times.read_text()) if times.exists() else {}
    for label, spec in items:
        todo = trials - searched(logged(log, spec))
        if todo <= 0:
            print(f"{label}: {trials} trials already in {log.name}")
            continue
        op_name, raw = parse_spec(spec)
        t0 = time.perf_counter()
        try:
            opts = TuneOptions(trials=todo, time_limit=time_limit, log=log, threads=TUNE_THREADS)
            result = tune(op_name, raw, opts)
        except Exception as exc:  # one workload's failure must not lose the others
            print(f"{label}: tuning failed: {type(exc).__name__}: {exc}")
            continue
        key = times_key(spec)
        spent[key] = spent.get(key, 0.0) + time.perf_counter() - t0
        times.write_text(json.dumps(spent, indent=1, sort_keys=True) + "\n")
        best = f"best {result.best.median * 1e3:.3f} ms" if result.best else "no correct candidate"
        print(
            f"{label}: {result.measured} trials in {spent[key]:.0f} s, {result.errors} errors, {best}"
        )


def time_all(
    items: list[tuple[str, str]], opts: argparse.Namespace, log: Path
) -> list[dict[str, Any]]:
    rows = []
    for t in (int(x) for x in opts.threads.split(",")):
        env = thread_env(t)
        before = cpus_available()
        cmd = [
            sys.executable,
            __file__,
            "--worker",
            str(t),
            "--suite",
            opts.suite,
            "--rounds",
            str(opts.rounds),
            "--min-sample",
            str(opts.min_sample),
            "--workloads",
            ",".join(k for k, _ in items),
            "--log",
            str(log),
            "--peers",
            ",".join(opts.peers),
        ]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        after = cpus_available()
        got = [json.loads(line[4:]) for line in out.stdout.splitlines() if line.startswith("ROW ")]
        if out.returncode:
            tail = out.stderr.strip().splitlines()[-1:] or ["no output"]
            print(f"the {t}-thread timing process failed after {len(got)} workloads: {tail[0]}")
        for row in got:
            row["cpus_before"], row["cpus_after"] = round(before, 2), round(after, 2)
        rows += got
    return rows


def finish(row: dict[str, Any], log: Path, times: dict[str, float]) -> dict[str, Any]:
    """Add rates, ratios, the tuning figures and the note (who wins, by how much) to a row."""
    op_name, raw = parse_spec(row["spec"])
    op = get_operator(op_name)
    args = op.parse_args(raw)
    memory = op.bytes_moved is not None
    work = op.bytes_moved(args) if op.bytes_moved is not None else op.flops(args)
    unit = "GB/s" if memory else ("GOP/s" if args.get("dtype") == "int8" else "GFLOP/s")
    records = logged(log, row["spec"])
    row.update(unit=unit, trials=searched(records), tune_s=times.get(times_key(row["spec"])))
    notes = list(row.pop("worker_notes", []))
    tuned = row.get("tuned_s")
    if tuned:
        row["tuned_rate"] = work / tuned / 1e9
        for key, name in (("default", "default"), *PEERS):
            if row.get(f"{key}_s"):
                ratio = row[f"{key}_s"] / tuned
                row[f"{key}_x_tuned" if key == "default" else f"tuned_x_{key}"] = ratio
                if key == "default" and ratio > DEFAULT_BAR:
                    notes.append(f"default {ratio:.1f}x slower than tuned (bar {DEFAULT_BAR:g}x)")
                elif key != "default" and ratio < 1:
                    notes.append(f"loses to {name} by {1 / ratio:.2f}x")
    elif records:
        kinds = sorted({r.error_kind.value for r in records if not r.ok})
        notes.append(
            f"{searched(records)} trials, none correct ({', '.join(kinds)}): {records[0].error_msg.splitlines()[-1][:100]}"
        )
    free = min(row.get("cpus_before", 2.0), row.get("cpus_after", 2.0))
    if free < 0.9 * row["threads"]:
        notes.append(f"machine busy ({free:.2f} CPUs free, {row['threads']} wanted): unreliable")
    row["note"] = "; ".join(n for n in notes if n)
    return row


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--trials", type=int, default=64, help="tuning budget per workload (64 and 200)")
    p.add_argument(
        "--workloads", default="", help="comma-separated labels or operator names (default: all)"
    )
    p.add_argument("--threads", default="1,2", help="thread counts to time with")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument(
        "--time-limit", type=float, default=None, help="tuning seconds per workload at most"
    )
    p.add_argument(
        "--from-logs", action="store_true", help="re-time the logged best records, no tuning"
    )
    p.add_argument(
        "--peers",
        default="numpy,torch,torch_compile",
        type=lambda v: v.split(","),
        help="peers to time beside the tuned and default kernels",
    )
    p.add_argument("--log-dir", type=Path, default=LOGS)
    p.add_argument("--out-dir", type=Path, default=OUT)
    p.add_argument("--suite", default="full", choices=sorted(SUITES), help=argparse.SUPPRESS)
    p.add_argument("--min-sample", type=float, default=0.05, help=argparse.SUPPRESS)
    p.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--log", default="", help=argparse.SUPPRESS)
    opts = p.parse_args()
    if opts.worker:
        worker(opts)
        return
    items = runnable(selected(opts))
    if not items:
        raise SystemExit("no workload to run")
    log = opts.log_dir / f"bench_ops_{opts.trials}.jsonl"
    times_file = log.with_suffix(".tuning.json")
    if opts.from_logs:
        if not log.exists():
            raise SystemExit(f"--from-logs: no log {log}; run without --from-logs to tune first")
    else:
        log.parent.mkdir(parents=True, exist_ok=True)
        tune_all(items, opts.trials, log, times_file, opts.time_limit)
    times = json.loads(times_file.read_text()) if times_file.exists() else {}
    rows = [finish(r, log, times) for r in time_all(items, opts, log)]
    torch_note = ""
    if any(r.get("torch_missing") for r in rows):
        torch_note = "PyTorch is not importable here: its columns are empty (the `bench` extra installs torch==2.13.0, CPU)."
    md = markdown(rows, opts.trials, torch_note)
    print(md)
    stem = write(rows, md, opts.out_dir / f"bench_ops_{opts.trials}")
    print(f"wrote {stem}.csv and {stem}.md")


if __name__ == "__main__":
    main()
