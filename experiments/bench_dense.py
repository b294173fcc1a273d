"""Dense (Linear + bias + activation) with the tile's vectors along the batch or the features.

    python experiments/bench_dense.py --threads 1,2 --rounds 11
    python experiments/bench_dense.py --shape 128,3072,768 --activation none

Variants: the operator's default config, the default with vectors along the
output features (W packed into panels on every call) and along the batch (X
packed once, W read in place), NumPy's ``matmul``, ``add`` and activation with
``out=`` buffers, and PyTorch eager's ``linear`` + activation where torch is
importable. Each thread count runs in its own process; inside it every variant
is checked against the NumPy reference, then all are timed in interleaved
rounds (``tuner.measure.interleave``) and the median of the rounds reported.
Writes experiments/out/bench_dense.csv.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_schedules import cpus_available, thread_env

OUT = Path(__file__).resolve().parent / "out"


def worker(shape: tuple[int, int, int], activation: str, threads: int, rounds: int) -> list[str]:
    import numpy as np

    import tuner
    from search_spaces import dense
    from tuner.measure.interleave import interleaved

    m, k, n = shape
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    ref = dense.reference(x, w, b, activation)
    target = tuner.Target.from_name("cpu", num_threads=threads)
    space = dense.config_space(m, k, n, True, activation, target)
    configs = {
        "default": dense.default_config(m, k, n, True, activation, target=target),
        "features": dense.default_config(m, k, n, True, activation, "features", target),
        "batch": dense.default_config(m, k, n, True, activation, "batch", target),
    }
    fns = {}
    for name, cfg in configs.items():
        s, args = dense.schedule(space.validate(cfg), m, k, n, True, activation)
        kern = tuner.build(s, args, target=target)
        out = np.empty((m, n), np.float32)
        kern(x, w, b, out)
        np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3, err_msg=name)
        fns[name] = lambda kern=kern, out=out: kern(x, w, b, out)
    y = np.empty((m, n), np.float32)

    def numpy_dense() -> None:
        np.matmul(x, w.T, out=y)
        np.add(y, b, out=y)
        if activation == "relu":
            np.maximum(y, 0, out=y)

    fns["numpy"] = numpy_dense
    try:
        import torch

        torch.set_num_threads(threads)
        tx, tw, tb = (torch.from_numpy(a) for a in (x, w, b))
        tact = torch.relu if activation == "relu" else (lambda v: v)
        fns["pytorch"] = lambda: tact(torch.nn.functional.linear(tx, tw, tb))
    except ImportError:
        pass
    samples = interleaved(fns, rounds)
    base = statistics.median(samples["numpy"])
    flops = 2.0 * m * k * n
    rows = []
    for name, ts in samples.items():
        med = statistics.median(ts)
        rows.append(
            f"variant={name},threads={threads},median_ms={med * 1e3:.3f},"
            f"gflops={flops / med / 1e9:.1f},x_numpy={base / med:.2f}"
        )
    return rows


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--shape", default="128,768,3072", help="batch,in_features,out_features")
    p.add_argument("--activation", default="relu", choices=["relu", "none"])
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=11)
    p.add_argument("--out", type=Path, default=OUT / "bench_dense.csv")
    p.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    shape = tuple(int(v) for v in args.shape.split(","))
    if len(shape) != 3:
        raise SystemExit("--shape takes batch,in_features,out_features")
    if args.worker:
        for row in worker(shape, args.activation, args.worker, args.rounds):  # type: ignore[arg-type]
            print("ROW", row)
        return
    rows: list[dict[str, str]] = []
    for t in (int(x) for x in args.threads.split(",")):
        before = cpus_available()
        cmd = [sys.executable, __file__, "--worker", str(t), "--shape", args.shape]
        cmd += ["--activation", args.activation, "--rounds", str(args.rounds)]
        out = subprocess.run(cmd, env=thread_env(t), capture_output=True, text=True)
        if out.returncode:
            raise SystemExit(out.stderr.strip().splitlines()[-1] if out.stderr else "worker failed")
        after = cpus_available()
        for line in out.stdout.splitlines():
            if line.startswith("ROW "):
                row = dict(kv.split("=", 1) for kv in line[4:].split(","))
                rows.append({**row, "shape": args.shape, "cpus": f"{before:.2f}/{after:.2f}"})
    print(f"{'variant':<10}{'threads':>8}{'ms':>9}{'GFLOP/s':>9}{'x NumPy':>9}  cpus")
    for r in rows:
        print(
            f"{r['variant']:<10}{r['threads']:>8}{r['median_ms']:>9}{r['gflops']:>9}"
            f"{r['x_numpy']:>9}  {r['cpus']}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
